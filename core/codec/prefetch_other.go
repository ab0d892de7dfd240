//go:build !amd64 || purego

package codec

// prefetch is a hint that pure Go cannot give: it does nothing.
func prefetch(p *byte, n int) {}
