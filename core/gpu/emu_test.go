package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/glyd/glyd/core/bf16"
	"github.com/glyd/glyd/core/codec"
)

// needFakeCUDA skips t unless kernels/emu's fake libcuda.so.1 is loaded
// (kernels/emu/run.sh sets GLYD_FAKE_CUDA and LD_LIBRARY_PATH).
func needFakeCUDA(t *testing.T) {
	t.Helper()
	if os.Getenv("GLYD_FAKE_CUDA") == "" {
		t.Skip("set GLYD_FAKE_CUDA and LD_LIBRARY_PATH to the fake libcuda (kernels/emu/run.sh)")
	}
}

// lcg returns a deterministic pseudo-random source of 24-bit values for test data.
func lcg(seed uint32) func() uint32 {
	s := seed
	return func() uint32 { s = s*1664525 + 1013904223; return s >> 8 }
}

// addr is the "device address" of a buffer of the fake libcuda: its first element's.
func addr[T any](b []T) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// fakeMemory hands out the fake libcuda's "device memory": 16-byte aligned
// host buffers, kept alive until the test ends. A buffer a kernel reads must
// come from here or be kept alive past the launch (runtime.KeepAlive): a Go
// slice whose last use is its address can be freed, and its memory reused,
// while the fake kernel runs.
type fakeMemory struct{ keep [][]byte }

func (m *fakeMemory) alloc(n int) []byte {
	b := make([]byte, n+32)
	o := int((16 - uintptr(unsafe.Pointer(&b[0]))%16) % 16)
	m.keep = append(m.keep, b)
	return b[o : o+n]
}

// activations places rows x k random bf16 activations (multiples of scale /
// 500 in [-2, 2] scale), returning their bytes and their values.
func (m *fakeMemory) activations(rnd func() uint32, rows, k int, scale float32) ([]byte, []float32) {
	x := m.alloc(2 * rows * k)
	xs := make([]float32, rows*k)
	for j := range xs {
		h := bf16.FromFloat32(float32(int32(rnd()%2001)-1000) / 500 * scale)
		binary.LittleEndian.PutUint16(x[2*j:], h)
		xs[j] = bf16.ToFloat32(h)
	}
	return x, xs
}

// workspace places need bytes of workspace (0: none).
func (m *fakeMemory) workspace(need uint64) uintptr {
	if need == 0 {
		return 0
	}
	return addr(m.alloc(int(need)))
}

// tensor places the planes of a packed tensor of the given shape.
func (m *fakeMemory) tensor(pk *codec.Tensor, shape []int64) *DeviceTensor {
	d := &DeviceTensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: shape, Groups: pk.Groups}
	for p, b := range pk.Planes {
		if len(b) > 0 {
			a := m.alloc(len(b))
			copy(a, b)
			d.Planes[p] = addr(a)
		}
	}
	return d
}

// weight places a random fixed12 weight [n, k] of exponents near 120, one
// weight in about `every` an escape, with its escape index when it has
// escapes; it returns the tensor and its bf16 bits.
func (m *fakeMemory) weight(t *testing.T, rnd func() uint32, n, k int64, every uint32) (*DeviceTensor, []uint16) {
	w := make([]uint16, n*k)
	for j := range w {
		w[j] = uint16(rnd()&0x807f) | uint16(118+rnd()%6)<<7
		if rnd()%every == 0 {
			w[j] = uint16(rnd()&0x807f) | uint16(60+rnd()%100)<<7 // escapes
		}
	}
	pk, err := codec.Pack(w, codec.BF16, []int64{n, k}, codec.Options{Layout: codec.Fixed12})
	if err != nil {
		t.Fatal(err)
	}
	d := m.tensor(pk, []int64{n, k})
	if pk.Groups[0].Escapes > 0 {
		eb, err := EscapeIndexBytes(d)
		if err != nil {
			t.Fatal(err)
		}
		idx := m.alloc(int(eb))
		if err := BuildEscapeIndex(0, 0, d, addr(idx)); err != nil {
			t.Fatal(err)
		}
		d.EscRows = addr(idx)
		checkEscapeIndex(t, idx, pk, w, n, k)
	}
	return d, w
}

// checkEscapeIndex checks an escape index built on the fake device against
// the packed tensor pk (one group) and its bf16 bits w [n, k]: record e is
// the codec's escape e (PlaneEscIdx), {its column, its true bits}, and row
// r's range holds exactly the escapes of row r.
func checkEscapeIndex(t *testing.T, idx []byte, pk *codec.Tensor, w []uint16, n, k int64) {
	t.Helper()
	u32 := func(b []byte, off uint64) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	esc := pk.Planes[codec.PlaneEscIdx]
	recs := escRowsBytes(n)
	for r := int64(0); r < n; r++ {
		for e := uint64(u32(idx, 4*uint64(r))); e < uint64(u32(idx, 4*uint64(r+1))); e++ {
			i := int64(u32(esc, codec.EscIdxBytes*e))
			if i/k != r || u32(idx, recs+8*e) != uint32(i%k) || u32(idx, recs+8*e+4) != uint32(w[i]) {
				t.Fatalf("row %d, record %d: {%d, %#x}, the codec's escape is element %d", r, e, u32(idx, recs+8*e), u32(idx, recs+8*e+4), i)
			}
		}
	}
	if first, last := u32(idx, 0), uint64(u32(idx, 4*uint64(n))); first != 0 || last != pk.Groups[0].Escapes {
		t.Fatalf("the rows' ranges cover records [%d, %d), the tensor has %d escapes", first, last, pk.Groups[0].Escapes)
	}
}

// TestPackEmulated runs PackBound and Pack (the real host code and driver
// layer) against kernels/emu's fake libcuda.so.1, which runs kernels/pack.cu
// on the CPU with host memory as "device" memory. Run it with
// kernels/emu/run.sh; skipped otherwise.
func TestPackEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(11)
	cases := []struct {
		shape  []int64
		groups int
		off    int // source starts this many elements into its buffer (alignment)
	}{
		{[]int64{0}, 1, 0}, {[]int64{}, 1, 0}, {[]int64{7}, 1, 1}, {[]int64{3, 5}, 3, 0},
		{[]int64{4097}, 1, 0}, {[]int64{2, 4097}, 2, 3}, {[]int64{256, 256}, 1, 0},
		{[]int64{8, 33000}, 4, 0}, {[]int64{3, 70001}, 3, 1}, {[]int64{65536}, 1, 0},
	}
	for ci, c := range cases {
		for _, layout := range []codec.Layout{codec.Fixed12, codec.Smallest} {
			g, _ := packGeometry(codec.BF16, layout, c.shape, c.groups)
			buf := make([]uint16, g.total+uint64(c.off)+8)
			x := buf[c.off : uint64(c.off)+g.total]
			for i := range x {
				switch {
				case ci == len(cases)-1:
					x[i] = uint16(i) // every bit pattern
				case rnd()%6 == 0:
					x[i] = uint16(rnd())
				default:
					x[i] = uint16(rnd()&0x807f) | uint16(110+rnd()%8+rnd()%8+rnd()%8)<<7
				}
			}
			want, err := codec.Pack(x, codec.BF16, c.shape, codec.Options{Layout: layout, Groups: c.groups})
			if err != nil {
				t.Fatal(err)
			}
			src := uintptr(unsafe.Pointer(&buf[0])) + 2*uintptr(c.off)
			ws := make([]uint64, g.wsBytes/8+1)
			wsp := uintptr(unsafe.Pointer(&ws[0]))
			b, err := PackBound(0, 0, src, codec.BF16, layout, c.shape, c.groups, wsp, 8*uint64(len(ws)))
			if err != nil {
				t.Fatalf("%v %v: PackBound: %v", layout, c.shape, err)
			}
			var planes [codec.NumPlanes]uintptr
			var caps [codec.NumPlanes]uint64
			bufs := make([][]byte, codec.NumPlanes)
			for p := range bufs {
				bufs[p] = make([]byte, b.PlaneBytes[p]+16)
				for i := range bufs[p] {
					bufs[p][i] = 0xA5 // poison: every byte must be written
				}
				planes[p] = (uintptr(unsafe.Pointer(&bufs[p][0])) + 15) &^ 15
				caps[p] = b.PlaneBytes[p]
			}
			res, err := Pack(0, 0, src, codec.BF16, layout, c.shape, c.groups, wsp, 8*uint64(len(ws)), planes, caps)
			if err != nil {
				t.Fatalf("%v %v: Pack: %v", layout, c.shape, err)
			}
			runtime.KeepAlive(buf)
			runtime.KeepAlive(ws)
			if res.Checksum != want.Checksum {
				t.Fatalf("%v %v: checksum %08x, want %08x", layout, c.shape, res.Checksum, want.Checksum)
			}
			for i := range want.Groups {
				if res.Groups[i] != want.Groups[i] {
					t.Fatalf("%v %v: group %d %+v, want %+v", layout, c.shape, i, res.Groups[i], want.Groups[i])
				}
			}
			for p := range want.Planes {
				o := planes[p] - uintptr(unsafe.Pointer(&bufs[p][0]))
				got := bufs[p][o : o+uintptr(res.PlaneBytes[p])]
				if string(got) != string(want.Planes[p]) {
					first := -1
					for i := range got {
						if i >= len(want.Planes[p]) || got[i] != want.Planes[p][i] {
							first = i
							break
						}
					}
					t.Fatalf("%v %v: plane %d differs (%d vs %d bytes), first at byte %d", layout, c.shape, p, len(got), len(want.Planes[p]), first)
				}
			}
			runtime.KeepAlive(bufs)
		}
	}
}

// TestTransposedExpertsEmulated runs BuildExpertsTable and LinearExperts on
// experts stored transposed ([E, in, out]) through kernels/emu's fake libcuda:
// the kernels of moe.cu on the CPU, both the one-token-per-pass kernel (rows
// <= experts) and the four-token one, against a float64 product of the
// decoded (source) weights, and twice for the same bits. The weights carry
// escapes: whole input rows of zeros (more records than a warp's 32 lanes),
// outliers, and random bit patterns. Run it with kernels/emu/run.sh; skipped
// otherwise.
func TestTransposedExpertsEmulated(t *testing.T) {
	needFakeCUDA(t)
	// 600 input rows (up to 9 slices); 264 columns: a partial second tile.
	// Three experts: 1 and 3 rows (<= 3 experts: one token per pass), 8 rows
	// on two of them; sixteen: 17 rows all on one expert, then on two (the
	// kernel gives the busy experts the idle ones' slices: 8 -> 9 each).
	transposedExperts(t, 3, [][]int32{{0, 1, 0}, {2, 0, 1}, {5, 3, 0}})
	transposedExperts(t, 16, [][]int32{{0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0}})
}

// transposedExperts checks LinearExperts on e transposed experts [600, 264]
// for each list of rows per expert, against a float64 reference.
func transposedExperts(t *testing.T, e int, countsList [][]int32) {
	rnd := lcg(5)
	bf := func(v float64) uint16 { return bf16.FromFloat32(float32(v)) }
	const in, out = 600, 264
	w := make([]uint16, e*in*out)
	for i := range w {
		switch {
		case rnd()%300 == 0:
			w[i] = uint16(rnd()) // any bit pattern: mostly escapes
		default:
			w[i] = uint16(rnd()&0x807f) | uint16(118+rnd()%4+rnd()%4)<<7
		}
		if f := bf16.ToFloat32(w[i]); f != f || f > 1e4 || f < -1e4 { // keep the sums finite
			w[i] = 0x3f80
		}
	}
	for x := 0; x < e; x++ {
		for j := 0; j < out; j++ {
			w[(x*in+7)*out+j] = 0 // an input row of zeros: 264 escape records
		}
		w[(x*in+100)*out+5] = 0x4f00 // outliers
		w[(x*in+in-1)*out+out-1] = 0x8001
	}
	pk, err := codec.Pack(w, codec.BF16, []int64{int64(e), in, out}, codec.Options{Layout: codec.Fixed12, Groups: e})
	if err != nil {
		t.Fatal(err)
	}
	var mem fakeMemory
	aligned := mem.alloc
	d := mem.tensor(pk, []int64{int64(e), in, out})
	tb, err := ExpertsTableBytes(d)
	if err != nil {
		t.Fatal(err)
	}
	table := aligned(int(tb))
	if err := BuildExpertsTable(0, 0, d, uintptr(unsafe.Pointer(&table[0]))); err != nil {
		t.Fatal(err)
	}
	for _, counts := range countsList {
		rows := int64(0)
		// The kernels read offs during LinearExperts: in fake memory, where
		// the GC cannot free it under the second run (the last Go use of a
		// plain slice would be its address, before the call).
		offs := unsafe.Slice((*int32)(unsafe.Pointer(&mem.alloc(4 * e)[0])), e)
		for i, c := range counts {
			rows += int64(c)
			offs[i] = int32(rows)
		}
		x := make([]uint16, rows*in)
		for i := range x {
			x[i] = bf(float64(int32(rnd()%2001)-1000) / 1000)
		}
		xb, yb := aligned(len(x)*2), aligned(int(rows)*out*2)
		copy(xb, unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*2))
		wsBytes, err := ExpertsWorkspaceBound(d, rows, true)
		if err != nil {
			t.Fatal(err)
		}
		ws := aligned(int(wsBytes))
		run := func() []uint16 {
			for i := range yb {
				yb[i] = 0xff // poison: NaN
			}
			err := LinearExperts(0, 0, uintptr(unsafe.Pointer(&xb[0])), rows, d, uintptr(unsafe.Pointer(&table[0])),
				uintptr(unsafe.Pointer(&offs[0])), 0, uintptr(unsafe.Pointer(&yb[0])), true,
				uintptr(unsafe.Pointer(&ws[0])), wsBytes)
			if err != nil {
				t.Fatal(err)
			}
			return append([]uint16(nil), unsafe.Slice((*uint16)(unsafe.Pointer(&yb[0])), rows*out)...)
		}
		y := run()
		r0 := int64(0)
		for ex, c := range counts {
			for r := r0; r < r0+int64(c); r++ {
				for j := 0; j < out; j++ {
					want, mag := 0.0, 0.0
					for k := 0; k < in; k++ {
						p := float64(bf16.ToFloat32(x[r*in+int64(k)])) * float64(bf16.ToFloat32(w[(ex*in+k)*out+j]))
						want += p
						mag += math.Abs(p)
					}
					got := float64(bf16.ToFloat32(y[r*int64(out)+int64(j)]))
					if math.Abs(got-want) > 1e-2*math.Abs(want)+1e-5*mag+1e-30 {
						t.Fatalf("counts %v: expert %d row %d column %d: %g, want %g", counts, ex, r, j, got, want)
					}
				}
			}
			r0 += int64(c)
		}
		if again := run(); !slices.Equal(again, y) {
			var diff []string
			for i := range y {
				if again[i] != y[i] && len(diff) < 8 {
					diff = append(diff, fmt.Sprintf("row %d col %d: %#04x then %#04x", i/out, i%out, y[i], again[i]))
				}
			}
			t.Fatalf("counts %v: not deterministic (%s)", counts, strings.Join(diff, "; "))
		}
		runtime.KeepAlive(x)
	}
	runtime.KeepAlive(&mem)
}

// TestMoeActivationAndRoutingIdsEmulated runs MoeSiluMul and MoeRowExperts
// (route.go and the driver layer) against kernels/emu's fake libcuda, which
// runs moe.cu's glyd_moe_silu_mul and glyd_moe_row_experts on the CPU:
// silu(gate) * up against a float32 reference (each op rounded to bf16 as
// torch does), both the 8-wide and the scalar tail paths; the routing ids of
// rows that are zero, negative zero, subnormal at their end, or NaN.
func TestMoeActivationAndRoutingIdsEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(9)
	aligned := func(n int) []uint16 { // 16-byte aligned, as the kernels require
		b := make([]uint16, n+8)
		o := int((16 - uintptr(unsafe.Pointer(&b[0]))%16) % 16 / 2)
		return b[o : o+n]
	}
	special := []uint16{0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f7f, 0xff7f, 0x0001, 0x8001, 0x42b1, 0xc2b1}
	for _, c := range []struct{ rows, inter int }{{3, 24}, {2, 13}, {1, 2056}, {300, 13}} { // the last: rows across blocks
		x := aligned(c.rows * 2 * c.inter)
		for i := range x {
			x[i] = bf16.FromFloat32(float32(int32(rnd()%2001)-1000) / 125)
			if rnd()%17 == 0 {
				x[i] = special[rnd()%uint32(len(special))]
			}
		}
		y := aligned(c.rows * c.inter)
		if err := MoeSiluMul(0, 0, uintptr(unsafe.Pointer(&x[0])), int64(c.rows), int64(c.inter), uintptr(unsafe.Pointer(&y[0]))); err != nil {
			t.Fatal(err)
		}
		for r := 0; r < c.rows; r++ {
			for j := 0; j < c.inter; j++ {
				g := bf16.ToFloat32(x[r*2*c.inter+j])
				u := bf16.ToFloat32(x[r*2*c.inter+c.inter+j])
				sg := bf16.FromFloat32(g / (1 + float32(math.Exp(float64(-g)))))
				want := bf16.FromFloat32(bf16.ToFloat32(sg) * u)
				if got := y[r*c.inter+j]; got != want && !(bf16.IsNaN(got) && bf16.IsNaN(want)) {
					t.Fatalf("rows %d inter %d: [%d][%d] silu(%#04x) * %#04x = %#04x, want %#04x", c.rows, c.inter, r, j,
						x[r*2*c.inter+j], x[r*2*c.inter+c.inter+j], got, want)
				}
			}
		}
		runtime.KeepAlive(x)
	}

	const experts, per, hidden = 4, 3, 40
	for _, h := range []int{hidden, 13} { // 8-wide loads, and the scalar path
		x := aligned(experts * per * h)
		want := make([]int64, experts*per)
		for r := range want {
			row := x[r*h : (r+1)*h]
			want[r] = -1
			switch r % 5 {
			case 0: // zero
			case 1:
				for i := range row {
					row[i] = 0x8000 // negative zeros are zero
				}
			case 2:
				row[h-1] = 0x0001 // a subnormal at the end
				want[r] = int64(r / per)
			case 3:
				row[h/2] = 0x7fc0 // NaN
				want[r] = int64(r / per)
			default:
				for i := range row {
					row[i] = bf16.FromFloat32(float32(i + 1))
				}
				want[r] = int64(r / per)
			}
		}
		ids := make([]int64, len(want))
		if err := MoeRowExperts(0, 0, uintptr(unsafe.Pointer(&x[0])), int64(len(want)), int64(h), per, uintptr(unsafe.Pointer(&ids[0]))); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("hidden %d: ids %v, want %v", h, ids, want)
		}
		runtime.KeepAlive(x)
	}
}

// TestMoeTop1AndGatherEmulated runs MoeTop1 and MoeGatherScale against
// kernels/emu's fake libcuda (moe.cu's glyd_moe_top1 and
// glyd_moe_gather_scale on the CPU): the expert of the largest logit in
// torch.topk's order (ties to the lowest expert, NaN above every number, -0
// below +0) over 5, 40 (two experts per lane) and 128 experts, its score
// bf16(1 / (1 + exp(-v))); the gathered rows x[tok[r]] * score[tok[r]],
// 8-wide and scalar.
func TestMoeTop1AndGatherEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(11)
	aligned := func(n int) []uint16 {
		b := make([]uint16, n+8)
		o := int((16 - uintptr(unsafe.Pointer(&b[0]))%16) % 16 / 2)
		return b[o : o+n]
	}
	key := func(b uint16) uint32 { // torch.topk's order
		switch {
		case b&0x7fff > 0x7f80:
			return 0xffff
		case b&0x8000 != 0:
			return uint32(b ^ 0xffff)
		}
		return uint32(b | 0x8000)
	}
	special := []uint16{0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x3f80, 0xbf80}
	for _, c := range []struct{ tokens, experts int }{{9, 5}, {3, 40}, {17, 128}} {
		logits := aligned(c.tokens * c.experts)
		for i := range logits {
			logits[i] = bf16.FromFloat32(float32(int32(rnd()%7) - 3)) // many ties
			if rnd()%5 == 0 {
				logits[i] = special[rnd()%uint32(len(special))]
			}
		}
		ids := make([]int64, c.tokens)
		score := aligned(c.tokens)
		if err := MoeTop1(0, 0, addr(logits), int64(c.tokens), int64(c.experts), addr(ids), addr(score)); err != nil {
			t.Fatal(err)
		}
		for tk := 0; tk < c.tokens; tk++ {
			row := logits[tk*c.experts : (tk+1)*c.experts]
			best := 0
			for e := range row {
				if key(row[e]) > key(row[best]) {
					best = e
				}
			}
			v := bf16.ToFloat32(row[best])
			want := bf16.FromFloat32(1 / (1 + float32(math.Exp(float64(-v)))))
			if ids[tk] != int64(best) || (score[tk] != want && !(bf16.IsNaN(score[tk]) && bf16.IsNaN(want))) {
				t.Fatalf("%d experts, token %d: expert %d score %#04x, want %d %#04x (row %x)", c.experts, tk, ids[tk],
					score[tk], best, want, row)
			}
		}
		runtime.KeepAlive(logits)
	}
	for _, h := range []int{40, 13} { // 8-wide, and the scalar path
		const tokens = 6
		x := aligned(tokens * h)
		for i := range x {
			x[i] = bf16.FromFloat32(float32(int32(rnd()%2001)-1000) / 125)
		}
		score := aligned(tokens)
		for i := range score {
			score[i] = bf16.FromFloat32(float32(rnd()%1000) / 999)
		}
		tok := []int32{4, 0, 5, 2}
		out := aligned(len(tok) * h)
		if err := MoeGatherScale(0, 0, addr(x), addr(tok), addr(score), int64(len(tok)), int64(h), addr(out)); err != nil {
			t.Fatal(err)
		}
		for r, tk := range tok {
			for j := 0; j < h; j++ {
				want := bf16.FromFloat32(bf16.ToFloat32(x[int(tk)*h+j]) * bf16.ToFloat32(score[tk]))
				if got := out[r*h+j]; got != want {
					t.Fatalf("hidden %d: row %d [%d] = %#04x, want %#04x", h, r, j, got, want)
				}
			}
		}
		runtime.KeepAlive(x)
	}
}

// TestLinearReduceSegmentsEmulated runs linear.cu's split-K reduce of three
// weights (glyd_lin_reduce_many; the fake libcuda runs it on the CPU) over
// their partial sums as LinearMany lays them out, and checks every output's
// bits against the single-weight reduce on each weight alone: the segment lookup,
// each weight's escapes (corrected with its own x column and exponent) and
// bias, and the outputs end to end.
func TestLinearReduceSegmentsEmulated(t *testing.T) {
	needFakeCUDA(t)
	if _, err := load(0); err != nil {
		t.Fatal(err)
	}
	rnd := lcg(12)
	const rows, k, splits = 3, 48, 3
	var mem fakeMemory
	aligned := mem.alloc
	var ws []*DeviceTensor
	var biases []uintptr
	for i, n := range []int64{5, 3, 7} {
		d, _ := mem.weight(t, rnd, n, k, 7)
		if d.Groups[0].Escapes == 0 {
			t.Fatalf("weight %d has no escapes", i)
		}
		ws = append(ws, d)
		bias := uintptr(0)
		if i != 1 {
			b := aligned(int(2 * n))
			for j := int64(0); j < n; j++ {
				binary.LittleEndian.PutUint16(b[2*j:], bf16.FromFloat32(float32(int32(rnd()%201)-100)/100))
			}
			bias = addr(b)
		}
		biases = append(biases, bias)
	}
	x := aligned(2 * rows * k)
	for j := 0; j < rows*k; j++ {
		binary.LittleEndian.PutUint16(x[2*j:], bf16.FromFloat32(float32(int32(rnd()%2001)-1000)/500))
	}
	ntot := sumRows(ws)
	part := aligned(4 * splits * rows * int(ntot)) // each weight's [splits][rows][N_i], end to end
	for j := 0; j < len(part)/4; j++ {
		binary.LittleEndian.PutUint32(part[4*j:], math.Float32bits(float32(int32(rnd()%20001)-10000)/1000))
	}
	reduce := func(ws []*DeviceTensor, biases []uintptr, partials, y uintptr) {
		p := manyParams(ws, biases, false, addr(x), y, rows, k)
		splitK(&p, splits, partials)
		if err := launch(0, reduceKernel(len(ws) > 1), reduceBlocks(rows, sumRows(ws)), 1, 1, 256, 0, 0, &p); err != nil {
			t.Fatal(err)
		}
	}
	all := aligned(2 * rows * int(ntot))
	reduce(ws, biases, addr(part), addr(all))
	off := 0
	for i, w := range ws {
		n := int(w.Shape[0])
		one := aligned(2 * rows * n)
		reduce(ws[i:i+1], biases[i:i+1], addr(part)+uintptr(4*splits*rows*off), addr(one))
		if got := all[2*rows*off : 2*rows*(off+n)]; !slices.Equal(got, one) {
			t.Fatalf("weight %d: the three-weight reduce differs from its own", i)
		}
		off += n
	}
	runtime.KeepAlive(&mem)
}

// TestLinearManyGenericEmulated runs LinearMany on the generic kernel (x not
// 16-byte aligned; the fake libcuda runs glyd_lin_f12_generic on the CPU): three
// weights with escapes and biases on some, outputs end to end, each equal bit
// for bit to Linear of its weight alone and within bf16 rounding of the
// product of x and the weight.
func TestLinearManyGenericEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(17)
	var mem fakeMemory
	const rows, k = 5, 48
	var ws []*DeviceTensor
	var biases []uintptr
	var wv [][]uint16
	var bv [][]float32
	for i, n := range []int64{9, 4, 6} {
		d, w := mem.weight(t, rnd, n, k, 9)
		bias, b := uintptr(0), make([]float32, n)
		if i != 1 {
			bb := mem.alloc(int(2 * n))
			for j := range b {
				h := bf16.FromFloat32(float32(int32(rnd()%201)-100) / 100)
				binary.LittleEndian.PutUint16(bb[2*j:], h)
				b[j] = bf16.ToFloat32(h)
			}
			bias = addr(bb)
		}
		ws, biases, wv, bv = append(ws, d), append(biases, bias), append(wv, w), append(bv, b)
	}
	xb := mem.alloc(2*rows*k + 2)[2:] // misaligned: the generic kernel
	xs := make([]float32, rows*k)
	for j := range xs {
		h := bf16.FromFloat32(float32(int32(rnd()%2001)-1000) / 500)
		binary.LittleEndian.PutUint16(xb[2*j:], h)
		xs[j] = bf16.ToFloat32(h)
	}
	ntot := sumRows(ws)
	all := mem.alloc(int(2 * rows * ntot))
	if err := LinearMany(0, 0, addr(xb), rows, ws, biases, addr(all), 0, 0); err != nil {
		t.Fatal(err)
	}
	off := int64(0)
	for i, w := range ws {
		n := w.Shape[0]
		one := mem.alloc(int(2 * rows * n))
		if err := Linear(0, 0, addr(xb), rows, w, biases[i], addr(one), 0, 0); err != nil {
			t.Fatal(err)
		}
		got := all[2*rows*off : 2*rows*(off+n)]
		if !slices.Equal(got, one) {
			t.Fatalf("weight %d: LinearMany differs from Linear", i)
		}
		for m := int64(0); m < rows; m++ {
			for r := int64(0); r < n; r++ {
				want, mag := float64(bv[i][r]), math.Abs(float64(bv[i][r]))
				for c := int64(0); c < k; c++ {
					p := float64(xs[m*k+c]) * float64(bf16.ToFloat32(wv[i][r*k+c]))
					want += p
					mag += math.Abs(p)
				}
				v := float64(bf16.ToFloat32(binary.LittleEndian.Uint16(got[2*(m*n+r):])))
				if math.Abs(v-want) > 1e-2*math.Abs(want)+1e-5*mag+1e-30 {
					t.Fatalf("weight %d output [%d][%d] = %g, want %g", i, m, r, v, want)
				}
			}
		}
		off += n
	}
	runtime.KeepAlive(&mem)
}

// TestPromptLayoutEmulated runs glyd_lin_xperm_t{64,128,256} (the prompt
// tiles' copy of x laid out as their shared-memory stages) on the fake
// libcuda and checks every word against the layout written out here: stage
// image (mtile, kb) at (mtile*KB + kb) * tb*128 bytes; in it, the 16
// activations k = kb*64 + 16ch.. of token tok as 8 words at byte
// (tok/8)*1024 + (tok%8)*16 + 4ch + 128q, word q holding the elements of
// pair q of decode16's order; tokens past rows and k past K are zeros.
func TestPromptLayoutEmulated(t *testing.T) {
	needFakeCUDA(t)
	if _, err := load(0); err != nil {
		t.Fatal(err)
	}
	pairs := [8][2]int{{0, 4}, {2, 6}, {1, 5}, {3, 7}, {8, 12}, {10, 14}, {9, 13}, {11, 15}}
	rnd := lcg(31)
	var mem fakeMemory
	for _, tc := range []struct{ rows, k, tb int }{{70, 1040, 64}, {130, 128, 128}, {3, 80, 256}} {
		x := mem.alloc(2 * tc.rows * tc.k)
		for j := range x {
			x[j] = byte(rnd())
		}
		kb := (tc.k + 63) / 64
		mt := (tc.rows + tc.tb - 1) / tc.tb
		dst := mem.alloc(mt * kb * tc.tb * 128)
		for j := range dst {
			dst[j] = 0xa5 // poison: every byte must be written
		}
		w, _ := mem.weight(t, rnd, 8, int64(tc.k), 1000) // only x, rows and K matter here
		p := manyParams([]*DeviceTensor{w}, []uintptr{0}, false, addr(x), 0, tc.rows, int64(tc.k))
		if err := launchXperm(0, 0, &p, tc.tb, addr(dst), false); err != nil {
			t.Fatal(err)
		}
		at := func(m, k int) uint32 {
			if m >= tc.rows || k >= tc.k {
				return 0
			}
			return uint32(binary.LittleEndian.Uint16(x[2*(m*tc.k+k):]))
		}
		for m0 := 0; m0 < mt; m0++ {
			for b := 0; b < kb; b++ {
				for tok := 0; tok < tc.tb; tok++ {
					for ch := 0; ch < 4; ch++ {
						for q, pr := range pairs {
							k0 := b*64 + 16*ch
							want := at(m0*tc.tb+tok, k0+pr[0]) | at(m0*tc.tb+tok, k0+pr[1])<<16
							o := (m0*kb+b)*tc.tb*128 + tok/8*1024 + tok%8*16 + 4*ch + 128*q
							if got := binary.LittleEndian.Uint32(dst[o:]); got != want {
								t.Fatalf("%+v: mtile %d kb %d token %d chunk %d word %d: %#x, want %#x", tc, m0, b, tok, ch, q, got, want)
							}
						}
					}
				}
			}
		}
	}
	runtime.KeepAlive(&mem)
}

// TestGroupedTilesEmulated runs the grouped experts kernels (every
// glyd_lin_f12g* configuration, forced: the mma.sync and the wgmma tiles)
// through the fake libcuda on experts [4, 48, 256] with escapes, some
// experts without rows, against a float64 reference. Run it with
// kernels/emu/run.sh.
func TestGroupedTilesEmulated(t *testing.T) {
	needFakeCUDA(t)
	defer func() { _ = ForceConfig("") }()
	rnd := lcg(31)
	const e, n, k = 4, 48, 256
	w := make([]uint16, e*n*k)
	for i := range w {
		w[i] = uint16(rnd()&0x807f) | uint16(118+rnd()%6)<<7
		if rnd()%97 == 0 {
			w[i] = 0 // an escape
		}
	}
	pk, err := codec.Pack(w, codec.BF16, []int64{e, n, k}, codec.Options{Layout: codec.Fixed12, Groups: e})
	if err != nil {
		t.Fatal(err)
	}
	var mem fakeMemory
	d := mem.tensor(pk, []int64{e, n, k})
	tb, err := ExpertsTableBytes(d)
	if err != nil {
		t.Fatal(err)
	}
	table := mem.alloc(int(tb))
	if err := BuildExpertsTable(0, 0, d, addr(table)); err != nil {
		t.Fatal(err)
	}
	counts := []int32{3, 0, 9, 1}
	offs := make([]int32, e)
	rows := int64(0)
	for i, c := range counts {
		rows += int64(c)
		offs[i] = int32(rows)
	}
	xb := mem.alloc(int(2 * rows * k))
	xs := make([]float32, rows*k)
	for j := range xs {
		h := bf16.FromFloat32(float32(int32(rnd()%2001)-1000) / 1000)
		binary.LittleEndian.PutUint16(xb[2*j:], h)
		xs[j] = bf16.ToFloat32(h)
	}
	for _, c := range groupedConfigs {
		name := c.groupedName()
		if err := ForceConfig(name); err != nil {
			t.Fatal(err)
		}
		yb := mem.alloc(int(2 * rows * n))
		if err := LinearExperts(0, 0, addr(xb), rows, d, addr(table), addr(offs), 0, addr(yb), false, 0, 0); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := int64(0)
		for ex, c := range counts {
			for ; r < int64(offs[ex]); r++ {
				for j := int64(0); j < n; j++ {
					var want, mag float64
					for q := int64(0); q < k; q++ {
						p := float64(xs[r*k+q]) * float64(bf16.ToFloat32(w[(int64(ex)*n+j)*k+q]))
						want += p
						mag += math.Abs(p)
					}
					got := float64(bf16.ToFloat32(binary.LittleEndian.Uint16(yb[2*(r*n+j):])))
					if math.Abs(got-want) > 1e-2*math.Abs(want)+1e-5*mag+1e-30 {
						t.Fatalf("%s: expert %d (%d rows) row %d output %d: %g, want %g", name, ex, c, r, j, got, want)
					}
				}
			}
		}
	}
	runtime.KeepAlive(&mem)
}

// TestEveryConfigEmulated runs every dense configuration (forced, and the
// automatic choice) through the fake libcuda on shapes off the tiles' grid
// (rows not a multiple of 16, K not of 64, partial weight and token tiles),
// weights with escapes (any exponent, rows of them) and _safe weights
// (exponents near 255: escapes decode as 0), at 1-65 tokens, against a
// float64 reference (checkLinear). Run it with kernels/emu/run.sh.
func TestEveryConfigEmulated(t *testing.T) {
	needFakeCUDA(t)
	defer func() { _ = ForceConfig("") }()
	rnd := lcg(77)
	var mem fakeMemory
	for _, sh := range [][2]int64{{16, 80}, {40, 208}, {200, 64}, {72, 592}} {
		n, k := sh[0], sh[1]
		for _, safe := range []bool{false, true} {
			var d *DeviceTensor
			var w []uint16
			if safe {
				w = make([]uint16, n*k)
				for i := range w {
					w[i] = uint16(rnd()&0x807f) | uint16(241+rnd()%14)<<7
					if rnd()%53 == 0 {
						w[i] = 0
					}
				}
				pk, err := codec.Pack(w, codec.BF16, []int64{n, k}, codec.Options{Layout: codec.Fixed12})
				if err != nil {
					t.Fatal(err)
				}
				d = mem.tensor(pk, []int64{n, k})
				if pk.Groups[0].Escapes > 0 {
					eb, _ := EscapeIndexBytes(d)
					idx := mem.alloc(int(eb))
					if err := BuildEscapeIndex(0, 0, d, addr(idx)); err != nil {
						t.Fatal(err)
					}
					d.EscRows = addr(idx)
				}
			} else {
				d, w = mem.weight(t, rnd, n, k, 30)
			}
			scale := float32(1)
			if safe {
				scale = 1.0 / (1 << 30) / (1 << 30) / (1 << 30) / (1 << 30)
			}
			for _, name := range append(ConfigNames(), "") {
				if err := ForceConfig(name); err != nil {
					t.Fatal(err)
				}
				for _, rows := range []int{1, 5, 65} {
					x, xs := mem.activations(rnd, rows, int(k), scale)
					need, err := LinearWorkspaceBound(d, rows)
					if err != nil {
						t.Fatal(err)
					}
					wsp := mem.workspace(need)
					y := mem.alloc(2 * rows * int(n))
					if err := Linear(0, 0, addr(x), rows, d, 0, addr(y), wsp, need); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					checkLinear(t, fmt.Sprintf("%q safe %v %dx%d rows %d", name, safe, n, k, rows), y, xs, w, d.Groups[0].Base, rows, n, k)
				}
			}
		}
	}
}
