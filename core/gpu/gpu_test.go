package gpu

import (
	"errors"
	"fmt"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// On a machine without a driver (CI), every GPU call must fail cleanly with
// status.NoGPU and a reason, and never kill the process. With a GPU, Init
// succeeds.
func TestInitNoGPUIsClean(t *testing.T) {
	err := Init()
	if err == nil {
		n, err := DeviceCount()
		if err != nil {
			t.Fatalf("Init ok but DeviceCount: %v", err)
		}
		t.Logf("driver present, %d devices", n)
		return
	}
	if !errors.Is(err, &status.Error{Code: status.NoGPU}) {
		t.Fatalf("Init without driver: want NoGPU, got %v (code %v)", err, status.CodeOf(err))
	}
	if err.Error() == "" {
		t.Fatal("empty reason")
	}
	t.Logf("no GPU: %v", err)
	if _, err := DeviceInfo(0); status.CodeOf(err) != status.NoGPU {
		t.Fatalf("DeviceInfo: %v", err)
	}
	w := &DeviceTensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: []int64{2, 16},
		Groups: []codec.Group{{Elements: 32, Base: 100}}}
	w.Planes[codec.PlaneSM], w.Planes[codec.PlaneCode] = 256, 512
	if err := Decode(0, 0, w, AllGroups, 1024); status.CodeOf(err) != status.NoGPU {
		t.Fatalf("Decode: %v", err)
	}
	if err := Linear(0, 0, 1024, 1, w, 0, 2048, 0, 0); status.CodeOf(err) != status.NoGPU {
		t.Fatalf("Linear: %v", err)
	}
	if err := DecodeRows(0, 0, w, 1, 1, 1024); status.CodeOf(err) != status.NoGPU {
		t.Fatalf("DecodeRows: %v", err)
	}
}

func TestValidate(t *testing.T) {
	w := &DeviceTensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: []int64{2, 16},
		Groups: []codec.Group{{Elements: 31}}}
	if err := Decode(0, 0, w, AllGroups, 1024); status.CodeOf(err) != status.SizeMismatch {
		t.Fatalf("size mismatch: %v", err)
	}
	w.Groups[0].Elements = 32
	if err := Decode(0, 0, w, AllGroups, 1024); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("missing planes: %v", err)
	}
	w.DType = codec.FP16
	if err := Decode(0, 0, w, AllGroups, 1024); status.CodeOf(err) != status.Unsupported {
		t.Fatalf("fp16: %v", err)
	}
}

func TestConfigTable(t *testing.T) {
	names := map[string]bool{}
	for _, n := range KernelNames() {
		if names[n] {
			t.Fatalf("duplicate kernel %s", n)
		}
		names[n] = true
	}
	for _, c := range linConfigs {
		if c.smem() > maxDynSmem {
			t.Fatalf("%s needs %d bytes of shared memory > %d", c.name(), c.smem(), maxDynSmem)
		}
		if c.threads() > 1024 || c.threads()%32 != 0 || c.WK&(c.WK-1) != 0 {
			t.Fatalf("%s: bad block", c.name())
		}
		if c.Kind == linPrompt { // its x layout kernel, found by token tile
			if want := fmt.Sprintf("glyd_lin_xperm_t%d", c.tokens()); kernelNames[xpermKernel(c.tokens())] != want {
				t.Fatalf("%s: layout kernel %s, want %s", c.name(), kernelNames[xpermKernel(c.tokens())], want)
			}
		}
	}
	for _, hopper := range []bool{false, true} {
		for _, r := range []int64{1, 8, 9, 16, 17, 64, 65, 128, 129, 300, 2048} {
			for _, n := range []int64{4096, 5120, 6144, 24576} {
				i := pickConfig(r, n, hopper)
				if i < 0 || i >= len(linConfigs) {
					t.Fatalf("rows %d -> config %d", r, i)
				}
				// wgmma on sm_90 from 9 tokens (but for weights of 96..263 row tiles
				// at 9..16 tokens), and from 1 on weights of >= 264 row tiles; the
				// prompt tiles from 65 tokens (from 33 on weights of >= 80 tiles)
				c := linConfigs[i]
				mid := r > 8 && r <= 16 && n/64 >= 96 && n/64 < splitTarget
				if c.hopperOnly() != (hopper && !mid && (r > 8 || n/64 >= splitTarget)) {
					t.Fatalf("rows %d n %d hopper %v -> %s", r, n, hopper, c.name())
				}
				if (c.Kind == linPrompt) != (hopper && (r > 64 || r > 32 && n/64 >= 80)) {
					t.Fatalf("rows %d hopper %v -> %s", r, hopper, c.name())
				}
				if int64(c.tokens()) > max(16, 2*r) {
					t.Fatalf("rows %d -> %s: token tile more than twice the tokens", r, c.name())
				}
			}
		}
	}
}

// The workspace bound (no device) covers the splits Linear takes on any GPU,
// and stays 0 where the blocks alone fill the largest one.
func TestWorkspaceSplits(t *testing.T) {
	for _, c := range linConfigs {
		for _, nk := range [][2]int64{{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}, {300, 1040}} {
			for _, rows := range []int64{1, 9, 16, 32, 64, 128, 300} {
				bound := c.splits(c.tilesOf(nk[0]), nk[1], rows, wgmmaSlotsMax)
				for _, slots := range []int{132, 264, 396, wgmmaSlotsMax, 8 * 132} {
					if s := c.splits(c.tilesOf(nk[0]), nk[1], rows, slots); s > bound {
						t.Fatalf("%s %v rows %d: %d splits on %d slots > bound %d", c.name(), nk, rows, s, slots, bound)
					}
				}
			}
		}
	}
	if s := wgConfig(64, 1, 4, 4, 4).splits(24576/64, 4096, 128, wgmmaSlotsMax); s != 1 {
		t.Fatalf("gate_up at 128 tokens: %d splits, want 1 (768 blocks fill the GPU)", s)
	}
}

func fakeMatrix(n, k int64) *DeviceTensor {
	w := &DeviceTensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: []int64{n, k},
		Groups: []codec.Group{{Elements: uint64(n * k), Base: 100}}}
	w.Planes[codec.PlaneSM], w.Planes[codec.PlaneCode] = 256, 512
	return w
}

// LinearMany's arguments are checked before any device work, and its
// workspace bound covers each launch: the weights of a launch together,
// launches of at most maxSegments weights sharing the workspace.
func TestLinearManyArgs(t *testing.T) {
	q, k, v := fakeMatrix(4096, 4096), fakeMatrix(1024, 4096), fakeMatrix(1024, 4096)
	for _, c := range []struct {
		ws   []*DeviceTensor
		code status.Code
	}{
		{nil, status.InvalidArgument},
		{[]*DeviceTensor{q, fakeMatrix(1024, 2048)}, status.InvalidArgument}, // two K
		{[]*DeviceTensor{fakeMatrix(8, 24), fakeMatrix(8, 24)}, status.Unsupported},
	} {
		if err := LinearMany(0, 0, 1024, 1, c.ws, nil, 2048, 0, 0); status.CodeOf(err) != c.code {
			t.Fatalf("%d weights: %v, want code %v", len(c.ws), err, c.code)
		}
	}
	if err := LinearMany(0, 0, 1024, 1, []*DeviceTensor{q, k}, []uintptr{0}, 2048, 0, 0); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("one bias for two weights: %v", err)
	}
	esc := unindexedEscapes(fakeMatrix(64, 64))
	if err := LinearMany(0, 0, 1024, 1, []*DeviceTensor{esc}, nil, 2048, 0, 0); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("escapes without index: %v", err)
	}

	for _, rows := range []int{1, 8, 16, 64, 128} {
		many, err := LinearManyWorkspaceBound([]*DeviceTensor{q, k, v}, rows)
		if err != nil {
			t.Fatal(err)
		}
		var want uint64
		for _, hopper := range []bool{false, true} {
			ci := pickConfig(int64(rows), 6144, hopper)
			cands := []int{ci}
			if alt := alternative(ci, rows, hopper); alt >= 0 { // device.pick may run it
				cands = append(cands, alt)
			}
			for _, cj := range cands {
				c := linConfigs[cj]
				tiles := c.tilesOf(4096) + 2*c.tilesOf(1024)
				var need uint64
				if s := c.splits(tiles, 4096, int64(rows), wgmmaSlotsMax); s > 1 {
					need = uint64(s) * uint64(rows) * 6144 * 4
				}
				if c.Kind == linPrompt { // then x as the stage images, 256-byte aligned
					tb := uint64(c.tokens())
					need = (need+255)&^255 + (uint64(rows)+tb-1)/tb*tb*4096*2
				}
				want = max(want, need)
			}
		}
		if many != want {
			t.Fatalf("rows %d: bound %d, want %d", rows, many, want)
		}
	}
	// Six weights: two launches (4 + 2) sharing one workspace.
	six := []*DeviceTensor{k, k, k, k, v, v}
	if got := chunks(six); len(got) != 2 || len(got[0]) != maxSegments || len(got[1]) != 2 {
		t.Fatalf("chunks of 6: %d", len(got))
	}
	b6, _ := LinearManyWorkspaceBound(six, 1)
	b4, _ := LinearManyWorkspaceBound(six[:4], 1)
	b2, _ := LinearManyWorkspaceBound(six[4:], 1)
	if b6 != max(b4, b2) {
		t.Fatalf("bound of 6 weights %d, launches %d and %d", b6, b4, b2)
	}
	if b1, _ := LinearWorkspaceBound(k, 1); b1 == 0 {
		t.Fatal("a 1024-row weight alone splits K at 1 token")
	}
	// K % 16 != 0: the generic kernel, which never splits K
	odd := fakeMatrix(37, 1001)
	for _, rows := range []int{1, 9, 100} {
		b, err := LinearManyWorkspaceBound([]*DeviceTensor{odd}, rows)
		if b1, _ := LinearWorkspaceBound(odd, rows); err != nil || b != 0 || b1 != 0 {
			t.Fatalf("K = 1001, rows %d: bounds %d and %d (%v), want 0", rows, b, b1, err)
		}
	}
}

// The split-K blocks of an sm_90 tile run as clusters only where all of the
// launch's clusters fit on the GPU at once.
func TestInClusters(t *testing.T) {
	d := &device{clusters: make([][2][9]int, len(linConfigs))}
	d.clusters[14][0][8] = 30 // glyd_lin_f12p_t256s4u2: 30 clusters of 8
	d.clusters[13][0][8] = 30 // glyd_lin_f12p_t128s4w4 has no cluster epilogue
	for _, c := range []struct {
		ci      int
		many    bool
		s, ctas int64
		want    bool
	}{
		{14, false, 8, 30, true},
		{14, false, 8, 31, false}, // a second wave of clusters: the workspace and the reduce
		{14, true, 8, 30, false},  // the _many kernel's own count (0 here)
		{14, false, 1, 1, false},  // no split
		{13, false, 8, 30, false},
		{0, false, 2, 1, false}, // mma.sync configurations: no clusters
	} {
		if got := d.inClusters(c.ci, c.many, c.s, c.ctas); got != c.want {
			t.Errorf("inClusters(%d, %v, %d, %d) = %v", c.ci, c.many, c.s, c.ctas, got)
		}
	}
}

// The three-warpgroup prompt tile runs where its blocks fill the GPU's waves
// at least as well as the two-warpgroup tile it replaces: on 132 SMs
// gate_up's 24,576 rows are one wave of its 128 tiles, on 114 SMs two.
// The workspace bound covers whichever of the two a device runs.
func TestPickByWaves(t *testing.T) {
	// Blocks per SM as on the H200 (registers and threads per block decide)
	occ := map[int]int{cfgRows16k8: 4, cfgRows16k16: 2, cfgRows16t16: 3, cfgWide16u2: 4, cfgWide16: 3,
		cfgSplit16: 2, cfgWide32u2: 4, cfgWide32: 3, cfgWgmma64: 2, cfgPrompt64: 2, cfgPrompt64w: 3, cfgPrompt128: 2, cfgPrompt256: 1,
		cfgPrompt128g3: 1}
	newDevice := func(sms int) *device {
		d := &device{info: Info{Major: 9, Minor: 0, SMs: sms}, occ: make([][2]int, len(linConfigs)),
			clusters: make([][2][9]int, len(linConfigs))}
		for ci, n := range occ {
			d.occ[ci] = [2]int{n, n}
		}
		return d
	}
	m := func(rows ...int64) []*DeviceTensor {
		var ws []*DeviceTensor
		for _, r := range rows {
			ws = append(ws, fakeMatrix(r, 4096))
		}
		return ws
	}
	gateUp, o, qkv := m(24576), m(4096), m(6144)
	// Qwen3-32B's shapes (K does not change the fill of these launches)
	gateUp32, o32, qkv32 := m(25600, 25600), m(5120), m(8192, 1024, 1024)
	for _, c := range []struct {
		sms, rows int
		ws        []*DeviceTensor
		want      int
	}{
		{132, 128, gateUp, cfgPrompt128g3}, // 128 blocks in 132 slots against 192 in 264
		{114, 128, gateUp, cfgPrompt128},   // two waves against 192 blocks in 228 slots
		{132, 96, o, cfgPrompt128g3},       // 22 tiles in 6 splits: 132 blocks
		{132, 256, gateUp, cfgPrompt128g3}, // 256 blocks in two waves of 132, against 192 in two
		{114, 256, gateUp, cfgPrompt256},   // 256 in three waves of 114, against 192 in two
		{132, 384, gateUp, cfgPrompt128g3}, // 384 in three waves either way: the tie goes to three warpgroups
		{132, 512, gateUp, cfgPrompt256},   // beyond 384 tokens: pickConfig's choice
		{132, 384, qkv, cfgPrompt128g3},    // 257-384 tokens: qkv on three warpgroups too
		{132, 128, qkv, cfgPrompt128g3},    // the better fill of two warpgroups splits K 5 ways: 12 k-blocks per block
		{132, 256, qkv, cfgPrompt256},      // not below
		{132, 512, qkv, cfgPrompt256},      // nor above
		{132, 64, gateUp, cfgPrompt64w},    // 192 tiles in 2 splits: 384 of 396 slots against 192 of 264
		{132, 64, qkv, cfgPrompt64},        // 48 tiles in 8 splits of 396 against 5 of 264: blocks of 8 k-blocks
		{132, 64, gateUp32, cfgPrompt64},   // 400 tiles in 2 waves of 264 against 2 of 396
		{132, 64, qkv32, cfgPrompt64},      // 80 tiles in 3 splits of 264 against 4 of 396
		{132, 128, gateUp32, cfgPrompt128}, // 268 tiles in 3 waves of 132 against 400 in 2 of 264
		// 1-32 tokens (session 28): Qwen3-8B keeps the sweeps' picks, ties included
		{132, 1, gateUp, cfgWide16},      // 384 of 396 slots, 1,536 16-row blocks in 3 waves of 528: a tie
		{132, 1, gateUp32, cfgRows16k8},  // 800 tiles in 3 waves of 396 against 3,200 in 7 of 528
		{132, 8, o, cfgRows16k16},        // 256 blocks of 264 against 64 tiles in 4 splits: a tie
		{132, 8, qkv, cfgRows16k8},       // 384 of 528 against 96 tiles in 2 splits of 264: a tie
		{132, 1, o32, cfgSplit16},        // 320 blocks of 528 against 80 tiles in 3 splits of 264
		{132, 1, qkv32, cfgRows16k8},     // 640 in 2 waves of 528 against 160 tiles of 264: a tie
		{132, 1, m(2048), cfgRows16k16},  // 128 blocks of 264, no alternative (a small model's o)
		{132, 16, gateUp, cfgWide16},     // one wave of 396 against 384 of 528
		{132, 16, gateUp32, cfgWide16u2}, // 3 waves of 396 against 2 of 528
		{132, 16, qkv, cfgRows16t16},     // 384 of 396 against 96 tiles in 5 splits of 528
		{132, 16, qkv32, cfgWide16u2},    // 640 in 2 waves of 396 against 160 tiles in 3 splits of 528
		{132, 32, gateUp, cfgWide32},     // as at 16 tokens
		{132, 32, gateUp32, cfgWide32u2},
		{132, 32, qkv, cfgWide32},     // 96 tiles in 4 splits of 396 against 5 of 528
		{132, 32, qkv32, cfgWide32u2}, // 160 in 2 splits of 396 against 3 of 528
		{132, 64, o32, cfgPrompt64},   // pickConfig: the prompt tile from 80 tiles; 6 splits of 264 against 8 of 396
	} {
		d := newDevice(c.sms)
		if got := d.pick(c.rows, c.ws, 4096); got != c.want {
			t.Errorf("%d SMs, %d rows, %d weight rows: %s, want %s", c.sms, c.rows, sumRows(c.ws), linConfigs[got].name(), linConfigs[c.want].name())
		}
		bound, err := LinearManyWorkspaceBound(c.ws, c.rows)
		if err != nil {
			t.Fatal(err)
		}
		for _, ci := range []int{pickConfig(int64(c.rows), sumRows(c.ws), true), c.want} {
			cfg := linConfigs[ci]
			s, _ := d.splitOf(ci, len(c.ws) > 1, weightTiles(cfg, c.ws), 4096, c.rows)
			if need, _ := cfg.workspace(sumRows(c.ws), 4096, int64(c.rows), s); need > bound {
				t.Errorf("%d rows, %s: workspace %d > bound %d", c.rows, cfg.name(), need, bound)
			}
		}
	}
	d := newDevice(132)
	// Small models at 65-256 tokens: the 64-token tiles where the prompt
	// tile's blocks would be short (smallPrompt)
	for _, c := range []struct {
		rows    int
		n, k    int64
		want    int
		comment string
	}{
		{128, 4096, 2048, cfgPrompt64, "Qwen3-1.7B's qkv: 22 tiles of 192 rows in 6 splits of 5.3 k-blocks"},
		{128, 2048, 2048, cfgWgmma64, "its o: 32 weight tiles of 64 rows, the wgmma tile"},
		{128, 2048, 6144, cfgWgmma64, "its down: 88 blocks of 12 k-blocks fill 0.67 of one wave"},
		{128, 12288, 2048, cfgPrompt128g3, "its gate_up: 128 blocks of 16"},
		{256, 4096, 1024, cfgPrompt64, "Qwen3-0.6B's qkv: the 256-token tile's blocks of 4 k-blocks"},
		{256, 6144, 1024, cfgPrompt256, "its gate_up: 96 blocks of 8 (0.73)"},
		{128, 2560, 4096, cfgPrompt128g3, "Qwen3-4B's o: 112 blocks of 8 fill 0.85"},
		{128, 6144, 2560, cfgPrompt128g3, "its qkv: 128 blocks of 10"},
		{256, 10240, 5120, cfgPrompt256, "Qwen3-32B's qkv: 80 blocks filling 0.61, but of 80 k-blocks"},
		{128, 51200, 5120, cfgPrompt128, "its gate_up: 267 blocks fill 0.67 of 3 waves (the alternative as before)"},
		{64, 4096, 2048, cfgWgmma64, "64 tokens: pickConfig's choice"},
	} {
		ws := []*DeviceTensor{fakeMatrix(c.n, c.k)}
		if got := d.pick(c.rows, ws, c.k); got != c.want {
			t.Errorf("%s: %s, want %s", c.comment, linConfigs[got].name(), linConfigs[c.want].name())
		}
		bound, err := LinearManyWorkspaceBound(ws, c.rows)
		if err != nil {
			t.Fatal(err)
		}
		cfg := linConfigs[c.want]
		s, _ := d.splitOf(c.want, false, weightTiles(cfg, ws), c.k, c.rows)
		if need, _ := cfg.workspace(c.n, c.k, int64(c.rows), s); need > bound {
			t.Errorf("%s: workspace %d > bound %d", c.comment, need, bound)
		}
	}
	// Qwen3-1.7B's q, k and v as one launch at 128 tokens: 23 tiles of 192 rows
	// in 5 splits of 6.4 k-blocks
	qkv17 := []*DeviceTensor{fakeMatrix(2048, 2048), fakeMatrix(1024, 2048), fakeMatrix(1024, 2048)}
	if got := d.pick(128, qkv17, 2048); got != cfgPrompt64 {
		t.Errorf("siblings: %s, want %s", linConfigs[got].name(), linConfigs[cfgPrompt64].name())
	}
	// Qwen3-1.7B's gate_up (K = 2,048) at 64 tokens: 96 tiles fill 97% of the
	// three-per-SM slots in 4 splits, but of 8 k-blocks each
	if got := d.pick(64, m(12288), 2048); got != cfgPrompt64 {
		t.Errorf("K 2048: %s, want %s", linConfigs[got].name(), linConfigs[cfgPrompt64].name())
	}
	d.info.Major = 8 // no alternatives off sm_90
	if got := d.pick(1, o32, 4096); got != cfgRows16k8 {
		t.Errorf("sm_80: %s, want %s", linConfigs[got].name(), linConfigs[cfgRows16k8].name())
	}
}
