package codec

import (
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/glyd/glyd/core/status"
)

// TestCRCCombine checks the CRC-32C combination against the CRC of the
// concatenation, for random splits (including empty halves).
func TestCRCCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 5000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for it := 0; it < 300; it++ {
		n := r.IntN(len(buf) + 1)
		k := r.IntN(n + 1)
		a, b := buf[:k], buf[k:n]
		want := crc32.Checksum(buf[:n], castagnoli)
		got := crcCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), uint64(len(b)))
		if got != want {
			t.Fatalf("split %d|%d: combined %#x, want %#x", len(a), len(b), got, want)
		}
	}
	x := []uint16{0x3F80, 0x0001, 0xFFFF}
	if got, want := Checksum(x), crc32.Checksum([]byte{0x80, 0x3F, 0x01, 0x00, 0xFF, 0xFF}, castagnoli); got != want {
		t.Fatalf("Checksum is not the CRC-32C of the little-endian bytes: %#x, want %#x", got, want)
	}
	if Checksum(nil) != 0 {
		t.Fatal("Checksum of nothing is not 0")
	}
}

func TestChooseBase(t *testing.T) {
	var h [256]uint64
	if b := chooseBase(&h, 255); b != 0 {
		t.Fatalf("empty histogram: base %d, want 0", b)
	}
	h[250], h[255] = 10, 10
	if b := chooseBase(&h, 255); b != 241 {
		t.Fatalf("top exponents: base %d, want 241 (base+14 <= 255)", b)
	}
	h = [256]uint64{}
	h[100], h[130] = 5, 5 // two windows tie: the smaller base wins
	if b := chooseBase(&h, 255); b != 86 {
		t.Fatalf("tie: base %d, want 86", b)
	}
	h = [256]uint64{}
	h[31] = 1
	if b := chooseBase(&h, 31); b != 17 {
		t.Fatalf("fp16 top: base %d, want 17", b)
	}
}

func TestChooseSmallest(t *testing.T) {
	var h [256]uint64
	h[120], h[121], h[119], h[118], h[122], h[117], h[116] = 50, 50, 40, 30, 30, 20, 5
	h[0] = 5
	table, used, base := chooseSmallest(&h, 255)
	if used != 6 {
		t.Fatalf("%d slots used, want 6", used)
	}
	if want := [6]uint8{120, 121, 119, 118, 122, 117}; table != want {
		t.Fatalf("table %v, want %v (ties to the smaller exponent)", table, want)
	}
	// Remaining: 116 (5) and 0 (5): the window holding 0 wins the tie.
	if base != 0 {
		t.Fatalf("base %d, want 0", base)
	}
	h = [256]uint64{}
	h[7] = 3
	table, used, base = chooseSmallest(&h, 31)
	if table != [6]uint8{7} || base != 0 || used != 1 {
		t.Fatalf("one exponent: table %v base %d used %d", table, base, used)
	}
	sym := smallestSyms(table, used, base)
	if sym[7] != 0 || sym[0] != symL3 || sym[20] != symEsc {
		t.Fatalf("symbols: %d %d %d", sym[7], sym[0], sym[20])
	}
}

func TestNames(t *testing.T) {
	for _, l := range []Layout{Raw, Fixed12, Smallest} {
		got, err := ParseLayout(l.String())
		if err != nil || got != l {
			t.Fatalf("ParseLayout(%q) = %v, %v", l.String(), got, err)
		}
	}
	if _, err := ParseLayout("fixed13"); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("ParseLayout(fixed13): %v", err)
	}
	if Layout(9).String() != "layout(9)" || DType(9).String() != "dtype(9)" || Plane(9).String() != "plane(9)" {
		t.Fatal("names of unknown values")
	}
	for _, d := range []DType{BF16, FP16} {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Fatalf("ParseDType(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDType("fp8"); !errors.Is(err, &status.Error{Code: status.DType}) {
		t.Fatalf("ParseDType(fp8): %v", err)
	}
}

func TestExponentEntropy(t *testing.T) {
	x := []uint16{1 << 7, 2 << 7, 3 << 7, 4 << 7, 0x8000 | 1<<7, 2<<7 | 5, 3 << 7, 4<<7 | 0x7F}
	if e := ExponentEntropy(x, BF16); math.Abs(e-2) > 1e-12 {
		t.Fatalf("entropy %v, want 2", e)
	}
	if e := ExponentEntropy(x, FP16); e != 0 {
		t.Fatalf("fp16 entropy %v, want 0 (all exponents 0)", e)
	}
	if ExponentEntropy(nil, BF16) != 0 || ExponentEntropy(x, 0) != 0 {
		t.Fatal("entropy of nothing / unknown dtype")
	}
}

// TestParallelError checks that parallel reports the error of the first
// failing item whatever the scheduling, and turns panics into errors.
func TestParallelError(t *testing.T) {
	for w := 1; w <= 4; w++ {
		err := parallel(100, w, func(_, i int) error {
			if i%7 == 3 {
				return status.Errorf(status.Corrupt, "item %d", i)
			}
			return nil
		})
		if err == nil || err.Error() != "item 3" {
			t.Fatalf("workers %d: %v, want item 3", w, err)
		}
		err = parallel(10, w, func(_, i int) error {
			if i == 5 {
				var m map[int]int
				m[0] = 1 // panics
			}
			return nil
		})
		if status.CodeOf(err) != status.Internal {
			t.Fatalf("workers %d: panic gave %v", w, err)
		}
	}
}

func TestCRCCombineEqual(t *testing.T) {
	x := make([]uint16, 70001)
	s := uint32(7)
	for i := range x {
		s = s*1664525 + 1013904223
		x[i] = uint16(s >> 16)
	}
	want := Checksum(x)
	for _, seg := range []int{1, 2, 100, 4096, 70000, 70001} {
		var crcs []uint32
		last := 0
		for lo := 0; lo < len(x); lo += seg {
			hi := min(lo+seg, len(x))
			crcs = append(crcs, Checksum(x[lo:hi]))
			last = 2 * (hi - lo)
		}
		if got := CRCCombineEqual(crcs, 2*uint64(seg), uint64(last)); got != want {
			t.Fatalf("segments of %d: %08x, want %08x", seg, got, want)
		}
	}
	if CRCCombineEqual(nil, 8, 0) != 0 {
		t.Fatal("no segments")
	}
	h := [256]uint64{127: 5, 126: 1}
	if b := Fixed12Base(&h, BF16); b != 113 { // 113..127 covers both
		t.Fatalf("Fixed12Base %d", b)
	}
}

// TestSmallestCounts checks the counts from the table slots and the base
// window against counting every exponent's symbol, for groups using one to
// six slots, with table exponents inside and outside the window.
func TestSmallestCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	few := 0
	for it := 0; it < 2000; it++ {
		var gh [256]uint64
		var h [256]uint16
		n := 0
		distinct := 1 + r.IntN(30)
		lo := r.IntN(256 - distinct)
		for range 1 + r.IntN(ChunkElements) {
			e := lo + r.IntN(distinct)
			if r.IntN(20) == 0 {
				e = r.IntN(256)
			}
			h[e]++
			n++
		}
		for e, c := range h {
			gh[e] = uint64(c)
			if r.IntN(100) == 0 {
				gh[e]++ // a group may hold exponents this chunk lacks
			}
		}
		table, used, base := chooseSmallest(&gh, 255)
		sym := smallestSyms(table, used, base)
		var w2, w3, wesc int
		for e, c := range h {
			if sym[e] >= 3 {
				w2 += int(c)
			}
			if sym[e] >= symL3 {
				w3 += int(c)
			}
			if sym[e] == symEsc {
				wesc += int(c)
			}
		}
		few += max(6-used, 0)
		if n2, n3, nesc := smallestCounts(&h, &sym, table, used, base, n); n2 != w2 || n3 != w3 || nesc != wesc {
			t.Fatalf("table %v used %d base %d: counts %d %d %d, want %d %d %d", table, used, base, n2, n3, nesc, w2, w3, wesc)
		}
	}
	if few == 0 {
		t.Fatal("no group used fewer than six slots")
	}
}

func TestSplitChunk(t *testing.T) {
	var x chunkX
	for i := 0; i < ChunkElements; i++ {
		v := uint16(i*40503 + i>>3)
		x[2*i], x[2*i+1] = byte(v), byte(v>>8)
	}
	var sm, e chunkSM
	splitChunk(&x, &sm, &e)
	for i := 0; i < ChunkElements; i++ {
		v := uint16(x[2*i]) | uint16(x[2*i+1])<<8
		if sm[i] != uint8(v>>8)&0x80|uint8(v)&0x7F || e[i] != uint8(v>>7) {
			t.Fatalf("element %d = %#04x: sm %#02x e %#02x", i, v, sm[i], e[i])
		}
	}
}

// TestHistWindow checks histWindow (SSE2 on amd64) against histBF16 and
// counts its outliers, for chunks of random bits, of every bf16 pattern
// (±0, subnormals, ±Inf, NaNs), of one repeated exponent (a lane of the
// vector counters sees it 256 times), of a few exponents, and of N(0, σ)
// weights, with windows that hold all, some or none of the exponents, at
// both ends of the range.
func TestHistWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var chunks [][]uint16
	for p := 0; p < 1<<16; p += ChunkElements {
		x := make([]uint16, ChunkElements)
		for i := range x {
			x[i] = uint16(p + i)
		}
		chunks = append(chunks, x)
	}
	for _, e := range []int{0, 1, 119, 127, 243, 244, 245, 254, 255} {
		x := make([]uint16, ChunkElements)
		for i := range x {
			x[i] = uint16(e)<<7 | uint16(r.Uint32())&0x807F
		}
		chunks = append(chunks, x)
	}
	for k := 0; k < 8; k++ {
		x, y, z := make([]uint16, ChunkElements), make([]uint16, ChunkElements), make([]uint16, ChunkElements)
		for i := range x {
			x[i] = uint16(r.Uint32())
			y[i] = uint16(118+r.IntN(4+k))<<7 | uint16(r.Uint32())&0x807F
			z[i] = uint16(math.Float32bits(float32(r.NormFloat64()*0.02)) >> 16)
		}
		chunks = append(chunks, x, y, z)
	}
	for c, x := range chunks {
		var want [256]uint16
		histBF16(x, &want, new(readAhead))
		for _, ws := range []int{0, 1, 100, 113, 117, 120, 200, 243, 244, r.IntN(245)} {
			got := [256]uint16{7: 3, 255: 1} // histWindow adds to h
			n := histWindow(asChunkX(x), &got, ws, nil)
			got[7] -= 3
			got[255]--
			if got != want {
				t.Fatalf("chunk %d window %d: histogram differs from histBF16's", c, ws)
			}
			out := ChunkElements
			for _, k := range want[ws : ws+windowLen] {
				out -= int(k)
			}
			if n != out {
				t.Fatalf("chunk %d window %d: %d outliers, want %d", c, ws, n, out)
			}
		}
	}
}

func TestWindowStart(t *testing.T) {
	var h [256]uint16
	h[255], h[250] = 100, 100
	if ws := windowStart(&h); ws != 256-windowLen {
		t.Fatalf("window %d, want %d", ws, 256-windowLen)
	}
	h[100] = 10 // 5% outside: still worth it
	if ws := windowStart(&h); ws != 256-windowLen {
		t.Fatalf("window %d, want %d", ws, 256-windowLen)
	}
	h[101] = 10 // 9% outside
	if ws := windowStart(&h); ws != -1 {
		t.Fatalf("window %d, want -1", ws)
	}
}

// TestPrefetch checks that prefetch leaves memory as it is, for lengths
// that end inside a cache line.
func TestPrefetch(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i)
	}
	for _, n := range []int{1, 63, 64, 65, 300} {
		prefetch(&b[0], n)
		prefetch(&b[len(b)-n], n)
	}
	for i := range b {
		if b[i] != byte(i) {
			t.Fatal("prefetch changed memory")
		}
	}
}
