// Package ref is a slow, obviously correct decoder of Glyd's packed layouts,
// written straight from docs/FORMAT.md (part I, the packed layouts)
// one element and one bit at a time. It shares no code with the fast decoder
// in package codec and serves as the oracle in its tests: for any input, the
// fast decoder must return the same bits, or fail where this one fails.
//
// It checks everything the specification requires of a packed tensor and
// reports the first violation with the status code the fast decoder uses:
// structural checks of every group first, then decoding group by group.
package ref

import (
	"github.com/glyd/glyd/core/status"
)

// Layout, dtype and plane numbers, as in the specification.
const (
	LayoutRaw      = 0
	LayoutFixed12  = 1
	LayoutSmallest = 2

	DTypeBF16 = 1
	DTypeFP16 = 2

	PlaneSM     = 0
	PlaneCode   = 1
	PlaneCode2  = 2
	PlaneCode3  = 3
	PlaneChunks = 4
	PlaneEscIdx = 5
	PlaneEscExp = 6
	NumPlanes   = 7

	// ChunkElements is the number of elements of a Smallest chunk.
	ChunkElements = 4096
	// MaxElements is the largest element count Glyd accepts (2^56).
	MaxElements = 1 << 56
)

// Group mirrors codec.Group.
type Group struct {
	Elements uint64
	Base     uint8
	Table    [6]uint8
	Offsets  [NumPlanes]uint64
	Escapes  uint64
}

// Tensor mirrors codec.Tensor (without the checksum).
type Tensor struct {
	Layout uint8
	DType  uint8
	Shape  []int64
	Groups []Group
	Planes [NumPlanes][]byte
}

func errf(c status.Code, format string, args ...any) error {
	return status.Errorf(c, "invalid input: "+format, args...)
}

// bit returns bit number pos of b, counting from the least significant bit
// of b[0] (bit 8j+k is bit k of byte j).
func bit(b []byte, pos uint64) uint64 {
	return uint64(b[pos/8]>>(pos%8)) & 1
}

// bits reads width bits starting at bit pos, least significant first.
func bits(b []byte, pos uint64, width uint64) uint64 {
	var v uint64
	for k := uint64(0); k < width; k++ {
		v |= bit(b, pos+k) << k
	}
	return v
}

// zeroFrom reports whether all bits of b from bit pos to the end are zero.
func zeroFrom(b []byte, pos uint64) bool {
	for p := pos; p < 8*uint64(len(b)); p++ {
		if bit(b, p) != 0 {
			return false
		}
	}
	return true
}

type dtypeInfo struct {
	maxExp uint64
	smBits uint64
}

func dtypeOf(d uint8) (dtypeInfo, bool) {
	switch d {
	case DTypeBF16:
		return dtypeInfo{maxExp: 255, smBits: 8}, true
	case DTypeFP16:
		return dtypeInfo{maxExp: 31, smBits: 11}, true
	}
	return dtypeInfo{}, false
}

// assemble puts the exponent field e and the sign+mantissa field sm together.
func (d dtypeInfo) assemble(e, sm uint64) uint16 {
	mantBits := d.smBits - 1
	sign := sm >> mantBits
	mant := sm & (1<<mantBits - 1)
	return uint16(sign<<15 | e<<mantBits | mant)
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// used reports whether a layout uses a plane.
func used(layout uint8, p int) bool {
	switch p {
	case PlaneSM, PlaneCode, PlaneEscIdx, PlaneEscExp:
		return true
	}
	return layout == LayoutSmallest
}

// fixedSize returns the slice size of plane p for a group, or false for the
// planes whose size depends on the data (Smallest level-2 and level-3).
func fixedSize(t *Tensor, d dtypeInfo, g *Group, p int) (uint64, bool) {
	n := g.Elements
	switch p {
	case PlaneSM:
		return ceilDiv(n*d.smBits, 8), true
	case PlaneCode:
		if t.Layout == LayoutFixed12 {
			return ceilDiv(n, 2), true
		}
		return ceilDiv(n, 4), true
	case PlaneChunks:
		if t.Layout == LayoutFixed12 {
			return 0, true
		}
		return 16 * ceilDiv(n, ChunkElements), true
	case PlaneEscIdx:
		return 4 * g.Escapes, true
	case PlaneEscExp:
		return g.Escapes, true
	case PlaneCode2, PlaneCode3:
		if t.Layout == LayoutFixed12 {
			return 0, true
		}
	}
	return 0, false
}

// slices holds, per group and plane, the [start, end) byte range.
type span struct{ start, end uint64 }

// Decode checks t and returns its elements in row-major order.
func Decode(t *Tensor) ([]uint16, error) {
	d, ok := dtypeOf(t.DType)
	if !ok {
		return nil, errf(status.DType, "unknown dtype %d", t.DType)
	}
	if t.Layout != LayoutFixed12 && t.Layout != LayoutSmallest {
		return nil, status.Errorf(status.InvalidArgument, "layout %d cannot be decoded", t.Layout)
	}
	// Shape: dimensions >= 0, product without overflow.
	total := uint64(1)
	zero := false
	for _, s := range t.Shape {
		if s < 0 {
			return nil, errf(status.Corrupt, "negative dimension %d", s)
		}
		if s == 0 {
			zero = true
		}
	}
	if zero {
		total = 0
	} else {
		for _, s := range t.Shape {
			if total > MaxElements/uint64(s) {
				return nil, errf(status.Overflow, "shape %v has too many elements", t.Shape)
			}
			total *= uint64(s)
		}
	}
	// Groups: at least one; G > 1 splits axis 0 into G equal parts.
	G := uint64(len(t.Groups))
	if G == 0 {
		return nil, errf(status.Corrupt, "no groups")
	}
	if G > 1 && (len(t.Shape) == 0 || uint64(t.Shape[0]) < G || uint64(t.Shape[0])%G != 0) {
		return nil, errf(status.Corrupt, "%d groups do not split shape %v along axis 0", G, t.Shape)
	}
	var sum uint64
	for _, g := range t.Groups {
		if g.Elements > MaxElements {
			return nil, errf(status.SizeMismatch, "group of %d elements", g.Elements)
		}
		if g.Elements > 1<<32-1 {
			return nil, errf(status.Corrupt, "group of %d elements: escape indices are uint32", g.Elements)
		}
		sum += g.Elements
	}
	if sum != total {
		return nil, errf(status.SizeMismatch, "groups hold %d elements, shape %v has %d", sum, t.Shape, total)
	}
	for i := range t.Groups {
		if t.Groups[i].Elements != total/G {
			return nil, errf(status.Corrupt, "group %d has %d elements, want %d", i, t.Groups[i].Elements, total/G)
		}
	}
	// Exponent base and table.
	for i, g := range t.Groups {
		if uint64(g.Base)+14 > d.maxExp {
			return nil, errf(status.ExponentTable, "group %d: base %d + 14 > %d", i, g.Base, d.maxExp)
		}
		if t.Layout == LayoutSmallest {
			for _, e := range g.Table {
				if uint64(e) > d.maxExp {
					return nil, errf(status.ExponentTable, "group %d: table entry %d > %d", i, e, d.maxExp)
				}
			}
		}
	}
	// Planes: each group's slice starts where the previous one ended; the
	// last one ends at the end of the plane. Unused planes are empty.
	sp := make([][NumPlanes]span, G)
	for p := 0; p < NumPlanes; p++ {
		plen := uint64(len(t.Planes[p]))
		if !used(t.Layout, p) {
			if plen != 0 {
				return nil, errf(status.Corrupt, "unused plane %d is not empty", p)
			}
		}
		var pos uint64
		for i := range t.Groups {
			g := &t.Groups[i]
			if g.Offsets[p] != pos {
				return nil, errf(status.Corrupt, "group %d plane %d: offset %d, want %d", i, p, g.Offsets[p], pos)
			}
			if p == PlaneEscIdx && g.Escapes > g.Elements {
				return nil, errf(status.EscapeRange, "group %d: %d escapes for %d elements", i, g.Escapes, g.Elements)
			}
			size, fixed := fixedSize(t, d, g, p)
			if !fixed {
				if i+1 < len(t.Groups) {
					next := t.Groups[i+1].Offsets[p]
					if next < pos {
						return nil, errf(status.Corrupt, "group %d plane %d: offsets go backwards", i+1, p)
					}
					size = next - pos
				} else {
					if plen < pos {
						return nil, errf(status.Corrupt, "plane %d: offset %d past its end", p, pos)
					}
					size = plen - pos
				}
			}
			if size > plen || pos > plen-size {
				return nil, errf(status.Corrupt, "group %d plane %d: %d bytes at %d past the end (%d)", i, p, size, pos, plen)
			}
			sp[i][p] = span{pos, pos + size}
			pos += size
		}
		if pos != plen {
			return nil, errf(status.Corrupt, "plane %d has %d bytes, groups use %d", p, plen, pos)
		}
	}
	// Escape lists: indices strictly ascending and inside the group;
	// exponents in range.
	for i, g := range t.Groups {
		idx := t.Planes[PlaneEscIdx][sp[i][PlaneEscIdx].start:sp[i][PlaneEscIdx].end]
		exp := t.Planes[PlaneEscExp][sp[i][PlaneEscExp].start:sp[i][PlaneEscExp].end]
		for k := uint64(0); k < g.Escapes; k++ {
			v := bits(idx, 32*k, 32)
			if v >= g.Elements {
				return nil, errf(status.EscapeRange, "group %d: escape index %d >= %d elements", i, v, g.Elements)
			}
			if k > 0 && v <= bits(idx, 32*(k-1), 32) {
				return nil, errf(status.EscapeRange, "group %d: escape indices not ascending at entry %d", i, k)
			}
			if uint64(exp[k]) > d.maxExp {
				return nil, errf(status.ExponentTable, "group %d: escaped exponent %d > %d", i, exp[k], d.maxExp)
			}
		}
	}
	// Chunk tables: the first entry is (0, 0), entries never decrease and
	// stay inside the group's level-2 and level-3 slices.
	if t.Layout == LayoutSmallest {
		for i, g := range t.Groups {
			ct := t.Planes[PlaneChunks][sp[i][PlaneChunks].start:sp[i][PlaneChunks].end]
			len2 := sp[i][PlaneCode2].end - sp[i][PlaneCode2].start
			len3 := sp[i][PlaneCode3].end - sp[i][PlaneCode3].start
			chunks := ceilDiv(g.Elements, ChunkElements)
			if chunks == 0 && (len2 != 0 || len3 != 0) {
				return nil, errf(status.Corrupt, "group %d: empty group with level-2/3 bytes", i)
			}
			var prev2, prev3 uint64
			for c := uint64(0); c < chunks; c++ {
				o2, o3 := bits(ct, 128*c, 64), bits(ct, 128*c+64, 64)
				if c == 0 && (o2 != 0 || o3 != 0) {
					return nil, errf(status.Corrupt, "group %d: first chunk offsets (%d, %d)", i, o2, o3)
				}
				if o2 < prev2 || o3 < prev3 || o2 > len2 || o3 > len3 {
					return nil, errf(status.Corrupt, "group %d chunk %d: offsets (%d, %d) out of order or range", i, c, o2, o3)
				}
				prev2, prev3 = o2, o3
			}
		}
	}

	out := make([]uint16, 0, total)
	for i := range t.Groups {
		var err error
		if t.Layout == LayoutFixed12 {
			out, err = decodeFixed12(t, d, i, sp[i], out)
		} else {
			out, err = decodeSmallest(t, d, i, sp[i], out)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func planeSlice(t *Tensor, sp [NumPlanes]span, p int) []byte {
	return t.Planes[p][sp[p].start:sp[p].end]
}

// escapes walks a group's escape list in element order.
type escapes struct {
	gi  int
	idx []byte
	exp []byte
	n   uint64
	k   uint64
}

// take returns the exponent of the escape of element i, which must be the
// next entry of the list.
func (e *escapes) take(i uint64) (uint64, error) {
	if e.k >= e.n {
		return 0, errf(status.EscapeMissing, "group %d element %d: escape code with no escape entry left", e.gi, i)
	}
	v := bits(e.idx, 32*e.k, 32)
	if v != i {
		return 0, errf(status.EscapeMissing, "group %d element %d: escape code, but next escape entry is element %d", e.gi, i, v)
	}
	x := uint64(e.exp[e.k])
	e.k++
	return x, nil
}

func (e *escapes) done() error {
	if e.k != e.n {
		return errf(status.EscapeMissing, "group %d: %d escape entries without escape code", e.gi, e.n-e.k)
	}
	return nil
}

func decodeFixed12(t *Tensor, d dtypeInfo, gi int, sp [NumPlanes]span, out []uint16) ([]uint16, error) {
	g := &t.Groups[gi]
	sm := planeSlice(t, sp, PlaneSM)
	code := planeSlice(t, sp, PlaneCode)
	esc := escapes{gi: gi, idx: planeSlice(t, sp, PlaneEscIdx), exp: planeSlice(t, sp, PlaneEscExp), n: g.Escapes}
	for i := uint64(0); i < g.Elements; i++ {
		c := bits(code, 4*i, 4)
		var e uint64
		if c == 15 {
			var err error
			if e, err = esc.take(i); err != nil {
				return nil, err
			}
		} else {
			e = uint64(g.Base) + c
		}
		out = append(out, d.assemble(e, bits(sm, d.smBits*i, d.smBits)))
	}
	if err := esc.done(); err != nil {
		return nil, err
	}
	if !zeroFrom(code, 4*g.Elements) {
		return nil, errf(status.Corrupt, "group %d: code padding bits are not zero", gi)
	}
	if !zeroFrom(sm, d.smBits*g.Elements) {
		return nil, errf(status.Corrupt, "group %d: sign+mantissa padding bits are not zero", gi)
	}
	return out, nil
}

func decodeSmallest(t *Tensor, d dtypeInfo, gi int, sp [NumPlanes]span, out []uint16) ([]uint16, error) {
	g := &t.Groups[gi]
	sm := planeSlice(t, sp, PlaneSM)
	code1 := planeSlice(t, sp, PlaneCode)
	code2 := planeSlice(t, sp, PlaneCode2)
	code3 := planeSlice(t, sp, PlaneCode3)
	ct := planeSlice(t, sp, PlaneChunks)
	esc := escapes{gi: gi, idx: planeSlice(t, sp, PlaneEscIdx), exp: planeSlice(t, sp, PlaneEscExp), n: g.Escapes}
	chunks := ceilDiv(g.Elements, ChunkElements)
	for c := uint64(0); c < chunks; c++ {
		start2, start3 := bits(ct, 128*c, 64), bits(ct, 128*c+64, 64)
		end2, end3 := uint64(len(code2)), uint64(len(code3))
		if c+1 < chunks {
			end2, end3 = bits(ct, 128*(c+1), 64), bits(ct, 128*(c+1)+64, 64)
		}
		seg2, seg3 := code2[start2:end2], code3[start3:end3]
		var j2, j3 uint64 // entries read from the level-2 and level-3 segments
		lo := c * ChunkElements
		hi := min(lo+ChunkElements, g.Elements)
		for i := lo; i < hi; i++ {
			var e uint64
			c1 := bits(code1, 2*i, 2)
			if c1 < 3 {
				e = uint64(g.Table[c1])
			} else {
				if 2*j2 >= 8*uint64(len(seg2)) {
					return nil, errf(status.Corrupt, "group %d chunk %d: level-2 segment too short", gi, c)
				}
				c2 := bits(seg2, 2*j2, 2)
				j2++
				if c2 < 3 {
					e = uint64(g.Table[3+c2])
				} else {
					if 4*j3 >= 8*uint64(len(seg3)) {
						return nil, errf(status.Corrupt, "group %d chunk %d: level-3 segment too short", gi, c)
					}
					c3 := bits(seg3, 4*j3, 4)
					j3++
					if c3 < 15 {
						e = uint64(g.Base) + c3
					} else {
						var err error
						if e, err = esc.take(i); err != nil {
							return nil, err
						}
					}
				}
			}
			out = append(out, d.assemble(e, bits(sm, d.smBits*i, d.smBits)))
		}
		if ceilDiv(2*j2, 8) != uint64(len(seg2)) || !zeroFrom(seg2, 2*j2) {
			return nil, errf(status.Corrupt, "group %d chunk %d: level-2 segment has %d bytes for %d entries or nonzero padding", gi, c, len(seg2), j2)
		}
		if ceilDiv(4*j3, 8) != uint64(len(seg3)) || !zeroFrom(seg3, 4*j3) {
			return nil, errf(status.Corrupt, "group %d chunk %d: level-3 segment has %d bytes for %d entries or nonzero padding", gi, c, len(seg3), j3)
		}
	}
	if err := esc.done(); err != nil {
		return nil, err
	}
	if !zeroFrom(code1, 2*g.Elements) {
		return nil, errf(status.Corrupt, "group %d: level-1 padding bits are not zero", gi)
	}
	if !zeroFrom(sm, d.smBits*g.Elements) {
		return nil, errf(status.Corrupt, "group %d: sign+mantissa padding bits are not zero", gi)
	}
	return out, nil
}
