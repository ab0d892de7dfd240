package codec

import (
	"encoding/binary"
	"unsafe"
)

// This file holds the dtype side of the codecs: where the exponent sits in
// an element, and how the sign+mantissa field goes to and from PlaneSM.
//
// The layout coders work on "lanes": an element's 16 bits with the exponent
// field in place. The encoders read exponents straight from the source
// elements; the decoders write each element's exponent in place and, for
// bf16, merge in its sign+mantissa byte in the same pass (fp16's 11-bit
// fields are merged by a second, scalar pass: mergeFP16).

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

// Masks of four 16-bit lanes in a uint64.
const (
	lanes1      = 0x0001000100010001
	lanesLo7    = 0x007F007F007F007F
	lanesBit7   = 0x0080008000800080
	lanesByte   = 0x00FF00FF00FF00FF
	lanesNibble = 0x000F000F000F000F
	lanesBit4   = 0x0010001000100010
	lanesBit14  = 0x4000400040004000
	lanesBit15  = 0x8000800080008000
)

// field describes where a dtype keeps its exponent.
type field struct {
	shift uint   // position of the exponent's lowest bit
	mask  uint16 // the exponent's mask after shifting
	bf16  bool   // bf16: sign+mantissa is one byte per element
}

func (d dtypeInfo) field() field {
	if d.smBits == 8 {
		return field{shift: 7, mask: 0xFF, bf16: true}
	}
	return field{shift: 10, mask: 0x1F}
}

// lanesMask returns f.mask in each of four lanes.
func (f field) lanesMask() uint64 { return uint64(f.mask) * lanes1 }

// smBF16 returns the sign+mantissa bytes of the four bf16 elements in the
// lanes of w, packed into 32 bits.
func smBF16(w uint64) uint32 {
	s := (w>>8)&lanesBit7 | w&lanesLo7
	s = (s | s>>8) & 0x0000FFFF0000FFFF
	return uint32(s | s>>16)
}

// smLanesBF16 returns the sign and mantissa bits of four bf16 elements, in
// place in four lanes, from their four sign+mantissa bytes v.
func smLanesBF16(v uint32) uint64 {
	w := uint64(v)
	w = (w | w<<16) & 0x0000FFFF0000FFFF
	w = (w | w<<8) & lanesByte
	return (w&lanesBit7)<<8 | w&lanesLo7
}

// smOneBF16 is smLanesBF16 for one element.
func smOneBF16(s byte) uint16 { return uint16(s&0x80)<<8 | uint16(s&0x7F) }

// splitFP16 writes the 11-bit sign+mantissa field of each element of x to
// the bit stream sm (ceil(11*len(x)/8) bytes, LSB first, padding bits zero).
func splitFP16(x []uint16, sm []byte) {
	sm = sm[:(11*len(x)+7)/8]
	var acc uint64
	nb := 0
	o := 0
	for _, v := range x {
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

// mergeFP16 ORs the sign+mantissa fields of the bit stream sm into the
// elements of x (whose other bits are the exponent). It reports whether the
// padding bits after the last field are zero.
func mergeFP16(x []uint16, sm []byte) bool {
	sm = sm[:(11*len(x)+7)/8]
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
		x[i] |= (s&0x400)<<5 | s&0x3FF
	}
	return acc == 0
}

// load4 returns elements i..i+3 of x (as bytes xb) in the lanes of a uint64.
func load4(xb []byte, i int) uint64 { return binary.LittleEndian.Uint64(xb[2*i:]) }
