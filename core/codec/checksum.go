package codec

import (
	"encoding/binary"
	"hash/crc32"
)

// castagnoli is the CRC-32C table (hardware-accelerated where available).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C (Castagnoli) of src's elements as
// little-endian bytes: the value Tensor.Checksum holds.
func Checksum(src []uint16) uint32 { return crcUpdate(0, src) }

// crcUpdate extends crc with the little-endian bytes of x.
func crcUpdate(crc uint32, x []uint16) uint32 {
	if littleEndian {
		return crc32.Update(crc, castagnoli, u16bytes(x))
	}
	var buf [4096]byte
	for len(x) > 0 {
		n := min(len(x), len(buf)/2)
		for i, v := range x[:n] {
			binary.LittleEndian.PutUint16(buf[2*i:], v)
		}
		crc = crc32.Update(crc, castagnoli, buf[:2*n])
		x = x[n:]
	}
	return crc
}

// CRC-32C combination (as zlib's crc32_combine): the CRC of A||B from the
// CRCs of A and B and the length of B, by multiplying in GF(2) modulo the
// (bit-reflected) polynomial.
const crcPoly = 0x82F63B78

// crcMulMod returns a*b modulo the polynomial (reflected: bit 31 is x^0).
func crcMulMod(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// crcShift returns x^(8n) modulo the polynomial: the operator that appends
// n zero bytes.
func crcShift(n uint64) uint32 {
	p := uint32(1) << 31        // x^0
	sq := uint32(1) << (31 - 8) // x^8
	for n != 0 {
		if n&1 != 0 {
			p = crcMulMod(sq, p)
		}
		sq = crcMulMod(sq, sq)
		n >>= 1
	}
	return p
}

// crcCombine returns the CRC of A||B given crcA, crcB and len(B) in bytes.
func crcCombine(crcA, crcB uint32, lenB uint64) uint32 {
	return crcMulMod(crcShift(lenB), crcA) ^ crcB
}
