package codec

import (
	"fmt"
	"strings"

	"github.com/glyd/glyd/core/status"
)

// String returns the layout's name: "raw", "fixed12" or "smallest".
func (l Layout) String() string {
	switch l {
	case Raw:
		return "raw"
	case Fixed12:
		return "fixed12"
	case Smallest:
		return "smallest"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// ParseLayout returns the layout named s ("raw", "fixed12" or "smallest",
// case-insensitive). Other names give a status.InvalidArgument error.
func ParseLayout(s string) (Layout, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "raw":
		return Raw, nil
	case "fixed12":
		return Fixed12, nil
	case "smallest":
		return Smallest, nil
	}
	return 0, status.Errorf(status.InvalidArgument, "unknown layout %q (want fixed12, smallest or raw)", s)
}

// String returns the dtype's name: "bf16" or "fp16".
func (d DType) String() string {
	switch d {
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType returns the dtype named s ("bf16" or "fp16", also "bfloat16" and
// "float16", case-insensitive). Other names give a status.DType error.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "f16", "float16", "half":
		return FP16, nil
	}
	return 0, status.Errorf(status.DType, "unknown dtype %q (want bf16 or fp16)", s)
}

// String returns the plane's name, as used in messages.
func (p Plane) String() string {
	switch p {
	case PlaneSM:
		return "sm"
	case PlaneCode:
		return "code"
	case PlaneCode2:
		return "code2"
	case PlaneCode3:
		return "code3"
	case PlaneChunks:
		return "chunks"
	case PlaneEscIdx:
		return "escidx"
	case PlaneEscExp:
		return "escexp"
	}
	return fmt.Sprintf("plane(%d)", uint8(p))
}

// Limits of the layouts.
const (
	// ChunkElements is the number of elements of a Smallest chunk: the
	// level-2 and level-3 codes of each chunk start on a byte boundary at
	// an offset given by PlaneChunks.
	ChunkElements = 4096
	// ChunkEntryBytes is the size of one PlaneChunks entry (two uint64).
	ChunkEntryBytes = 16
	// EscIdxBytes is the size of one PlaneEscIdx entry (a uint32 element
	// index within the group).
	EscIdxBytes = 4
	// MaxGroupElements is the largest number of elements one group may hold
	// (2^32-1), so that every escape index fits in a uint32.
	MaxGroupElements = 1<<32 - 1
	// MaxElements is the largest element count Pack and Validate accept
	// (2^56, far beyond any tensor; it keeps size arithmetic exact).
	MaxElements = 1 << 56
)

// unitElements is the work unit of the parallel passes: a multiple of
// ChunkElements, so units never split a chunk, and of 8, so every unit
// starts on a byte boundary in every plane.
const unitElements = 16 * ChunkElements

// dtypeInfo describes the fields of a dtype.
type dtypeInfo struct {
	maxExp uint8 // largest exponent field
	smBits int   // width of the sign+mantissa field
}

func (d DType) info() (dtypeInfo, bool) {
	switch d {
	case BF16:
		return dtypeInfo{maxExp: 0xFF, smBits: 8}, true
	case FP16:
		return dtypeInfo{maxExp: 0x1F, smBits: 11}, true
	}
	return dtypeInfo{}, false
}

// smSize is the byte size of n sign+mantissa fields.
func (d dtypeInfo) smSize(n int) int { return (n*d.smBits + 7) / 8 }

// codeSize is the byte size of PlaneCode for n elements.
func codeSize(l Layout, n int) int {
	if l == Fixed12 {
		return (n + 1) / 2
	}
	return (n + 3) / 4
}

func numChunks(n int) int { return (n + ChunkElements - 1) / ChunkElements }

// errCorrupt returns an error with code c and a message starting with
// "invalid input:".
func errCorrupt(c status.Code, format string, args ...any) error {
	return status.Errorf(c, "invalid input: "+format, args...)
}
