//go:build !amd64 || purego

package codec

import "encoding/binary"

// splitChunk writes the sign+mantissa byte (to sm) and the exponent field
// (to e) of every bf16 element of a chunk.
func splitChunk(x *chunkX, sm, e *chunkSM) {
	for i := range sm {
		v := binary.LittleEndian.Uint16(x[2*i : 2*i+2])
		sm[i] = uint8(v>>8)&0x80 | uint8(v)&0x7F
		e[i] = uint8(v >> 7)
	}
}
