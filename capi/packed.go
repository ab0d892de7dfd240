package main

/*
#include <stdlib.h>
#include <string.h>
#include "glyd.h"
#include "handles.h"
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// packedObj is the Go object behind a glyd_packed handle.
type packedObj struct {
	t *codec.Tensor
	// cmem holds the C allocations of planes the library made (glyd_pack);
	// imported planes belong to the caller and reader planes to the reader.
	cmem []unsafe.Pointer
}

func newPackedHandle(obj *packedObj, out **C.glyd_packed) {
	h := (*C.glyd_packed)(C.calloc(1, C.size_t(unsafe.Sizeof(C.glyd_packed{}))))
	h.id = C.uintptr_t(cgo.NewHandle(obj))
	*out = h
}

func packedOf(p *C.glyd_packed) (*packedObj, error) {
	if p == nil {
		return nil, errArg("packed handle is NULL")
	}
	return cgo.Handle(p.id).Value().(*packedObj), nil
}

// toCMemory moves the planes of t into C memory so that glyd_packed_plane can
// hand out pointers (Go pointers must not cross to C).
func toCMemory(t *codec.Tensor) (*packedObj, error) {
	obj := &packedObj{t: t}
	for p, plane := range t.Planes {
		if len(plane) == 0 {
			continue
		}
		m := C.malloc(C.size_t(len(plane)))
		if m == nil {
			obj.free()
			return nil, status.Errorf(status.OutOfMemory, "out of memory: %d bytes for a packed plane", len(plane))
		}
		obj.cmem = append(obj.cmem, m)
		dst := unsafe.Slice((*byte)(m), len(plane))
		copy(dst, plane)
		t.Planes[p] = dst
	}
	return obj, nil
}

func (o *packedObj) free() {
	for _, m := range o.cmem {
		C.free(m)
	}
	o.cmem = nil
}

//export glydgo_pack
func glydgo_pack(src unsafe.Pointer, srcBytes C.size_t, dtype C.int, shape *C.int64_t, ndim C.size_t, layout C.int, groups C.int64_t, workers C.int, out **C.glyd_packed) (rc C.int) {
	defer guard(&rc)
	if out == nil {
		return fail(errArg("out is NULL"))
	}
	*out = nil
	dims, err := goShape(shape, ndim)
	if err != nil {
		return fail(err)
	}
	if srcBytes%2 != 0 {
		return fail(status.Errorf(status.SizeMismatch, "src_bytes %d is odd; elements are 2 bytes", srcBytes))
	}
	if src == nil && srcBytes != 0 {
		return fail(errArg("src is NULL"))
	}
	if groups < 0 || workers < 0 {
		return fail(errArg("groups (%d) and workers (%d) must be >= 0", groups, workers))
	}
	var elems []uint16
	if srcBytes > 0 {
		elems = unsafe.Slice((*uint16)(src), int(srcBytes/2))
	}
	t, err := codec.Pack(elems, codec.DType(dtype), dims, codec.Options{Layout: codec.Layout(layout), Groups: int(groups), Workers: int(workers)})
	if err != nil {
		return fail(err)
	}
	obj, err := toCMemory(t)
	if err != nil {
		return fail(err)
	}
	newPackedHandle(obj, out)
	return C.GLYD_OK
}

//export glydgo_packed_import
func glydgo_packed_import(layout C.int, dtype C.int, shape *C.int64_t, ndim C.size_t, groups *C.glyd_group, numGroups C.size_t, planes **C.uint8_t, planeLens *C.size_t, checksum C.uint32_t, out **C.glyd_packed) (rc C.int) {
	defer guard(&rc)
	if out == nil {
		return fail(errArg("out is NULL"))
	}
	*out = nil
	dims, err := goShape(shape, ndim)
	if err != nil {
		return fail(err)
	}
	if numGroups == 0 || groups == nil {
		return fail(errArg("a packed tensor has at least one group"))
	}
	if planes == nil || planeLens == nil {
		return fail(errArg("planes and plane_lens must not be NULL"))
	}
	t := &codec.Tensor{Layout: codec.Layout(layout), DType: codec.DType(dtype), Shape: dims, Checksum: uint32(checksum)}
	for _, g := range unsafe.Slice(groups, int(numGroups)) {
		t.Groups = append(t.Groups, goGroup(&g))
	}
	ptrs := unsafe.Slice(planes, codec.NumPlanes)
	lens := unsafe.Slice(planeLens, codec.NumPlanes)
	for p := range codec.NumPlanes {
		if lens[p] > 0 && ptrs[p] == nil {
			return fail(errArg("plane %d is NULL with length %d", p, lens[p]))
		}
		t.Planes[p] = bytesAt(unsafe.Pointer(ptrs[p]), uint64(lens[p]))
	}
	if err := t.Validate(); err != nil {
		return fail(err)
	}
	newPackedHandle(&packedObj{t: t}, out)
	return C.GLYD_OK
}

func goGroup(g *C.glyd_group) codec.Group {
	out := codec.Group{Elements: uint64(g.elements), Escapes: uint64(g.escapes), Base: uint8(g.base)}
	for i := range out.Offsets {
		out.Offsets[i] = uint64(g.offsets[i])
	}
	for i := range out.Table {
		out.Table[i] = uint8(g.table[i])
	}
	return out
}

func cGroup(g codec.Group, out *C.glyd_group) {
	*out = C.glyd_group{}
	out.elements = C.uint64_t(g.Elements)
	out.escapes = C.uint64_t(g.Escapes)
	out.base = C.uint8_t(g.Base)
	for i, v := range g.Offsets {
		out.offsets[i] = C.uint64_t(v)
	}
	for i, v := range g.Table {
		out.table[i] = C.uint8_t(v)
	}
}

// describePacked fills info for a packed tensor.
func describePacked(t *codec.Tensor, info *C.glyd_tensor_info) {
	*info = C.glyd_tensor_info{}
	info.layout = C.int(t.Layout)
	info.dtype = C.int(t.DType)
	setShape(info, t.Shape)
	n := t.NumElements()
	info.elements = C.uint64_t(n)
	info.original_bytes = C.uint64_t(2 * n)
	info.packed_bytes = C.uint64_t(t.PackedBytes())
	info.num_groups = C.uint64_t(len(t.Groups))
	var esc uint64
	for _, g := range t.Groups {
		esc += g.Escapes
	}
	info.escapes = C.uint64_t(esc)
	info.checksum = C.uint32_t(t.Checksum)
	info.bits_per_weight = C.double(t.BitsPerWeight())
}

func setShape(info *C.glyd_tensor_info, shape []int64) {
	info.ndim = C.size_t(len(shape))
	for i, d := range shape {
		info.shape[i] = C.int64_t(d)
	}
}

//export glydgo_packed_describe
func glydgo_packed_describe(p *C.glyd_packed, info *C.glyd_tensor_info) (rc C.int) {
	defer guard(&rc)
	o, err := packedOf(p)
	if err != nil {
		return fail(err)
	}
	if info == nil {
		return fail(errArg("info is NULL"))
	}
	describePacked(o.t, info)
	return C.GLYD_OK
}

//export glydgo_packed_group
func glydgo_packed_group(p *C.glyd_packed, g C.uint64_t, out *C.glyd_group) (rc C.int) {
	defer guard(&rc)
	o, err := packedOf(p)
	if err != nil {
		return fail(err)
	}
	return result(groupOut(o.t, uint64(g), out))
}

func groupOut(t *codec.Tensor, g uint64, out *C.glyd_group) error {
	if out == nil {
		return errArg("out is NULL")
	}
	if g >= uint64(len(t.Groups)) {
		return errArg("group %d out of range: the tensor has %d", g, len(t.Groups))
	}
	cGroup(t.Groups[g], out)
	return nil
}

func planeOut(t *codec.Tensor, plane C.int, data **C.uint8_t, n *C.size_t) error {
	if data == nil || n == nil {
		return errArg("data and len must not be NULL")
	}
	if plane < 0 || plane >= codec.NumPlanes {
		return errArg("plane %d out of range 0..%d", plane, codec.NumPlanes-1)
	}
	b := t.Planes[plane]
	*n = C.size_t(len(b))
	*data = nil
	if len(b) > 0 {
		*data = (*C.uint8_t)(unsafe.Pointer(&b[0]))
	}
	return nil
}

//export glydgo_packed_plane
func glydgo_packed_plane(p *C.glyd_packed, plane C.int, data **C.uint8_t, n *C.size_t) (rc C.int) {
	defer guard(&rc)
	o, err := packedOf(p)
	if err != nil {
		return fail(err)
	}
	return result(planeOut(o.t, plane, data, n))
}

// dstElems views dst as n uint16 elements after checking its size.
func dstElems(dst unsafe.Pointer, dstBytes C.size_t, n uint64) ([]uint16, error) {
	if uint64(dstBytes) < 2*n {
		return nil, status.Errorf(status.BufferTooSmall, "buffer too small: dst_bytes is %d, the tensor needs %d", dstBytes, 2*n)
	}
	if n == 0 {
		return nil, nil
	}
	if dst == nil {
		return nil, errArg("dst is NULL")
	}
	return unsafe.Slice((*uint16)(dst), n), nil
}

//export glydgo_packed_unpack
func glydgo_packed_unpack(p *C.glyd_packed, dst unsafe.Pointer, dstBytes C.size_t, workers C.int) (rc C.int) {
	defer guard(&rc)
	o, err := packedOf(p)
	if err != nil {
		return fail(err)
	}
	out, err := dstElems(dst, dstBytes, o.t.NumElements())
	if err != nil {
		return fail(err)
	}
	return result(codec.Unpack(o.t, out, int(workers)))
}

//export glydgo_packed_unpack_group
func glydgo_packed_unpack_group(p *C.glyd_packed, g C.uint64_t, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	o, err := packedOf(p)
	if err != nil {
		return fail(err)
	}
	if uint64(g) >= uint64(len(o.t.Groups)) {
		return fail(errArg("group %d out of range: the tensor has %d", g, len(o.t.Groups)))
	}
	out, err := dstElems(dst, dstBytes, o.t.Groups[g].Elements)
	if err != nil {
		return fail(err)
	}
	return result(codec.UnpackGroup(o.t, int(g), out))
}

//export glydgo_packed_verify
func glydgo_packed_verify(p *C.glyd_packed, workers C.int) (rc C.int) {
	defer guard(&rc)
	o, err := packedOf(p)
	if err != nil {
		return fail(err)
	}
	return result(codec.Verify(o.t, int(workers)))
}

//export glydgo_packed_destroy
func glydgo_packed_destroy(p *C.glyd_packed) {
	defer func() { _ = recover() }()
	h := cgo.Handle(p.id)
	h.Value().(*packedObj).free()
	h.Delete()
	C.free(unsafe.Pointer(p))
}
