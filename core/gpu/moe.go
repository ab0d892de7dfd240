package gpu

/*
#include "driver.h"
*/
import "C"

import (
	"unsafe"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// Experts tensors: a packed [E, N, K] (or [E*N, K]) tensor with one group per
// expert, fixed12. Its experts table (device memory, built once by
// BuildExpertsTable) lists every expert's plane addresses and escape index,
// so the kernels of kernels/moe.cu cover all experts in one launch and read
// the routing on the device.

// entrySize is sizeof(glyd_expert); the table starts with E entries.
const entrySize = uint64(unsafe.Sizeof(C.glyd_expert{}))

// expertDims returns (E, N, K) of an experts tensor: E groups of N rows of
// the matrix [product of all but the last dimension, K] each.
func expertDims(t *DeviceTensor) (e, n, k int64, err error) {
	if err = t.validate(); err != nil {
		return
	}
	if t.Layout != codec.Fixed12 || t.Tiled {
		err = status.Errorf(status.Unsupported, "gpu: experts kernels take fixed12 tensors with row-major planes, not layout %d (tiled %v)", t.Layout, t.Tiled)
		return
	}
	if len(t.Shape) < 2 {
		err = status.Errorf(status.InvalidArgument, "gpu: experts tensor must have >= 2 dimensions, have %v", t.Shape)
		return
	}
	k = t.Shape[len(t.Shape)-1]
	rows := int64(1)
	for _, d := range t.Shape[:len(t.Shape)-1] {
		rows *= d
	}
	e = int64(len(t.Groups))
	if rows%e != 0 {
		err = status.Errorf(status.InvalidArgument, "gpu: %d groups do not split the %d rows of %v into experts", e, rows, t.Shape)
		return
	}
	n = rows / e
	for i := range t.Groups {
		if t.Groups[i].Elements != uint64(n*k) {
			err = status.Errorf(status.InvalidArgument, "gpu: group %d has %d elements, an expert of %v has %d", i, t.Groups[i].Elements, t.Shape, n*k)
			return
		}
		if t.Groups[i].Escapes >= 1<<32 || k >= 1<<31 {
			err = status.Errorf(status.Unsupported, "gpu: group %d: %d escapes, K=%d: the escape index holds 32-bit positions", i, t.Groups[i].Escapes, k)
			return
		}
	}
	return
}

// safeExperts reports whether the fused kernel must zero the exponents of
// escapes for some expert (base + 15 would be Inf/NaN or carry), which then
// applies to all (one kernel per launch).
func safeExperts(t *DeviceTensor) bool {
	for i := range t.Groups {
		if escapeExponent(t.Groups[i].Base) == 0 {
			return true
		}
	}
	return false
}

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// expertsLayout returns the table size and, per expert, the offset of its
// escape index in the table (0 for experts without escapes).
func expertsLayout(t *DeviceTensor, n int64) (uint64, []uint64) {
	off := make([]uint64, len(t.Groups))
	size := align16(entrySize * uint64(len(t.Groups)))
	for i := range t.Groups {
		if esc := t.Groups[i].Escapes; esc > 0 {
			off[i] = size
			size += escRowsBytes(n) + 8*esc
		}
	}
	return size, off
}

// ExpertsTableBytes is the size of t's experts table: E entries, then the
// escape index (EscapeIndexBytes of the expert's matrix) of every expert that
// has escapes.
func ExpertsTableBytes(t *DeviceTensor) (uint64, error) {
	_, n, _, err := expertDims(t)
	if err != nil {
		return 0, err
	}
	size, _ := expertsLayout(t, n)
	return size, nil
}

// BuildExpertsTable writes t's experts table at dst (ExpertsTableBytes bytes,
// 16-byte aligned) on the caller's stream: the escape index kernels of every
// expert, then the entries copied from the host (not capturable in a CUDA
// graph; run it when the planes are placed).
func BuildExpertsTable(dev int, stream uintptr, t *DeviceTensor, dst uintptr) error {
	_, n, k, err := expertDims(t)
	if err != nil {
		return err
	}
	if dst == 0 || dst%16 != 0 {
		return status.Errorf(status.InvalidArgument, "gpu: experts table destination must be 16-byte aligned and not nil")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	_, off := expertsLayout(t, n)
	safe := safeExperts(t)
	entries := make([]C.glyd_expert, len(t.Groups))
	for i := range t.Groups {
		p := groupParams(t, i)
		en := &entries[i]
		en.sm, en.code, en.escidx, en.escexp = p.sm, p.code, p.escidx, p.escexp
		en.escapes = p.escapes
		en.base = p.base
		if !safe {
			en.ebase = C.glyd_u32(escapeExponent(t.Groups[i].Base))
		}
		if t.Groups[i].Escapes == 0 {
			en.escidx, en.escexp = 0, 0
			continue
		}
		rows := uint64(dst) + off[i]
		p.dst = C.glyd_u64(rows)
		p.escrecs = C.glyd_u64(rows + escRowsBytes(n))
		p.N = C.glyd_i64(n)
		p.K = C.glyd_i64(k)
		en.escrows, en.escrecs = p.dst, p.escrecs
		if err := launch(dev, kEscapeRows, gridFor(uint64(n+1), 256, 1<<30), 1, 1, 256, 0, stream, &p); err != nil {
			return err
		}
		if err := launch(dev, kEscapeRecords, gridFor(t.Groups[i].Escapes, 256, d.info.SMs*8), 1, 1, 256, 0, stream, &p); err != nil {
			return err
		}
	}
	return copyHtoD(dev, stream, uint64(dst), unsafe.Pointer(&entries[0]), entrySize*uint64(len(entries)))
}

// DecodeExperts writes every expert of t to dst (bf16, Elements(AllGroups)*2
// bytes), the bits of Decode(t, AllGroups), in two launches whatever E is.
// table: t's experts table. Experts whose planes or outputs are not aligned
// for the vector kernel go through Decode.
func DecodeExperts(dev int, stream uintptr, t *DeviceTensor, table, dst uintptr) error {
	e, n, k, err := expertDims(t)
	if err != nil {
		return err
	}
	if dst == 0 && n*k > 0 {
		return status.Errorf(status.InvalidArgument, "gpu: nil destination")
	}
	if table == 0 {
		return status.Errorf(status.InvalidArgument, "gpu: nil experts table (BuildExpertsTable)")
	}
	per := uint64(n * k)
	aligned := per%8 == 0 && uint64(dst)%16 == 0
	var maxEsc uint64
	for i := range t.Groups {
		sm := uint64(t.Planes[codec.PlaneSM]) + t.Groups[i].Offsets[codec.PlaneSM]
		cd := uint64(t.Planes[codec.PlaneCode]) + t.Groups[i].Offsets[codec.PlaneCode]
		aligned = aligned && sm%8 == 0 && cd%4 == 0
		if t.Groups[i].Escapes > maxEsc {
			maxEsc = t.Groups[i].Escapes
		}
	}
	if per == 0 {
		return nil
	}
	if !aligned || e > 65535 {
		return Decode(dev, stream, t, AllGroups, dst)
	}
	if _, err := load(dev); err != nil {
		return err
	}
	var p C.glyd_kparams
	p.experts = C.glyd_u64(table)
	p.num_experts = C.glyd_i64(e)
	p.n = C.glyd_u64(per)
	p.dst = C.glyd_u64(dst)
	if err := launch(dev, kDecodeF12Groups, gridFor(per/8, 256*12, 1<<16-1), uint32(e), 1, 256, 0, stream, &p); err != nil {
		return err
	}
	if maxEsc == 0 {
		return nil
	}
	return launch(dev, kEscapeScatterGroups, gridFor(maxEsc, 256, 1<<16-1), uint32(e), 1, 256, 0, stream, &p)
}

// groupedConfigs are the tile configurations of the grouped kernel
// (glyd_lin_f12g*, the GLYD_LING and GLYD_LINGW lines of kernels/moe.cu, same
// order): the dense kernel's mma.sync tiles for 8, 16, 32 and 64 rows of x at
// a time, then (sm_90) its wgmma tiles for 16, 32, 48, 64, 96 and 128.
var groupedConfigs = []linConfig{
	regConfig(1, 1, 1, 8, 1),
	regConfig(1, 2, 1, 8, 1),
	regConfig(2, 4, 1, 8, 1),
	regConfig(1, 8, 2, 4, 1),
	wgConfig(16, 1, 4, 4, 2), // groupedWgmma
	wgConfig(32, 1, 4, 4, 2),
	wgConfig(48, 1, 4, 4, 4),
	wgConfig(64, 1, 4, 4, 4),
	wgConfig(96, 1, 4, 2, 2),
	wgConfig(128, 1, 4, 2, 2),
}

// groupedWgmma is the index of the first wgmma configuration in groupedConfigs.
const groupedWgmma = 4

// The sm_90 grouped tiles by the rows of x they take at a time.
const (
	groupedT16 = groupedWgmma + iota
	groupedT32
	groupedT48
	groupedT64
	groupedT96
	groupedT128
)

func (c linConfig) groupedName() string { return "glyd_lin_f12g" + c.name()[len("glyd_lin_f12"):] }

// pickGrouped returns the index in groupedConfigs for rows sorted over e
// experts of k inputs: the host does not see the routing, so the mean rows
// per expert decides. Elsewhere than sm_90, the mma.sync tile whose rows of
// x cover the mean (an expert with more rows than the tile reads and decodes
// its weights once per tile). On sm_90 (hopper), from the Mixtral-8x7B,
// Qwen3-30B-A3B, Llama-4-Scout and gpt-oss-20b blocks on the H200 with each
// tile forced (sessions 13 and 15, python/benchmarks/moe_grouped_sweep.py):
//   - over 80 rows per expert the 128-row tile (at 96 and 128 per expert
//     13-23% faster than the 96-row one, which reads the experts past 96
//     rows twice), over 56 the 96-row one (at 64 per expert 2-5% faster than
//     the 128-row one in all four blocks, 16-27% than the 64-row one), over
//     32 the 64-row one (at 48 per expert 4% faster than the 96-row one, 8%
//     than the 128-row one, 17% than the 48-row one);
//   - over 16 the 48-row tile (at 32 per expert 4-8% faster than the 64-row
//     one in all four blocks; the 32-row one 16-44% slower);
//   - over 8, for k <= 2048 (Qwen3's 2048 and 768) the 32-row tile (at 16 per
//     expert 9% faster than the 64-row one), else the 64-row one (Mixtral at
//     16 per expert: the 16- and 64-row tiles within 1%);
//   - from 1 to 8 rows per expert, for k <= 2048 the 16-row wgmma tile,
//     13-23% faster than the mma.sync tiles; for larger k (Mixtral, Llama 4)
//     it is 6-33% slower than the mma.sync tile of 8 rows up to 4 per
//     expert, of 16 up to 8 (at 8 per expert 10-14% faster than the 8-row
//     one, at 4 per expert 12% slower).
func pickGrouped(rows, e, k int64, hopper bool) int {
	if f := forcedGrouped.Load(); f > 0 {
		return int(f - 1)
	}
	if hopper {
		switch {
		case rows > 80*e:
			return groupedT128
		case rows > 56*e:
			return groupedT96
		case rows > 32*e:
			return groupedT64
		case rows > 16*e:
			return groupedT48
		case rows > 8*e && k <= 2048:
			return groupedT32
		case rows > 8*e:
			return groupedT64
		case k <= 2048 && rows >= e:
			return groupedT16
		case rows > 4*e:
			return 1
		}
		return 0
	}
	for i := 0; i < groupedWgmma-1; i++ {
		if rows <= int64(groupedConfigs[i].tokens())*e {
			return i
		}
	}
	return groupedWgmma - 1
}

// transposedOne reports whether the transposed kernel takes one token per
// pass (glyd_lin_f12t1_experts: 64 registers, four blocks per SM): when the
// experts get at most one row each on average (decode steps), else four
// (glyd_lin_f12t_experts: 111 registers, two blocks per SM).
func transposedOne(e, rows int64) bool { return rows <= e }

// transposedSplits is how many slices of the input rows the transposed
// kernel sums separately (grid y): as many as keep the blocks within one
// wave of a 132-SM GPU at the kernel's blocks per SM, each warp with >= 8
// input rows, when the rows spread over min(e, rows) experts. A constant of
// the shapes only, so the workspace bound and the result bits do not depend
// on the GPU. When fewer experts get rows, the kernel gives each more slices
// (kernels/moe.cu, skew_splits), up to transposedSplitsMax.
func transposedSplits(e, ri, co, rows int64) int64 {
	z := min(e, rows)
	tiles := (co + 255) / 256
	perSM := int64(2)
	if transposedOne(e, rows) {
		perSM = 4
	}
	return max(1, min(perSM*splitTarget/2/(tiles*z), ri/64, 32))
}

// transposedSplitsMax is the most slices the transposed kernel gives an
// expert (kernels/moe.cu, skew_splits): the S x Z blocks of a column tile
// all on one expert, at most max(S, min(ri/64, 32)); S in the one-token
// kernel.
func transposedSplitsMax(e, ri, co, rows int64) int64 {
	s := transposedSplits(e, ri, co, rows)
	if transposedOne(e, rows) {
		return s
	}
	return max(s, min(s*min(e, rows), ri/64, 32))
}

// ExpertsWorkspaceBound is the workspace LinearExperts needs, in bytes: 0 for
// the linear layout, the fp32 partial sums [S][rows][out] for transposed
// experts.
func ExpertsWorkspaceBound(w *DeviceTensor, rows int64, transposed bool) (uint64, error) {
	e, n, k, err := expertDims(w)
	if err != nil || !transposed || rows <= 0 {
		return 0, err
	}
	return uint64(transposedSplitsMax(e, n, k, rows)) * uint64(rows) * uint64(k) * 4, nil
}

// LinearExperts computes, for every expert e, y[r] = x[r]·W[e]ᵀ (+ bias[e])
// over the rows r of expert e, in one launch (transposed: y[r] = x[r]·W[e],
// W[e] stored [in, out], two launches):
//
//	x    bf16 [rows, in], rows sorted by expert     w   experts tensor [E, out, in] ([E, in, out])
//	offs int32 [E] cumulative end rows (device)     bias bf16 [E, out] or 0 (linear layout only)
//	y    bf16 [rows, out]                           ws  ExpertsWorkspaceBound bytes (transposed)
//
// Rows past offs[E-1] are not written. Math as Linear. The linear layout
// needs in % 16 == 0 and 16-byte aligned x and expert planes, the transposed
// one out % 8 == 0 and 8-byte aligned expert planes (UNSUPPORTED otherwise:
// run Linear, or decode and multiply, per expert).
func LinearExperts(dev int, stream uintptr, x uintptr, rows int64, w *DeviceTensor, table, offs, bias, y uintptr,
	transposed bool, ws uintptr, wsBytes uint64) error {
	e, n, k, err := expertDims(w)
	if err != nil {
		return err
	}
	if rows < 0 {
		return status.Errorf(status.InvalidArgument, "gpu: rows %d < 0", rows)
	}
	if rows == 0 || n == 0 || k == 0 {
		return nil
	}
	if x == 0 || y == 0 || offs == 0 || table == 0 {
		return status.Errorf(status.InvalidArgument, "gpu: nil x, y, offsets or experts table")
	}
	align, what := uint64(16), "K % 16 == 0 and 16-byte aligned x and expert planes"
	if transposed {
		align, what = 8, "out % 8 == 0 and 8-byte aligned expert planes"
		if k%8 != 0 {
			return status.Errorf(status.Unsupported, "gpu: the transposed experts kernel needs %s (out=%d)", what, k)
		}
		if bias != 0 {
			return status.Errorf(status.Unsupported, "gpu: the transposed experts kernel takes no bias (add it after)")
		}
	} else if k%16 != 0 || x%16 != 0 {
		return status.Errorf(status.Unsupported, "gpu: the grouped kernel needs %s (K=%d)", what, k)
	}
	for i := range w.Groups {
		sm := uint64(w.Planes[codec.PlaneSM]) + w.Groups[i].Offsets[codec.PlaneSM]
		cd := uint64(w.Planes[codec.PlaneCode]) + w.Groups[i].Offsets[codec.PlaneCode]
		if sm%align != 0 || cd%align != 0 {
			return status.Errorf(status.Unsupported, "gpu: expert %d's planes are not %d-byte aligned (the kernel needs %s)", i, align, what)
		}
	}
	z := min(e, rows)
	if z > 65535 {
		return status.Errorf(status.Unsupported, "gpu: %d experts is too many for one launch", e)
	}
	var p C.glyd_kparams
	p.experts = C.glyd_u64(table)
	p.offs = C.glyd_u64(offs)
	p.num_experts = C.glyd_i64(e)
	setOperands(&p, x, bias, y, rows, n, k)
	if transposed {
		s := transposedSplits(e, n, k, rows)
		if need := uint64(transposedSplitsMax(e, n, k, rows)) * uint64(rows) * uint64(k) * 4; ws == 0 || wsBytes < need {
			return status.Errorf(status.BufferTooSmall, "gpu: transposed experts need %d bytes of workspace (ExpertsWorkspaceBound), have %d", need, wsBytes)
		}
		tiles := (k + 255) / 256
		if tiles > 1<<31-1 || s > 65535 {
			return status.Errorf(status.Unsupported, "gpu: %d output columns is too many for one launch", k)
		}
		d, err := load(dev)
		if err != nil {
			return err
		}
		// the kernel reads storage [in, out] as K = in rows, N = out columns
		p.K, p.N = C.glyd_i64(n), C.glyd_i64(k)
		p.ws = C.glyd_u64(ws)
		p.splits = C.glyd_u32(s)
		kern := kLinTransposed
		if transposedOne(e, rows) {
			kern = kLinTransposed1
		}
		if err := launchAs(dev, kern, uint32(tiles), uint32(s), uint32(z), 256, 0, stream, &p, d.programmatic()); err != nil {
			return err
		}
		return launchAs(dev, kLinTransposedReduce, gridFor(uint64(rows*k), 256, 1<<31-1), 1, 1, 256, 0, stream, &p, d.programmatic())
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	ci := pickGrouped(rows, e, k, d.hopper())
	c := groupedConfigs[ci]
	if err := d.canRun(c, c.groupedName()); err != nil {
		return err
	}
	gy := (n + int64(c.rows()) - 1) / int64(c.rows())
	if gy > 65535 {
		return status.Errorf(status.Unsupported, "gpu: %d weight rows is too many for one launch", n)
	}
	kidx := kGroupedFirst + 2*ci
	if safeExperts(w) {
		kidx++
	}
	return launchAs(dev, kidx, 1, uint32(gy), uint32(z), uint32(c.threads()), uint32(c.groupedSmem()), stream, &p, d.programmatic())
}
