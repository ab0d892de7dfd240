package format

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// fbReader reads a FlatBuffers buffer and checks every offset, length and
// vtable entry against the buffer before using it, as the FlatBuffers
// verifier does (the Go runtime has none). Reading a field of a table it has
// not checked is impossible: every accessor goes through table, which checks
// the table's header and vtable, and field, which checks the field against
// the table's size.
//
// budget bounds the work an adversarial buffer can cause: every table,
// vector and string read is charged its size, and the total may not exceed
// the buffer's length. A buffer that points many offsets at the same bytes
// (legal FlatBuffers, but never written by Glyd) is rejected instead of
// being decoded once per reference.
type fbReader struct {
	b      []byte
	budget uint64
}

// fbTable is a table whose header and vtable have been checked.
type fbTable struct {
	pos, vt     uint64
	vtLen, tLen uint64
}

func fbErr(format string, args ...any) error {
	return status.Errorf(status.Descriptor, format, args...)
}

// span returns b[pos:pos+n], or an error if that leaves the buffer.
func (r *fbReader) span(pos, n uint64) ([]byte, error) {
	if pos > uint64(len(r.b)) || n > uint64(len(r.b))-pos {
		return nil, fbErr("offset %d + %d bytes is outside the %d-byte buffer", pos, n, len(r.b))
	}
	return r.b[pos : pos+n], nil
}

func (r *fbReader) charge(n uint64) error {
	if n > r.budget {
		return fbErr("offsets refer to the same bytes more than once")
	}
	r.budget -= n
	return nil
}

func (r *fbReader) u32(pos uint64) (uint32, error) {
	b, err := r.span(pos, 4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

// table checks the table at pos: alignment, its vtable and its size.
func (r *fbReader) table(pos uint64) (fbTable, error) {
	if pos%4 != 0 {
		return fbTable{}, fbErr("table at %d is misaligned", pos)
	}
	so, err := r.u32(pos)
	if err != nil {
		return fbTable{}, err
	}
	vt := int64(pos) - int64(int32(so))
	if vt < 0 || vt%2 != 0 {
		return fbTable{}, fbErr("table at %d has a bad vtable offset", pos)
	}
	h, err := r.span(uint64(vt), 4)
	if err != nil {
		return fbTable{}, err
	}
	t := fbTable{
		pos:   pos,
		vt:    uint64(vt),
		vtLen: uint64(binary.LittleEndian.Uint16(h)),
		tLen:  uint64(binary.LittleEndian.Uint16(h[2:])),
	}
	if t.vtLen < 4 || t.vtLen%2 != 0 || t.tLen < 4 {
		return fbTable{}, fbErr("table at %d has a bad vtable", pos)
	}
	if _, err := r.span(t.vt, t.vtLen); err != nil {
		return fbTable{}, err
	}
	if _, err := r.span(t.pos, t.tLen); err != nil {
		return fbTable{}, err
	}
	return t, r.charge(t.tLen)
}

// field returns the position of field slot (0-based) of t, whose inline size
// is size bytes, or ok false if the field is absent.
func (r *fbReader) field(t fbTable, slot int, size uint64) (pos uint64, ok bool, err error) {
	vo := 4 + 2*uint64(slot)
	if vo+2 > t.vtLen {
		return 0, false, nil
	}
	off := uint64(binary.LittleEndian.Uint16(r.b[t.vt+vo:]))
	if off == 0 {
		return 0, false, nil
	}
	if off < 4 || off+size > t.tLen {
		return 0, false, fbErr("field %d of the table at %d lies outside the table", slot, t.pos)
	}
	return t.pos + off, true, nil
}

func (r *fbReader) scalar(t fbTable, slot int, size uint64) (uint64, error) {
	pos, ok, err := r.field(t, slot, size)
	if err != nil || !ok {
		return 0, err
	}
	b := r.b[pos : pos+size]
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	default:
		return binary.LittleEndian.Uint64(b), nil
	}
}

// ref follows the uoffset in field slot of t and returns its target.
func (r *fbReader) ref(t fbTable, slot int) (target uint64, ok bool, err error) {
	pos, ok, err := r.field(t, slot, 4)
	if err != nil || !ok {
		return 0, ok, err
	}
	return r.follow(pos)
}

// follow returns the target of the uoffset stored at pos.
func (r *fbReader) follow(pos uint64) (uint64, bool, error) {
	off, err := r.u32(pos)
	if err != nil {
		return 0, false, err
	}
	if off == 0 {
		return 0, false, fbErr("zero offset at %d", pos)
	}
	return pos + uint64(off), true, nil
}

// vector returns the start and length of the vector in field slot of t,
// whose elements are elem bytes each, after checking it lies in the buffer.
func (r *fbReader) vector(t fbTable, slot int, elem uint64) (start, n uint64, err error) {
	target, ok, err := r.ref(t, slot)
	if err != nil || !ok {
		return 0, 0, err
	}
	return r.vectorAt(target, elem)
}

func (r *fbReader) vectorAt(target, elem uint64) (start, n uint64, err error) {
	if target%4 != 0 {
		return 0, 0, fbErr("vector at %d is misaligned", target)
	}
	l, err := r.u32(target)
	if err != nil {
		return 0, 0, err
	}
	n = uint64(l)
	if _, err := r.span(target+4, n*elem); err != nil {
		return 0, 0, err
	}
	return target + 4, n, r.charge(4 + n*elem)
}

// str returns the string in field slot of t; ok is false if it is absent.
func (r *fbReader) str(t fbTable, slot int) (s string, ok bool, err error) {
	target, ok, err := r.ref(t, slot)
	if err != nil || !ok {
		return "", ok, err
	}
	start, n, err := r.vectorAt(target, 1)
	if err != nil {
		return "", false, err
	}
	term, err := r.span(start+n, 1)
	if err != nil || term[0] != 0 {
		return "", false, fbErr("string at %d is not NUL-terminated", target)
	}
	return string(r.b[start : start+n]), true, r.charge(1)
}

// tableVector returns the start and length of the vector of tables in field
// slot of t, after checking that the buffer has at least minBytes for each
// element (so that callers may allocate per element).
func (r *fbReader) tableVector(t fbTable, slot int, minBytes uint64) (start, n uint64, err error) {
	if start, n, err = r.vector(t, slot, 4); err != nil {
		return 0, 0, err
	}
	if n*minBytes > r.budget {
		return 0, 0, fbErr("vector of %d tables at %d does not fit in the buffer", n, start)
	}
	return start, n, nil
}

// tableAt returns element i of the vector of tables starting at start.
func (r *fbReader) tableAt(start, i uint64) (fbTable, error) {
	target, _, err := r.follow(start + 4*i)
	if err != nil {
		return fbTable{}, err
	}
	return r.table(target)
}
