package gpu

/*
#include "driver.h"
*/
import "C"

import "github.com/glyd/glyd/core/status"

// Tile writes t's sm and code planes in the other arrangement to sm and code
// (device buffers of the planes' sizes, 16-byte aligned, not overlapping t's
// planes) on the caller's stream: the tiled one (kernels/common.cuh,
// plane_index; docs/FORMAT.md, "Planes on the GPU") when t.Tiled is false,
// row-major when it is true. With them t describes the same tensor with
// Tiled flipped; its escape planes and escape index stay as they are. t: a
// fixed12 matrix [N, K] of one group, N % 16 == 0, K % 64 == 0 (Unsupported
// otherwise). Two launches of glyd_tile_bytes (kernels/tile.cu).
func Tile(dev int, stream uintptr, t *DeviceTensor, sm, code uintptr) error {
	if err := t.validate(); err != nil {
		return err
	}
	if err := t.tileable(); err != nil {
		return err
	}
	n, k, _ := matrixDims(t)
	if n*k == 0 {
		return nil
	}
	p0 := groupParams(t, 0)
	src := [2]uintptr{uintptr(p0.sm), uintptr(p0.code)}
	dst := [2]uintptr{sm, code}
	size := [2]uint64{uint64(n * k), uint64(n * k / 2)}
	for i, name := range []string{"sm", "code"} {
		switch {
		case dst[i] == 0 || dst[i]%16 != 0:
			return status.Errorf(status.InvalidArgument, "gpu: tile: the %s destination must be 16-byte aligned and not nil", name)
		case src[i]%16 != 0:
			return status.Errorf(status.Unsupported, "gpu: tile: the %s plane is not 16-byte aligned", name)
		}
		for j := range dst {
			if overlaps(dst[i], size[i], src[j], size[j]) || (j != i && overlaps(dst[i], size[i], dst[j], size[j])) {
				return status.Errorf(status.InvalidArgument, "gpu: tile: the %s destination overlaps a plane or the other destination", name)
			}
		}
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.N = C.glyd_i64(n)
	if t.Tiled {
		p.rows = 1 // back to row-major
	}
	for i, width := range []uint64{64, 32} { // a tile row: 64 k of sm bytes, of codes
		p.sm, p.dst = C.glyd_u64(src[i]), C.glyd_u64(dst[i])
		p.K = C.glyd_i64(size[i] / uint64(n)) // bytes per matrix row
		p.n = C.glyd_u64(width)
		if err := launch(dev, kTileBytes, gridFor(size[i]/16, 256, d.info.SMs*8), 1, 1, 256, 0, stream, &p); err != nil {
			return err
		}
	}
	return nil
}

// overlaps reports whether [a, a+na) and [b, b+nb) share a byte.
func overlaps(a uintptr, na uint64, b uintptr, nb uint64) bool {
	return uint64(a) < uint64(b)+nb && uint64(b) < uint64(a)+na
}
