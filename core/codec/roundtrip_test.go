package codec_test

import (
	"fmt"
	"testing"

	"github.com/glyd/glyd/core/codec"
)

// allPatterns returns the 65,536 16-bit patterns in order, after k copies
// of pad (so that pattern p sits at index k+p).
func allPatterns(k int, pad uint16) []uint16 {
	x := make([]uint16, k+1<<16)
	for i := 0; i < k; i++ {
		x[i] = pad
	}
	for p := 0; p < 1<<16; p++ {
		x[k+p] = uint16(p)
	}
	return x
}

// TestAllPatterns round-trips every bf16 and fp16 bit pattern (±0,
// subnormals, ±Inf, every NaN payload) in both layouts, shifted by k = 0..7
// elements so that every pattern lands in every position of a byte of
// codes, of a block of the fast paths, and both sides of chunk boundaries.
func TestAllPatterns(t *testing.T) {
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for _, l := range layouts {
			for k := 0; k < 8; k++ {
				x := allPatterns(k, 0x3C00)
				checkRoundTrip(t, x, dt, []int64{int64(len(x))}, codec.Options{Layout: l, Workers: 2})
			}
		}
	}
}

// TestAllPatternsEverySlot puts every pattern p in every slot s mod 4 (and
// so mod 2): element 4p+s holds pattern p+s*16411 (mod 2^16), a bijection
// of p for each s.
func TestAllPatternsEverySlot(t *testing.T) {
	x := make([]uint16, 4<<16)
	for p := 0; p < 1<<16; p++ {
		for s := 0; s < 4; s++ {
			x[4*p+s] = uint16(p + s*16411)
		}
	}
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for _, l := range layouts {
			checkRoundTrip(t, x, dt, []int64{1 << 16, 4}, codec.Options{Layout: l})
		}
	}
}

// TestSparsePatterns places each of the 65,536 patterns into N(0, 0.02)
// weights, one per 64 elements at slot p mod 64, so that the word-at-a-time
// fast paths run and meet an escape in every slot of their blocks, with
// realistic tables (not the ones all-patterns data produces).
func TestSparsePatterns(t *testing.T) {
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		x := randn(dt, 64<<16, 0.02, 3)
		for p := 0; p < 1<<16; p++ {
			x[64*p+p%64] = uint16(p)
		}
		for _, l := range layouts {
			checkRoundTrip(t, x, dt, []int64{64 << 16}, codec.Options{Layout: l})
		}
	}
}

// TestMagnitudes round-trips weights of many scales, so that the base and
// table cover exponents from subnormals to near the top of the range (bases
// above 127 exercise the byte arithmetic of the fast paths).
func TestMagnitudes(t *testing.T) {
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for _, sigma := range []float64{1e-30, 1e-6, 0.02, 1, 300, 1e20, 1e36} {
			x := randn(dt, 20000, sigma, 4)
			for _, l := range layouts {
				t.Run(fmt.Sprintf("%v/%v/%g", dt, l, sigma), func(t *testing.T) {
					checkRoundTrip(t, x, dt, []int64{100, 200}, codec.Options{Layout: l})
				})
			}
		}
	}
}

// TestConstant round-trips tensors with a single value (one exponent: the
// smallest table has unused slots) and two values.
func TestConstant(t *testing.T) {
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for _, v := range []uint16{0, 0x8000, 0x3F80, 0x7F80, 0xFFFF, 0x0001} {
			x := make([]uint16, 9000)
			for i := range x {
				x[i] = v
				if i%7 == 3 {
					x[i] = v ^ 0x4000
				}
			}
			for _, l := range layouts {
				checkRoundTrip(t, x[:4097], dt, []int64{4097}, codec.Options{Layout: l})
				for i := range x {
					x[i] = v
				}
				checkRoundTrip(t, x, dt, []int64{9000}, codec.Options{Layout: l})
			}
		}
	}
}

// TestShapes round-trips awkward shapes: scalars, empty tensors, single
// rows and columns, sizes around 2, 4, 8, 4096 and 65536, and groups.
func TestShapes(t *testing.T) {
	type tc struct {
		shape  []int64
		groups int
	}
	cases := []tc{
		{[]int64{}, 0}, {[]int64{0}, 0}, {[]int64{3, 0}, 0}, {[]int64{0, 5}, 0}, {[]int64{1}, 0},
		{[]int64{1, 1}, 0}, {[]int64{1, 1, 1}, 1}, {[]int64{1, 37}, 0}, {[]int64{37, 1}, 0},
		{[]int64{4095}, 0}, {[]int64{4097}, 0}, {[]int64{8191}, 0}, {[]int64{3, 4099}, 3},
		{[]int64{65537}, 0}, {[]int64{2, 65536 + 3}, 0}, {[]int64{2, 65536 + 3}, 2},
		{[]int64{8, 33, 17}, 8}, {[]int64{8, 33, 17}, 4}, {[]int64{6, 3}, 3}, {[]int64{6, 3}, 6},
		{[]int64{4, 0, 7}, 4}, {[]int64{5, 4096}, 5}, {[]int64{3, 70001}, 3},
	}
	for n := 2; n <= 17; n++ {
		cases = append(cases, tc{[]int64{int64(n)}, 0}, tc{[]int64{int64(n), 3}, n})
	}
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for i, c := range cases {
			total := 1
			for _, s := range c.shape {
				total *= int(s)
			}
			x := randn(dt, total, 0.02, uint64(i))
			for j := range x {
				if j%97 == 5 {
					x[j] = uint16(j * 40503) // escapes and odd values
				}
			}
			for _, l := range layouts {
				t.Run(fmt.Sprintf("%v/%v/%v/g%d", dt, l, c.shape, c.groups), func(t *testing.T) {
					pt := checkRoundTrip(t, x, dt, c.shape, codec.Options{Layout: l, Groups: c.groups})
					if want := max(c.groups, 1); len(pt.Groups) != want {
						t.Fatalf("%d groups, want %d", len(pt.Groups), want)
					}
					if total == 0 && (pt.BitsPerWeight() != 0 || pt.EscapeFraction() != 0) {
						t.Fatalf("empty tensor: bits/weight %v, escape fraction %v", pt.BitsPerWeight(), pt.EscapeFraction())
					}
				})
			}
		}
	}
}

// TestGroupsIndependent checks that each group has its own tables: two
// experts with very different scales both code without escapes.
func TestGroupsIndependent(t *testing.T) {
	a := randnBF16(8192, 0.02, 1)
	b := randnBF16(8192, 1e10, 2)
	x := append(a, b...)
	for _, l := range layouts {
		pt := checkRoundTrip(t, x, codec.BF16, []int64{2, 64, 128}, codec.Options{Layout: l, Groups: 2})
		if pt.Groups[0].Base == pt.Groups[1].Base {
			t.Fatalf("%v: both groups have base %d", l, pt.Groups[0].Base)
		}
		if f := pt.EscapeFraction(); f > 0.01 {
			t.Fatalf("%v: escape fraction %v with per-group tables", l, f)
		}
	}
}

// TestRandomBits round-trips uniformly random bits (almost every element
// an escape in fixed12) at many sizes.
func TestRandomBits(t *testing.T) {
	for _, n := range []int{1, 5, 64, 4100, 70000} {
		x := randnBF16(n, 1, uint64(n))
		for i := range x {
			x[i] = uint16(uint32(i)*2654435761>>16) ^ x[i]
		}
		for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
			for _, l := range layouts {
				checkRoundTrip(t, x, dt, []int64{int64(n)}, codec.Options{Layout: l})
			}
		}
	}
}
