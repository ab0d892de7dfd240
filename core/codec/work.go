package codec

import (
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/glyd/glyd/core/status"
)

// unit is one piece of parallel work: elements [lo, hi) of group g. lo is a
// multiple of unitElements; units of a group tile it in order.
type unit struct {
	g      int
	lo, hi int
}

// readAhead is the source bytes of the chunk after the one being coded,
// prefetched a piece at a time while it is coded. Otherwise the first read
// of each chunk waits on memory (CRC-32C ran at a third of its in-cache
// speed); prefetching a whole chunk at once stalls instead on the few
// misses a core can have in flight.
type readAhead []byte

// aheadPieces is how many pieces a chunk is prefetched in.
const aheadPieces = 16

// step prefetches the next piece, if any.
func (r *readAhead) step() {
	if n := min(len(*r), 2*ChunkElements/aheadPieces); n > 0 {
		prefetch(&(*r)[0], n)
		*r = (*r)[n:]
	}
}

// makeUnits cuts groups [g0, g1) of per elements each into units.
func makeUnits(g0, g1, per int) []unit {
	perGroup := (per + unitElements - 1) / unitElements
	us := make([]unit, 0, (g1-g0)*perGroup)
	for g := g0; g < g1; g++ {
		for lo := 0; lo < per; lo += unitElements {
			us = append(us, unit{g: g, lo: lo, hi: min(lo+unitElements, per)})
		}
	}
	return us
}

// parallel calls fn(w, i) for every i in [0, n) on up to workers goroutines
// (w in [0, workers) names the goroutine, for scratch buffers). It returns
// the error of the smallest i that failed, so the error does not depend on
// scheduling; after a failure, items past it are skipped. A panic in fn is
// returned as a status.Internal error instead of killing the process.
func parallel(n, workers int, fn func(w, i int) error) error {
	if workers > n {
		workers = n
	}
	if workers <= 1 {
		for i := 0; i < n; i++ {
			if err := safeCall(fn, 0, i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next    atomic.Int64
		failed  atomic.Int64 // smallest failed item, n if none
		mu      sync.Mutex
		errs    = map[int]error{}
		wg      sync.WaitGroup
		nn      = int64(n)
		workerN = workers
	)
	failed.Store(nn)
	wg.Add(workerN)
	for w := 0; w < workerN; w++ {
		go func(w int) {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= nn {
					return
				}
				if i > failed.Load() {
					continue
				}
				if err := safeCall(fn, w, int(i)); err != nil {
					mu.Lock()
					errs[int(i)] = err
					for {
						f := failed.Load()
						if i >= f || failed.CompareAndSwap(f, i) {
							break
						}
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	if f := failed.Load(); f < nn {
		return errs[int(f)]
	}
	return nil
}

// safeCall runs fn(w, i), turning a panic into an error.
//
// Planes may be memory-mapped files: a file truncated while mapped faults
// (SIGBUS) on access, which SetPanicOnFault turns into a panic reported as
// an I/O error here, instead of a crash of the host process.
func safeCall(fn func(w, i int) error, w, i int) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = status.Recovered(r, "codec")
		}
	}()
	return fn(w, i)
}
