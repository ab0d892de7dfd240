package codec_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/bf16"
	"github.com/glyd/glyd/core/codec"
)

// TestReportBits prints, for synthetic bf16 weights, the bits per weight of
// both layouts next to the order-0 limit (8 + exponent entropy). It only
// runs with GLYD_REPORT=1:
//
//	GLYD_REPORT=1 go test -run TestReportBits -v ./core/codec
//
// (Numbers for real checkpoints come from the Python side.)
func TestReportBits(t *testing.T) {
	if os.Getenv("GLYD_REPORT") != "1" {
		t.Skip("set GLYD_REPORT=1 to print the bits/weight table")
	}
	const n = 16 << 20
	r := rand.New(rand.NewPCG(7, 8))
	gen := func(f func() float64) []uint16 {
		x := make([]uint16, n)
		for i := range x {
			x[i] = bf16.FromFloat32(float32(f()))
		}
		return x
	}
	dists := []struct {
		name string
		x    []uint16
	}{
		{"randn*0.02", benchData()},
		{"randn*0.01", gen(func() float64 { return r.NormFloat64() * 0.01 })},
		{"randn*0.05", gen(func() float64 { return r.NormFloat64() * 0.05 })},
		{"laplace b=0.014", gen(func() float64 { return r.ExpFloat64() * 0.014 * float64(1-2*int(r.Uint32()&1)) })},
		{"student-t3*0.012", gen(func() float64 {
			z := r.NormFloat64()
			a, b, c := r.NormFloat64(), r.NormFloat64(), r.NormFloat64()
			c = a*a + b*b + c*c
			return z / math.Sqrt(c/3) * 0.012
		})},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-18s %10s | %-22s | %-40s\n", "bf16 weights", "limit", "fixed12 bits (esc %)", "smallest bits (esc %) [sm code code2 code3 chunks esc]")
	for _, d := range dists {
		limit := 8 + codec.ExponentEntropy(d.x, codec.BF16)
		fmt.Fprintf(&b, "%-18s %10.3f |", d.name, limit)
		for _, l := range layouts {
			pt, err := codec.Pack(d.x, codec.BF16, []int64{4096, n / 4096}, codec.Options{Layout: l})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, " %7.3f (%.4f%%)", pt.BitsPerWeight(), 100*pt.EscapeFraction())
			if l == codec.Smallest {
				per := func(p ...codec.Plane) float64 {
					s := 0
					for _, q := range p {
						s += len(pt.Planes[q])
					}
					return 8 * float64(s) / n
				}
				fmt.Fprintf(&b, " [%.3f %.3f %.3f %.3f %.3f %.3f]", per(codec.PlaneSM), per(codec.PlaneCode), per(codec.PlaneCode2),
					per(codec.PlaneCode3), per(codec.PlaneChunks), per(codec.PlaneEscIdx, codec.PlaneEscExp))
			} else {
				fmt.Fprint(&b, "      |")
			}
		}
		fmt.Fprintln(&b)
	}
	t.Log(b.String())
}
