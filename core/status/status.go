// Package status defines Glyd's error codes. Every error the core returns
// carries one, so the C ABI can hand callers a stable number (include/glyd.h,
// enum glyd_status) next to the message. Codes only grow; values never change.
package status

import (
	"errors"
	"fmt"
	"io/fs"
)

// Code is a Glyd status code. Its values are part of the C ABI.
type Code int32

// Status codes, mirrored one for one by enum glyd_status in include/glyd.h.
const (
	OK               Code = 0
	InvalidArgument  Code = 1  // a NULL pointer, a bad enum value, an impossible option
	BufferTooSmall   Code = 2  // a caller-allocated output is smaller than its _bound
	IO               Code = 3  // the operating system refused a read, write, rename or mmap
	NotFound         Code = 4  // no such file, folder or tensor
	Truncated        Code = 5  // a file ends before the data it declares
	Header           Code = 6  // a safetensors header that is malformed or longer than the file
	RangeOverlap     Code = 7  // two tensors' byte ranges overlap
	RangeGap         Code = 8  // tensors' byte ranges leave a gap or trailing bytes
	RangeOutOfBounds Code = 9  // a byte range ends past the end of the data
	SizeMismatch     Code = 10 // dtype × shape disagrees with a byte length
	Overflow         Code = 11 // dimensions or sizes whose product overflows
	Descriptor       Code = 12 // the FlatBuffers descriptor fails verification or disagrees with the shards
	EscapeMissing    Code = 13 // an escape code has no escape entry (or an entry has no escape code)
	EscapeRange      Code = 14 // an escape index is out of range or out of order
	ExponentTable    Code = 15 // an exponent base or table entry is out of range
	Version          Code = 16 // a format version this library does not read
	Checksum         Code = 17 // decoded bytes disagree with the checksum of the original
	DType            Code = 18 // a dtype that is not allowed here
	Corrupt          Code = 19 // any other inconsistency in packed data
	NoGPU            Code = 20 // no usable GPU or CUDA driver
	OutOfMemory      Code = 21 // host or device memory could not be allocated
	Internal         Code = 22 // a bug in Glyd (a recovered panic)
	State            Code = 23 // a call out of order (a writer used after commit or abort)
	Exists           Code = 24 // the destination exists and may not be replaced
	CUDA             Code = 25 // the CUDA driver returned an error
	Unsupported      Code = 26 // valid, but not supported by this build or device
)

var names = map[Code]string{
	OK: "ok", InvalidArgument: "invalid argument", BufferTooSmall: "buffer too small",
	IO: "input/output error", NotFound: "not found", Truncated: "truncated file",
	Header: "invalid safetensors header", RangeOverlap: "overlapping byte ranges",
	RangeGap: "gap in byte ranges", RangeOutOfBounds: "byte range out of bounds",
	SizeMismatch: "dtype and shape disagree with byte length", Overflow: "size overflow",
	Descriptor: "invalid descriptor", EscapeMissing: "escape code without escape entry",
	EscapeRange: "escape index out of range", ExponentTable: "exponent table out of range",
	Version: "unsupported format version", Checksum: "checksum mismatch",
	DType: "wrong dtype", Corrupt: "corrupt packed data", NoGPU: "no GPU",
	OutOfMemory: "out of memory", Internal: "internal error", State: "call out of order",
	Exists: "destination exists", CUDA: "CUDA driver error", Unsupported: "unsupported",
}

// String returns the fixed description of c (glyd_strerror's text).
func (c Code) String() string {
	if s, ok := names[c]; ok {
		return s
	}
	return fmt.Sprintf("unknown status %d", int32(c))
}

// Error is an error with a status code.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is lets errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Msg == ""
}

// Errorf returns an *Error with code c and a formatted message. Corruption
// messages start with "invalid input:" by convention of the callers.
func Errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// Wrap prefixes err's message with context (a file or tensor name) and keeps
// its code (see CodeOf for errors that carry none).
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	prefix := fmt.Sprintf(format, args...)
	return &Error{Code: CodeOf(err), Msg: prefix + ": " + err.Error()}
}

// Recovered turns a recovered panic value into an error. A memory fault past
// the first page (reported as a panic under debug.SetPanicOnFault) is a
// memory-mapped file that became unreadable, e.g. truncated while open: IO.
// Anything else is a bug in Glyd: Internal, with where it happened.
func Recovered(r any, where string) error {
	if fe, ok := r.(interface{ Addr() uintptr }); ok && fe.Addr() >= 4096 {
		return Errorf(IO, "a memory-mapped file became unreadable (truncated while open?): %v", r)
	}
	return Errorf(Internal, "internal error in %s (please report): panic: %v", where, r)
}

// CodeOf returns the status code carried by err: OK for nil, NotFound or IO
// for errors from the file system, Internal for anything else.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, fs.ErrNotExist) {
		return NotFound
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return IO
	}
	return Internal
}
