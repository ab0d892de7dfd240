package codec

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// Fixed12 codes: PlaneCode holds one 4-bit code per element, two per byte,
// low nibble first. Code c < 15 stands for exponent Base+c; code 15 is an
// escape, whose exponent is the next entry of the group's escape list.

const bytes8 = 0x0101010101010101

// escWriter appends escape entries to a group's escape planes.
type escWriter struct {
	idx []byte // PlaneEscIdx slice, 8 bytes per entry
	exp []byte // PlaneEscExp slice, 1 byte per entry
	k   int
}

func (w *escWriter) add(i int, e byte) bool {
	if w.k >= len(w.exp) || EscIdxBytes*w.k+EscIdxBytes > len(w.idx) {
		return false
	}
	binary.LittleEndian.PutUint64(w.idx[EscIdxBytes*w.k:], uint64(i))
	w.exp[w.k] = e
	w.k++
	return true
}

// escReader walks the escape entries of one unit of a group, in order.
type escReader struct {
	gi  int
	idx []byte
	exp []byte
	k   int // next entry
	end int // one past the unit's last entry
}

// take returns the exponent of element i (an index within the group) whose
// code is an escape: it must be the next entry.
func (r *escReader) take(i int) (byte, error) {
	if r.k >= r.end {
		return 0, errCorrupt(status.EscapeMissing, "group %d element %d: escape code with no escape entry left", r.gi, i)
	}
	v := binary.LittleEndian.Uint64(r.idx[EscIdxBytes*r.k:])
	if v != uint64(i) {
		return 0, errCorrupt(status.EscapeMissing, "group %d element %d: escape code, but the next escape entry is element %d", r.gi, i, v)
	}
	e := r.exp[r.k]
	r.k++
	return e, nil
}

// done checks that every entry of the unit was taken.
func (r *escReader) done() error {
	if r.k != r.end {
		v := binary.LittleEndian.Uint64(r.idx[EscIdxBytes*r.k:])
		return errCorrupt(status.EscapeMissing, "group %d: escape entry for element %d has no escape code", r.gi, v)
	}
	return nil
}

// fixed12Codes returns the code of every exponent for a group with base b.
func fixed12Codes(b uint8) (lut [256]uint8) {
	for e := range lut {
		c := e - int(b)
		if c < 0 || c > 14 {
			c = 15
		}
		lut[e] = uint8(c)
	}
	return lut
}

// encodeFixed12 writes the codes of exps to code (ceil(len(exps)/2) bytes)
// and the escapes to esc; start is the group index of exps[0]. It reports
// false if esc runs out of room (the counts disagree: a bug).
func encodeFixed12(exps, code []byte, base uint8, lut *[256]uint8, start int, esc *escWriter) bool {
	n := len(exps)
	code = code[:(n+1)/2]
	const hi = 0x8080808080808080
	bb := uint64(base) * bytes8
	i := 0
	for ; i+8 <= n; i += 8 {
		e := binary.LittleEndian.Uint64(exps[i:])
		// d = e - base in every byte, without borrows between bytes.
		d := ((e | hi) - bb) ^ ((e ^ ^bb) & hi)
		// An escape where d > 14: bit 7 set, or low 7 bits >= 15.
		if ((d&^hi)+0x7171717171717171|d)&hi != 0 {
			for j := i; j < i+8; j += 2 {
				c0, c1 := lut[exps[j]], lut[exps[j+1]]
				if c0 == 15 && !esc.add(start+j, exps[j]) || c1 == 15 && !esc.add(start+j+1, exps[j+1]) {
					return false
				}
				code[j/2] = c0 | c1<<4
			}
			continue
		}
		d = (d | d>>4) & 0x00FF00FF00FF00FF
		binary.LittleEndian.PutUint32(code[i/2:], uint32(compact4(d)))
	}
	for ; i < n; i += 2 {
		c0 := lut[exps[i]]
		if c0 == 15 && !esc.add(start+i, exps[i]) {
			return false
		}
		var c1 uint8
		if i+1 < n {
			c1 = lut[exps[i+1]]
			if c1 == 15 && !esc.add(start+i+1, exps[i+1]) {
				return false
			}
		}
		code[i/2] = c0 | c1<<4
	}
	return true
}

// decodeFixed12 writes to exps the exponents of the codes (len(exps) of
// them); start is the group index of exps[0]. It checks escape codes
// against the escape list and the padding nibble.
func decodeFixed12(code, exps []byte, base uint8, start int, esc *escReader) error {
	n := len(exps)
	code = code[:(n+1)/2]
	bb := uint64(base) * bytes8
	i := 0
	for ; i+8 <= n; i += 8 {
		x := uint64(binary.LittleEndian.Uint32(code[i/2:]))
		x = (x | x<<16) & 0x0000FFFF0000FFFF
		x = (x | x<<8) & 0x00FF00FF00FF00FF
		x = (x | x<<4) & 0x0F0F0F0F0F0F0F0F
		if (x+bytes8)&0x1010101010101010 != 0 {
			if err := decodeFixed12Slow(code, exps, base, start, esc, i, i+8); err != nil {
				return err
			}
			continue
		}
		binary.LittleEndian.PutUint64(exps[i:], x+bb)
	}
	if err := decodeFixed12Slow(code, exps, base, start, esc, i, n); err != nil {
		return err
	}
	if n%2 == 1 && code[n/2]>>4 != 0 {
		return errCorrupt(status.Corrupt, "group %d: padding nibble after element %d is not zero", esc.gi, start+n-1)
	}
	return nil
}

func decodeFixed12Slow(code, exps []byte, base uint8, start int, esc *escReader, lo, hi int) error {
	for j := lo; j < hi; j++ {
		c := code[j/2] >> (4 * (j & 1)) & 15
		if c == 15 {
			e, err := esc.take(start + j)
			if err != nil {
				return err
			}
			exps[j] = e
		} else {
			exps[j] = base + c
		}
	}
	return nil
}
