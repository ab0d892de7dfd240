package gpu

/*
#include "driver.h"
*/
import "C"

import (
	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// AllGroups asks Decode for every group of a tensor.
const AllGroups = -1

func groupParams(t *DeviceTensor, g int) C.glyd_kparams {
	gr := &t.Groups[g]
	var p C.glyd_kparams
	at := func(pl codec.Plane) C.glyd_u64 {
		if t.Planes[pl] == 0 {
			return 0
		}
		return C.glyd_u64(uint64(t.Planes[pl]) + gr.Offsets[pl])
	}
	p.sm = at(codec.PlaneSM)
	p.code = at(codec.PlaneCode)
	p.code2 = at(codec.PlaneCode2)
	p.code3 = at(codec.PlaneCode3)
	p.chunks = at(codec.PlaneChunks)
	p.escidx = at(codec.PlaneEscIdx)
	p.escexp = at(codec.PlaneEscExp)
	p.n = C.glyd_u64(gr.Elements)
	p.escapes = C.glyd_u64(gr.Escapes)
	p.base = C.glyd_u32(gr.Base)
	p.tiled = C.glyd_u32(t.kblocks())
	for i := 0; i < 6; i++ {
		p.table[i] = C.glyd_u32(gr.Table[i])
	}
	return p
}

func gridFor(work uint64, per uint64, cap int) uint32 {
	b := (work + per - 1) / per
	if b < 1 {
		b = 1
	}
	if b > uint64(cap) {
		b = uint64(cap)
	}
	return uint32(b)
}

// bulkChunk and bulkSmem are glyd_decode_f12_bulk's chunk (units of 8
// elements) and dynamic shared memory (kernels/decode.cu, BULK_CH, BULK_SMEM).
const (
	bulkChunk = 1024
	bulkSmem  = 4 * 12 * bulkChunk
)

// launchDecodeF12 decodes cnt fixed12 elements from element first of the
// group of p (p.dst, p.n, and for a row range p.row0 and p.K set) with the
// fastest kernel their alignment allows: on sm_90 the bulk copy engine's
// (16-byte aligned planes, at least one chunk), else the vector kernel
// (8-byte sm, 4-byte code), else one element per thread — also for tiled
// planes (p.tiled) where the elements are not whole 16-row groups, which the
// other two decode in the planes' order. One block per multiprocessor for
// the bulk kernel: 48 KiB in flight each are enough
// (python/benchmarks/decode_bw.cu: as fast as four).
func launchDecodeF12(dev int, d *device, stream uintptr, p *C.glyd_kparams, first, cnt uint64) error {
	sm, code, sms := uint64(p.sm)+first, uint64(p.code)+first/2, d.info.SMs
	group := 16 * 64 * uint64(p.tiled) // elements of a 16-row group of tiled planes
	switch {
	case first%8 != 0 || sm%8 != 0 || code%4 != 0 || uint64(p.dst)%16 != 0 || cnt < 8,
		group > 0 && (first%group != 0 || cnt%group != 0):
		return launch(dev, kDecodeF12Scalar, gridFor(cnt, 256, sms*16), 1, 1, 256, 0, stream, p)
	case d.hopper() && sm%16 == 0 && code%16 == 0 && cnt >= 8*bulkChunk:
		return launch(dev, kDecodeF12Bulk, gridFor(cnt/8, bulkChunk, sms), 1, 1, 256, bulkSmem, stream, p)
	default:
		return launch(dev, kDecodeF12Vec, gridFor(cnt/8, 256*12, sms*3), 1, 1, 256, 0, stream, p)
	}
}

// Decode writes the bf16 bits of group g of t (AllGroups: the whole tensor,
// groups in order) to dst, a device buffer of Elements(g)*2 bytes, on the
// caller's stream. Bit-exact for every input the codec produces. Launches one
// kernel per group, plus one for the escapes of groups that have any.
func Decode(dev int, stream uintptr, t *DeviceTensor, g int, dst uintptr) error {
	if err := t.validate(); err != nil {
		return err
	}
	if g < AllGroups || g >= len(t.Groups) {
		return status.Errorf(status.InvalidArgument, "gpu: group %d out of range (%d groups)", g, len(t.Groups))
	}
	if dst == 0 && t.Elements(g) > 0 {
		return status.Errorf(status.InvalidArgument, "gpu: nil destination")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	first, last := g, g
	if g == AllGroups {
		first, last = 0, len(t.Groups)-1
	}
	out := uint64(dst)
	for i := first; i <= last; i++ {
		p := groupParams(t, i)
		p.dst = C.glyd_u64(out)
		n := t.Groups[i].Elements
		out += 2 * n
		if n == 0 {
			continue
		}
		sms := d.info.SMs
		switch t.Layout {
		case codec.Fixed12:
			err = launchDecodeF12(dev, d, stream, &p, 0, n)
		case codec.Smallest:
			err = launch(dev, kDecodeSmall, gridFor(n, 4096, sms*16), 1, 1, 256, 0, stream, &p)
		}
		if err != nil {
			return err
		}
		if t.Groups[i].Escapes > 0 {
			if err = launch(dev, kEscapeScatter, gridFor(t.Groups[i].Escapes, 256, sms*8), 1, 1, 256, 0, stream, &p); err != nil {
				return err
			}
		}
	}
	return nil
}

// matrixDims returns (rows, K) of a single-group tensor seen as a matrix
// [product of all but the last dimension, last dimension].
func matrixDims(t *DeviceTensor) (int64, int64, error) {
	if len(t.Shape) < 2 {
		return 0, 0, status.Errorf(status.Unsupported, "gpu: need a matrix, have shape %v", t.Shape)
	}
	if len(t.Groups) != 1 {
		return 0, 0, status.Errorf(status.Unsupported, "gpu: %d groups: the fused kernels take single-group tensors", len(t.Groups))
	}
	k := t.Shape[len(t.Shape)-1]
	n := int64(1)
	for _, d := range t.Shape[:len(t.Shape)-1] {
		n *= d
	}
	return n, k, nil
}

// escRowsBytes is the size of the row part of the escape index (8-aligned).
func escRowsBytes(rows int64) uint64 { return (4*uint64(rows+1) + 7) &^ 7 }

// escapeIndex returns the device addresses of the row part and the records of
// t's escape index (BuildEscapeIndex, t.EscRows; t seen as a matrix of n
// rows) as the kernels take them, or 0, 0 when t has no escapes.
func (t *DeviceTensor) escapeIndex(n int64) (rows, recs C.glyd_u64) {
	if t.Groups[0].Escapes == 0 {
		return 0, 0
	}
	return C.glyd_u64(t.EscRows), C.glyd_u64(uint64(t.EscRows) + escRowsBytes(n))
}

// EscapeIndexBytes is the size of the escape index of t: for the matrix
// [rows = product of all but the last dimension, K], 4*(rows+1) bytes of
// per-row ranges (rounded up to 8) followed by 8 bytes per escape (its column
// and true bf16 value). 0 if t has no escapes.
func EscapeIndexBytes(t *DeviceTensor) (uint64, error) {
	if err := t.validate(); err != nil {
		return 0, err
	}
	n, _, err := matrixDims(t)
	if err != nil {
		return 0, err
	}
	if t.Groups[0].Escapes == 0 {
		return 0, nil
	}
	return escRowsBytes(n) + 8*t.Groups[0].Escapes, nil
}

// BuildEscapeIndex writes the escape index of t to dst (EscapeIndexBytes
// bytes, 8-byte aligned) on the caller's stream. Run it once after placing the
// tensor on the GPU, then set t.EscRows = dst; Linear needs it.
func BuildEscapeIndex(dev int, stream uintptr, t *DeviceTensor, dst uintptr) error {
	need, err := EscapeIndexBytes(t)
	if err != nil || need == 0 {
		return err
	}
	if dst == 0 || dst%8 != 0 {
		return status.Errorf(status.InvalidArgument, "gpu: escape index destination must be 8-byte aligned and not nil")
	}
	n, k, _ := matrixDims(t)
	if t.Groups[0].Escapes >= 1<<32 || k >= 1<<31 {
		return status.Errorf(status.Unsupported, "gpu: %d escapes, K=%d: the escape index holds 32-bit positions", t.Groups[0].Escapes, k)
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	p := groupParams(t, 0)
	p.dst = C.glyd_u64(dst)
	p.escrecs = C.glyd_u64(uint64(dst) + escRowsBytes(n))
	p.N = C.glyd_i64(n)
	p.K = C.glyd_i64(k)
	if err := launch(dev, kEscapeRows, gridFor(uint64(n+1), 256, 1<<30), 1, 1, 256, 0, stream, &p); err != nil {
		return err
	}
	return launch(dev, kEscapeRecords, gridFor(t.Groups[0].Escapes, 256, d.info.SMs*8), 1, 1, 256, 0, stream, &p)
}

// fixed12Rows checks what the row kernels (DecodeRows, DecodeGather: op)
// need of t — a valid fixed12 tensor of one group seen as the matrix [n, k],
// with its escape index when it has escapes — and returns n and k.
func fixed12Rows(t *DeviceTensor, op string) (n, k int64, err error) {
	if err := t.validate(); err != nil {
		return 0, 0, err
	}
	if t.Layout != codec.Fixed12 {
		return 0, 0, status.Errorf(status.Unsupported, "gpu: %s takes fixed12 tensors (layout %d); decode the whole tensor instead", op, t.Layout)
	}
	if n, k, err = matrixDims(t); err != nil {
		return 0, 0, err
	}
	if e := t.Groups[0].Escapes; e > 0 && t.EscRows == 0 {
		return 0, 0, status.Errorf(status.InvalidArgument, "gpu: tensor has %d escapes but no escape row index (BuildEscapeIndex)", e)
	}
	return n, k, nil
}

// DecodeRows writes the bf16 bits of rows [row0, row0+rows) of t, seen as the
// matrix [product of all but the last dimension, K], to dst (device, rows*K*2
// bytes, row-major) on the caller's stream: a tile of weight rows for a GEMM
// that follows on the same stream (the prompt path of the Python layer, which
// multiplies with cuBLAS a tile small enough to stay in L2). Bit-exact, like
// Decode. t: fixed12, one group (Unsupported otherwise), with its escape index
// (BuildEscapeIndex, t.EscRows) when it has escapes. Launches one decode
// kernel, plus glyd_escape_scatter_rows when t has escapes.
func DecodeRows(dev int, stream uintptr, t *DeviceTensor, row0, rows int64, dst uintptr) error {
	n, k, err := fixed12Rows(t, "row-range decode")
	if err != nil {
		return err
	}
	if row0 < 0 || rows < 0 || row0 > n || rows > n-row0 {
		return status.Errorf(status.InvalidArgument, "gpu: rows [%d, %d+%d) out of range (%d rows)", row0, row0, rows, n)
	}
	g := &t.Groups[0]
	if rows == 0 || k == 0 {
		return nil
	}
	if dst == 0 {
		return status.Errorf(status.InvalidArgument, "gpu: nil destination")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	p := groupParams(t, 0)
	first := uint64(row0) * uint64(k)
	cnt := uint64(rows) * uint64(k)
	p.dst = C.glyd_u64(dst)
	p.n = C.glyd_u64(cnt)
	p.escapes = 0
	p.row0 = C.glyd_i64(row0)
	p.N = C.glyd_i64(rows)
	p.K = C.glyd_i64(k)
	sms := d.info.SMs
	// The kernels read from element first = row0*K of the group (p.row0, p.K).
	if err = launchDecodeF12(dev, d, stream, &p, first, cnt); err != nil || g.Escapes == 0 {
		return err
	}
	p.escrows, p.escrecs = t.escapeIndex(n)
	return launch(dev, kEscapeScatterRows, gridFor(uint64(rows), 8, sms*8), 1, 1, 256, 0, stream, &p)
}

// DecodeGather writes the bf16 bits of rows ids[0..count) of t, seen as the
// matrix [product of all but the last dimension, K], to dst (device,
// count*K*2 bytes, row t of dst = row ids[t] of t) on the caller's stream: an
// embedding lookup from a packed table. ids: device int64 [count], 8-byte
// aligned; they are read on the device only, so an id outside [0, rows) can
// not be refused here: it gives a row of zeros. Bit-exact, like Decode. t:
// fixed12, one group, K a multiple of 8, 8-byte aligned sm and 4-byte aligned
// code planes (Unsupported otherwise), with its escape index (BuildEscapeIndex,
// t.EscRows) when it has escapes. One launch (glyd_decode_f12_gather).
func DecodeGather(dev int, stream uintptr, t *DeviceTensor, ids uintptr, count int64, dst uintptr) error {
	n, k, err := fixed12Rows(t, "gather")
	if err != nil {
		return err
	}
	if t.Tiled {
		return status.Errorf(status.Unsupported, "gpu: gather reads row-major planes; an embedding table is not tiled (Tile)")
	}
	p := groupParams(t, 0)
	if k%8 != 0 || uint64(p.sm)%8 != 0 || uint64(p.code)%4 != 0 {
		return status.Errorf(status.Unsupported, "gpu: gather needs K %% 8 == 0 and 8-byte aligned planes (K=%d)", k)
	}
	if count < 0 || count >= 1<<31 {
		return status.Errorf(status.InvalidArgument, "gpu: gather of %d rows (0 to 2^31-1)", count)
	}
	if count == 0 || k == 0 {
		return nil
	}
	if ids == 0 || ids%8 != 0 || dst == 0 || dst%16 != 0 {
		return status.Errorf(status.InvalidArgument, "gpu: gather needs 8-byte aligned ids and a 16-byte aligned destination, not nil")
	}
	if _, err := load(dev); err != nil {
		return err
	}
	p.x = C.glyd_u64(ids)
	p.rows = C.glyd_i64(count)
	p.dst = C.glyd_u64(dst)
	p.N = C.glyd_i64(n)
	p.K = C.glyd_i64(k)
	p.escrows, p.escrecs = t.escapeIndex(n)
	return launch(dev, kDecodeF12Gather, uint32(count), 1, 1, 256, 0, stream, &p)
}
