package gpu

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// experts builds an experts DeviceTensor over fake device addresses from a
// real packing of e experts of n x k (the host side never dereferences them).
func experts(t *testing.T, e, n, k int, layout codec.Layout) *DeviceTensor {
	t.Helper()
	src := make([]uint16, e*n*k)
	for i := range src {
		src[i] = 0x3c00 + uint16(i%97) // ordinary weights
	}
	for i := 0; i < k; i++ {
		src[i] = 0 // a row of exact zeros: k escapes in expert 0
	}
	p, err := codec.Pack(src, codec.BF16, []int64{int64(e), int64(n), int64(k)}, codec.Options{Layout: layout, Groups: e})
	if err != nil {
		t.Fatal(err)
	}
	d := &DeviceTensor{Layout: layout, DType: codec.BF16, Shape: p.Shape, Groups: p.Groups}
	for pl := 0; pl < codec.NumPlanes; pl++ {
		if len(p.Planes[pl]) > 0 {
			d.Planes[pl] = uintptr(1<<24) * uintptr(pl+1)
		}
	}
	return d
}

func TestExpertsTableBytes(t *testing.T) {
	d := experts(t, 4, 32, 64, codec.Fixed12)
	got, err := ExpertsTableBytes(d)
	if err != nil {
		t.Fatal(err)
	}
	want := align16(entrySize * 4)
	for _, g := range d.Groups {
		if g.Escapes > 0 {
			want += escRowsBytes(32) + 8*g.Escapes
		}
	}
	if d.Groups[0].Escapes < 64 || got != want {
		t.Fatalf("table bytes %d, want %d (escapes of expert 0: %d)", got, want, d.Groups[0].Escapes)
	}
	if entrySize != 64 {
		t.Fatalf("sizeof(glyd_expert) = %d, kernels/moe.cu and docs assume 64", entrySize)
	}
}

func TestExpertsErrors(t *testing.T) {
	d := experts(t, 4, 32, 64, codec.Smallest)
	if _, err := ExpertsTableBytes(d); status.CodeOf(err) != status.Unsupported {
		t.Fatalf("smallest: %v", err)
	}
	d = experts(t, 4, 32, 64, codec.Fixed12)
	d.Shape = []int64{4 * 32 * 64}
	if _, err := ExpertsTableBytes(d); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("1-D: %v", err)
	}
	d.Shape = []int64{2, 64 * 64} // 2 rows cannot hold 4 experts
	if _, err := ExpertsTableBytes(d); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("rows not divisible: %v", err)
	}
	d = experts(t, 4, 32, 64, codec.Fixed12)
	if err := BuildExpertsTable(0, 0, d, 8); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("misaligned table: %v", err)
	}
	if err := LinearExperts(0, 0, 1024, -1, d, 4096, 4096, 0, 8192, false, 0, 0); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("negative rows: %v", err)
	}
	if err := LinearExperts(0, 0, 1024, 0, d, 4096, 4096, 0, 8192, false, 0, 0); err != nil {
		t.Fatalf("no rows is a no-op: %v", err)
	}
	if err := LinearExperts(0, 0, 1024, 4, d, 0, 4096, 0, 8192, false, 0, 0); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("nil table: %v", err)
	}
	if err := LinearExperts(0, 0, 1032, 4, d, 4096, 4096, 0, 8192, false, 0, 0); status.CodeOf(err) != status.Unsupported {
		t.Fatalf("misaligned x: %v", err)
	}
	if err := DecodeExperts(0, 0, d, 0, 8192); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("nil table: %v", err)
	}
	if Init() != nil { // no driver: the device calls say so
		if err := LinearExperts(0, 0, 1024, 4, d, 4096, 4096, 0, 8192, false, 0, 0); status.CodeOf(err) != status.NoGPU {
			t.Fatalf("LinearExperts without a GPU: %v", err)
		}
		if err := DecodeExperts(0, 0, d, 4096, 8192); status.CodeOf(err) != status.NoGPU {
			t.Fatalf("DecodeExperts without a GPU: %v", err)
		}
		if err := BuildExpertsTable(0, 0, d, 4096); status.CodeOf(err) != status.NoGPU {
			t.Fatalf("BuildExpertsTable without a GPU: %v", err)
		}
	}
}

func TestExpertsTransposed(t *testing.T) {
	d := experts(t, 4, 32, 64, codec.Fixed12) // stored [E, in=32, out=64]
	ws, err := ExpertsWorkspaceBound(d, 5, true)
	s := transposedSplits(4, 32, 64, 5)
	if err != nil || ws != uint64(s)*5*64*4 || s < 1 {
		t.Fatalf("workspace %d (splits %d), err %v", ws, s, err)
	}
	if ws, _ := ExpertsWorkspaceBound(d, 5, false); ws != 0 {
		t.Fatalf("linear layout needs no workspace, got %d", ws)
	}
	if err := LinearExperts(0, 0, 1024, 5, d, 4096, 4096, 2048, 8192, true, 1<<20, ws); status.CodeOf(err) != status.Unsupported {
		t.Fatalf("bias with transposed experts: %v", err)
	}
	if err := LinearExperts(0, 0, 1024, 5, d, 4096, 4096, 0, 8192, true, 1<<20, ws-1); status.CodeOf(err) != status.BufferTooSmall {
		t.Fatalf("short workspace: %v", err)
	}
	// splits: enough blocks for a 132-SM GPU, bounded by the input rows
	if s := transposedSplits(16, 5120, 16384, 1); s < 4 || s > 32 { // one token, top-1
		t.Fatalf("Llama 4 gate_up splits %d", s)
	}
	if s := transposedSplits(16, 64, 16384, 16); s != 1 {
		t.Fatalf("64 input rows: %d splits", s)
	}
}

func TestPickGroupedCoversTheMeanRowsPerExpert(t *testing.T) {
	// hopper: k > 2048 (Mixtral, Llama 4), hopperSmallK: k <= 2048 (Qwen3-30B-A3B)
	for _, c := range []struct {
		rows, e                    int64
		want, hopper, hopperSmallK string
	}{
		{1, 8, "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n1w1k8u1"},
		{8, 128, "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n1w1k8u1"},
		{128, 128, "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12gw_t16k1s4u4p2"},
		{32, 8, "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12gw_t16k1s4u4p2"},
		{33, 8, "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n2w1k8u1", "glyd_lin_f12gw_t16k1s4u4p2"},
		{64, 8, "glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n2w1k8u1", "glyd_lin_f12gw_t16k1s4u4p2"},
		{65, 8, "glyd_lin_f12g_m1n2w1k8u1", "glyd_lin_f12gw_t64k1s4u4p4", "glyd_lin_f12gw_t32k1s4u4p2"},
		{128, 8, "glyd_lin_f12g_m1n2w1k8u1", "glyd_lin_f12gw_t64k1s4u4p4", "glyd_lin_f12gw_t32k1s4u4p2"},
		{129, 8, "glyd_lin_f12g_m2n4w1k8u1", "glyd_lin_f12gw_t48k1s4u4p4", "glyd_lin_f12gw_t48k1s4u4p4"},
		{256, 8, "glyd_lin_f12g_m2n4w1k8u1", "glyd_lin_f12gw_t48k1s4u4p4", "glyd_lin_f12gw_t48k1s4u4p4"},
		{257, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t64k1s4u4p4", "glyd_lin_f12gw_t64k1s4u4p4"},
		{448, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t64k1s4u4p4", "glyd_lin_f12gw_t64k1s4u4p4"},
		{449, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t96k1s4u2p2", "glyd_lin_f12gw_t96k1s4u2p2"},
		{512, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t96k1s4u2p2", "glyd_lin_f12gw_t96k1s4u2p2"},
		{640, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t96k1s4u2p2", "glyd_lin_f12gw_t96k1s4u2p2"},
		{641, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t128k1s4u2p2", "glyd_lin_f12gw_t128k1s4u2p2"},
		{1 << 20, 8, "glyd_lin_f12g_m1n8w2k4u1", "glyd_lin_f12gw_t128k1s4u2p2", "glyd_lin_f12gw_t128k1s4u2p2"},
	} {
		if got := groupedConfigs[pickGrouped(c.rows, c.e, 4096, false)].groupedName(); got != c.want {
			t.Errorf("%d rows over %d experts: %s, want %s", c.rows, c.e, got, c.want)
		}
		if got := groupedConfigs[pickGrouped(c.rows, c.e, 4096, true)].groupedName(); got != c.hopper {
			t.Errorf("sm_90, k 4096: %d rows over %d experts: %s, want %s", c.rows, c.e, got, c.hopper)
		}
		if got := groupedConfigs[pickGrouped(c.rows, c.e, 2048, true)].groupedName(); got != c.hopperSmallK {
			t.Errorf("sm_90, k 2048: %d rows over %d experts: %s, want %s", c.rows, c.e, got, c.hopperSmallK)
		}
	}
	for i := range groupedConfigs {
		if kernelNames[kGroupedFirst+2*i] != groupedConfigs[i].groupedName() {
			t.Fatal("grouped kernel indices out of order")
		}
	}
}

// The routing limits are part of the C ABI: include/glyd.h states them.
func TestMoeRouteLimitsMatchTheHeader(t *testing.T) {
	h, err := os.ReadFile("../../include/glyd.h")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"GLYD_MOE_ROUTE_MAX_PAIRS": MoeRouteMaxPairs, "GLYD_MOE_ROUTE_MAX_EXPERTS": MoeRouteMaxExpert} {
		if !strings.Contains(string(h), fmt.Sprintf("#define %s %d\n", name, want)) {
			t.Errorf("include/glyd.h does not define %s %d", name, want)
		}
	}
}

func TestMoeRouteArgumentErrors(t *testing.T) {
	const fake = 1 << 20
	for _, c := range []struct {
		pairs, topk, experts, total int64
		ids, offs                   uintptr
		want                        status.Code
	}{
		{8, 0, 4, 4, fake, fake, status.InvalidArgument},
		{8, 3, 4, 4, fake, fake, status.InvalidArgument},
		{8, 8, 4, 3, fake, fake, status.InvalidArgument},
		{MoeRouteMaxPairs + 8, 8, 4, 4, fake, fake, status.Unsupported},
		{8, 8, 4, MoeRouteMaxExpert + 1, fake, fake, status.Unsupported},
		{8, 8, 4, 4, 0, fake, status.InvalidArgument},
		{8, 8, 4, 4, fake, 0, status.InvalidArgument},
	} {
		err := MoeRoute(0, 0, c.ids, c.pairs, c.topk, c.experts, c.total, c.offs, fake, fake)
		if status.CodeOf(err) != c.want {
			t.Errorf("%+v: %v, want code %v", c, err, c.want)
		}
	}
	if err := MoeCombine(0, 0, fake+2, fake, fake, fake, fake, 1, 8, 64, 4, 4, fake); status.CodeOf(err) != status.InvalidArgument {
		t.Errorf("misaligned x: %v", err)
	}
	if err := MoeCombine(0, 0, fake, fake, fake, fake, fake, 0, 8, 64, 4, 4, fake); err != nil {
		t.Errorf("no tokens: %v", err)
	}
}

func TestForceGroupedConfig(t *testing.T) {
	defer ForceConfig("")
	if err := ForceConfig("glyd_lin_f12gw_t64k1s4u4p4"); err != nil {
		t.Fatal(err)
	}
	if got := groupedConfigs[pickGrouped(8, 128, 4096, true)].groupedName(); got != "glyd_lin_f12gw_t64k1s4u4p4" {
		t.Fatalf("forced grouped configuration ignored: %s", got)
	}
	if forced.Load() != 0 {
		t.Fatal("a grouped name forced a dense configuration")
	}
	if err := ForceConfig(""); err != nil || pickGrouped(8, 128, 4096, true) != 0 {
		t.Fatal("\"\" did not restore the automatic grouped choice")
	}
}

// glyd_moe_route's shared memory stays within 96 KiB at its limits, with at
// least one warp, and 32 warps at Qwen3-30B-A3B's 512-token prompt.
func TestRouteWarps(t *testing.T) {
	for _, c := range [][2]int64{{MoeRouteMaxPairs, MoeRouteMaxExpert + 1}, {4096, 129}, {1, 2}, {MoeRouteMaxPairs, 2}} {
		w := routeWarps(c[0], c[1])
		if smem := (c[1]+1)*4 + w*c[1]*4 + (c[0]*2+15)&^15; w < 1 || w > 32 || smem > 96*1024 {
			t.Fatalf("%d pairs, %d bins: %d warps, %d bytes", c[0], c[1], w, smem)
		}
	}
	if w := routeWarps(4096, 129); w != 32 {
		t.Fatalf("512 tokens x 8 over 128 experts: %d warps", w)
	}
	// A decode step's routing is one warp per 32 pairs: a small block.
	for _, c := range [][3]int64{{1, 17, 1}, {0, 17, 1}, {8, 129, 1}, {33, 17, 2}, {256, 129, 8}} {
		if w := routeWarps(c[0], c[1]); w != c[2] {
			t.Fatalf("%d pairs, %d bins: %d warps, want %d", c[0], c[1], w, c[2])
		}
	}
}
