package bf16

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBF16AllPatterns checks every bf16 bit pattern: float32 and back is the
// identity (NaN payloads included, since all bf16 NaNs with a payload in the
// top 7 bits survive), and the field helpers reassemble the bits.
func TestBF16AllPatterns(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		b := uint16(i)
		f := ToFloat32(b)
		back := FromFloat32(f)
		if IsNaN(b) {
			if !IsNaN(back) || back != b|0x0040 {
				t.Fatalf("NaN %#04x -> %#04x, want quiet %#04x", b, back, b|0x0040)
			}
		} else if back != b {
			t.Fatalf("%#04x -> %v -> %#04x", b, f, back)
		}
		if got := Assemble(Exponent(b), SignMantissa(b)); got != b {
			t.Fatalf("Assemble(fields(%#04x)) = %#04x", b, got)
		}
		if IsNaN(b) != math.IsNaN(float64(f)) {
			t.Fatalf("IsNaN(%#04x) disagrees with float32", b)
		}
	}
}

// TestFromFloat32Rounding compares with a slow reference: the nearest bf16
// by exhaustive neighbour comparison, ties to the even mantissa.
func TestFromFloat32Rounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(u uint32) {
		f := math.Float32frombits(u)
		got := FromFloat32(f)
		if math.IsNaN(float64(f)) {
			if !IsNaN(got) || got&0x8000 != uint16(u>>16)&0x8000 {
				t.Fatalf("NaN %#08x -> %#04x", u, got)
			}
			return
		}
		lo := uint16(u >> 16) // truncation toward zero in magnitude
		hi := lo + 1
		dlo := math.Abs(float64(f) - float64(ToFloat32(lo)))
		var want uint16
		if lo&0x7FFF == 0x7F7F && u&0xFFFF >= 0x8000 {
			// Rounding up from the largest finite magnitude: Inf when at
			// or past the halfway point (ties go to even = Inf).
			want = hi
		} else if lo&0x7FFF >= 0x7F80 {
			want = lo // Inf stays Inf
		} else {
			dhi := math.Abs(float64(ToFloat32(hi)) - float64(f))
			switch {
			case dlo < dhi:
				want = lo
			case dhi < dlo:
				want = hi
			case lo&1 == 0:
				want = lo
			default:
				want = hi
			}
		}
		if got != want {
			t.Fatalf("FromFloat32(%#08x = %v) = %#04x, want %#04x", u, f, got, want)
		}
	}
	for _, u := range []uint32{0, 0x80000000, 0x00008000, 0x00018000, 0x7F7F7FFF, 0x7F7F8000,
		0x7F7FFFFF, 0xFF7F8000, 0x7F800000, 0x3F808000, 0x3F818000, 0x3F80FFFF} {
		check(u)
	}
	for i := 0; i < 1_000_000; i++ {
		check(r.Uint32())
	}
}

// TestFP16AllPatterns checks every fp16 bit pattern through float32 and the
// field helpers.
func TestFP16AllPatterns(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := FP16ToFloat32(h)
		back := FP16FromFloat32(f)
		if FP16IsNaN(h) {
			if !FP16IsNaN(back) || back&0x8000 != h&0x8000 {
				t.Fatalf("NaN %#04x -> %#04x", h, back)
			}
		} else if back != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
		if got := FP16Assemble(FP16Exponent(h), FP16SignMantissa(h)); got != h {
			t.Fatalf("FP16Assemble(fields(%#04x)) = %#04x", h, got)
		}
		if FP16SignMantissa(h) >= 1<<FP16SMBits || FP16Exponent(h) > FP16MaxExp {
			t.Fatalf("fields of %#04x out of range", h)
		}
	}
}

func TestKnownValues(t *testing.T) {
	cases := []struct {
		f    float32
		bf16 uint16
		fp16 uint16
	}{
		{1, 0x3F80, 0x3C00},
		{-2, 0xC000, 0xC000},
		{0.5, 0x3F00, 0x3800},
		{float32(math.Inf(1)), 0x7F80, 0x7C00},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{65504, 0x4780, 0x7BFF},
	}
	for _, c := range cases {
		if got := FromFloat32(c.f); got != c.bf16 {
			t.Errorf("FromFloat32(%v) = %#04x, want %#04x", c.f, got, c.bf16)
		}
		if got := FP16FromFloat32(c.f); got != c.fp16 {
			t.Errorf("FP16FromFloat32(%v) = %#04x, want %#04x", c.f, got, c.fp16)
		}
	}
	if Exponent(0x3F80) != 127 || FP16Exponent(0x3C00) != 15 {
		t.Error("exponent of 1.0")
	}
}
