// Package codec packs 16-bit floating-point tensors (bf16, and fp16) losslessly
// into byte planes, and unpacks them to their exact original bits.
//
// Only the exponent is entropy-coded; sign and mantissa stay raw (their entropy
// is ≈7.97 of 8 bits on trained weights). Two layouts exist:
//
//   - Fixed12: one raw sign+mantissa byte and one 4-bit exponent code per weight
//     (≈12.0 bits/weight), decodable in a few integer operations.
//   - Smallest: a three-level exponent code (≈10.7 bits/weight on trained
//     weights), still decodable inside a GPU matmul tile.
//
// docs/FORMAT.md specifies every byte of both layouts as implemented here
// (docs/FORMAT.md, the checkpoint format around them).
//
// A tensor may be split along its first axis into independent groups (the
// experts of a mixture-of-experts tensor): each group has its own exponent
// tables and its own slice of every plane, so one expert can be decoded
// without touching the others.
//
// Pack packs; Unpack, UnpackGroup and Verify decode (Verify in pieces,
// comparing the CRC-32C of the original); Tensor.Validate checks a packed
// tensor's structure cheaply. Work is spread over goroutines in pieces of
// 64Ki elements; the packed bytes, the decoded elements and the errors do
// not depend on the number of workers. Every error carries a status code
// (core/status); errors about damaged packed data start with "invalid
// input:". Decoding never panics and allocates only scratch, whatever the
// input. The fast paths are written for bf16 on little-endian machines;
// fp16, and big-endian machines, take generic paths that give the same
// bytes. internal/ref is the slow reference decoder the tests hold the
// fast one to.
package codec

// Layout names how a tensor is stored.
type Layout uint8

// Layouts. The values are part of the file format and never change.
const (
	// Raw marks a tensor stored as it is (norms, biases, small tensors).
	Raw Layout = 0
	// Fixed12 stores a raw sign+mantissa byte plus a 4-bit exponent code.
	Fixed12 Layout = 1
	// Smallest stores a raw sign+mantissa byte plus a three-level exponent code.
	Smallest Layout = 2
)

// DType is the element type of the original (unpacked) tensor.
type DType uint8

// Element types. The values are part of the file format and never change.
const (
	BF16 DType = 1
	FP16 DType = 2
)

// Plane identifies one byte plane of a packed tensor.
type Plane uint8

// Planes. The values are part of the file format and never change. A layout
// uses a subset; unused planes are empty.
const (
	PlaneSM     Plane = 0 // sign+mantissa bits, one field per weight
	PlaneCode   Plane = 1 // Fixed12: 4-bit exponent codes; Smallest: 2-bit level-1 codes
	PlaneCode2  Plane = 2 // Smallest: 2-bit level-2 codes, compacted
	PlaneCode3  Plane = 3 // Smallest: 4-bit level-3 codes, compacted
	PlaneChunks Plane = 4 // Smallest: per-chunk byte offsets into PlaneCode2/PlaneCode3
	PlaneEscIdx Plane = 5 // escapes: element index within the group, uint64 little-endian, ascending
	PlaneEscExp Plane = 6 // escapes: the exponent field of each escaped element, one byte each
	NumPlanes         = 7
)

// Group is one independently decodable slice of a packed tensor (the whole
// tensor, or one expert of a mixture-of-experts tensor).
type Group struct {
	// Elements is the number of elements in this group.
	Elements uint64
	// Base is the exponent of code 0 in the 4-bit code (Fixed12 codes and
	// Smallest level-3 codes): exponent = Base + code, code 15 = escape.
	Base uint8
	// Table holds the exponents of the Smallest level-1 codes 0..2 (Table[0:3])
	// and level-2 codes 0..2 (Table[3:6]). Unused by Fixed12.
	Table [6]uint8
	// Offsets[p] is the byte offset of this group's data within plane p.
	Offsets [NumPlanes]uint64
	// Escapes is the number of escaped elements in this group.
	Escapes uint64
}

// Tensor is a packed tensor: its planes and everything needed to decode them.
type Tensor struct {
	Layout Layout
	DType  DType
	// Shape of the original tensor; a 0-dim (scalar) tensor has an empty Shape.
	Shape []int64
	// Groups split the elements along the first axis, in order. There is
	// always at least one group; the sum of Elements is the element count.
	Groups []Group
	// Planes are indexed by Plane; planes a layout does not use are empty.
	Planes [NumPlanes][]byte
	// Checksum is the CRC-32C (Castagnoli) of the original tensor's bytes,
	// little-endian, in row-major order.
	Checksum uint32
}
