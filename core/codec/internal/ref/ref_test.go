package ref

import (
	"slices"
	"testing"

	"github.com/glyd/glyd/core/status"
)

// These tensors are written by hand from the specification, byte by byte,
// so that the oracle is checked against the text and not only against the
// encoder it judges.

func le32(v uint32) []byte {
	b := make([]byte, 4)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

func TestFixed12ByHand(t *testing.T) {
	// bf16 1.0 (exp 127), -1.0078125 (sign, exp 127, mantissa 1), +0
	// (exp 0: outside [120, 134], an escape). Codes 7, 7, 15.
	tt := &Tensor{Layout: LayoutFixed12, DType: DTypeBF16, Shape: []int64{3},
		Groups: []Group{{Elements: 3, Base: 120, Escapes: 1}}}
	tt.Planes[PlaneSM] = []byte{0x00, 0x81, 0x00}
	tt.Planes[PlaneCode] = []byte{0x77, 0x0F}
	tt.Planes[PlaneEscIdx] = le32(2)
	tt.Planes[PlaneEscExp] = []byte{0}
	got, err := Decode(tt)
	if err != nil || !slices.Equal(got, []uint16{0x3F80, 0xBF81, 0x0000}) {
		t.Fatalf("got %04x, %v", got, err)
	}
	tt.Planes[PlaneCode] = []byte{0x7F, 0x0F} // element 1 now claims an escape too
	if _, err := Decode(tt); status.CodeOf(err) != status.EscapeMissing {
		t.Fatalf("escape code without entry: %v", err)
	}
	tt.Planes[PlaneCode] = []byte{0x77, 0x1F} // nonzero padding nibble
	if _, err := Decode(tt); status.CodeOf(err) != status.Corrupt {
		t.Fatalf("padding nibble: %v", err)
	}
}

func TestFixed12FP16ByHand(t *testing.T) {
	// fp16 1.0 (exp 15) and -65504 (sign, exp 30, mantissa 0x3FF); base 15:
	// codes 0 and 15 (30 is outside [15, 29]). sm fields 0 and 0x7FF, 11
	// bits each: bits 11..21 set.
	tt := &Tensor{Layout: LayoutFixed12, DType: DTypeFP16, Shape: []int64{1, 2},
		Groups: []Group{{Elements: 2, Base: 15, Escapes: 1}}}
	tt.Planes[PlaneSM] = []byte{0x00, 0xF8, 0x3F}
	tt.Planes[PlaneCode] = []byte{0xF0}
	tt.Planes[PlaneEscIdx] = le32(1)
	tt.Planes[PlaneEscExp] = []byte{30}
	got, err := Decode(tt)
	if err != nil || !slices.Equal(got, []uint16{0x3C00, 0xFBFF}) {
		t.Fatalf("got %04x, %v", got, err)
	}
	tt.Groups[0].Base = 18 // 18 + 14 > 31
	if _, err := Decode(tt); status.CodeOf(err) != status.ExponentTable {
		t.Fatalf("base: %v", err)
	}
}

func TestSmallestByHand(t *testing.T) {
	// Exponents 127, 127, 126, 125, 0 with Table [127 126 200 125 1 2] and
	// Base 100: c1 = 0, 0, 1, 3, 3; the last two take level-2 codes 0
	// (Table[3] = 125) and 3; the last a level-3 code 15 (0 is outside
	// [100, 114]): an escape. Element 1 is negative.
	tt := &Tensor{Layout: LayoutSmallest, DType: DTypeBF16, Shape: []int64{5},
		Groups: []Group{{Elements: 5, Base: 100, Table: [6]uint8{127, 126, 200, 125, 1, 2}, Escapes: 1}}}
	tt.Planes[PlaneSM] = []byte{0x00, 0x80, 0x05, 0x7F, 0x00}
	tt.Planes[PlaneCode] = []byte{0xD0, 0x03}
	tt.Planes[PlaneCode2] = []byte{0x0C}
	tt.Planes[PlaneCode3] = []byte{0x0F}
	tt.Planes[PlaneChunks] = make([]byte, 16)
	tt.Planes[PlaneEscIdx] = le32(4)
	tt.Planes[PlaneEscExp] = []byte{0}
	want := []uint16{127 << 7, 0x8000 | 127<<7, 126<<7 | 5, 125<<7 | 0x7F, 0}
	got, err := Decode(tt)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %04x, want %04x, %v", got, want, err)
	}
	tt.Planes[PlaneCode2] = []byte{0x0C, 0x00} // a byte too many in the segment
	if _, err := Decode(tt); status.CodeOf(err) != status.Corrupt {
		t.Fatalf("long segment: %v", err)
	}
	tt.Planes[PlaneCode2] = []byte{0x0C}
	tt.Planes[PlaneChunks][0] = 1 // first chunk must start at 0
	if _, err := Decode(tt); status.CodeOf(err) != status.Corrupt {
		t.Fatalf("chunk table: %v", err)
	}
}
