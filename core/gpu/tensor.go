package gpu

import (
	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// DeviceTensor is a packed tensor whose planes live in device memory: the
// codec's metadata (host memory) plus one device address per plane. It is the
// GPU twin of codec.Tensor; the caller owns the memory.
type DeviceTensor struct {
	Layout codec.Layout
	DType  codec.DType
	Shape  []int64
	// Groups as in codec.Tensor; group g's slice of plane p starts at
	// Planes[p] + Groups[g].Offsets[p].
	Groups []codec.Group
	// Planes[p] is the device address of plane p (all groups); 0 for a plane
	// the layout does not use or that is empty.
	Planes [codec.NumPlanes]uintptr
	// EscRows is the device address of the escape row index that
	// BuildEscapeIndex writes (EscapeIndexBytes bytes); Linear needs it when
	// the tensor has escapes. 0 otherwise.
	EscRows uintptr
	// Tiled: the sm and code planes hold the tiled arrangement (Tile;
	// docs/FORMAT.md, "Planes on the GPU") instead of the codec's row-major
	// one. The escape planes and the escape index do not change.
	Tiled bool
}

// tileable reports why t's planes cannot be tiled (Tile), or nil: the
// arrangement is defined for fixed12 matrices [N, K] of one group with N a
// multiple of 16 and K of 64.
func (t *DeviceTensor) tileable() error {
	if t.Layout != codec.Fixed12 || len(t.Groups) != 1 || len(t.Shape) < 2 {
		return status.Errorf(status.Unsupported, "gpu: only fixed12 matrices of one group have a tiled arrangement (layout %d, %d groups, shape %v)", t.Layout, len(t.Groups), t.Shape)
	}
	n, k, _ := matrixDims(t)
	if n%16 != 0 || k%64 != 0 {
		return status.Errorf(status.Unsupported, "gpu: a tiled arrangement needs rows %% 16 == 0 and K %% 64 == 0, the matrix is [%d, %d]", n, k)
	}
	return nil
}

// kblocks is glyd_kparams.tiled for t: K / 64 when tiled, else 0.
func (t *DeviceTensor) kblocks() uint32 {
	if !t.Tiled {
		return 0
	}
	return uint32(t.Shape[len(t.Shape)-1] / 64)
}

// validate checks what every kernel relies on. It is cheap (no allocation):
// it runs on every call.
func (t *DeviceTensor) validate() error {
	if t == nil {
		return status.Errorf(status.InvalidArgument, "gpu: nil tensor")
	}
	if t.DType != codec.BF16 {
		return status.Errorf(status.Unsupported, "gpu: dtype %d: the GPU kernels decode bf16 tensors only", t.DType)
	}
	if t.Layout != codec.Fixed12 && t.Layout != codec.Smallest {
		return status.Errorf(status.Unsupported, "gpu: layout %d has no GPU kernel", t.Layout)
	}
	if len(t.Groups) == 0 {
		return status.Errorf(status.InvalidArgument, "gpu: tensor has no groups")
	}
	var total uint64
	for i := range t.Groups {
		g := &t.Groups[i]
		total += g.Elements
		if g.Base > 241 {
			return status.Errorf(status.ExponentTable, "invalid input: group %d: base %d > 241", i, g.Base)
		}
		if g.Escapes > 0 && (t.Planes[codec.PlaneEscIdx] == 0 || t.Planes[codec.PlaneEscExp] == 0) {
			return status.Errorf(status.InvalidArgument, "gpu: group %d has %d escapes but no escape planes", i, g.Escapes)
		}
	}
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 {
			return status.Errorf(status.InvalidArgument, "gpu: negative dimension %d", d)
		}
		n *= d
	}
	if uint64(n) != total {
		return status.Errorf(status.SizeMismatch, "gpu: shape %v holds %d elements, groups %d", t.Shape, n, total)
	}
	if total > 0 && (t.Planes[codec.PlaneSM] == 0 || t.Planes[codec.PlaneCode] == 0) {
		return status.Errorf(status.InvalidArgument, "gpu: missing sm or code plane")
	}
	if t.Layout == codec.Smallest && total > 0 && t.Planes[codec.PlaneChunks] == 0 {
		return status.Errorf(status.InvalidArgument, "gpu: smallest layout without chunk table")
	}
	if t.Tiled {
		if err := t.tileable(); err != nil {
			return status.Errorf(status.InvalidArgument, "gpu: tensor marked tiled: %v", err)
		}
		if k := t.Shape[len(t.Shape)-1]; k >= 1<<28 { // the kernels' 32-bit offsets in a 16-row band
			return status.Errorf(status.Unsupported, "gpu: tiled K = %d is too large (< 2^28)", k)
		}
	}
	return nil
}

// Elements returns the number of elements of group g (g = -1: all).
func (t *DeviceTensor) Elements(g int) uint64 {
	if g >= 0 {
		return t.Groups[g].Elements
	}
	var n uint64
	for i := range t.Groups {
		n += t.Groups[i].Elements
	}
	return n
}
