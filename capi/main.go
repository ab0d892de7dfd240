// Command capi is libglyd.so: the C ABI of Glyd (include/glyd.h), built with
// go build -buildmode=c-shared. The public functions are defined in glyd.c as
// thin wrappers over the glydgo_* exports here, so the C compiler checks the
// header against the implementation; the linker version script (Makefile)
// exports only the glyd_* names.
//
// Rules (DESIGN.md D5): every export recovers panics into GLYD_ERR_INTERNAL;
// Go pointers never cross to C (handles are cgo.Handle ids in C structs, and
// memory handed out is C-allocated, caller-owned, or memory-mapped).
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -O2
#include <stdlib.h>
#include "glyd.h"
#include "handles.h"
*/
import "C"

import (
	"runtime/debug"
	"unsafe"

	"github.com/glyd/glyd/core/status"
)

func main() {}

// version is GLYD_VERSION_MAJOR.MINOR.PATCH; a test checks they agree.
const version = "0.1.0"

var cVersion = C.CString(version)

//export glydgo_version_string
func glydgo_version_string() *C.char { return cVersion }

var cStrerror = map[status.Code]*C.char{}

func init() {
	for c := status.OK; c <= status.Unsupported; c++ {
		cStrerror[c] = C.CString(c.String())
	}
	cStrerror[-1] = C.CString("unknown status")
}

//export glydgo_strerror
func glydgo_strerror(code C.int) *C.char {
	if s, ok := cStrerror[status.Code(code)]; ok {
		return s
	}
	return cStrerror[-1]
}

// fail records err as this thread's last error and returns its status.
func fail(err error) C.int {
	msg := C.CString(err.Error())
	C.glydint_set_error(msg)
	C.free(unsafe.Pointer(msg))
	return C.int(status.CodeOf(err))
}

// result is fail(err) for a non-nil err, else GLYD_OK.
func result(err error) C.int {
	if err != nil {
		return fail(err)
	}
	return C.int(status.OK)
}

// guard turns a panic in an export into GLYD_ERR_INTERNAL: a panic must never
// reach the host process. Use as `defer guard(&rc)` with a named result.
func guard(rc *C.int) {
	if r := recover(); r != nil {
		err := status.Recovered(r, "libglyd")
		if status.CodeOf(err) == status.Internal {
			err = status.Errorf(status.Internal, "%v\n%s", err, debug.Stack())
		}
		*rc = fail(err)
	}
}

// mappedReads makes a fault while reading memory-mapped shards on this
// goroutine a panic (which guard reports) instead of a crash; it returns the
// function that restores the previous setting.
func mappedReads() func() {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

func errArg(format string, args ...any) error {
	return status.Errorf(status.InvalidArgument, "invalid argument: "+format, args...)
}

// goShape copies a C shape array.
func goShape(shape *C.int64_t, ndim C.size_t) ([]int64, error) {
	if ndim > C.GLYD_MAX_DIMS {
		return nil, errArg("ndim %d exceeds GLYD_MAX_DIMS (%d)", ndim, C.GLYD_MAX_DIMS)
	}
	if ndim > 0 && shape == nil {
		return nil, errArg("shape is NULL with ndim %d", ndim)
	}
	out := make([]int64, int(ndim))
	if ndim > 0 {
		for i, d := range unsafe.Slice((*int64)(unsafe.Pointer(shape)), int(ndim)) {
			if d < 0 {
				return nil, errArg("shape[%d] = %d is negative", i, d)
			}
			out[i] = d
		}
	}
	return out, nil
}

// bytesAt views n bytes of C (or mapped, or caller) memory; nil for n == 0.
func bytesAt(p unsafe.Pointer, n uint64) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

func goString(s *C.char, what string) (string, error) {
	if s == nil {
		return "", errArg("%s is NULL", what)
	}
	return C.GoString(s), nil
}
