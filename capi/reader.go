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

// readerCall runs fn on the reader behind r and records a failure on the
// handle (glyd_reader_errmsg) and the thread (glyd_last_error).
func readerCall(r *C.glyd_reader, fn func(o *readerObj) error) C.int {
	if r == nil {
		return fail(errArg("reader handle is NULL"))
	}
	err := fn(cgo.Handle(r.id).Value().(*readerObj))
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
	return readerCall(r, func(o *readerObj) error {
		if name == nil {
			return errArg("name is NULL")
		}
		if _, err := o.tensor(i); err != nil {
			return err
		}
		*name = unsafe.Slice(r.names, r.count)[i]
		return nil
	})
}

//export glydgo_reader_find
func glydgo_reader_find(r *C.glyd_reader, name *C.char, i *C.size_t) (rc C.int) {
	defer guard(&rc)
	return readerCall(r, func(o *readerObj) error {
		n, err := goString(name, "name")
		if err != nil {
			return err
		}
		if i == nil {
			return errArg("i is NULL")
		}
		idx, ok := o.index[n]
		if !ok {
			return status.Errorf(status.NotFound, "%s: no tensor named %q", o.r.Dir(), n)
		}
		*i = C.size_t(idx)
		return nil
	})
}

//export glydgo_reader_describe
func glydgo_reader_describe(r *C.glyd_reader, i C.size_t, info *C.glyd_tensor_info) (rc C.int) {
	defer guard(&rc)
	return readerCall(r, func(o *readerObj) error {
		if info == nil {
			return errArg("info is NULL")
		}
		ti, err := o.tensor(i)
		if err != nil {
			return err
		}
		if ti.Layout != codec.Raw {
			t, err := o.r.Packed(ti.Name)
			if err != nil {
				return err
			}
			describePacked(t, info)
			return nil
		}
		*info = C.glyd_tensor_info{}
		setShape(info, ti.Shape)
		for j := 0; j < len(ti.RawDType) && j < 7; j++ {
			info.raw_dtype[j] = C.char(ti.RawDType[j])
		}
		info.elements = C.uint64_t(ti.Elements)
		info.original_bytes = C.uint64_t(ti.OriginalBytes)
		info.packed_bytes = C.uint64_t(ti.OriginalBytes)
		info.num_groups = 1
		info.checksum = C.uint32_t(ti.Checksum)
		if ti.Elements > 0 {
			info.bits_per_weight = C.double(8 * float64(ti.OriginalBytes) / float64(ti.Elements))
		}
		return nil
	})
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

//export glydgo_reader_group
func glydgo_reader_group(r *C.glyd_reader, i C.size_t, g C.uint64_t, out *C.glyd_group) (rc C.int) {
	defer guard(&rc)
	return readerCall(r, func(o *readerObj) error {
		t, err := o.packed(i)
		if err != nil {
			return err
		}
		return groupOut(t, uint64(g), out)
	})
}

//export glydgo_reader_plane
func glydgo_reader_plane(r *C.glyd_reader, i C.size_t, plane C.int, data **C.uint8_t, n *C.size_t) (rc C.int) {
	defer guard(&rc)
	return readerCall(r, func(o *readerObj) error {
		t, err := o.packed(i)
		if err != nil {
			return err
		}
		return planeOut(t, plane, data, n)
	})
}

//export glydgo_reader_raw
func glydgo_reader_raw(r *C.glyd_reader, i C.size_t, data *unsafe.Pointer, n *C.size_t) (rc C.int) {
	defer guard(&rc)
	return readerCall(r, func(o *readerObj) error {
		if data == nil || n == nil {
			return errArg("data and len must not be NULL")
		}
		ti, err := o.tensor(i)
		if err != nil {
			return err
		}
		_, b, err := o.r.Raw(ti.Name)
		if err != nil {
			return err
		}
		*n = C.size_t(len(b))
		*data = nil
		if len(b) > 0 {
			*data = unsafe.Pointer(&b[0])
		}
		return nil
	})
}

//export glydgo_reader_unpack
func glydgo_reader_unpack(r *C.glyd_reader, i C.size_t, dst unsafe.Pointer, dstBytes C.size_t) (rc C.int) {
	defer guard(&rc)
	defer mappedReads()()
	return readerCall(r, func(o *readerObj) error {
		ti, err := o.tensor(i)
		if err != nil {
			return err
		}
		if uint64(dstBytes) < ti.OriginalBytes {
			return status.Errorf(status.BufferTooSmall, "buffer too small: dst_bytes is %d, tensor %q needs %d", dstBytes, ti.Name, ti.OriginalBytes)
		}
		if ti.OriginalBytes > 0 && dst == nil {
			return errArg("dst is NULL")
		}
		if ti.Layout == codec.Raw {
			_, b, err := o.r.Raw(ti.Name)
			if err == nil {
				copy(bytesAt(dst, uint64(len(b))), b)
			}
			return err
		}
		out, err := dstElems(dst, dstBytes, ti.Elements)
		if err != nil {
			return err
		}
		return o.r.Unpack(ti.Name, out)
	})
}

//export glydgo_reader_verify
func glydgo_reader_verify(r *C.glyd_reader, i C.size_t) (rc C.int) {
	defer guard(&rc)
	defer mappedReads()()
	return readerCall(r, func(o *readerObj) error {
		ti, err := o.tensor(i)
		if err != nil {
			return err
		}
		return o.r.Verify(ti.Name)
	})
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
