package gpu

/*
#include "driver.h"
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// Tile sizes of kernels/pack.cu (PK_TILE, PK_HIST_TILE, PK_CRC_TILE).
const (
	packTile     = 4096
	packHistTile = 8 * packTile
	packCRCTile  = 65536 // bytes
	packMaxG     = 65535 // groups are gridDim.y
)

// PackResult is what Pack produces besides the planes: the metadata of a
// codec.Tensor (Groups, Checksum) and the byte size of every plane.
type PackResult struct {
	Groups     []codec.Group
	Checksum   uint32
	PlaneBytes [codec.NumPlanes]uint64
}

// packGeom is the arithmetic of a pack: sizes, tile counts, workspace layout.
type packGeom struct {
	layout           codec.Layout
	total, per, G    uint64
	stride           uint64 // counts and offsets per tile: 1 (fixed12) or 3 (smallest)
	sym              uint64 // workspace offset of the symbol tables (smallest)
	T, tcrc          uint64 // encode tiles per group, CRC tiles of the tensor
	hist, base, tile uint64 // workspace offsets
	off, wsBytes     uint64
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

func packGeometry(dt codec.DType, layout codec.Layout, shape []int64, groups int) (packGeom, error) {
	var g packGeom
	if dt != codec.BF16 {
		return g, status.Errorf(status.Unsupported, "gpu pack: dtype %d: the GPU packs bf16 tensors only", dt)
	}
	if layout != codec.Fixed12 && layout != codec.Smallest {
		return g, status.Errorf(status.InvalidArgument, "gpu pack: layout %d cannot be packed", layout)
	}
	if groups < 1 || groups > packMaxG {
		return g, status.Errorf(status.InvalidArgument, "gpu pack: %d groups (1 to %d)", groups, packMaxG)
	}
	total := uint64(1)
	zero := false
	for _, d := range shape {
		if d < 0 {
			return g, status.Errorf(status.InvalidArgument, "gpu pack: negative dimension %d in shape %v", d, shape)
		}
		zero = zero || d == 0
	}
	if zero {
		total = 0
	} else {
		for _, d := range shape {
			if total > codec.MaxElements/uint64(d) {
				return g, status.Errorf(status.Overflow, "gpu pack: shape %v has more than 2^56 elements", shape)
			}
			total *= uint64(d)
		}
	}
	G := uint64(groups)
	if G > 1 && (len(shape) == 0 || uint64(shape[0]) < G || uint64(shape[0])%G != 0) {
		return g, status.Errorf(status.InvalidArgument, "gpu pack: %d groups do not split shape %v along axis 0", G, shape)
	}
	per := total / G
	if per > codec.MaxGroupElements {
		return g, status.Errorf(status.InvalidArgument, "group of %d elements exceeds 2^32-1; pack with groups=%d or more", per, (total+codec.MaxGroupElements-1)/codec.MaxGroupElements)
	}
	g.layout, g.total, g.per, g.G = layout, total, per, G
	g.stride = 1
	if layout == codec.Smallest {
		g.stride = 3
	}
	g.T = (per + packTile - 1) / packTile
	g.tcrc = (2*total + packCRCTile - 1) / packCRCTile
	g.hist = 0
	g.base = align8(4 * 256 * G)
	g.sym = g.base + align8(4*G)
	g.tile = g.sym + 256*G
	g.off = g.tile + align8(4*max(g.tcrc, g.stride*G*g.T))
	g.wsBytes = g.off + 8*g.stride*G*g.T
	return g, nil
}

// PackWorkspaceBytes returns the device workspace (bytes, 8-byte aligned)
// that PackBound and Pack need for a tensor of this shape, layout and number
// of groups.
func PackWorkspaceBytes(dt codec.DType, layout codec.Layout, shape []int64, groups int) (uint64, error) {
	g, err := packGeometry(dt, layout, shape, groups)
	return g.wsBytes, err
}

func copyDtoH(dev int, stream uintptr, dst unsafe.Pointer, src uint64, bytes uint64) error {
	var e [C.GLYD_ERRLEN]C.char
	return drvErr(C.glyd_drv_copy_dtoh(C.int(dev), dst, C.uint64_t(src), C.size_t(bytes), C.uintptr_t(stream), &e[0]), &e)
}

func copyHtoD(dev int, stream uintptr, dst uint64, src unsafe.Pointer, bytes uint64) error {
	var e [C.GLYD_ERRLEN]C.char
	return drvErr(C.glyd_drv_copy_htod(C.int(dev), C.uint64_t(dst), src, C.size_t(bytes), C.uintptr_t(stream), &e[0]), &e)
}

// packPlan runs the counting passes (histograms, CRC, escape counts per
// tile) and works out the groups and plane sizes. It synchronizes stream.
// tileOff receives the first escape entry of every tile.
func packPlan(dev int, stream uintptr, src uintptr, g packGeom, ws uintptr) (PackResult, []uint64, error) {
	res := PackResult{Groups: make([]codec.Group, g.G)}
	for i := range res.Groups {
		res.Groups[i].Elements = g.per
	}
	if g.total == 0 {
		return res, nil, nil
	}
	if g.tcrc >= 1<<31 {
		return res, nil, status.Errorf(status.Unsupported, "gpu pack: tensor too large (%d CRC tiles)", g.tcrc)
	}
	d, err := load(dev)
	if err != nil {
		return res, nil, err
	}
	sms := d.info.SMs
	w := uint64(ws)
	p := packParams(src, g, w)

	z := p
	z.dst = p.pk_hist
	z.n = C.glyd_u64(256 * g.G)
	if err := launch(dev, kPackZero, gridFor(256*g.G, 256, sms*8), 1, 1, 256, 0, stream, &z); err != nil {
		return res, nil, err
	}
	if err := launch(dev, kPackHist, uint32((g.per+packHistTile-1)/packHistTile), uint32(g.G), 1, 256, 0, stream, &p); err != nil {
		return res, nil, err
	}
	if err := launch(dev, kPackCRC, uint32(g.tcrc), 1, 1, 256, 0, stream, &p); err != nil {
		return res, nil, err
	}
	hist := make([]uint32, 256*g.G)
	if err := copyDtoH(dev, stream, unsafe.Pointer(&hist[0]), w+g.hist, 4*uint64(len(hist))); err != nil {
		return res, nil, err
	}
	crcs := make([]uint32, g.tcrc)
	if err := copyDtoH(dev, stream, unsafe.Pointer(&crcs[0]), w+g.tile, 4*uint64(len(crcs))); err != nil {
		return res, nil, err
	}
	res.Checksum = codec.CRCCombineEqual(crcs, packCRCTile, 2*g.total-(g.tcrc-1)*packCRCTile)

	bases := make([]uint32, g.G)
	var syms []byte
	if g.layout == codec.Smallest {
		syms = make([]byte, 256*g.G)
	}
	for i := range bases {
		var h [256]uint64
		for e := 0; e < 256; e++ {
			h[e] = uint64(hist[256*i+e])
		}
		if g.layout == codec.Smallest {
			table, b, sym := codec.SmallestChoice(&h, codec.BF16)
			res.Groups[i].Table, res.Groups[i].Base = table, b
			bases[i] = uint32(b)
			copy(syms[256*i:], sym[:])
		} else {
			b := codec.Fixed12Base(&h, codec.BF16)
			bases[i] = uint32(b)
			res.Groups[i].Base = b
		}
	}
	if err := copyHtoD(dev, stream, w+g.base, unsafe.Pointer(&bases[0]), 4*uint64(len(bases))); err != nil {
		return res, nil, err
	}
	kCount := kPackCount
	if g.layout == codec.Smallest {
		if err := copyHtoD(dev, stream, w+g.sym, unsafe.Pointer(&syms[0]), uint64(len(syms))); err != nil {
			return res, nil, err
		}
		kCount = kPackSmallCount
	}
	if err := launch(dev, kCount, uint32(g.T), uint32(g.G), 1, 256, 0, stream, &p); err != nil {
		return res, nil, err
	}
	cnt := make([]uint32, g.stride*g.G*g.T)
	if err := copyDtoH(dev, stream, unsafe.Pointer(&cnt[0]), w+g.tile, 4*uint64(len(cnt))); err != nil {
		return res, nil, err
	}
	off := make([]uint64, len(cnt))
	if g.layout == codec.Smallest {
		res.PlaneBytes, _ = packOffsetsSmall(res.Groups, g, cnt, off)
	} else {
		res.PlaneBytes, _ = packOffsets(res.Groups, g, cnt, off)
	}
	return res, off, nil
}

// packOffsetsSmall is packOffsets for the smallest layout: cnt and off hold
// three entries per tile (level-2 codes, level-3 codes, escapes; off: the
// absolute byte offsets of the tile's level-2 and level-3 segments and its
// first escape entry).
func packOffsetsSmall(groups []codec.Group, g packGeom, cnt []uint32, off []uint64) ([codec.NumPlanes]uint64, uint64) {
	var sizes [codec.NumPlanes]uint64
	codeBytes := (g.per + 3) / 4
	var tot2, tot3, esc uint64
	for i := range groups {
		gr := &groups[i]
		gr.Offsets = [codec.NumPlanes]uint64{}
		gr.Offsets[codec.PlaneSM] = uint64(i) * g.per
		gr.Offsets[codec.PlaneCode] = uint64(i) * codeBytes
		gr.Offsets[codec.PlaneCode2] = tot2
		gr.Offsets[codec.PlaneCode3] = tot3
		gr.Offsets[codec.PlaneChunks] = uint64(i) * codec.ChunkEntryBytes * g.T
		gr.Offsets[codec.PlaneEscIdx] = codec.EscIdxBytes * esc
		gr.Offsets[codec.PlaneEscExp] = esc
		first := esc
		for t := uint64(0); t < g.T; t++ {
			j := 3 * (uint64(i)*g.T + t)
			off[j], off[j+1], off[j+2] = tot2, tot3, esc
			tot2 += (uint64(cnt[j]) + 3) / 4
			tot3 += (uint64(cnt[j+1]) + 1) / 2
			esc += uint64(cnt[j+2])
		}
		gr.Escapes = esc - first
	}
	sizes[codec.PlaneSM] = g.G * g.per
	sizes[codec.PlaneCode] = g.G * codeBytes
	sizes[codec.PlaneCode2] = tot2
	sizes[codec.PlaneCode3] = tot3
	sizes[codec.PlaneChunks] = codec.ChunkEntryBytes * g.G * g.T
	sizes[codec.PlaneEscIdx] = codec.EscIdxBytes * esc
	sizes[codec.PlaneEscExp] = esc
	return sizes, esc
}

// packOffsets fills the escape counts and plane offsets of the groups
// (Pack's layout) from the escape count of every tile, writes the first
// escape entry of every tile to off, and returns the plane sizes and the
// total number of escapes.
func packOffsets(groups []codec.Group, g packGeom, cnt []uint32, off []uint64) ([codec.NumPlanes]uint64, uint64) {
	var sizes [codec.NumPlanes]uint64
	codeBytes := (g.per + 1) / 2
	var esc uint64
	for i := range groups {
		gr := &groups[i]
		gr.Offsets = [codec.NumPlanes]uint64{}
		gr.Offsets[codec.PlaneSM] = uint64(i) * g.per
		gr.Offsets[codec.PlaneCode] = uint64(i) * codeBytes
		gr.Offsets[codec.PlaneEscIdx] = codec.EscIdxBytes * esc
		gr.Offsets[codec.PlaneEscExp] = esc
		first := esc
		for t := uint64(0); t < g.T; t++ {
			off[uint64(i)*g.T+t] = esc
			esc += uint64(cnt[uint64(i)*g.T+t])
		}
		gr.Escapes = esc - first
	}
	sizes[codec.PlaneSM] = g.G * g.per
	sizes[codec.PlaneCode] = g.G * codeBytes
	sizes[codec.PlaneEscIdx] = codec.EscIdxBytes * esc
	sizes[codec.PlaneEscExp] = esc
	return sizes, esc
}

func checkWorkspace(g packGeom, ws uintptr, wsBytes uint64) error {
	if g.total == 0 {
		return nil
	}
	if ws == 0 || ws%8 != 0 {
		return status.Errorf(status.InvalidArgument, "gpu pack: workspace must be 8-byte aligned and not nil")
	}
	if wsBytes < g.wsBytes {
		return status.Errorf(status.BufferTooSmall, "gpu pack: workspace of %d bytes, need %d", wsBytes, g.wsBytes)
	}
	return nil
}

// packArgs checks the arguments shared by PackBound and Pack.
func packArgs(dt codec.DType, layout codec.Layout, shape []int64, groups int, src, ws uintptr, wsBytes uint64) (packGeom, error) {
	g, err := packGeometry(dt, layout, shape, groups)
	if err != nil {
		return g, err
	}
	if g.total > 0 && (src == 0 || src%2 != 0) {
		return g, status.Errorf(status.InvalidArgument, "gpu pack: source must be 2-byte aligned and not nil")
	}
	return g, checkWorkspace(g, ws, wsBytes)
}

// PackBound runs the counting passes of Pack on the GPU and returns the
// groups, the checksum and the exact byte size of every plane; it
// synchronizes stream. src is the tensor's bf16 elements in device memory
// (row-major, contiguous, 2-byte aligned); ws a workspace of
// PackWorkspaceBytes bytes.
func PackBound(dev int, stream uintptr, src uintptr, dt codec.DType, layout codec.Layout, shape []int64, groups int, ws uintptr, wsBytes uint64) (PackResult, error) {
	g, err := packArgs(dt, layout, shape, groups, src, ws, wsBytes)
	if err != nil {
		return PackResult{}, err
	}
	res, _, err := packPlan(dev, stream, src, g, ws)
	return res, err
}

// Pack packs the bf16 tensor at src (device memory, row-major, contiguous)
// into planes[p] (device buffers of caps[p] bytes, at least PackBound's
// sizes; nil where the size is 0), exactly the bytes codec.Pack writes for
// the same elements, layout and groups. It synchronizes stream during the
// counting passes; the last kernel (the encoder) is queued on stream when it
// returns. bf16 only; fixed12 and smallest.
func Pack(dev int, stream uintptr, src uintptr, dt codec.DType, layout codec.Layout, shape []int64, groups int, ws uintptr, wsBytes uint64, planes [codec.NumPlanes]uintptr, caps [codec.NumPlanes]uint64) (PackResult, error) {
	g, err := packArgs(dt, layout, shape, groups, src, ws, wsBytes)
	if err != nil {
		return PackResult{}, err
	}
	res, off, err := packPlan(dev, stream, src, g, ws)
	if err != nil || g.total == 0 {
		return res, err
	}
	for pl := 0; pl < codec.NumPlanes; pl++ {
		need := res.PlaneBytes[pl]
		if caps[pl] < need {
			return res, status.Errorf(status.BufferTooSmall, "gpu pack: plane %d has %d bytes, need %d", pl, caps[pl], need)
		}
		if need > 0 && planes[pl] == 0 {
			return res, status.Errorf(status.InvalidArgument, "gpu pack: plane %d is nil", pl)
		}
	}
	if res.PlaneBytes[codec.PlaneEscIdx] > 0 && planes[codec.PlaneEscIdx]%4 != 0 {
		return res, status.Errorf(status.InvalidArgument, "gpu pack: the escape index plane must be 4-byte aligned")
	}
	w := uint64(ws)
	if err := copyHtoD(dev, stream, w+g.off, unsafe.Pointer(&off[0]), 8*uint64(len(off))); err != nil {
		return res, err
	}
	k := kPackF12
	if g.layout == codec.Smallest {
		k = kPackSmall
		// The chunk table comes from the host (the offsets are known here).
		chunks := make([]byte, res.PlaneBytes[codec.PlaneChunks])
		chunksFromOffsets(g, off, chunks)
		if err := copyHtoD(dev, stream, uint64(planes[codec.PlaneChunks]), unsafe.Pointer(&chunks[0]), uint64(len(chunks))); err != nil {
			return res, err
		}
	}
	p := packParams(src, g, w)
	p.sm = C.glyd_u64(planes[codec.PlaneSM])
	p.code = C.glyd_u64(planes[codec.PlaneCode])
	p.escidx = C.glyd_u64(planes[codec.PlaneEscIdx])
	p.escexp = C.glyd_u64(planes[codec.PlaneEscExp])
	p.code2 = C.glyd_u64(planes[codec.PlaneCode2])
	p.code3 = C.glyd_u64(planes[codec.PlaneCode3])
	return res, launch(dev, k, uint32(g.T), uint32(g.G), 1, 256, 0, stream, &p)
}

// packParams is the argument block of the pack kernels: the source, the
// geometry and the workspace arrays (at w); each pass reads what it needs.
func packParams(src uintptr, g packGeom, w uint64) C.glyd_kparams {
	var p C.glyd_kparams
	p.x = C.glyd_u64(src)
	p.n = C.glyd_u64(g.per)
	p.N = C.glyd_i64(g.G)
	p.total = C.glyd_u64(g.total)
	p.pk_hist = C.glyd_u64(w + g.hist)
	p.pk_base = C.glyd_u64(w + g.base)
	p.pk_tiles = C.glyd_u64(w + g.tile)
	p.pk_off = C.glyd_u64(w + g.off)
	p.pk_sym = C.glyd_u64(w + g.sym)
	return p
}

// chunksFromOffsets writes the PlaneChunks bytes of a smallest pack from the
// absolute segment offsets of every tile (packOffsetsSmall): each chunk's
// offsets relative to its group's first segment.
func chunksFromOffsets(g packGeom, off []uint64, chunks []byte) {
	for i := uint64(0); i < g.G; i++ {
		j0 := 3 * i * g.T
		for t := uint64(0); t < g.T; t++ {
			j := j0 + 3*t
			c := codec.ChunkEntryBytes * (i*g.T + t)
			binary.LittleEndian.PutUint64(chunks[c:], off[j]-off[j0])
			binary.LittleEndian.PutUint64(chunks[c+8:], off[j+1]-off[j0+1])
		}
	}
}
