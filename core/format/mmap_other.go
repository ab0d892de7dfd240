//go:build !unix

package format

import (
	"io"
	"os"
)

// mapFile reads the first size bytes of f (no memory mapping on this system).
func mapFile(f *os.File, size int) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, int64(size)), b); err != nil {
		return nil, err
	}
	return b, nil
}

func unmapFile([]byte) error { return nil }
