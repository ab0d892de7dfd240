package gpu

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

func rowsTensor(shape []int64, groups int, layout codec.Layout) *DeviceTensor {
	n := uint64(1)
	for _, d := range shape {
		n *= uint64(d)
	}
	gs := make([]codec.Group, groups)
	for i := range gs {
		gs[i].Elements = n / uint64(groups)
		gs[i].Base = 100
	}
	t := &DeviceTensor{Layout: layout, DType: codec.BF16, Shape: shape, Groups: gs}
	t.Planes[codec.PlaneSM], t.Planes[codec.PlaneCode], t.Planes[codec.PlaneChunks] = 256, 512, 768
	return t
}

// unindexedEscapes gives w's first group escapes and (fake) escape planes but
// no escape row index: what the fused and row kernels must refuse.
func unindexedEscapes(w *DeviceTensor) *DeviceTensor {
	w.Groups[0].Escapes = 3
	w.Planes[codec.PlaneEscIdx], w.Planes[codec.PlaneEscExp] = 1024, 1280
	return w
}

// Argument errors of DecodeRows come before any device work, so they are the
// same with and without a GPU.
func TestDecodeRowsArguments(t *testing.T) {
	w := rowsTensor([]int64{4, 16}, 1, codec.Fixed12)
	cases := []struct {
		name       string
		t          *DeviceTensor
		row0, rows int64
		dst        uintptr
		code       status.Code
	}{
		{"nil tensor", nil, 0, 1, 1024, status.InvalidArgument},
		{"smallest", rowsTensor([]int64{4, 16}, 1, codec.Smallest), 0, 1, 1024, status.Unsupported},
		{"groups", rowsTensor([]int64{4, 16}, 2, codec.Fixed12), 0, 1, 1024, status.Unsupported},
		{"1-D", rowsTensor([]int64{64}, 1, codec.Fixed12), 0, 1, 1024, status.Unsupported},
		{"row0 < 0", w, -1, 1, 1024, status.InvalidArgument},
		{"rows < 0", w, 0, -1, 1024, status.InvalidArgument},
		{"past the end", w, 3, 2, 1024, status.InvalidArgument},
		{"row0 past the end", w, 5, 0, 1024, status.InvalidArgument},
		{"huge", w, 1, 1 << 62, 1024, status.InvalidArgument},
		{"nil dst", w, 0, 1, 0, status.InvalidArgument},
	}
	for _, c := range cases {
		if err := DecodeRows(0, 0, c.t, c.row0, c.rows, c.dst); status.CodeOf(err) != c.code {
			t.Errorf("%s: %v (code %v), want %v", c.name, err, status.CodeOf(err), c.code)
		}
	}
	esc := unindexedEscapes(rowsTensor([]int64{4, 16}, 1, codec.Fixed12))
	if err := DecodeRows(0, 0, esc, 0, 1, 4096); status.CodeOf(err) != status.InvalidArgument {
		t.Errorf("escapes without index: %v", err)
	}
	// nothing to do: no device work, no error, even without a GPU
	for _, r := range [][2]int64{{0, 0}, {4, 0}, {2, 0}} {
		if err := DecodeRows(0, 0, w, r[0], r[1], 0); err != nil {
			t.Errorf("rows [%d, +%d): %v", r[0], r[1], err)
		}
	}
	if err := DecodeRows(0, 0, rowsTensor([]int64{4, 0}, 1, codec.Fixed12), 1, 2, 0); err != nil {
		t.Errorf("K = 0: %v", err)
	}
}

// TestDecodeRowsEmulated runs BuildEscapeIndex and DecodeRows (host code and
// the kernels of decode.cu) through kernels/emu's fake libcuda on the CPU and
// compares every row range with the source tensor (lossless: the packed
// tensor must decode to it). Run it with kernels/emu/run.sh; skipped otherwise.
func TestDecodeRowsEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(7)
	cases := []struct {
		n, k   int64
		smOff  int // plane start offsets (alignment: odd offsets take the scalar kernel)
		dstOff int
	}{
		{64, 256, 0, 0}, {37, 33, 0, 0}, {130, 64, 0, 0}, {9, 1000, 0, 0}, {64, 256, 1, 0}, {64, 256, 0, 1},
		{16, 8, 0, 0}, {5, 3, 0, 0},
	}
	for _, c := range cases {
		x := escapeMatrix(t, rnd, c.n, c.k)
		w, idx, keep := placeWithIndex(t, x, c.n, c.k, c.smOff)
		ranges := [][2]int64{{0, c.n}, {0, 1}, {c.n - 1, 1}, {c.n, 0}, {1, c.n - 1}, {c.n / 3, c.n / 2}, {3, 1}, {2, 1}}
		for _, r := range ranges {
			row0, rows := r[0], r[1]
			cnt := rows * c.k
			out := make([]uint16, cnt+16)
			base := (uintptr(unsafe.Pointer(&out[0]))+15)&^15 + 2*uintptr(c.dstOff)
			skip := int64((base - uintptr(unsafe.Pointer(&out[0]))) / 2)
			for i := range out {
				out[i] = 0x7fc1 // poison (a NaN no weight here has)
			}
			if err := DecodeRows(0, 0, w, row0, rows, base); err != nil {
				t.Fatalf("%dx%d rows [%d, +%d): %v", c.n, c.k, row0, rows, err)
			}
			got := out[skip : skip+cnt]
			want := x[row0*c.k : (row0+rows)*c.k]
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%dx%d (sm +%d, dst +%d) rows [%d, +%d): element %d (row %d col %d) = %04x, want %04x",
						c.n, c.k, c.smOff, c.dstOff, row0, rows, i, row0+int64(i)/c.k, int64(i)%c.k, got[i], want[i])
				}
			}
			for i := int64(0); i < int64(len(out)); i++ {
				if (i < skip || i >= skip+cnt) && out[i] != 0x7fc1 {
					t.Fatalf("%dx%d rows [%d, +%d): wrote outside the tile at %d", c.n, c.k, row0, rows, i-skip)
				}
			}
			runtime.KeepAlive(out)
		}
		runtime.KeepAlive(keep)
		runtime.KeepAlive(idx)
	}
}

// escapeMatrix returns a bf16 matrix [n, k] of exponents near 115 with the
// escapes the fast decode must repair: any bit pattern (1 in 50), rows of
// zeros (every element an escape) and outliers at both ends of a row.
func escapeMatrix(t *testing.T, rnd func() uint32, n, k int64) []uint16 {
	t.Helper()
	x := make([]uint16, n*k)
	for i := range x {
		switch {
		case rnd()%50 == 0:
			x[i] = uint16(rnd()) // any bit pattern: mostly escapes
		default:
			x[i] = uint16(rnd()&0x807f) | uint16(110+rnd()%6+rnd()%6)<<7
		}
	}
	for r := int64(0); r < n; r++ {
		switch r % 7 {
		case 2: // a row of zeros: every element an escape
			for j := int64(0); j < k; j++ {
				x[r*k+j] = 0
			}
		case 5: // outliers
			x[r*k] = 0x4f00
			x[r*k+k-1] = 0x8001
		}
	}
	return x
}

// placeWithIndex packs x [n, k] (fixed12), places its planes in host memory
// for the fake libcuda (the sm plane smOff bytes past 16-byte alignment) and
// builds its escape index; keep and idx must stay alive while w is used.
func placeWithIndex(t *testing.T, x []uint16, n, k int64, smOff int) (w *DeviceTensor, idx []uint64, keep [][]byte) {
	t.Helper()
	pk, err := codec.Pack(x, codec.BF16, []int64{n, k}, codec.Options{Layout: codec.Fixed12})
	if err != nil {
		t.Fatal(err)
	}
	if pk.Groups[0].Escapes == 0 {
		t.Fatalf("%dx%d: no escapes", n, k)
	}
	w = &DeviceTensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: []int64{n, k}, Groups: pk.Groups}
	for p, b := range pk.Planes {
		if len(b) == 0 {
			continue
		}
		off := 0
		if p == int(codec.PlaneSM) {
			off = smOff
		}
		buf := make([]byte, len(b)+32)
		o := int((16-uintptr(unsafe.Pointer(&buf[0]))%16)%16) + off
		copy(buf[o:], b)
		w.Planes[p] = uintptr(unsafe.Pointer(&buf[o]))
		keep = append(keep, buf)
	}
	need, err := EscapeIndexBytes(w)
	if err != nil {
		t.Fatal(err)
	}
	idx = make([]uint64, need/8+1)
	if err := BuildEscapeIndex(0, 0, w, uintptr(unsafe.Pointer(&idx[0]))); err != nil {
		t.Fatal(err)
	}
	w.EscRows = uintptr(unsafe.Pointer(&idx[0]))
	return w, idx, keep
}

// Argument errors of DecodeGather come before any device work.
func TestDecodeGatherArguments(t *testing.T) {
	w := rowsTensor([]int64{4, 16}, 1, codec.Fixed12)
	cases := []struct {
		name  string
		t     *DeviceTensor
		ids   uintptr
		count int64
		dst   uintptr
		code  status.Code
	}{
		{"nil tensor", nil, 64, 1, 1024, status.InvalidArgument},
		{"smallest", rowsTensor([]int64{4, 16}, 1, codec.Smallest), 64, 1, 1024, status.Unsupported},
		{"groups", rowsTensor([]int64{4, 16}, 2, codec.Fixed12), 64, 1, 1024, status.Unsupported},
		{"1-D", rowsTensor([]int64{64}, 1, codec.Fixed12), 64, 1, 1024, status.Unsupported},
		{"K % 8", rowsTensor([]int64{4, 12}, 1, codec.Fixed12), 64, 1, 1024, status.Unsupported},
		{"count < 0", w, 64, -1, 1024, status.InvalidArgument},
		{"count huge", w, 64, 1 << 40, 1024, status.InvalidArgument},
		{"nil ids", w, 0, 1, 1024, status.InvalidArgument},
		{"misaligned ids", w, 68, 1, 1024, status.InvalidArgument},
		{"nil dst", w, 64, 1, 0, status.InvalidArgument},
		{"misaligned dst", w, 64, 1, 1032, status.InvalidArgument},
	}
	for _, c := range cases {
		if err := DecodeGather(0, 0, c.t, c.ids, c.count, c.dst); status.CodeOf(err) != c.code {
			t.Errorf("%s: %v (code %v), want %v", c.name, err, status.CodeOf(err), c.code)
		}
	}
	esc := unindexedEscapes(rowsTensor([]int64{4, 16}, 1, codec.Fixed12))
	if err := DecodeGather(0, 0, esc, 64, 1, 4096); status.CodeOf(err) != status.InvalidArgument {
		t.Errorf("escapes without index: %v", err)
	}
	if err := DecodeGather(0, 0, w, 0, 0, 0); err != nil { // nothing to do, even without a GPU
		t.Errorf("count 0: %v", err)
	}
}

// TestDecodeGatherEmulated runs DecodeGather (host code and decode.cu's
// gather kernel) through the fake libcuda: rows picked in any order, repeated,
// and out of range (a row of zeros), against the source matrix.
func TestDecodeGatherEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(11)
	for _, c := range []struct{ n, k int64 }{{64, 256}, {37, 40}, {9, 1000}, {16, 8}} {
		x := escapeMatrix(t, rnd, c.n, c.k)
		w, idx, keep := placeWithIndex(t, x, c.n, c.k, 0)
		ids := []int64{c.n - 1, 0, 2, 2, 5, c.n, -1, c.n / 2, 1 << 40, 5}
		for i := 0; i < 20; i++ {
			ids = append(ids, int64(rnd())%c.n)
		}
		cnt := int64(len(ids)) * c.k
		out := make([]uint16, cnt+8)
		base := (uintptr(unsafe.Pointer(&out[0])) + 15) &^ 15
		skip := int64((base - uintptr(unsafe.Pointer(&out[0]))) / 2)
		for i := range out {
			out[i] = 0x7fc1 // poison
		}
		if err := DecodeGather(0, 0, w, uintptr(unsafe.Pointer(&ids[0])), int64(len(ids)), base); err != nil {
			t.Fatalf("%dx%d: %v", c.n, c.k, err)
		}
		for r, id := range ids {
			for j := int64(0); j < c.k; j++ {
				want := uint16(0)
				if id >= 0 && id < c.n {
					want = x[id*c.k+j]
				}
				if got := out[skip+int64(r)*c.k+j]; got != want {
					t.Fatalf("%dx%d: row %d (id %d) col %d = %04x, want %04x", c.n, c.k, r, id, j, got, want)
				}
			}
		}
		for i := int64(0); i < int64(len(out)); i++ {
			if (i < skip || i >= skip+cnt) && out[i] != 0x7fc1 {
				t.Fatalf("%dx%d: wrote outside the rows at %d", c.n, c.k, i-skip)
			}
		}
		runtime.KeepAlive(out)
		runtime.KeepAlive(ids)
		runtime.KeepAlive(keep)
		runtime.KeepAlive(idx)
	}
}
