package codec_test

import (
	"fmt"
	"slices"

	"github.com/glyd/glyd/core/bf16"
	"github.com/glyd/glyd/core/codec"
)

// Example packs a weight matrix in both layouts, prints its size in bits
// per weight, and unpacks it to the exact original bits.
func Example() {
	// A 256 x 256 bf16 weight matrix, roughly N(0, 0.02). (Real code gets
	// the bits from a checkpoint; this makes them from integers only, so
	// that the output below is the same on every machine.)
	w := make([]uint16, 256*256)
	s := uint32(1)
	for i := range w {
		var sum int64
		for k := 0; k < 4; k++ { // Irwin-Hall: a sum of 4 uniforms is close to normal
			s = s*1664525 + 1013904223
			sum += int64(s >> 8)
		}
		w[i] = bf16.FromFloat32(float32(sum-2<<24) / float32(1<<24) * 0.035)
	}
	w[7] = 0x7FC0 // a NaN: any bits survive

	for _, layout := range []codec.Layout{codec.Fixed12, codec.Smallest} {
		t, err := codec.Pack(w, codec.BF16, []int64{256, 256}, codec.Options{Layout: layout})
		if err != nil {
			fmt.Println(err)
			return
		}
		out := make([]uint16, t.NumElements())
		if err := codec.Unpack(t, out, 0); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-8v %.2f bits/weight, exact: %v\n", layout, t.BitsPerWeight(), slices.Equal(out, w))
	}
	fmt.Printf("limit    %.2f bits/weight\n", 8+codec.ExponentEntropy(w, codec.BF16))
	// Output:
	// fixed12  12.01 bits/weight, exact: true
	// smallest 10.74 bits/weight, exact: true
	// limit    10.52 bits/weight
}
