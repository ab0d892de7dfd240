package codec

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// span is a byte range [lo, hi) of a plane.
type span struct{ lo, hi int }

// plan is a structurally valid tensor with the byte range of every group in
// every plane worked out: what the decoder needs to index planes safely.
type plan struct {
	t     *Tensor
	d     dtypeInfo
	total int               // elements of the tensor
	per   int               // elements of each group
	spans [][NumPlanes]span // per group
}

// NumElements returns the number of elements of the original tensor: the
// product of Shape (1 for a scalar). It returns 0 if a dimension is negative
// or the product exceeds MaxElements; Validate reports those as errors.
func (t *Tensor) NumElements() uint64 {
	n, err := shapeElements(t.Shape)
	if err != nil {
		return 0
	}
	return uint64(n)
}

// PackedBytes returns the sum of the plane lengths.
func (t *Tensor) PackedBytes() uint64 {
	var s uint64
	for _, p := range t.Planes {
		s += uint64(len(p))
	}
	return s
}

// BitsPerWeight returns 8*PackedBytes/NumElements, or 0 for an empty tensor.
func (t *Tensor) BitsPerWeight() float64 {
	n := t.NumElements()
	if n == 0 {
		return 0
	}
	return 8 * float64(t.PackedBytes()) / float64(n)
}

// EscapeFraction returns the fraction of elements stored as escapes, or 0 for
// an empty tensor.
func (t *Tensor) EscapeFraction() float64 {
	n := t.NumElements()
	if n == 0 {
		return 0
	}
	var e uint64
	for _, g := range t.Groups {
		e += g.Escapes
	}
	return float64(e) / float64(n)
}

// shapeElements returns the product of the dimensions: status.Corrupt for a
// negative dimension, status.Overflow past MaxElements. A zero dimension
// makes the product 0 whatever the others are.
func shapeElements(shape []int64) (int, error) {
	zero := false
	for _, s := range shape {
		if s < 0 {
			return 0, errCorrupt(status.Corrupt, "negative dimension %d in shape %v", s, shape)
		}
		zero = zero || s == 0
	}
	if zero {
		return 0, nil
	}
	n := uint64(1)
	for _, s := range shape {
		if n > MaxElements/uint64(s) {
			return 0, status.Errorf(status.Overflow, "shape %v has more than 2^56 elements", shape)
		}
		n *= uint64(s)
	}
	return int(n), nil
}

// Validate checks the structure of t cheaply (in time proportional to the
// number of groups, escapes and chunks, not elements): dtype and layout,
// shape against the group element counts, the exact length and offset of
// every group's slice of every plane, exponent bases and tables, escape
// counts, escape indices (ascending, in range) and exponents, and the chunk
// tables. A tensor that passes can be handed to Unpack without any risk of
// out-of-range indexing; Unpack still checks the codes themselves.
func (t *Tensor) Validate() error {
	p, err := newPlan(t)
	if err != nil {
		return err
	}
	for g := range t.Groups {
		if err := p.validateGroup(g); err != nil {
			return err
		}
	}
	return nil
}

// newPlan runs the checks of Validate that take time proportional to the
// number of groups, and works out the group slices.
func newPlan(t *Tensor) (*plan, error) {
	if t == nil {
		return nil, status.Errorf(status.InvalidArgument, "nil tensor")
	}
	d, ok := t.DType.info()
	if !ok {
		return nil, errCorrupt(status.DType, "unknown dtype %d", uint8(t.DType))
	}
	if t.Layout != Fixed12 && t.Layout != Smallest {
		return nil, status.Errorf(status.InvalidArgument, "layout %v cannot be decoded by codec", t.Layout)
	}
	total, err := shapeElements(t.Shape)
	if err != nil {
		return nil, err
	}
	G := len(t.Groups)
	if G == 0 {
		return nil, errCorrupt(status.Corrupt, "no groups")
	}
	if G > 1 && (len(t.Shape) == 0 || t.Shape[0] < int64(G) || t.Shape[0]%int64(G) != 0) {
		return nil, errCorrupt(status.Corrupt, "%d groups do not split shape %v along axis 0", G, t.Shape)
	}
	var sum uint64
	for _, g := range t.Groups {
		if g.Elements > MaxElements {
			return nil, errCorrupt(status.SizeMismatch, "group of %d elements", g.Elements)
		}
		if g.Elements > MaxGroupElements {
			return nil, errCorrupt(status.Corrupt, "group of %d elements exceeds 2^32-1 (escape indices are uint32)", g.Elements)
		}
		sum += g.Elements
	}
	if sum != uint64(total) {
		return nil, errCorrupt(status.SizeMismatch, "groups hold %d elements, shape %v has %d", sum, t.Shape, total)
	}
	per := total / G
	for i := range t.Groups {
		if t.Groups[i].Elements != uint64(per) {
			return nil, errCorrupt(status.Corrupt, "group %d has %d elements, want %d", i, t.Groups[i].Elements, per)
		}
	}
	for i := range t.Groups {
		g := &t.Groups[i]
		if int(g.Base)+14 > int(d.maxExp) {
			return nil, errCorrupt(status.ExponentTable, "group %d: base %d + 14 > %d", i, g.Base, d.maxExp)
		}
		if t.Layout == Smallest {
			for _, e := range g.Table {
				if e > d.maxExp {
					return nil, errCorrupt(status.ExponentTable, "group %d: table entry %d > %d", i, e, d.maxExp)
				}
			}
		}
	}

	p := &plan{t: t, d: d, total: total, per: per, spans: make([][NumPlanes]span, G)}
	for pl := Plane(0); pl < NumPlanes; pl++ {
		plen := len(t.Planes[pl])
		if !t.Layout.uses(pl) && plen != 0 {
			return nil, errCorrupt(status.Corrupt, "plane %v is not used by %v but has %d bytes", pl, t.Layout, plen)
		}
		pos := 0
		for i := range t.Groups {
			g := &t.Groups[i]
			if g.Offsets[pl] != uint64(pos) {
				return nil, errCorrupt(status.Corrupt, "group %d plane %v: offset %d, want %d", i, pl, g.Offsets[pl], pos)
			}
			if pl == PlaneEscIdx && g.Escapes > g.Elements {
				return nil, errCorrupt(status.EscapeRange, "group %d: %d escapes for %d elements", i, g.Escapes, g.Elements)
			}
			size, fixed := fixedSize(t.Layout, d, g, pl)
			if !fixed {
				var end uint64
				if i+1 < G {
					end = t.Groups[i+1].Offsets[pl]
				} else {
					end = uint64(plen)
				}
				if end < uint64(pos) || end > uint64(plen) {
					return nil, errCorrupt(status.Corrupt, "group %d plane %v: slice [%d, %d) out of order or past the end of the plane (%d bytes)", i, pl, pos, end, plen)
				}
				size = int(end) - pos
			}
			if size > plen-pos {
				return nil, errCorrupt(status.Corrupt, "group %d plane %v: %d bytes at offset %d run past the end of the plane (%d bytes)", i, pl, size, pos, plen)
			}
			p.spans[i][pl] = span{pos, pos + size}
			pos += size
		}
		if pos != plen {
			return nil, errCorrupt(status.Corrupt, "plane %v has %d bytes, its groups use %d", pl, plen, pos)
		}
	}
	return p, nil
}

// uses reports whether a layout stores anything in plane p.
func (l Layout) uses(p Plane) bool {
	switch p {
	case PlaneSM, PlaneCode, PlaneEscIdx, PlaneEscExp:
		return true
	case PlaneCode2, PlaneCode3, PlaneChunks:
		return l == Smallest
	}
	return false
}

// fixedSize returns the byte size of group g's slice of plane p, or false
// for Smallest's level-2 and level-3 planes whose size depends on the codes.
// Elements <= MaxElements and Escapes <= Elements keep it from overflowing.
func fixedSize(l Layout, d dtypeInfo, g *Group, p Plane) (int, bool) {
	n := int(g.Elements)
	switch p {
	case PlaneSM:
		return d.smSize(n), true
	case PlaneCode:
		return codeSize(l, n), true
	case PlaneEscIdx:
		return EscIdxBytes * int(g.Escapes), true
	case PlaneEscExp:
		return int(g.Escapes), true
	case PlaneChunks:
		if l == Smallest {
			return ChunkEntryBytes * numChunks(n), true
		}
		return 0, true
	case PlaneCode2, PlaneCode3:
		if l == Smallest {
			return 0, false
		}
		return 0, true
	}
	return 0, true
}

func (p *plan) slice(g int, pl Plane) []byte {
	s := p.spans[g][pl]
	return p.t.Planes[pl][s.lo:s.hi:s.hi]
}

// validateGroup runs the checks of Validate on group g's escape list and
// chunk table.
func (p *plan) validateGroup(gi int) error {
	g := &p.t.Groups[gi]
	idx := p.slice(gi, PlaneEscIdx)
	exp := p.slice(gi, PlaneEscExp)
	n := int(g.Escapes)
	if len(idx) != EscIdxBytes*n || len(exp) != n {
		return status.Errorf(status.Internal, "group %d: escape slices do not match the count", gi)
	}
	prev := uint64(0)
	for k := 0; k < n; k++ {
		v := uint64(binary.LittleEndian.Uint32(idx[EscIdxBytes*k:]))
		if v >= g.Elements {
			return errCorrupt(status.EscapeRange, "group %d: escape index %d >= %d elements", gi, v, g.Elements)
		}
		if k > 0 && v <= prev {
			return errCorrupt(status.EscapeRange, "group %d: escape indices not ascending at entry %d (%d after %d)", gi, k, v, prev)
		}
		prev = v
	}
	for k := 0; k < n; k++ {
		if exp[k] > p.d.maxExp {
			return errCorrupt(status.ExponentTable, "group %d: escaped exponent %d > %d", gi, exp[k], p.d.maxExp)
		}
	}
	if p.t.Layout == Smallest {
		return p.validateChunks(gi)
	}
	return nil
}

// validateChunks checks a Smallest group's chunk table: the first entry is
// (0, 0); entries never decrease; every segment fits in its slice and is no
// longer than a chunk's codes can be.
func (p *plan) validateChunks(gi int) error {
	ct := p.slice(gi, PlaneChunks)
	len2 := uint64(p.spans[gi][PlaneCode2].hi - p.spans[gi][PlaneCode2].lo)
	len3 := uint64(p.spans[gi][PlaneCode3].hi - p.spans[gi][PlaneCode3].lo)
	chunks := numChunks(p.per)
	if chunks == 0 {
		if len2 != 0 || len3 != 0 {
			return errCorrupt(status.Corrupt, "group %d: empty group with %d level-2 and %d level-3 bytes", gi, len2, len3)
		}
		return nil
	}
	var prev2, prev3 uint64
	for c := 0; c < chunks; c++ {
		o2 := binary.LittleEndian.Uint64(ct[ChunkEntryBytes*c:])
		o3 := binary.LittleEndian.Uint64(ct[ChunkEntryBytes*c+8:])
		if c == 0 && (o2 != 0 || o3 != 0) {
			return errCorrupt(status.Corrupt, "group %d: first chunk offsets are (%d, %d), want (0, 0)", gi, o2, o3)
		}
		if o2 < prev2 || o3 < prev3 || o2 > len2 || o3 > len3 {
			return errCorrupt(status.Corrupt, "group %d chunk %d: offsets (%d, %d) out of order or past the level-2/3 slices (%d, %d bytes)", gi, c, o2, o3, len2, len3)
		}
		if c > 0 {
			if err := checkSegments(gi, c-1, o2-prev2, o3-prev3); err != nil {
				return err
			}
		}
		prev2, prev3 = o2, o3
	}
	return checkSegments(gi, chunks-1, len2-prev2, len3-prev3)
}

// maxSeg2 and maxSeg3 bound a chunk's level-2 and level-3 segments.
const (
	maxSeg2 = ChunkElements / 4
	maxSeg3 = ChunkElements / 2
)

func checkSegments(gi, c int, s2, s3 uint64) error {
	if s2 > maxSeg2 || s3 > maxSeg3 {
		return errCorrupt(status.Corrupt, "group %d chunk %d: level-2/3 segments of %d and %d bytes are longer than a chunk's codes", gi, c, s2, s3)
	}
	return nil
}

// chunkSegments returns chunk c's level-2 and level-3 segments of group gi
// (validateChunks has checked the table).
func (p *plan) chunkSegments(gi, c int) (seg2, seg3 []byte) {
	ct := p.slice(gi, PlaneChunks)
	code2 := p.slice(gi, PlaneCode2)
	code3 := p.slice(gi, PlaneCode3)
	o2 := int(binary.LittleEndian.Uint64(ct[ChunkEntryBytes*c:]))
	o3 := int(binary.LittleEndian.Uint64(ct[ChunkEntryBytes*c+8:]))
	e2, e3 := len(code2), len(code3)
	if (c+1)*ChunkEntryBytes < len(ct) {
		e2 = int(binary.LittleEndian.Uint64(ct[ChunkEntryBytes*(c+1):]))
		e3 = int(binary.LittleEndian.Uint64(ct[ChunkEntryBytes*(c+1)+8:]))
	}
	return code2[o2:e2:e2], code3[o3:e3:e3]
}
