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
	"github.com/glyd/glyd/core/format"
	"github.com/glyd/glyd/core/status"
)

// readerObj is the Go object behind a glyd_reader handle.
type readerObj struct {
	r     *format.Reader
	infos []format.TensorInfo // sorted by name, index = the C API's tensor index
	index map[string]int
}

func readerOf(r *C.glyd_reader) (*readerObj, error) {
	if r == nil {
		return nil, errArg("reader handle is NULL")
	}
	return cgo.Handle(r.id).Value().(*readerObj), nil
}

func readerResult(r *C.glyd_reader, err error) C.int {
	if err == nil {
		return C.GLYD_OK
	}
	C.free(unsafe.Pointer(r.errmsg))
	r.errmsg = C.CString(err.Error())
	return fail(err)
}

func (o *readerObj) tensor(i C.size_t) (*format.TensorInfo, error) {
	if uint64(i) >= uint64(len(o.infos)) {
		return nil, errArg("tensor index %d out of range: the checkpoint has %d tensors", i, len(o.infos))
	}
	return &o.infos[i], nil
}

//export glydgo_reader_open
func glydgo_reader_open(dir *C.char, maxFormat C.int, out **C.glyd_reader) (rc C.int) {
	defer guard(&rc)
	if out == nil {
		return fail(errArg("out is NULL"))
	}
	*out = nil
	d, err := goString(dir, "dir")
	if err != nil {
		return fail(err)
	}
	if maxFormat < 0 {
		return fail(errArg("max_format_version %d is negative", maxFormat))
	}
	r, err := format.Open(d, format.ReaderOptions{MaxFormatVersion: int(maxFormat)})
	if err != nil {
		return fail(err)
	}
	o := &readerObj{r: r, infos: r.Tensors(), index: map[string]int{}}
	h := (*C.glyd_reader)(C.calloc(1, C.size_t(unsafe.Sizeof(C.glyd_reader{}))))
	h.id = C.uintptr_t(cgo.NewHandle(o))
	h.format = C.CString(r.Format())
	h.count = C.size_t(len(o.infos))
	if len(o.infos) > 0 {
		h.names = (**C.char)(C.calloc(C.size_t(len(o.infos)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		names := unsafe.Slice(h.names, len(o.infos))
		for i, ti := range o.infos {
			names[i] = C.CString(ti.Name)
			o.index[ti.Name] = i
		}
	}
	*out = h
	return C.GLYD_OK
}

//export glydgo_reader_name
func glydgo_reader_name(r *C.glyd_reader, i C.size_t, name **C.char) (rc C.int) {
	defer guard(&rc)
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	if name == nil {
		return readerResult(r, errArg("name is NULL"))
	}
	if _, err := o.tensor(i); err != nil {
		return readerResult(r, err)
	}
	*name = unsafe.Slice(r.names, r.count)[i]
	return C.GLYD_OK
}

//export glydgo_reader_find
func glydgo_reader_find(r *C.glyd_reader, name *C.char, i *C.size_t) (rc C.int) {
	defer guard(&rc)
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	n, err := goString(name, "name")
	if err != nil || i == nil {
		return readerResult(r, errArg("name and i must not be NULL"))
	}
	idx, ok := o.index[n]
	if !ok {
		return readerResult(r, status.Errorf(status.NotFound, "%s: no tensor named %q", o.r.Dir(), n))
	}
	*i = C.size_t(idx)
	return C.GLYD_OK
}

//export glydgo_reader_describe
func glydgo_reader_describe(r *C.glyd_reader, i C.size_t, info *C.glyd_tensor_info) (rc C.int) {
	defer guard(&rc)
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	ti, err := o.tensor(i)
	if err != nil || info == nil {
		return readerResult(r, errArg("bad tensor index or NULL info"))
	}
	if ti.Layout == codec.Raw {
		*info = C.glyd_tensor_info{}
		setShape(info, ti.Shape)
		dt := ti.RawDType
		for j := 0; j < len(dt) && j < 7; j++ {
			info.raw_dtype[j] = C.char(dt[j])
		}
		info.elements = C.uint64_t(ti.Elements)
		info.original_bytes = C.uint64_t(ti.OriginalBytes)
		info.packed_bytes = C.uint64_t(ti.OriginalBytes)
		info.num_groups = 1
		info.checksum = C.uint32_t(ti.Checksum)
		if ti.Elements > 0 {
			info.bits_per_weight = C.double(8 * float64(ti.OriginalBytes) / float64(ti.Elements))
		}
		return C.GLYD_OK
	}
	t, err := o.r.Packed(ti.Name)
	if err != nil {
		return readerResult(r, err)
	}
	describePacked(t, info)
	return C.GLYD_OK
}

//export glydgo_reader_group
func glydgo_reader_group(r *C.glyd_reader, i C.size_t, g C.uint64_t, out *C.glyd_group) (rc C.int) {
	defer guard(&rc)
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	t, err := o.packed(i)
	if err != nil {
		return readerResult(r, err)
	}
	return readerResult(r, groupOut(t, uint64(g), out))
}

func (o *readerObj) packed(i C.size_t) (*codec.Tensor, error) {
	ti, err := o.tensor(i)
	if err != nil {
		return nil, err
	}
	if ti.Layout == codec.Raw {
		return nil, errArg("tensor %q is stored raw, not packed", ti.Name)
	}
	return o.r.Packed(ti.Name)
}

//export glydgo_reader_plane
func glydgo_reader_plane(r *C.glyd_reader, i C.size_t, plane C.int, data **C.uint8_t, n *C.size_t) (rc C.int) {
	defer guard(&rc)
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	t, err := o.packed(i)
	if err != nil {
		return readerResult(r, err)
	}
	return readerResult(r, planeOut(t, plane, data, n))
}

//export glydgo_reader_raw
func glydgo_reader_raw(r *C.glyd_reader, i C.size_t, data *unsafe.Pointer, n *C.size_t) (rc C.int) {
	defer guard(&rc)
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	ti, err := o.tensor(i)
	if err != nil || data == nil || n == nil {
		return readerResult(r, errArg("bad tensor index or NULL output"))
	}
	_, b, err := o.r.Raw(ti.Name)
	if err != nil {
		return readerResult(r, err)
	}
	*n = C.size_t(len(b))
	*data = nil
	if len(b) > 0 {
		*data = unsafe.Pointer(&b[0])
	}
	return C.GLYD_OK
}

//export glydgo_reader_unpack
func glydgo_reader_unpack(r *C.glyd_reader, i C.size_t, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	defer mappedReads()()
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	ti, err := o.tensor(i)
	if err != nil {
		return readerResult(r, err)
	}
	if uint64(dstBytes) < ti.OriginalBytes {
		return readerResult(r, status.Errorf(status.BufferTooSmall, "buffer too small: dst_bytes is %d, tensor %q needs %d", dstBytes, ti.Name, ti.OriginalBytes))
	}
	if ti.OriginalBytes > 0 && dst == nil {
		return readerResult(r, errArg("dst is NULL"))
	}
	if ti.Layout == codec.Raw {
		_, b, err := o.r.Raw(ti.Name)
		if err != nil {
			return readerResult(r, err)
		}
		copy(bytesAt(dst, uint64(len(b))), b)
		return C.GLYD_OK
	}
	out, err := dstElems(dst, dstBytes, ti.Elements)
	if err != nil {
		return readerResult(r, err)
	}
	return readerResult(r, o.r.Unpack(ti.Name, out))
}

//export glydgo_reader_verify
func glydgo_reader_verify(r *C.glyd_reader, i C.size_t) (rc C.int) {
	defer guard(&rc)
	defer mappedReads()()
	o, err := readerOf(r)
	if err != nil {
		return fail(err)
	}
	ti, err := o.tensor(i)
	if err != nil {
		return readerResult(r, err)
	}
	return readerResult(r, o.r.Verify(ti.Name))
}

//export glydgo_reader_close
func glydgo_reader_close(r *C.glyd_reader) {
	defer func() { _ = recover() }()
	h := cgo.Handle(r.id)
	_ = h.Value().(*readerObj).r.Close()
	h.Delete()
	if r.count > 0 {
		for _, s := range unsafe.Slice(r.names, r.count) {
			C.free(unsafe.Pointer(s))
		}
		C.free(unsafe.Pointer(r.names))
	}
	C.free(unsafe.Pointer(r.format))
	C.free(unsafe.Pointer(r.errmsg))
	C.free(unsafe.Pointer(r))
}
