package gpu

import (
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/glyd/glyd/core/codec"
)

// TestPackEmulated runs PackBound and Pack (the real host code and driver
// layer) against kernels/emu's fake libcuda.so.1, which runs kernels/pack.cu
// on the CPU with host memory as "device" memory. Run it with
// kernels/emu/run.sh; skipped otherwise.
func TestPackEmulated(t *testing.T) {
	if os.Getenv("GLYD_FAKE_CUDA") == "" {
		t.Skip("set GLYD_FAKE_CUDA and LD_LIBRARY_PATH to the fake libcuda (kernels/emu/run.sh)")
	}
	s := uint32(11)
	rnd := func() uint32 { s = s*1664525 + 1013904223; return s >> 8 }
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
