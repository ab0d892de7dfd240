package codec

import (
	"encoding/binary"
	"unsafe"
)

// This file splits elements into their two fields and joins them again:
// the sign+mantissa field, stored raw in PlaneSM, and the exponent field,
// one byte per element in a chunk-sized scratch buffer that the layout
// coders read (encoder) or fill (decoder).

// littleEndian reports whether the machine stores a uint16 low byte first;
// the word-at-a-time loops read []uint16 through a byte view and need it.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// u16bytes views x as its bytes in machine order.
func u16bytes(x []uint16) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 2*len(x))
}

const (
	lanes16Lo7  = 0x007F007F007F007F
	lanes16Bit7 = 0x0080008000800080
	lanes16Byte = 0x00FF00FF00FF00FF
)

// compact4 packs the low bytes of the four 16-bit lanes of w into 32 bits.
func compact4(w uint64) uint64 {
	w = (w | w>>8) & 0x0000FFFF0000FFFF
	return (w | w>>16) & 0xFFFFFFFF
}

// spread4 puts the four bytes of v into the low bytes of four 16-bit lanes.
func spread4(v uint32) uint64 {
	w := uint64(v)
	w = (w | w<<16) & 0x0000FFFF0000FFFF
	return (w | w<<8) & lanes16Byte
}

// splitBF16 writes the sign+mantissa byte of each element of x to sm and its
// exponent to exps (both len(x) bytes).
func splitBF16(x []uint16, sm, exps []byte) {
	n := len(x)
	sm = sm[:n]
	exps = exps[:n]
	i := 0
	if littleEndian {
		xb := u16bytes(x)
		for ; i+8 <= n; i += 8 {
			a := binary.LittleEndian.Uint64(xb[2*i:])
			b := binary.LittleEndian.Uint64(xb[2*i+8:])
			sa := (a>>8)&lanes16Bit7 | a&lanes16Lo7
			sb := (b>>8)&lanes16Bit7 | b&lanes16Lo7
			binary.LittleEndian.PutUint64(sm[i:], compact4(sa)|compact4(sb)<<32)
			ea := (a >> 7) & lanes16Byte
			eb := (b >> 7) & lanes16Byte
			binary.LittleEndian.PutUint64(exps[i:], compact4(ea)|compact4(eb)<<32)
		}
	}
	for ; i < n; i++ {
		v := x[i]
		sm[i] = uint8(v>>8)&0x80 | uint8(v)&0x7F
		exps[i] = uint8(v >> 7)
	}
}

// joinBF16 writes to x the elements with exponents exps and sign+mantissa
// bytes sm (both len(x) bytes).
func joinBF16(x []uint16, sm, exps []byte) {
	n := len(x)
	sm = sm[:n]
	exps = exps[:n]
	i := 0
	if littleEndian {
		xb := u16bytes(x)
		for ; i+8 <= n; i += 8 {
			s := binary.LittleEndian.Uint64(sm[i:])
			e := binary.LittleEndian.Uint64(exps[i:])
			sa := spread4(uint32(s))
			sb := spread4(uint32(s >> 32))
			ea := spread4(uint32(e))
			eb := spread4(uint32(e >> 32))
			binary.LittleEndian.PutUint64(xb[2*i:], (sa&lanes16Bit7)<<8|sa&lanes16Lo7|ea<<7)
			binary.LittleEndian.PutUint64(xb[2*i+8:], (sb&lanes16Bit7)<<8|sb&lanes16Lo7|eb<<7)
		}
	}
	for ; i < n; i++ {
		s, e := sm[i], exps[i]
		x[i] = uint16(s&0x80)<<8 | uint16(e)<<7 | uint16(s&0x7F)
	}
}

// splitFP16 writes the 11-bit sign+mantissa field of each element of x to
// the bit stream sm (ceil(11*len(x)/8) bytes, LSB first, padding bits zero)
// and its exponent to exps.
func splitFP16(x []uint16, sm, exps []byte) {
	n := len(x)
	exps = exps[:n]
	sm = sm[:(11*n+7)/8]
	var acc uint64
	nb := 0
	o := 0
	for i, v := range x {
		exps[i] = uint8(v>>10) & 0x1F
		acc |= uint64(v>>5&0x400|v&0x3FF) << nb
		nb += 11
		for nb >= 8 {
			sm[o] = byte(acc)
			o++
			acc >>= 8
			nb -= 8
		}
	}
	if nb > 0 {
		sm[o] = byte(acc)
	}
}

// joinFP16 is the inverse of splitFP16. It reports whether the padding bits
// after the last field are zero.
func joinFP16(x []uint16, sm, exps []byte) bool {
	n := len(x)
	exps = exps[:n]
	sm = sm[:(11*n+7)/8]
	var acc uint64
	nb := 0
	o := 0
	for i := range x {
		for nb < 11 {
			acc |= uint64(sm[o]) << nb
			o++
			nb += 8
		}
		s := uint16(acc) & 0x7FF
		acc >>= 11
		nb -= 11
		x[i] = (s&0x400)<<5 | uint16(exps[i])<<10 | s&0x3FF
	}
	return acc == 0
}
