//go:build !amd64 || purego

package codec

// histWindow adds the exponent counts of a chunk of bf16 elements to h and
// returns how many of them lie outside the window ws..ws+windowLen-1.
func histWindow(xb *chunkX, h *[256]uint16, ws int, next *byte) (outliers int) {
	var hs [4][256]uint32
	histChunk(xb, &hs, new(readAhead))
	for e := range h {
		n := hs[0][e] + hs[1][e] + hs[2][e] + hs[3][e]
		h[e] += uint16(n)
		if e < ws || e >= ws+windowLen {
			outliers += int(n)
		}
	}
	return outliers
}
