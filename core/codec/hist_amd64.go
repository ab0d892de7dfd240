//go:build !purego

package codec

// histWindow adds the exponent counts of a chunk of bf16 elements to h and
// returns how many of them lie outside the window ws..ws+windowLen-1
// (ws <= 256-windowLen). hist_amd64.s (SSE2, part of every amd64 CPU)
// counts the window's exponents in vector lanes, sixteen elements at a
// time, and the others one at a time: half the time of histBF16 when few
// lie outside. It prefetches the 8 KiB at next (a hint: any address will
// do).
//
//go:noescape
func histWindow(xb *chunkX, h *[256]uint16, ws int, next *byte) (outliers int)
