package gpu

import (
	"fmt"
	"testing"

	"github.com/glyd/glyd/core/codec"
)

// emulatePack runs the algorithm of kernels/pack.cu on the CPU (tile by
// tile, as the kernels and packPlan do) and returns the tensor it would
// produce; it must equal codec.Pack byte for byte. This checks the plan
// (tiles, bases, escape offsets, plane layout); the GPU tests check the
// kernels themselves.
func emulatePack(t *testing.T, x []uint16, shape []int64, groups int) *codec.Tensor {
	g, err := packGeometry(codec.BF16, codec.Fixed12, shape, groups)
	if err != nil {
		t.Fatal(err)
	}
	res := PackResult{Groups: make([]codec.Group, g.G)}
	for i := range res.Groups {
		res.Groups[i].Elements = g.per
	}
	out := &codec.Tensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: shape}
	if g.total > 0 {
		var crcs []uint32
		for lo := uint64(0); lo < g.total; lo += packCRCTile / 2 {
			crcs = append(crcs, codec.Checksum(x[lo:min(lo+packCRCTile/2, g.total)]))
		}
		res.Checksum = codec.CRCCombineEqual(crcs, packCRCTile, 2*g.total-(g.tcrc-1)*packCRCTile)
		bases := make([]uint32, g.G)
		for i := range bases {
			var h [256]uint64
			for _, v := range x[uint64(i)*g.per : uint64(i+1)*g.per] {
				h[v>>7&0xff]++
			}
			b := codec.Fixed12Base(&h, codec.BF16)
			bases[i], res.Groups[i].Base = uint32(b), b
		}
		esc := func(v uint16, b uint32) bool { return uint32(v>>7&0xff)-b > 14 }
		cnt := make([]uint32, g.G*g.T)
		for i := uint64(0); i < g.G; i++ {
			for j := uint64(0); j < g.per; j++ {
				if esc(x[i*g.per+j], bases[i]) {
					cnt[i*g.T+j/packTile]++
				}
			}
		}
		off := make([]uint64, len(cnt))
		res.PlaneBytes, _ = packOffsets(res.Groups, g, cnt, off)
		for p := range out.Planes {
			out.Planes[p] = make([]byte, res.PlaneBytes[p])
		}
		for i := uint64(0); i < g.G; i++ {
			for t := uint64(0); t < g.T; t++ {
				k := off[i*g.T+t]
				for j := t * packTile; j < min((t+1)*packTile, g.per); j++ {
					v := x[i*g.per+j]
					e := uint32(v >> 7 & 0xff)
					c := e - bases[i]
					if c > 14 {
						c = 15
						out.Planes[codec.PlaneEscIdx][4*k] = byte(j)
						out.Planes[codec.PlaneEscIdx][4*k+1] = byte(j >> 8)
						out.Planes[codec.PlaneEscIdx][4*k+2] = byte(j >> 16)
						out.Planes[codec.PlaneEscIdx][4*k+3] = byte(j >> 24)
						out.Planes[codec.PlaneEscExp][k] = byte(e)
						k++
					}
					out.Planes[codec.PlaneSM][i*g.per+j] = byte(v>>8&0x80 | v&0x7f)
					out.Planes[codec.PlaneCode][i*((g.per+1)/2)+j/2] |= byte(c << (4 * (j % 2)))
				}
			}
		}
	} else {
		res.PlaneBytes, _ = packOffsets(res.Groups, g, nil, nil)
		for p := range out.Planes {
			out.Planes[p] = make([]byte, res.PlaneBytes[p])
		}
	}
	out.Groups, out.Checksum = res.Groups, res.Checksum
	return out
}

func TestPackPlanMatchesCodec(t *testing.T) {
	rnd := lcg(1)
	cases := []struct {
		shape  []int64
		groups int
	}{
		{[]int64{0}, 1}, {[]int64{4, 0}, 2}, {[]int64{}, 1}, {[]int64{1}, 1}, {[]int64{7}, 1},
		{[]int64{3, 5}, 3}, {[]int64{4097}, 1}, {[]int64{2, 4097}, 2}, {[]int64{256, 256}, 1},
		{[]int64{8, 33000}, 4}, {[]int64{40000, 1}, 8}, {[]int64{3, 70001}, 3},
	}
	for _, c := range cases {
		g, _ := packGeometry(codec.BF16, codec.Fixed12, c.shape, c.groups)
		x := make([]uint16, g.total)
		for i := range x {
			switch rnd() % 4 {
			case 0:
				x[i] = uint16(rnd()) // any pattern: escapes
			default:
				x[i] = uint16(rnd()&0x807f) | uint16(118+rnd()%12)<<7
			}
		}
		want, err := codec.Pack(x, codec.BF16, c.shape, codec.Options{Layout: codec.Fixed12, Groups: c.groups})
		if err != nil {
			t.Fatal(err)
		}
		samePack(t, fmt.Sprintf("%v/%d", c.shape, c.groups), emulatePack(t, x, c.shape, c.groups), want)
	}
}

// samePack fails t unless got has want's checksum, groups and planes, byte for byte.
func samePack(t *testing.T, what string, got, want *codec.Tensor) {
	t.Helper()
	if got.Checksum != want.Checksum {
		t.Fatalf("%s: checksum %08x, want %08x", what, got.Checksum, want.Checksum)
	}
	for i := range want.Groups {
		if got.Groups[i] != want.Groups[i] {
			t.Fatalf("%s: group %d %+v, want %+v", what, i, got.Groups[i], want.Groups[i])
		}
	}
	for p := range want.Planes {
		if string(got.Planes[p]) != string(want.Planes[p]) {
			t.Fatalf("%s: plane %d differs (%d vs %d bytes)", what, p, len(got.Planes[p]), len(want.Planes[p]))
		}
	}
}

func TestPackGeometryErrors(t *testing.T) {
	for _, c := range []struct {
		dt     codec.DType
		l      codec.Layout
		shape  []int64
		groups int
	}{
		{codec.FP16, codec.Fixed12, []int64{4}, 1},
		{codec.BF16, codec.Layout(0), []int64{4}, 1},
		{codec.BF16, codec.Fixed12, []int64{4}, 3},
		{codec.BF16, codec.Fixed12, []int64{4}, 0},
		{codec.BF16, codec.Fixed12, []int64{-1}, 1},
		{codec.BF16, codec.Fixed12, []int64{1 << 16, 1 << 16}, 1},
		{codec.BF16, codec.Fixed12, []int64{1 << 56, 256}, 1},
	} {
		if _, err := PackWorkspaceBytes(c.dt, c.l, c.shape, c.groups); err == nil {
			t.Fatalf("%+v: no error", c)
		}
	}
	if n, err := PackWorkspaceBytes(codec.BF16, codec.Fixed12, []int64{1 << 16, 1 << 16}, 2); err != nil || n == 0 {
		t.Fatal(n, err)
	}
}

// The driver layer resolves at most GLYD_MAX_KERNELS kernels per module.
func TestKernelCount(t *testing.T) {
	if n := len(kernelNames); n > maxKernels {
		t.Fatalf("%d kernels, driver.h allows %d", n, maxKernels)
	}
	if kernelNames[kPackF12] != "glyd_pack_f12" || kernelNames[kLinFirst] != linConfigs[0].name() {
		t.Fatal("kernel indices out of order")
	}
}

// emulateSmall is emulatePack for the smallest layout (kernels
// glyd_pack_small_count and glyd_pack_small, with packOffsetsSmall and
// chunksFromOffsets).
func emulateSmall(t *testing.T, x []uint16, shape []int64, groups int) *codec.Tensor {
	g, err := packGeometry(codec.BF16, codec.Smallest, shape, groups)
	if err != nil {
		t.Fatal(err)
	}
	out := &codec.Tensor{Layout: codec.Smallest, DType: codec.BF16, Shape: shape, Groups: make([]codec.Group, g.G)}
	for i := range out.Groups {
		out.Groups[i].Elements = g.per
	}
	if g.total == 0 {
		return out
	}
	out.Checksum = codec.Checksum(x)
	syms := make([][256]uint8, g.G)
	for i := range syms {
		var h [256]uint64
		for _, v := range x[uint64(i)*g.per : uint64(i+1)*g.per] {
			h[v>>7&0xff]++
		}
		out.Groups[i].Table, out.Groups[i].Base, syms[i] = codec.SmallestChoice(&h, codec.BF16)
	}
	cnt := make([]uint32, 3*g.G*g.T)
	for i := uint64(0); i < g.G; i++ {
		for j := uint64(0); j < g.per; j++ {
			s := syms[i][x[i*g.per+j]>>7&0xff]
			k := 3 * (i*g.T + j/packTile)
			if s >= 3 {
				cnt[k]++
			}
			if s >= 6 {
				cnt[k+1]++
			}
			if s == 7 {
				cnt[k+2]++
			}
		}
	}
	off := make([]uint64, len(cnt))
	sizes, _ := packOffsetsSmall(out.Groups, g, cnt, off)
	for p := range out.Planes {
		out.Planes[p] = make([]byte, sizes[p])
	}
	chunksFromOffsets(g, off, out.Planes[codec.PlaneChunks])
	for i := uint64(0); i < g.G; i++ {
		base := uint32(out.Groups[i].Base)
		for t := uint64(0); t < g.T; t++ {
			j := 3 * (i*g.T + t)
			k2, k3, ke := off[j], off[j+1], off[j+2]
			var n2, n3 uint64
			for e := t * packTile; e < min((t+1)*packTile, g.per); e++ {
				v := x[i*g.per+e]
				ex := uint32(v >> 7 & 0xff)
				s := uint32(syms[i][ex])
				c1 := min(s, 3)
				out.Planes[codec.PlaneSM][i*g.per+e] = byte(v>>8&0x80 | v&0x7f)
				out.Planes[codec.PlaneCode][i*((g.per+3)/4)+e/4] |= byte(c1 << (2 * (e % 4)))
				if s >= 3 {
					c2 := min(s-3, 3)
					out.Planes[codec.PlaneCode2][k2+n2/4] |= byte(c2 << (2 * (n2 % 4)))
					n2++
					if s >= 6 {
						c3 := uint32(15)
						if s == 6 {
							c3 = ex - base
						}
						out.Planes[codec.PlaneCode3][k3+n3/2] |= byte(c3 << (4 * (n3 % 2)))
						n3++
					}
					if s == 7 {
						out.Planes[codec.PlaneEscIdx][4*ke] = byte(e)
						out.Planes[codec.PlaneEscIdx][4*ke+1] = byte(e >> 8)
						out.Planes[codec.PlaneEscIdx][4*ke+2] = byte(e >> 16)
						out.Planes[codec.PlaneEscIdx][4*ke+3] = byte(e >> 24)
						out.Planes[codec.PlaneEscExp][ke] = byte(ex)
						ke++
					}
				}
			}
		}
	}
	return out
}

func TestPackPlanSmallestMatchesCodec(t *testing.T) {
	rnd := lcg(3)
	for _, c := range []struct {
		shape  []int64
		groups int
	}{
		{[]int64{0}, 1}, {[]int64{4, 0}, 2}, {[]int64{}, 1}, {[]int64{1}, 1}, {[]int64{7}, 1},
		{[]int64{3, 5}, 3}, {[]int64{4097}, 1}, {[]int64{2, 4097}, 2}, {[]int64{256, 256}, 1},
		{[]int64{8, 33000}, 4}, {[]int64{40000, 1}, 8}, {[]int64{3, 70001}, 3},
	} {
		g, _ := packGeometry(codec.BF16, codec.Smallest, c.shape, c.groups)
		x := make([]uint16, g.total)
		for i := range x {
			switch rnd() % 8 {
			case 0:
				x[i] = uint16(rnd())
			default:
				x[i] = uint16(rnd()&0x807f) | uint16(110+rnd()%8+rnd()%8+rnd()%8)<<7
			}
		}
		want, err := codec.Pack(x, codec.BF16, c.shape, codec.Options{Layout: codec.Smallest, Groups: c.groups})
		if err != nil {
			t.Fatal(err)
		}
		samePack(t, fmt.Sprintf("%v/%d", c.shape, c.groups), emulateSmall(t, x, c.shape, c.groups), want)
	}
}
