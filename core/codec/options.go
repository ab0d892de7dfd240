package codec

import (
	"runtime"

	"github.com/glyd/glyd/core/status"
)

// Options control Pack.
type Options struct {
	// Layout is Fixed12 or Smallest (Raw tensors are not packed).
	Layout Layout
	// Groups splits the tensor along its first axis into this many
	// independently decodable groups (the experts of a mixture-of-experts
	// tensor). 0 or 1 means one group; otherwise Shape[0] must be a
	// positive multiple of Groups.
	Groups int
	// Workers is the number of goroutines; 0 means runtime.GOMAXPROCS(0).
	// The packed bytes do not depend on it.
	Workers int
}

// Validate reports whether the options are usable, with a
// status.InvalidArgument error naming the bad field.
func (o Options) Validate() error {
	if o.Layout != Fixed12 && o.Layout != Smallest {
		return status.Errorf(status.InvalidArgument, "layout %v cannot be packed (want fixed12 or smallest)", o.Layout)
	}
	if o.Groups < 0 {
		return status.Errorf(status.InvalidArgument, "negative group count %d", o.Groups)
	}
	if o.Workers < 0 {
		return status.Errorf(status.InvalidArgument, "negative worker count %d", o.Workers)
	}
	return nil
}

func workerCount(w int) (int, error) {
	if w < 0 {
		return 0, status.Errorf(status.InvalidArgument, "negative worker count %d", w)
	}
	if w == 0 {
		w = runtime.GOMAXPROCS(0)
	}
	return w, nil
}
