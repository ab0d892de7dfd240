//go:build !purego

package codec

// prefetch asks the CPU to bring the n > 0 bytes at p into the cache
// without waiting for them (prefetch_amd64.s); it reads nothing and never
// faults.
//
//go:noescape
func prefetch(p *byte, n int)
