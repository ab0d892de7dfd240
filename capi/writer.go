package main

/*
#include <stdlib.h>
#include "glyd.h"
#include "handles.h"
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"

	"github.com/glyd/glyd/core/format"
)

// writerCall runs fn on the writer behind w and records a failure on the
// handle (glyd_writer_errmsg) and the thread (glyd_last_error).
func writerCall(w *C.glyd_writer, fn func(wr *format.Writer) error) C.int {
	if w == nil {
		return fail(errArg("writer handle is NULL"))
	}
	err := fn(cgo.Handle(w.id).Value().(*format.Writer))
	if err == nil {
		return C.GLYD_OK
	}
	C.free(unsafe.Pointer(w.errmsg))
	w.errmsg = C.CString(err.Error())
	return fail(err)
}

//export glydgo_writer_open
func glydgo_writer_open(dir *C.char, maxShardSize C.uint64_t, flags C.uint32_t, out **C.glyd_writer) (rc C.int) {
	defer guard(&rc)
	if out == nil {
		return fail(errArg("out is NULL"))
	}
	*out = nil
	d, err := goString(dir, "dir")
	if err != nil {
		return fail(err)
	}
	if flags&^C.GLYD_WRITER_OVERWRITE != 0 {
		return fail(errArg("unknown writer flags %#x", flags))
	}
	wr, err := format.Create(d, format.WriterOptions{
		MaxShardSize: int64(maxShardSize),
		Overwrite:    flags&C.GLYD_WRITER_OVERWRITE != 0,
		Library:      "libglyd " + version,
	})
	if err != nil {
		return fail(err)
	}
	h := (*C.glyd_writer)(C.calloc(1, C.size_t(unsafe.Sizeof(C.glyd_writer{}))))
	h.id = C.uintptr_t(cgo.NewHandle(wr))
	h.temp_dir = C.CString(wr.TempDir())
	*out = h
	return C.GLYD_OK
}

//export glydgo_writer_add_packed
func glydgo_writer_add_packed(w *C.glyd_writer, name *C.char, p *C.glyd_packed) (rc C.int) {
	defer guard(&rc)
	return writerCall(w, func(wr *format.Writer) error {
		n, err := goString(name, "name")
		if err != nil {
			return err
		}
		o, err := packedOf(p)
		if err != nil {
			return err
		}
		return wr.AddPacked(n, o.t)
	})
}

//export glydgo_writer_add_raw
func glydgo_writer_add_raw(w *C.glyd_writer, name *C.char, dtype *C.char, shape *C.int64_t, ndim C.size_t, data unsafe.Pointer, nbytes C.size_t) (rc C.int) {
	defer guard(&rc)
	return writerCall(w, func(wr *format.Writer) error {
		n, err := goString(name, "name")
		if err != nil {
			return err
		}
		dt, err := goString(dtype, "dtype")
		if err != nil {
			return err
		}
		dims, err := goShape(shape, ndim)
		if err != nil {
			return err
		}
		if data == nil && nbytes > 0 {
			return errArg("data is NULL for tensor %q", n)
		}
		return wr.AddRaw(n, dt, dims, bytesAt(data, uint64(nbytes)))
	})
}

//export glydgo_writer_commit
func glydgo_writer_commit(w *C.glyd_writer) (rc C.int) {
	defer guard(&rc)
	return writerCall(w, (*format.Writer).Commit)
}

//export glydgo_writer_abort
func glydgo_writer_abort(w *C.glyd_writer) (rc C.int) {
	defer guard(&rc)
	return writerCall(w, (*format.Writer).Abort)
}

//export glydgo_writer_destroy
func glydgo_writer_destroy(w *C.glyd_writer) {
	defer func() { _ = recover() }()
	h := cgo.Handle(w.id)
	_ = h.Value().(*format.Writer).Abort()
	h.Delete()
	C.free(unsafe.Pointer(w.temp_dir))
	C.free(unsafe.Pointer(w.errmsg))
	C.free(unsafe.Pointer(w))
}
