package main

// The GPU half of the C ABI (include/glyd.h, between "GPU: begin" and
// "GPU: end"): glydgo_gpu_* exports wrapped by the glyd_gpu_* functions of
// gpu.c. Every export recovers panics into GLYD_ERR_INTERNAL (guard).

/*
#include <stdlib.h>
#include "glyd.h"
*/
import "C"

import (
	"math/bits"
	"strings"
	"sync"
	"unsafe"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/gpu"
	"github.com/glyd/glyd/core/status"
)

// gpuTensor converts a glyd_gpu_tensor (C memory, read during the call).
func gpuTensor(t *C.glyd_gpu_tensor) (*gpu.DeviceTensor, error) {
	if t == nil {
		return nil, errArg("tensor is NULL")
	}
	shape, err := goShape(&t.shape[0], t.ndim)
	if err != nil {
		return nil, err
	}
	if t.num_groups == 0 || t.groups == nil {
		return nil, errArg("tensor has no groups")
	}
	if t.num_groups > 1<<24 {
		return nil, errArg("num_groups %d is implausible", t.num_groups)
	}
	cg := unsafe.Slice(t.groups, int(t.num_groups))
	groups := make([]codec.Group, len(cg))
	for i := range cg {
		g := &groups[i]
		g.Elements = uint64(cg[i].elements)
		g.Escapes = uint64(cg[i].escapes)
		g.Base = uint8(cg[i].base)
		for j := 0; j < 6; j++ {
			g.Table[j] = uint8(cg[i].table[j])
		}
		for p := 0; p < codec.NumPlanes; p++ {
			g.Offsets[p] = uint64(cg[i].offsets[p])
		}
	}
	d := &gpu.DeviceTensor{
		Layout: codec.Layout(t.layout), DType: codec.DType(t.dtype), Shape: shape, Groups: groups,
		EscRows: uintptr(t.esc_rows),
	}
	if t.layout == C.GLYD_LAYOUT_FIXED12_TILED {
		d.Layout, d.Tiled = codec.Fixed12, true
	}
	if t.layout < 0 || t.layout > 255 || t.dtype < 0 || t.dtype > 255 {
		return nil, errArg("layout %d / dtype %d out of range", t.layout, t.dtype)
	}
	for p := 0; p < codec.NumPlanes; p++ {
		d.Planes[p] = uintptr(t.planes[p])
	}
	return d, nil
}

//export glydgo_gpu_init
func glydgo_gpu_init() (rc C.int) {
	defer guard(&rc)
	return result(gpu.Init())
}

//export glydgo_gpu_device_count
func glydgo_gpu_device_count(count *C.int) (rc C.int) {
	defer guard(&rc)
	if count == nil {
		return fail(errArg("count is NULL"))
	}
	n, err := gpu.DeviceCount()
	if err != nil {
		return fail(err)
	}
	*count = C.int(n)
	return C.int(status.OK)
}

//export glydgo_gpu_device_info
func glydgo_gpu_device_info(device C.int, info *C.glyd_gpu_info) (rc C.int) {
	defer guard(&rc)
	if info == nil {
		return fail(errArg("info is NULL"))
	}
	in, err := gpu.DeviceInfo(int(device))
	if err != nil {
		return fail(err)
	}
	*info = C.glyd_gpu_info{}
	name := []byte(in.Name)
	if len(name) > 255 {
		name = name[:255]
	}
	for i, b := range name {
		info.name[i] = C.char(b)
	}
	info.cc_major, info.cc_minor = C.int(in.Major), C.int(in.Minor)
	info.multiprocessors = C.int(in.SMs)
	info.shared_optin, info.shared_per_sm = C.int(in.SharedOptin), C.int(in.SharedPerSM)
	info.l2_bytes, info.clock_khz, info.mem_clock_khz = C.int(in.L2Bytes), C.int(in.ClockKHz), C.int(in.MemClockKHz)
	info.bus_width, info.driver_version = C.int(in.BusWidth), C.int(in.DriverVersion)
	info.total_mem = C.uint64_t(in.TotalMem)
	return C.int(status.OK)
}

//export glydgo_gpu_decode
func glydgo_gpu_decode(device C.int, stream unsafe.Pointer, t *C.glyd_gpu_tensor, group C.int64_t, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(t)
	if err != nil {
		return fail(err)
	}
	if group < -1 || group >= C.int64_t(len(d.Groups)) {
		return fail(errArg("group %d out of range (%d groups)", group, len(d.Groups)))
	}
	if need := 2 * d.Elements(int(group)); uint64(dstBytes) < need {
		return fail(status.Errorf(status.BufferTooSmall, "glyd_gpu_decode: dst_bytes %d < %d", dstBytes, need))
	}
	return result(gpu.Decode(int(device), uintptr(stream), d, int(group), uintptr(dst)))
}

//export glydgo_gpu_decode_rows
func glydgo_gpu_decode_rows(device C.int, stream unsafe.Pointer, t *C.glyd_gpu_tensor, row0, rows C.int64_t, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(t)
	if err != nil {
		return fail(err)
	}
	if err := rowsDst("glyd_gpu_decode_rows", d, rows, dstBytes); err != nil {
		return fail(err)
	}
	return result(gpu.DecodeRows(int(device), uintptr(stream), d, int64(row0), int64(rows), uintptr(dst)))
}

//export glydgo_gpu_decode_gather
func glydgo_gpu_decode_gather(device C.int, stream unsafe.Pointer, t *C.glyd_gpu_tensor, ids unsafe.Pointer, count C.int64_t, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(t)
	if err != nil {
		return fail(err)
	}
	if err := rowsDst("glyd_gpu_decode_gather", d, count, dstBytes); err != nil {
		return fail(err)
	}
	return result(gpu.DecodeGather(int(device), uintptr(stream), d, uintptr(ids), int64(count), uintptr(dst)))
}

//export glydgo_gpu_tile
func glydgo_gpu_tile(device C.int, stream unsafe.Pointer, t *C.glyd_gpu_tensor, smDst, codeDst unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(t)
	if err != nil {
		return fail(err)
	}
	return result(gpu.Tile(int(device), uintptr(stream), d, uintptr(smDst), uintptr(codeDst)))
}

// rowsDst checks a row count and that dst_bytes holds that many rows of t's
// matrix [product of all but the last dimension, K] in bf16.
func rowsDst(fn string, d *gpu.DeviceTensor, rows C.int64_t, dstBytes C.size_t) error {
	if err := rowsArg(rows); err != nil {
		return err
	}
	if sh := d.Shape; len(sh) >= 2 && sh[len(sh)-1] > 0 {
		hi, need := bits.Mul64(2*uint64(rows), uint64(sh[len(sh)-1]))
		if hi != 0 || uint64(dstBytes) < need {
			return status.Errorf(status.BufferTooSmall, "%s: dst_bytes %d < 2 * %d rows * %d", fn, dstBytes, rows, sh[len(sh)-1])
		}
	}
	return nil
}

// sizeOf is the body of the glyd_gpu_*_bytes exports: *bytes = size(t).
func sizeOf(t *C.glyd_gpu_tensor, bytes *C.size_t, size func(*gpu.DeviceTensor) (uint64, error)) C.int {
	if bytes == nil {
		return fail(errArg("bytes is NULL"))
	}
	d, err := gpuTensor(t)
	if err != nil {
		return fail(err)
	}
	n, err := size(d)
	if err != nil {
		return fail(err)
	}
	*bytes = C.size_t(n)
	return C.int(status.OK)
}

// rowsArg checks a row count argument (at most 2^40: sizes stay far from overflow).
func rowsArg(rows C.int64_t) error {
	if rows < 0 || rows > 1<<40 {
		return errArg("rows %d out of range", rows)
	}
	return nil
}

// buildInto is the body of the glyd_gpu_build_* exports: dst_bytes checked
// against size(t), then build.
func buildInto(fn string, t *C.glyd_gpu_tensor, dstBytes C.size_t, size func(*gpu.DeviceTensor) (uint64, error), build func(*gpu.DeviceTensor) error) C.int {
	d, err := gpuTensor(t)
	if err != nil {
		return fail(err)
	}
	need, err := size(d)
	if err != nil {
		return fail(err)
	}
	if uint64(dstBytes) < need {
		return fail(status.Errorf(status.BufferTooSmall, "%s: dst_bytes %d < %d", fn, dstBytes, need))
	}
	return result(build(d))
}

//export glydgo_gpu_escape_index_bytes
func glydgo_gpu_escape_index_bytes(t *C.glyd_gpu_tensor, bytes *C.size_t) (rc C.int) {
	defer guard(&rc)
	return sizeOf(t, bytes, gpu.EscapeIndexBytes)
}

//export glydgo_gpu_build_escape_index
func glydgo_gpu_build_escape_index(device C.int, stream unsafe.Pointer, t *C.glyd_gpu_tensor, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	return buildInto("glyd_gpu_build_escape_index", t, dstBytes, gpu.EscapeIndexBytes, func(d *gpu.DeviceTensor) error {
		return gpu.BuildEscapeIndex(int(device), uintptr(stream), d, uintptr(dst))
	})
}

//export glydgo_gpu_linear_workspace_bound
func glydgo_gpu_linear_workspace_bound(w *C.glyd_gpu_tensor, rows C.int64_t, bytes *C.size_t) (rc C.int) {
	defer guard(&rc)
	return sizeOf(w, bytes, func(d *gpu.DeviceTensor) (uint64, error) { return gpu.LinearWorkspaceBound(d, int(rows)) })
}

//export glydgo_gpu_linear
func glydgo_gpu_linear(device C.int, stream unsafe.Pointer, x unsafe.Pointer, rows C.int64_t, w *C.glyd_gpu_tensor, bias unsafe.Pointer, y unsafe.Pointer, ws unsafe.Pointer, wsBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(w)
	if err != nil {
		return fail(err)
	}
	return linearRun("glyd_gpu_linear", device, stream, x, rows, []*gpu.DeviceTensor{d}, []uintptr{uintptr(bias)}, y, ws, wsBytes)
}

// linearRun checks the rows and the workspace of a glyd_gpu_linear* call
// (against LinearManyWorkspaceBound), then runs it.
func linearRun(fn string, device C.int, stream, x unsafe.Pointer, rows C.int64_t, weights []*gpu.DeviceTensor, biases []uintptr, y, ws unsafe.Pointer, wsBytes C.size_t) C.int {
	if err := rowsArg(rows); err != nil {
		return fail(err)
	}
	need, err := gpu.LinearManyWorkspaceBound(weights, int(rows))
	if err != nil {
		return fail(err)
	}
	if uint64(wsBytes) < need {
		return fail(status.Errorf(status.BufferTooSmall, "%s: workspace_bytes %d < %d", fn, wsBytes, need))
	}
	return result(gpu.LinearMany(int(device), uintptr(stream), uintptr(x), int(rows), weights, biases, uintptr(y), uintptr(ws), uint64(wsBytes)))
}

// gpuTensors converts an array of count glyd_gpu_tensor (C memory).
func gpuTensors(w *C.glyd_gpu_tensor, count C.size_t) ([]*gpu.DeviceTensor, error) {
	if w == nil || count == 0 {
		return nil, errArg("w is NULL or count is 0")
	}
	if count > 1<<16 {
		return nil, errArg("count %d is implausible", count)
	}
	ts := unsafe.Slice(w, int(count))
	out := make([]*gpu.DeviceTensor, len(ts))
	for i := range ts {
		d, err := gpuTensor(&ts[i])
		if err != nil {
			return nil, status.Errorf(status.CodeOf(err), "weight %d: %v", i, err)
		}
		out[i] = d
	}
	return out, nil
}

//export glydgo_gpu_linear_many_workspace_bound
func glydgo_gpu_linear_many_workspace_bound(w *C.glyd_gpu_tensor, count C.size_t, rows C.int64_t, bytes *C.size_t) (rc C.int) {
	defer guard(&rc)
	if bytes == nil {
		return fail(errArg("bytes is NULL"))
	}
	ws, err := gpuTensors(w, count)
	if err != nil {
		return fail(err)
	}
	if err := rowsArg(rows); err != nil {
		return fail(err)
	}
	need, err := gpu.LinearManyWorkspaceBound(ws, int(rows))
	if err != nil {
		return fail(err)
	}
	*bytes = C.size_t(need)
	return C.int(status.OK)
}

//export glydgo_gpu_linear_many
func glydgo_gpu_linear_many(device C.int, stream unsafe.Pointer, x unsafe.Pointer, rows C.int64_t, w *C.glyd_gpu_tensor, count C.size_t, bias *unsafe.Pointer, y unsafe.Pointer, ws unsafe.Pointer, wsBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	weights, err := gpuTensors(w, count)
	if err != nil {
		return fail(err)
	}
	var biases []uintptr
	if bias != nil {
		biases = make([]uintptr, len(weights))
		for i, b := range unsafe.Slice(bias, len(weights)) {
			biases[i] = uintptr(b)
		}
	}
	return linearRun("glyd_gpu_linear_many", device, stream, x, rows, weights, biases, y, ws, wsBytes)
}

var (
	kernelNameMu sync.Mutex
	kernelNameC  = map[string]*C.char{} // static storage for glyd_gpu_linear_kernel
)

// gpuMatrix is w for the per-weight queries of fn: a single-group matrix.
func gpuMatrix(w *C.glyd_gpu_tensor, fn string) (*gpu.DeviceTensor, error) {
	d, err := gpuTensor(w)
	if err != nil {
		return nil, err
	}
	if len(d.Shape) == 0 || len(d.Groups) != 1 {
		return nil, status.Errorf(status.Unsupported, "%s: need a single-group matrix", fn)
	}
	return d, nil
}

//export glydgo_gpu_linear_kernel
func glydgo_gpu_linear_kernel(device C.int, w *C.glyd_gpu_tensor, rows C.int64_t, name **C.char) (rc C.int) {
	defer guard(&rc)
	if name == nil {
		return fail(errArg("name is NULL"))
	}
	d, err := gpuMatrix(w, "glyd_gpu_linear_kernel")
	if err != nil {
		return fail(err)
	}
	s, err := gpu.ConfigFor(int(device), d, int(rows))
	if err != nil {
		return fail(err)
	}
	kernelNameMu.Lock()
	c, ok := kernelNameC[s]
	if !ok {
		c = C.CString(s)
		kernelNameC[s] = c
	}
	kernelNameMu.Unlock()
	*name = c
	return C.int(status.OK)
}

//export glydgo_gpu_linear_split
func glydgo_gpu_linear_split(device C.int, w *C.glyd_gpu_tensor, rows C.int64_t, splits, clusters *C.int) (rc C.int) {
	defer guard(&rc)
	if splits == nil || clusters == nil {
		return fail(errArg("splits or clusters is NULL"))
	}
	d, err := gpuMatrix(w, "glyd_gpu_linear_split")
	if err != nil {
		return fail(err)
	}
	s, cl, err := gpu.SplitFor(int(device), d, int(rows))
	if err != nil {
		return fail(err)
	}
	*splits = C.int(s)
	*clusters = 0
	if cl {
		*clusters = 1
	}
	return C.int(status.OK)
}

//export glydgo_gpu_force_kernel
func glydgo_gpu_force_kernel(name *C.char) (rc C.int) {
	defer guard(&rc)
	s := ""
	if name != nil {
		s = C.GoString(name)
	}
	return result(gpu.ForceConfig(s))
}

var linearConfigsC = sync.OnceValue(func() *C.char { return C.CString(strings.Join(gpu.ConfigNames(), "\n")) })

//export glydgo_gpu_linear_configs
func glydgo_gpu_linear_configs(names **C.char) (rc C.int) {
	defer guard(&rc)
	if names == nil {
		return fail(errArg("names is NULL"))
	}
	*names = linearConfigsC()
	return C.int(status.OK)
}

// packArgs converts the arguments common to the glyd_gpu_pack* calls.
func packArgs(dtype, layout C.int, shape *C.int64_t, ndim C.size_t, groups C.int64_t) ([]int64, int, error) {
	sh, err := goShape(shape, ndim)
	if err != nil {
		return nil, 0, err
	}
	if groups < 0 || groups > 1<<24 {
		return nil, 0, errArg("groups %d out of range", groups)
	}
	if dtype < 0 || dtype > 255 || layout < 0 || layout > 255 {
		return nil, 0, errArg("layout %d / dtype %d out of range", layout, dtype)
	}
	return sh, max(int(groups), 1), nil
}

//export glydgo_gpu_pack_workspace_bytes
func glydgo_gpu_pack_workspace_bytes(dtype, layout C.int, shape *C.int64_t, ndim C.size_t, groups C.int64_t, bytes *C.size_t) (rc C.int) {
	defer guard(&rc)
	if bytes == nil {
		return fail(errArg("bytes is NULL"))
	}
	sh, g, err := packArgs(dtype, layout, shape, ndim, groups)
	if err != nil {
		return fail(err)
	}
	n, err := gpu.PackWorkspaceBytes(codec.DType(dtype), codec.Layout(layout), sh, g)
	if err != nil {
		return fail(err)
	}
	*bytes = C.size_t(n)
	return C.int(status.OK)
}

//export glydgo_gpu_pack_bound
func glydgo_gpu_pack_bound(device C.int, stream unsafe.Pointer, src unsafe.Pointer, dtype, layout C.int, shape *C.int64_t, ndim C.size_t, groups C.int64_t, ws unsafe.Pointer, wsBytes C.size_t, planeBytes *C.uint64_t) (rc C.int) {
	defer guard(&rc)
	if planeBytes == nil {
		return fail(errArg("plane_bytes is NULL"))
	}
	sh, g, err := packArgs(dtype, layout, shape, ndim, groups)
	if err != nil {
		return fail(err)
	}
	res, err := gpu.PackBound(int(device), uintptr(stream), uintptr(src), codec.DType(dtype), codec.Layout(layout), sh, g, uintptr(ws), uint64(wsBytes))
	if err != nil {
		return fail(err)
	}
	out := unsafe.Slice(planeBytes, codec.NumPlanes)
	for p := range out {
		out[p] = C.uint64_t(res.PlaneBytes[p])
	}
	return C.int(status.OK)
}

//export glydgo_gpu_pack
func glydgo_gpu_pack(device C.int, stream unsafe.Pointer, src unsafe.Pointer, dtype, layout C.int, shape *C.int64_t, ndim C.size_t, groups C.int64_t, ws unsafe.Pointer, wsBytes C.size_t, planes *unsafe.Pointer, planeBytes *C.uint64_t, groupsOut *C.glyd_group, checksum *C.uint32_t) (rc C.int) {
	defer guard(&rc)
	if planes == nil || planeBytes == nil || groupsOut == nil || checksum == nil {
		return fail(errArg("planes, plane_bytes, groups_out and checksum must not be NULL"))
	}
	sh, g, err := packArgs(dtype, layout, shape, ndim, groups)
	if err != nil {
		return fail(err)
	}
	var pl [codec.NumPlanes]uintptr
	var caps [codec.NumPlanes]uint64
	ps, cs := unsafe.Slice(planes, codec.NumPlanes), unsafe.Slice(planeBytes, codec.NumPlanes)
	for p := 0; p < codec.NumPlanes; p++ {
		pl[p], caps[p] = uintptr(ps[p]), uint64(cs[p])
	}
	res, err := gpu.Pack(int(device), uintptr(stream), uintptr(src), codec.DType(dtype), codec.Layout(layout), sh, g, uintptr(ws), uint64(wsBytes), pl, caps)
	if err != nil {
		return fail(err)
	}
	out := unsafe.Slice(groupsOut, len(res.Groups))
	for i := range res.Groups {
		cGroup(res.Groups[i], &out[i])
	}
	*checksum = C.uint32_t(res.Checksum)
	return C.int(status.OK)
}
