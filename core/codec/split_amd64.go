//go:build !purego

package codec

// splitChunk writes the sign+mantissa byte (to sm) and the exponent field
// (to e) of every bf16 element of a chunk (split_amd64.s: SSE2, part of
// every amd64 CPU, sixteen elements per step; fixed-size arrays, so it
// cannot leave them).
//
//go:noescape
func splitChunk(x *chunkX, sm, e *chunkSM)
