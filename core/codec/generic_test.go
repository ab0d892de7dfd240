package codec_test

import (
	"testing"

	"github.com/glyd/glyd/core/codec"
)

// TestGenericPaths runs bf16 through the generic (block at a time) coders
// that fp16 and big-endian machines use, and checks that they produce the
// same bytes as the fast chunk coders and decode the same.
func TestGenericPaths(t *testing.T) {
	inputs := map[string][]uint16{
		"patterns": allPatterns(3, 0x3C00),
		"sparse":   randnBF16(3*4096+77, 0.02, 8),
		"small":    randnBF16(13, 0.02, 9),
		// Large enough for the pair tables of the fast Smallest encoder.
		"large": randnBF16(1<<20+3*4096+77, 0.03, 10),
	}
	// Chunks of N(0, 0.02), random bits and N(0, 1e20) in turn: the
	// window of the vector histogram moves, or is given up, from chunk to
	// chunk.
	drift := randnBF16(12*4096+5, 0.02, 12)
	for c := 1; c < 12; c += 3 {
		for i := 4096 * c; i < 4096*(c+1); i++ {
			drift[i] = uint16(i * 40503)
		}
		copy(drift[4096*(c+1):], randnBF16(4096, 1e20, uint64(c)))
	}
	inputs["drift"] = drift
	for _, name := range []string{"sparse", "large"} {
		sp := inputs[name]
		for p := 0; p < len(sp); p += 37 {
			sp[p] = uint16(p * 40503)
		}
	}
	for name, x := range inputs {
		for _, l := range layouts {
			fast, err := codec.Pack(x, codec.BF16, []int64{int64(len(x))}, codec.Options{Layout: l})
			if err != nil {
				t.Fatal(err)
			}
			restore := codec.SetForceGeneric(true)
			gen := checkRoundTrip(t, x, codec.BF16, []int64{int64(len(x))}, codec.Options{Layout: l})
			restore()
			if !sameTensor(fast, gen) {
				t.Fatalf("%s %v: the generic and fast encoders give different bytes", name, l)
			}
		}
	}
	// Two large groups with different tables, two workers: each worker's
	// pair table must follow the group.
	x := randnBF16(2<<20, 0.02, 11)
	for i := range x[1<<20:] {
		x[1<<20+i] ^= 0x0080 // flip the low exponent bit: another table
	}
	shape := []int64{2, 1 << 20}
	opt := codec.Options{Layout: codec.Smallest, Groups: 2, Workers: 2}
	fast, err := codec.Pack(x, codec.BF16, shape, opt)
	if err != nil {
		t.Fatal(err)
	}
	if fast.Groups[0].Table == fast.Groups[1].Table {
		t.Fatal("the groups should have different tables")
	}
	restore := codec.SetForceGeneric(true)
	gen := checkRoundTrip(t, x, codec.BF16, shape, opt)
	restore()
	if !sameTensor(fast, gen) {
		t.Fatal("two groups: the generic and fast encoders give different bytes")
	}
}
