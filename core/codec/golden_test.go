package codec_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/codec/internal/ref"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenInput is a fixed 64-element bf16 tensor of shape [4, 16] made from
// integers only (no floating point, no random generator), with exponents
// spread so that the Smallest layout uses all three levels, and escapes:
// ±0, a subnormal, ±Inf, a NaN with a payload and a far outlier.
func goldenInput() []uint16 {
	exps := [16]uint16{120, 121, 119, 120, 122, 118, 121, 120, 123, 117, 119, 116, 120, 124, 115, 121}
	x := make([]uint16, 64)
	for i := range x {
		sign := uint16(i*7) & 1
		mant := uint16(i*29) % 128
		e := exps[(i*5)%16]
		if i%13 == 12 {
			e = 110 + uint16(i%3) // level 3, inside the window
		}
		x[i] = sign<<15 | e<<7 | mant
	}
	x[3] = 0x0000  // +0
	x[20] = 0x8000 // -0
	x[21] = 0x0001 // smallest subnormal
	x[40] = 0x7F80 // +Inf
	x[41] = 0xFF80 // -Inf
	x[50] = 0x7FC1 // NaN with a payload
	x[63] = 0x6F00 // 2^95: an outlier
	return x
}

// formatTensor prints every field and byte of a packed tensor.
func formatTensor(t *codec.Tensor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "layout %v\ndtype %v\nshape %v\nchecksum %#08x\n", t.Layout, t.DType, t.Shape, t.Checksum)
	for i, g := range t.Groups {
		fmt.Fprintf(&b, "group %d elements %d base %d table %v escapes %d offsets %v\n", i, g.Elements, g.Base, g.Table, g.Escapes, g.Offsets)
	}
	for p, data := range t.Planes {
		fmt.Fprintf(&b, "plane %v %d bytes\n", codec.Plane(p), len(data))
		for i := 0; i < len(data); i += 32 {
			fmt.Fprintf(&b, "  %x\n", data[i:min(i+32, len(data))])
		}
	}
	return b.String()
}

// TestGolden pins the bytes of both layouts for goldenInput: the file
// format and the GPU kernels depend on them. Run with -update to rewrite
// testdata/golden_*.txt after a deliberate change of the layouts (and say
// so in docs/FORMAT.md).
func TestGolden(t *testing.T) {
	x := goldenInput()
	for _, l := range layouts {
		pt := checkRoundTrip(t, x, codec.BF16, []int64{4, 16}, codec.Options{Layout: l, Groups: 2})
		if pt.EscapeFraction() == 0 {
			t.Fatalf("%v: golden tensor has no escapes", l)
		}
		if l == codec.Smallest && (len(pt.Planes[codec.PlaneCode2]) == 0 || len(pt.Planes[codec.PlaneCode3]) == 0) {
			t.Fatal("smallest: golden tensor does not use levels 2 and 3")
		}
		got := formatTensor(pt)
		path := filepath.Join("testdata", "golden_"+l.String()+".txt")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
		}
		if got != string(want) {
			t.Errorf("%v: packed bytes differ from %s:\n--- got\n%s--- want\n%s", l, path, got, want)
		}
		// The reference decoder reads the pinned bytes.
		dec, err := ref.Decode(toRef(pt))
		if err != nil || firstDiff(dec, x) >= 0 {
			t.Fatalf("%v: reference decoder: %v", l, err)
		}
	}
}

// TestHandMade decodes tensors written by hand from docs/FORMAT.md (the
// same ones internal/ref checks itself against) with the fast decoder.
func TestHandMade(t *testing.T) {
	le32 := func(v uint32) []byte {
		b := make([]byte, 4)
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		return b
	}
	f12 := &codec.Tensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: []int64{3},
		Groups: []codec.Group{{Elements: 3, Base: 120, Escapes: 1}}}
	f12.Planes[codec.PlaneSM] = []byte{0x00, 0x81, 0x00}
	f12.Planes[codec.PlaneCode] = []byte{0x77, 0x0F}
	f12.Planes[codec.PlaneEscIdx] = le32(2)
	f12.Planes[codec.PlaneEscExp] = []byte{0}

	fp := &codec.Tensor{Layout: codec.Fixed12, DType: codec.FP16, Shape: []int64{1, 2},
		Groups: []codec.Group{{Elements: 2, Base: 15, Escapes: 1}}}
	fp.Planes[codec.PlaneSM] = []byte{0x00, 0xF8, 0x3F}
	fp.Planes[codec.PlaneCode] = []byte{0xF0}
	fp.Planes[codec.PlaneEscIdx] = le32(1)
	fp.Planes[codec.PlaneEscExp] = []byte{30}

	sm := &codec.Tensor{Layout: codec.Smallest, DType: codec.BF16, Shape: []int64{5},
		Groups: []codec.Group{{Elements: 5, Base: 100, Table: [6]uint8{127, 126, 200, 125, 1, 2}, Escapes: 1}}}
	sm.Planes[codec.PlaneSM] = []byte{0x00, 0x80, 0x05, 0x7F, 0x00}
	sm.Planes[codec.PlaneCode] = []byte{0xD0, 0x03}
	sm.Planes[codec.PlaneCode2] = []byte{0x0C}
	sm.Planes[codec.PlaneCode3] = []byte{0x0F}
	sm.Planes[codec.PlaneChunks] = make([]byte, 16)
	sm.Planes[codec.PlaneEscIdx] = le32(4)
	sm.Planes[codec.PlaneEscExp] = []byte{0}

	for _, c := range []struct {
		t    *codec.Tensor
		want []uint16
	}{
		{f12, []uint16{0x3F80, 0xBF81, 0x0000}},
		{fp, []uint16{0x3C00, 0xFBFF}},
		{sm, []uint16{127 << 7, 0x8000 | 127<<7, 126<<7 | 5, 125<<7 | 0x7F, 0}},
	} {
		got := make([]uint16, len(c.want))
		if err := codec.Unpack(c.t, got, 1); err != nil || firstDiff(got, c.want) >= 0 {
			t.Fatalf("%v %v: got %04x, want %04x (%v)", c.t.Layout, c.t.DType, got, c.want, err)
		}
	}
}
