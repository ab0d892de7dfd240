package main

// The experts (mixture of experts) exports of the C ABI: glyd_gpu_*experts*
// of include/glyd.h, wrapped by gpu.c.

/*
#include "glyd.h"
*/
import "C"

import (
	"unsafe"

	"github.com/glyd/glyd/core/gpu"
	"github.com/glyd/glyd/core/status"
)

//export glydgo_gpu_experts_table_bytes
func glydgo_gpu_experts_table_bytes(w *C.glyd_gpu_tensor, bytes *C.size_t) (rc C.int) {
	defer guard(&rc)
	return sizeOf(w, bytes, gpu.ExpertsTableBytes)
}

//export glydgo_gpu_build_experts_table
func glydgo_gpu_build_experts_table(device C.int, stream unsafe.Pointer, w *C.glyd_gpu_tensor, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	return buildInto("glyd_gpu_build_experts_table", w, dstBytes, gpu.ExpertsTableBytes, func(d *gpu.DeviceTensor) error {
		return gpu.BuildExpertsTable(int(device), uintptr(stream), d, uintptr(dst))
	})
}

//export glydgo_gpu_decode_experts
func glydgo_gpu_decode_experts(device C.int, stream unsafe.Pointer, w *C.glyd_gpu_tensor, table unsafe.Pointer, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(w)
	if err != nil {
		return fail(err)
	}
	if need := 2 * d.Elements(gpu.AllGroups); uint64(dstBytes) < need {
		return fail(status.Errorf(status.BufferTooSmall, "glyd_gpu_decode_experts: dst_bytes %d < %d", dstBytes, need))
	}
	return result(gpu.DecodeExperts(int(device), uintptr(stream), d, uintptr(table), uintptr(dst)))
}

//export glydgo_gpu_experts_workspace_bound
func glydgo_gpu_experts_workspace_bound(w *C.glyd_gpu_tensor, rows C.int64_t, transposed C.int, bytes *C.size_t) (rc C.int) {
	defer guard(&rc)
	if err := rowsArg(rows); err != nil {
		return fail(err)
	}
	return sizeOf(w, bytes, func(d *gpu.DeviceTensor) (uint64, error) {
		return gpu.ExpertsWorkspaceBound(d, int64(rows), transposed != 0)
	})
}

//export glydgo_gpu_linear_experts
func glydgo_gpu_linear_experts(device C.int, stream unsafe.Pointer, x unsafe.Pointer, rows C.int64_t, w *C.glyd_gpu_tensor, transposed C.int, table, offsets, bias, y, ws unsafe.Pointer, wsBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	d, err := gpuTensor(w)
	if err != nil {
		return fail(err)
	}
	if err := rowsArg(rows); err != nil {
		return fail(err)
	}
	return result(gpu.LinearExperts(int(device), uintptr(stream), uintptr(x), int64(rows), d, uintptr(table), uintptr(offsets), uintptr(bias), uintptr(y), transposed != 0, uintptr(ws), uint64(wsBytes)))
}

//export glydgo_gpu_moe_route
func glydgo_gpu_moe_route(device C.int, stream, ids unsafe.Pointer, pairs, topk, experts, total C.int64_t, offsets, tokens, rows unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	return result(gpu.MoeRoute(int(device), uintptr(stream), uintptr(ids), int64(pairs), int64(topk), int64(experts), int64(total), uintptr(offsets), uintptr(tokens), uintptr(rows)))
}

//export glydgo_gpu_moe_combine
func glydgo_gpu_moe_combine(device C.int, stream, x, d, w, ids, rows unsafe.Pointer, tokens, topk, hidden, experts, total C.int64_t, out unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	return result(gpu.MoeCombine(int(device), uintptr(stream), uintptr(x), uintptr(d), uintptr(w), uintptr(ids), uintptr(rows), int64(tokens), int64(topk), int64(hidden), int64(experts), int64(total), uintptr(out)))
}

//export glydgo_gpu_moe_silu_mul
func glydgo_gpu_moe_silu_mul(device C.int, stream, x unsafe.Pointer, rows, inter C.int64_t, out unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	return result(gpu.MoeSiluMul(int(device), uintptr(stream), uintptr(x), int64(rows), int64(inter), uintptr(out)))
}

//export glydgo_gpu_moe_row_experts
func glydgo_gpu_moe_row_experts(device C.int, stream, x unsafe.Pointer, rows, hidden, perExpert C.int64_t, ids unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	return result(gpu.MoeRowExperts(int(device), uintptr(stream), uintptr(x), int64(rows), int64(hidden), int64(perExpert), uintptr(ids)))
}

//export glydgo_gpu_moe_top1
func glydgo_gpu_moe_top1(device C.int, stream, logits unsafe.Pointer, tokens, experts C.int64_t, ids, score unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	return result(gpu.MoeTop1(int(device), uintptr(stream), uintptr(logits), int64(tokens), int64(experts), uintptr(ids), uintptr(score)))
}

//export glydgo_gpu_moe_gather_scale
func glydgo_gpu_moe_gather_scale(device C.int, stream, x, tokens, score unsafe.Pointer, rows, hidden C.int64_t, out unsafe.Pointer) (rc C.int) {
	defer guard(&rc)
	return result(gpu.MoeGatherScale(int(device), uintptr(stream), uintptr(x), uintptr(tokens), uintptr(score), int64(rows), int64(hidden), uintptr(out)))
}
