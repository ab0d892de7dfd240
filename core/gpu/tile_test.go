package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/bf16"
	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// tiledIndex is the reference of the tiled arrangement (docs/FORMAT.md,
// "Planes on the GPU"; kernels/common.cuh, plane_index): the place of element
// e of a matrix of k columns in tiled planes (a byte of sm, a nibble of code).
func tiledIndex(e, k int64) int64 {
	n, c := e/k, e%k
	return (n&^15)*k + (n&15)*64 + (c&^63)*16 + c&63
}

// Argument errors of Tile and of the kernels that take row-major planes only
// come before any device work, so they are the same with and without a GPU.
func TestTileArguments(t *testing.T) {
	ok := rowsTensor([]int64{32, 128}, 1, codec.Fixed12)
	tiled := *ok
	tiled.Tiled = true
	cases := []struct {
		name     string
		t        *DeviceTensor
		sm, code uintptr
		want     status.Code
	}{
		{"nil tensor", nil, 8192, 16384, status.InvalidArgument},
		{"rows % 16", rowsTensor([]int64{24, 128}, 1, codec.Fixed12), 8192, 16384, status.Unsupported},
		{"K % 64", rowsTensor([]int64{32, 96}, 1, codec.Fixed12), 8192, 16384, status.Unsupported},
		{"groups", rowsTensor([]int64{32, 128}, 2, codec.Fixed12), 8192, 16384, status.Unsupported},
		{"smallest", rowsTensor([]int64{32, 128}, 1, codec.Smallest), 8192, 16384, status.Unsupported},
		{"1-D", rowsTensor([]int64{4096}, 1, codec.Fixed12), 8192, 16384, status.Unsupported},
		{"nil sm destination", ok, 0, 16384, status.InvalidArgument},
		{"misaligned code destination", ok, 8192, 16392, status.InvalidArgument},
		// the planes of ok: sm [256, 4352), code [512, 2560)
		{"destination over the sm plane", ok, 4336, 16384, status.InvalidArgument},
		{"destination over the code plane", ok, 8192, 1536, status.InvalidArgument},
		{"destinations overlap", ok, 8192, 8192 + 2048, status.InvalidArgument},
	}
	for _, c := range cases {
		if err := Tile(0, 0, c.t, c.sm, c.code); status.CodeOf(err) != c.want {
			t.Errorf("%s: %v (code %v), want %v", c.name, err, status.CodeOf(err), c.want)
		}
	}
	bad := *rowsTensor([]int64{24, 128}, 1, codec.Fixed12)
	bad.Tiled = true
	if err := bad.validate(); status.CodeOf(err) != status.InvalidArgument {
		t.Errorf("a tensor marked tiled whose shape has no tiled arrangement: %v", err)
	}
	if err := DecodeGather(0, 0, &tiled, 4096, 1, 8192); status.CodeOf(err) != status.Unsupported {
		t.Errorf("gather of tiled planes: %v", err)
	}
	if _, _, _, err := expertDims(&tiled); status.CodeOf(err) != status.Unsupported {
		t.Errorf("experts of tiled planes: %v", err)
	}
	// one launch per run of equally arranged weights (glyd_kparams.tiled is the launch's)
	ws := []*DeviceTensor{&tiled, &tiled, ok, &tiled}
	got := chunks(ws)
	if len(got) != 3 || len(got[0]) != 2 || len(got[1]) != 1 || len(got[2]) != 1 {
		t.Errorf("chunks of tiled, tiled, row-major, tiled: %d launches", len(got))
	}
}

// TestTileEmulated tiles packed matrices with escapes through kernels/emu's
// fake libcuda and checks the planes against the reference arrangement
// (tiledIndex), then that the tiled tensor decodes (whole and by rows, on the
// vector and the scalar kernel), builds its escape index and multiplies (the
// generic kernel) exactly as the row-major one, and tiles back to the
// codec's planes. Run it with kernels/emu/run.sh; skipped otherwise.
func TestTileEmulated(t *testing.T) {
	needFakeCUDA(t)
	rnd := lcg(23)
	var mem fakeMemory
	// (the bulk-copy decode from 8,192 elements: 64x256 in the planes' order,
	// 16x512 and 32x1024 row by row, its chunks whole k-runs of a 16-row group)
	for _, sh := range [][2]int64{{16, 64}, {32, 128}, {48, 192}, {64, 256}, {16, 512}, {32, 1024}} {
		n, k := sh[0], sh[1]
		x := escapeMatrix(t, rnd, n, k)
		w, idx, keep := placeWithIndex(t, x, n, k, 0)
		sm, code := mem.alloc(int(n*k)), mem.alloc(int(n*k/2))
		if err := Tile(0, 0, w, addr(sm), addr(code)); err != nil {
			t.Fatalf("%dx%d: %v", n, k, err)
		}
		pk, err := codec.Pack(x, codec.BF16, []int64{n, k}, codec.Options{Layout: codec.Fixed12})
		if err != nil {
			t.Fatal(err)
		}
		rsm, rcode := pk.Planes[codec.PlaneSM], pk.Planes[codec.PlaneCode] // what placeWithIndex placed
		for e := int64(0); e < n*k; e++ {
			i := tiledIndex(e, k)
			if sm[i] != rsm[e] || code[i/2]>>(4*(i&1))&15 != rcode[e/2]>>(4*(e&1))&15 {
				t.Fatalf("%dx%d: element %d is not at %d of the tiled planes", n, k, e, i)
			}
		}
		tw := *w
		tw.Tiled = true
		tw.Planes[codec.PlaneSM], tw.Planes[codec.PlaneCode] = addr(sm), addr(code)
		tidx := make([]uint64, len(idx))
		if err := BuildEscapeIndex(0, 0, &tw, addr(tidx)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tidx, idx) {
			t.Fatalf("%dx%d: the escape index of the tiled planes differs", n, k)
		}
		tw.EscRows = addr(tidx)

		// whole: the vector kernel (aligned destination), the scalar one (not)
		for _, off := range []int{0, 1} {
			out := make([]uint16, n*k+16)
			at := (addr(out)+15)&^15 + 2*uintptr(off)
			if err := Decode(0, 0, &tw, AllGroups, at); err != nil {
				t.Fatal(err)
			}
			skip := int64(at-addr(out)) / 2
			if got := out[skip : skip+n*k]; !slices.Equal(got, x) {
				t.Fatalf("%dx%d (dst +%d): the tiled planes decode differently", n, k, off)
			}
		}
		// row ranges: whole 16-row groups (the vector kernel) and others (scalar)
		for _, r := range [][2]int64{{0, n}, {16, n - 16}, {0, 16}, {3, 5}, {n - 1, 1}, {5, n - 5}} {
			row0, rows := r[0], r[1]
			if rows <= 0 {
				continue
			}
			out := make([]uint16, rows*k+8)
			at := (addr(out) + 15) &^ 15
			if err := DecodeRows(0, 0, &tw, row0, rows, at); err != nil {
				t.Fatal(err)
			}
			skip := int64(at-addr(out)) / 2
			if !slices.Equal(out[skip:skip+rows*k], x[row0*k:(row0+rows)*k]) {
				t.Fatalf("%dx%d rows [%d, +%d): the tiled planes decode differently", n, k, row0, rows)
			}
		}
		// the generic kernel (x misaligned): the same bits as on row-major planes
		const tokens = 3
		xb := mem.alloc(2*tokens*int(k) + 2)[2:]
		for i := range xb {
			xb[i] = byte(rnd())&0xbf | 0x30 // finite bf16 of moderate size
		}
		y, ty := mem.alloc(2*tokens*int(n)), mem.alloc(2*tokens*int(n))
		if err := Linear(0, 0, addr(xb), tokens, w, 0, addr(y), 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := Linear(0, 0, addr(xb), tokens, &tw, 0, addr(ty), 0, 0); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(y, ty) {
			t.Fatalf("%dx%d: the generic kernel multiplies the tiled planes differently", n, k)
		}
		// and back
		bsm, bcode := mem.alloc(int(n*k)), mem.alloc(int(n*k/2))
		if err := Tile(0, 0, &tw, addr(bsm), addr(bcode)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(bsm, rsm) || !slices.Equal(bcode, rcode) {
			t.Fatalf("%dx%d: tiled and back is not the codec's planes", n, k)
		}
		runtime.KeepAlive(keep)
		runtime.KeepAlive(idx)
		runtime.KeepAlive(tidx) // the kernels above read it through tw.EscRows
	}
	runtime.KeepAlive(&mem)
}

// TestMmaTilesEmulated runs the mma.sync tiles (linear_f12: every
// glyd_lin_f12_m* configuration, forced, single and sibling launches, split
// K within and across blocks) through the fake libcuda, whose mma.sync is a
// CPU loop over the warp's fragments: their products against a float
// reference of the decoded weight, and on tiled planes bit for bit those on
// row-major ones. Run it with kernels/emu/run.sh; skipped otherwise.
func TestMmaTilesEmulated(t *testing.T) {
	tilesEmulated(t, "glyd_lin_f12_m", []int{1, 3, 8, 13}, [][2]int64{{48, 256}, {64, 2048}})
}

// TestHopperTilesEmulated is TestMmaTilesEmulated for the sm_90 tiles: the
// wgmma tiles (glyd_lin_f12w_*) and the prompt tiles (glyd_lin_f12p_*), the
// fake GPU running wgmma, the bulk copy engine, cp.async, mbarriers and
// named barriers on the CPU.
func TestHopperTilesEmulated(t *testing.T) {
	shapes := [][2]int64{{48, 256}, {64, 512}}
	tilesEmulated(t, "glyd_lin_f12w_", []int{1, 13, 40}, shapes)
	tilesEmulated(t, "glyd_lin_f12p_", []int{1, 70, 130}, shapes)
}

// checkLinear checks y (bf16 [rows, n]) against x [rows, k] times w [n, k],
// a fixed12 weight of exponent base `base`: |y - ref| <= 2^-8 |ref| +
// 2^-16 (sum of |products|, an escaped weight's counted both as it is and
// as the kernels first decode it). The 1-64-token tiles give an escaped
// weight exponent base + 15 (0 in the _safe kernels) and correct it after
// the sum, whose fp32 additions carry that large wrong product meanwhile.
func checkLinear(t *testing.T, what string, y []byte, xs []float32, w []uint16, base uint8, rows int, n, k int64) {
	t.Helper()
	eb := uint16(escapeExponent(base))
	for m := int64(0); m < int64(rows); m++ {
		for r := int64(0); r < n; r++ {
			var want, mag float64
			for c := int64(0); c < k; c++ {
				wv := w[r*k+c]
				xv := float64(xs[m*k+c])
				p := xv * float64(bf16.ToFloat32(wv))
				want += p
				mag += math.Abs(p)
				if e := uint8(wv >> 7); e < base || e > base+14 { // and its first decode's product
					mag += math.Abs(xv * float64(bf16.ToFloat32(wv&0x807f|eb<<7)))
				}
			}
			v := float64(bf16.ToFloat32(binary.LittleEndian.Uint16(y[2*(m*n+r):])))
			if math.Abs(v-want) > math.Abs(want)/256+mag/65536 {
				t.Fatalf("%s: output [%d][%d] = %g, want %g (sum of |products| %g)", what, m, r, v, want, mag)
			}
		}
	}
}

// tilesEmulated checks the configurations whose names start with
// configPrefix, forced, at the given token counts on weights of the given
// shapes (see TestMmaTilesEmulated).
func tilesEmulated(t *testing.T, configPrefix string, tokens []int, shapes [][2]int64) {
	needFakeCUDA(t)
	rnd := lcg(29)
	var mem fakeMemory
	defer func() { _ = ForceConfig("") }()
	type weightPair struct {
		rm, tl *DeviceTensor
		w      []uint16
	}
	tiledPair := func(n, k int64) weightPair {
		d, w := mem.weight(t, rnd, n, k, 40)
		sm, code := mem.alloc(int(n*k)), mem.alloc(int(n*k/2))
		if err := Tile(0, 0, d, addr(sm), addr(code)); err != nil {
			t.Fatal(err)
		}
		td := *d
		td.Tiled = true
		td.Planes[codec.PlaneSM], td.Planes[codec.PlaneCode] = addr(sm), addr(code)
		return weightPair{d, &td, w}
	}
	for _, sh := range shapes {
		n, k := sh[0], sh[1]
		a, b := tiledPair(n, k), tiledPair(32, k)
		for _, name := range ConfigNames() {
			if !strings.HasPrefix(name, configPrefix) {
				continue
			}
			if err := ForceConfig(name); err != nil {
				t.Fatal(err)
			}
			for _, rows := range tokens {
				x, xs := mem.activations(rnd, rows, int(k), 1)
				run := func(ws []*DeviceTensor) []byte {
					need, err := LinearManyWorkspaceBound(ws, rows)
					if err != nil {
						t.Fatal(err)
					}
					wsp := mem.workspace(need)
					y := mem.alloc(2 * rows * int(sumRows(ws)))
					if err := LinearMany(0, 0, addr(x), rows, ws, nil, addr(y), wsp, need); err != nil {
						t.Fatalf("%s %dx%d rows %d: %v", name, n, k, rows, err)
					}
					return y
				}
				y := run([]*DeviceTensor{a.rm})
				if ty := run([]*DeviceTensor{a.tl}); !slices.Equal(y, ty) {
					t.Fatalf("%s %dx%d rows %d: tiled planes multiply differently", name, n, k, rows)
				}
				if m, tm := run([]*DeviceTensor{a.rm, b.rm}), run([]*DeviceTensor{a.tl, b.tl}); !slices.Equal(m, tm) {
					t.Fatalf("%s %dx%d rows %d: tiled siblings multiply differently", name, n, k, rows)
				}
				checkLinear(t, fmt.Sprintf("%s %dx%d rows %d", name, n, k, rows), y, xs, a.w, a.rm.Groups[0].Base, rows, n, k)
			}
		}
	}
	runtime.KeepAlive(&mem)
}
