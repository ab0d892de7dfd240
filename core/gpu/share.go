package gpu

/*
#include "driver.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"

	"github.com/glyd/glyd/core/status"
)

// Stream shares: the kernels Glyd launches on a stream given a share take at
// most that share of each multiprocessor's resident blocks, so that kernels
// other streams launch later find room beside them at once.
//
// Why: a side stream's work (a MoE block's shared expert) is queued before
// the block's own small kernels (router, top-k, routing); its GEMV fills
// every SM's registers, and with no room the small kernels wait for its
// blocks to drain (Llama-4-Scout, 1 token: the router started 34 µs into the
// block). Stream priorities do not help inside a CUDA graph unless the graph
// is instantiated to use node priorities, which the caller decides.
//
// How: a launch on such a stream asks for more dynamic shared memory than
// the kernel uses, just enough that no more than share x (its resident
// blocks per SM) fit (at least one). The grid, the splits and so the result
// bits are unchanged; the padding is never touched.

type streamKey struct {
	dev    int
	stream uintptr
}

type padKey struct {
	dev, k, percent int
	block, smem     uint32
}

var (
	streamShares sync.Map     // streamKey -> percent (1..99)
	sharedCount  atomic.Int32 // entries of streamShares: launches skip the lookup while 0
	smemPads     sync.Map     // padKey -> padded dynamic shared memory (uint32)
)

// SetStreamShare gives stream (on device dev) a share of percent of each
// multiprocessor for the kernels Glyd launches on it from now on (100:
// everything, the default). Launches already captured in a graph keep theirs.
func SetStreamShare(dev int, stream uintptr, percent int) error {
	if percent < 1 || percent > 100 {
		return status.Errorf(status.InvalidArgument, "gpu: stream share %d%% is not in 1..100", percent)
	}
	if _, err := load(dev); err != nil {
		return err
	}
	key := streamKey{dev, stream}
	if percent == 100 {
		if _, had := streamShares.LoadAndDelete(key); had {
			sharedCount.Add(-1)
		}
		return nil
	}
	if _, had := streamShares.Swap(key, percent); !had {
		sharedCount.Add(1)
	}
	return nil
}

// streamSmem is the dynamic shared memory of a launch of kernel k with block
// threads and smem bytes on stream: smem itself unless the stream has a share.
func streamSmem(dev, k int, block, smem uint32, stream uintptr) (uint32, error) {
	if sharedCount.Load() == 0 {
		return smem, nil
	}
	v, ok := streamShares.Load(streamKey{dev, stream})
	if !ok {
		return smem, nil
	}
	return paddedSmem(dev, k, block, smem, v.(int))
}

// paddedSmem is the smallest dynamic shared memory >= smem at which kernel k
// has at most percent of its resident blocks per SM at smem (at least one);
// smem when that is all of them or no padding reaches it. Cached per kernel.
func paddedSmem(dev, k int, block, smem uint32, percent int) (uint32, error) {
	key := padKey{dev, k, percent, block, smem}
	if v, ok := smemPads.Load(key); ok {
		return v.(uint32), nil
	}
	d, err := load(dev)
	if err != nil {
		return 0, err
	}
	occ, err := occupancy(dev, k, block, smem)
	if err != nil {
		return 0, err
	}
	limit := max(1, occ*percent/100)
	// Binary search in 256-byte steps between smem (more than limit blocks)
	// and the most any kernel may ask for: occupancy only falls as smem grows.
	lo, hi := smem, uint32(d.smemMax)
	if o, err := occupancy(dev, k, block, hi); err != nil {
		return 0, err
	} else if limit >= occ || o > limit {
		hi = smem // nothing to do, or no padding reaches it
	}
	for hi-lo > 256 {
		mid := (lo + (hi-lo)/2) &^ 255
		if mid <= lo {
			break
		}
		o, err := occupancy(dev, k, block, mid)
		if err != nil {
			return 0, err
		}
		if o > limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	smemPads.Store(key, hi)
	return hi, nil
}

func occupancy(dev, k int, block, smem uint32) (int, error) {
	var e [C.GLYD_ERRLEN]C.char
	var nb C.int
	if err := drvErr(C.glyd_drv_occupancy(C.int(dev), C.int(k), C.int(block), C.int(smem), &nb, &e[0]), &e); err != nil {
		return 0, err
	}
	return int(nb), nil
}
