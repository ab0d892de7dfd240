package format

import (
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// File names inside a checkpoint folder.
const (
	// DescriptorFile is the FlatBuffers descriptor (schema glyd.fbs).
	DescriptorFile = "glyd.fb"
	// SingleShardFile is the shard of a checkpoint that has only one.
	SingleShardFile = "model.safetensors"
	// IndexFile maps every safetensors key to its shard when there are
	// several shards, named model-00001-of-0000N.safetensors.
	IndexFile = "model.safetensors.index.json"
)

// Format versions. FormatVersion is the newest this library reads and writes.
const (
	// FormatV1 (glyd-v1): dense checkpoints, every packed tensor has one group.
	FormatV1 = 1
	// FormatV2 (glyd-v2): packed tensors may have several groups (experts).
	FormatV2 = 2
	// FormatVersion is the newest format version this library knows.
	FormatVersion = FormatV2
)

// Limits.
const (
	// MaxDims is the largest number of dimensions of a tensor (GLYD_MAX_DIMS).
	MaxDims = 8
	// DefaultMaxShardSize is the shard size used when WriterOptions.MaxShardSize
	// is 0: 5 GB, transformers' default "5GB".
	DefaultMaxShardSize = 5_000_000_000
	// MaxHeaderSize is the largest safetensors header a Reader accepts
	// (the limit of the safetensors library).
	MaxHeaderSize = 100_000_000
	// MaxDescriptorSize is the largest glyd.fb a Reader accepts.
	MaxDescriptorSize = 256 << 20
)

// FormatName returns the name of format version v, e.g. "glyd-v2".
func FormatName(v int) string { return fmt.Sprintf("glyd-v%d", v) }

// planeNames are the plane suffixes of safetensors keys, indexed by
// codec.Plane. They are part of the file format.
var planeNames = [codec.NumPlanes]string{"sm", "code", "code2", "code3", "chunks", "escidx", "escexp"}

// keyInfix separates a packed tensor's name from its plane name in a key.
const keyInfix = ".glyd_"

// PlaneKey returns the safetensors key of plane p of the packed tensor name:
// name + ".glyd_" + one of sm, code, code2, code3, chunks, escidx, escexp.
func PlaneKey(name string, p codec.Plane) string {
	if int(p) >= len(planeNames) {
		return name + keyInfix + fmt.Sprint(uint8(p))
	}
	return name + keyInfix + planeNames[p]
}

// checkName reports whether name may name a tensor: non-empty valid UTF-8
// without NUL bytes, not "__metadata__", and without ".glyd_", which is
// reserved for plane keys.
func checkName(name string) error {
	switch {
	case name == "":
		return status.Errorf(status.InvalidArgument, "empty tensor name")
	case !utf8.ValidString(name):
		return status.Errorf(status.InvalidArgument, "tensor name %q is not valid UTF-8", name)
	case strings.IndexByte(name, 0) >= 0:
		return status.Errorf(status.InvalidArgument, "tensor name %q contains a NUL byte", name)
	case name == metadataKey:
		return status.Errorf(status.InvalidArgument, "tensor name %q is reserved by safetensors", name)
	case strings.Contains(name, keyInfix):
		return status.Errorf(status.InvalidArgument, "tensor name %q contains %q, which is reserved for plane keys", name, keyInfix)
	}
	return nil
}

// validFileName reports whether name is a plain file name inside a folder:
// no path separators, not "." or "..", no NUL bytes.
func validFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00") && utf8.ValidString(name)
}

// shardFileName returns the file name of shard i (0-based) of n, as
// transformers names them.
func shardFileName(i, n int) string {
	if n == 1 {
		return SingleShardFile
	}
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}

// dtypeInfo describes a safetensors dtype.
type dtypeInfo struct {
	name string // safetensors name, "BF16"
	size int    // bytes per element
	code uint8  // value of the descriptor's DType enum
}

// dtypes lists the dtypes a checkpoint may hold. The codes are part of the
// file format (enum DType in glyd.fbs); BF16 and F16 equal codec.DType.
var dtypes = []dtypeInfo{
	{"BF16", 2, 1}, {"F16", 2, 2}, {"F32", 4, 3}, {"F64", 8, 4},
	{"I8", 1, 5}, {"I16", 2, 6}, {"I32", 4, 7}, {"I64", 8, 8},
	{"U8", 1, 9}, {"U16", 2, 10}, {"U32", 4, 11}, {"U64", 8, 12},
	{"BOOL", 1, 13}, {"F8_E4M3", 1, 14}, {"F8_E5M2", 1, 15},
}

var dtypeU8 = dtypes[8]

func dtypeByName(s string) (dtypeInfo, bool) {
	for _, d := range dtypes {
		if d.name == s {
			return d, true
		}
	}
	return dtypeInfo{}, false
}

func dtypeByCode(c uint8) (dtypeInfo, bool) {
	if c >= 1 && int(c) <= len(dtypes) {
		return dtypes[c-1], true
	}
	return dtypeInfo{}, false
}

// packedDType returns the safetensors dtype of a packed tensor's original.
func packedDType(d codec.DType) (dtypeInfo, bool) {
	switch d {
	case codec.BF16, codec.FP16:
		return dtypeByCode(uint8(d))
	}
	return dtypeInfo{}, false
}

// numElements returns the product of shape; ok is false when a dimension is
// negative or the product exceeds 2^63-1. A zero dimension makes the product
// 0 whatever the others are.
func numElements(shape []int64) (n uint64, ok bool) {
	n = 1
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			n = 0
		}
	}
	if n == 0 {
		return 0, true
	}
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// byteSize returns n*size, ok false beyond 2^63-1.
func byteSize(n uint64, size int) (uint64, bool) {
	hi, lo := bits.Mul64(n, uint64(size))
	return lo, hi == 0 && lo <= 1<<63-1
}
