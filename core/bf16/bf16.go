// Package bf16 holds bit-level helpers for the two 16-bit floating-point
// formats Glyd packs: bfloat16 (1 sign, 8 exponent, 7 mantissa bits) and
// IEEE 754 binary16 "fp16" (1 sign, 5 exponent, 10 mantissa bits).
//
// Values are handled as their raw bits (uint16) throughout Glyd; these
// helpers convert to and from float32 and split the bits into the fields the
// codecs store separately: the exponent, and sign+mantissa ("sm").
//
// bfloat16 is the upper half of an IEEE float32, so its conversions are a few
// lines here; fp16 conversions come from github.com/x448/float16.
package bf16

import (
	"math"

	"github.com/x448/float16"
)

// Field widths and limits of bfloat16.
const (
	// MaxExp is the largest bf16 exponent field (Inf and NaN).
	MaxExp = 0xFF
	// SMBits is the width of the bf16 sign+mantissa field.
	SMBits = 8
)

// Field widths and limits of fp16.
const (
	// FP16MaxExp is the largest fp16 exponent field (Inf and NaN).
	FP16MaxExp = 0x1F
	// FP16SMBits is the width of the fp16 sign+mantissa field.
	FP16SMBits = 11
)

// ToFloat32 returns the float32 with the same value as the bf16 bits b. The
// conversion is exact; NaN payloads are kept.
func ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// FromFloat32 rounds f to the nearest bf16, ties to even, and returns its
// bits. Values too large for bf16 become ±Inf. A NaN stays a NaN with the
// same sign and the upper 7 bits of its payload, made quiet (bit 6 set), so
// it can never turn into an Inf.
func FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 { // NaN
		return uint16(u>>16) | 0x0040
	}
	// Round to nearest even: add 0x7FFF plus the lowest kept bit. A carry
	// out of the mantissa correctly bumps the exponent (up to Inf).
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}

// Exponent returns the 8-bit exponent field of bf16 bits b (bits 7..14).
func Exponent(b uint16) uint8 { return uint8(b >> 7) }

// SignMantissa returns the 8-bit sign+mantissa field of bf16 bits b: the sign
// in bit 7 and the 7 mantissa bits in bits 0..6.
func SignMantissa(b uint16) uint8 { return uint8(b>>8)&0x80 | uint8(b)&0x7F }

// Assemble returns the bf16 bits with exponent field exp and sign+mantissa
// field sm (as returned by Exponent and SignMantissa).
func Assemble(exp, sm uint8) uint16 {
	return uint16(sm&0x80)<<8 | uint16(exp)<<7 | uint16(sm&0x7F)
}

// IsNaN reports whether bf16 bits b are a NaN.
func IsNaN(b uint16) bool { return b&0x7FFF > 0x7F80 }

// FP16ToFloat32 returns the float32 with the same value as the fp16 bits h.
// The conversion is exact; NaN payloads are kept.
func FP16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// FP16FromFloat32 rounds f to the nearest fp16, ties to even, and returns its
// bits (github.com/x448/float16 semantics: overflow becomes ±Inf, a NaN stays
// a quiet NaN with the upper bits of its payload).
func FP16FromFloat32(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// FP16Exponent returns the 5-bit exponent field of fp16 bits h (bits 10..14).
func FP16Exponent(h uint16) uint8 { return uint8(h>>10) & 0x1F }

// FP16SignMantissa returns the 11-bit sign+mantissa field of fp16 bits h: the
// sign in bit 10 and the 10 mantissa bits in bits 0..9.
func FP16SignMantissa(h uint16) uint16 { return h>>5&0x400 | h&0x3FF }

// FP16Assemble returns the fp16 bits with exponent field exp (0..31) and
// sign+mantissa field sm (0..2047).
func FP16Assemble(exp uint8, sm uint16) uint16 {
	return (sm&0x400)<<5 | uint16(exp&0x1F)<<10 | sm&0x3FF
}

// FP16IsNaN reports whether fp16 bits h are a NaN.
func FP16IsNaN(h uint16) bool { return h&0x7FFF > 0x7C00 }
