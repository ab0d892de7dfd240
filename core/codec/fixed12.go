package codec

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// Fixed12 codes: PlaneCode holds one 4-bit code per element, two per byte,
// low nibble first. Code c < 15 stands for exponent Base+c; code 15 is an
// escape, whose exponent is the next entry of the group's escape list.

// escWriter appends escape entries to a group's escape planes.
type escWriter struct {
	idx []byte // PlaneEscIdx slice, 4 bytes per entry (uint32)
	exp []byte // PlaneEscExp slice, 1 byte per entry
	k   int
}

func (w *escWriter) add(i int, e uint8) bool {
	if w.k >= len(w.exp) || EscIdxBytes*w.k+EscIdxBytes > len(w.idx) {
		return false
	}
	binary.LittleEndian.PutUint32(w.idx[EscIdxBytes*w.k:], uint32(i))
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
func (r *escReader) take(i int) (uint8, error) {
	if r.k >= r.end {
		return 0, errCorrupt(status.EscapeMissing, "group %d element %d: escape code with no escape entry left", r.gi, i)
	}
	v := binary.LittleEndian.Uint32(r.idx[EscIdxBytes*r.k:])
	if uint64(v) != uint64(i) {
		return 0, errCorrupt(status.EscapeMissing, "group %d element %d: escape code, but the next escape entry is element %d", r.gi, i, v)
	}
	e := r.exp[r.k]
	r.k++
	return e, nil
}

// done checks that every entry of the unit was taken.
func (r *escReader) done() error {
	if r.k != r.end {
		v := binary.LittleEndian.Uint32(r.idx[EscIdxBytes*r.k:])
		return errCorrupt(status.EscapeMissing, "group %d: escape entry for element %d has no escape code", r.gi, v)
	}
	return nil
}

// windowLanes returns, for the exponents e (in place in four lanes, already
// shifted down and masked), a = e + 0x4000 - base in each lane, and a mask
// with bit 14 or 15 set in the lanes whose exponent is outside the window
// [base, base+14]. For the others, a's low nibble is e - base.
func windowLanes(e uint64, base uint8) (a, out uint64) {
	a = e + (0x4000-uint64(base))*lanes1 // e - base + 0x4000, in [0x3F01, 0x40FF]
	// In the window iff 0x4000 <= a <= 0x400E: bit 14 set, and a + 0x3FF1
	// does not reach bit 15.
	out = ^a&lanesBit14 | (a+0x3FF1*lanes1)&lanesBit15
	return a, out
}

// encodeFixed12 writes the codes of the elements x to code (ceil(len(x)/2)
// bytes) and, for bf16, their sign+mantissa bytes to sm (len(x) bytes);
// escapes go to esc. start is the group index of x[0]. It reports false if
// esc runs out of room (the counts disagree: a bug).
func encodeFixed12(x []uint16, sm, code []byte, f field, base uint8, start int, esc *escWriter) bool {
	n := len(x)
	code = code[:(n+1)/2]
	if f.bf16 {
		sm = sm[:n]
	}
	i := 0
	if f.bf16 && littleEndian && !forceGeneric {
		xb := u16bytes(x)
		for {
			i = encodeFixed12BF16(xb, sm, code, base, i)
			if i+8 > n {
				break
			}
			// The block at i has an escape.
			if !encodeFixed12Slow(x, sm, code, f, base, start, esc, i, i+8) {
				return false
			}
			i += 8
		}
	}
	return encodeFixed12Slow(x, sm, code, f, base, start, esc, i, n)
}

// encodeFixed12BF16 codes bf16 elements (as bytes xb) from i on, eight at a
// time, until the end or a block of eight with an escape; it returns where
// it stopped.
func encodeFixed12BF16(xb, sm, code []byte, base uint8, i int) int {
	n := len(xb) / 2
	bl := (0x4000 - uint64(base)) * lanes1
	for ; i+8 <= n; i += 8 {
		b := xb[2*i : 2*i+16]
		w0, w1 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		// e - base + 0x4000 in each lane: in the window iff in [0x4000,
		// 0x400E], that is bit 14 set and no bit 15 after adding 0x3FF1.
		a0 := w0>>7&lanesByte + bl
		a1 := w1>>7&lanesByte + bl
		if (^(a0&a1)&lanesBit14 | ((a0+0x3FF1*lanes1)|(a1+0x3FF1*lanes1))&lanesBit15) != 0 {
			return i
		}
		s0 := (w0>>8)&lanesBit7 | w0&lanesLo7
		s1 := (w1>>8)&lanesBit7 | w1&lanesLo7
		s0 = (s0 | s0>>8) & 0x0000FFFF0000FFFF
		s1 = (s1 | s1>>8) & 0x0000FFFF0000FFFF
		binary.LittleEndian.PutUint64(sm[i:i+8], (s0|s0>>16)&0xFFFFFFFF|(s1|s1>>16)<<32)
		a0 &= lanesNibble
		a1 &= lanesNibble
		a0 |= a0 >> 12 // codes of lanes 0,1 in bits 0..7, of lanes 2,3 in bits 32..39
		a1 |= a1 >> 12
		binary.LittleEndian.PutUint32(code[i/2:i/2+4], uint32(a0&0xFF|a0>>24&0xFF00|a1<<16&0xFF0000|a1>>8&0xFF000000))
	}
	return i
}

// encodeFixed12Slow codes elements [lo, hi) one at a time (lo even).
func encodeFixed12Slow(x []uint16, sm, code []byte, f field, base uint8, start int, esc *escWriter, lo, hi int) bool {
	for j := lo; j < hi; j++ {
		v := x[j]
		if f.bf16 {
			sm[j] = uint8(v>>8)&0x80 | uint8(v)&0x7F
		}
		e := uint8(v>>f.shift) & uint8(f.mask)
		c := e - base
		if c > 14 {
			c = 15
			if !esc.add(start+j, e) {
				return false
			}
		}
		if j%2 == 0 {
			code[j/2] = c
		} else {
			code[j/2] |= c << 4
		}
	}
	return true
}

// nibbleLanes puts the four 4-bit codes of c (low nibble first) in the low
// nibbles of four lanes.
func nibbleLanes(c uint16) uint64 {
	x := uint64(c)
	x = (x | x<<24) & 0x000000FF000000FF
	return (x | x<<12) & lanesNibble
}

// decodeFixed12 writes to x (len(x) elements) the exponents of the codes
// in place and, for bf16, the sign+mantissa bytes sm; start is the group
// index of x[0]. It checks the escape codes against the escape list and the
// padding nibble.
func decodeFixed12(code, sm []byte, x []uint16, f field, base uint8, start int, esc *escReader) error {
	n := len(x)
	code = code[:(n+1)/2]
	if f.bf16 {
		sm = sm[:n]
	}
	i := 0
	if f.bf16 && littleEndian && !forceGeneric {
		xb := u16bytes(x)
		for {
			i = decodeFixed12BF16(code, sm, xb, base, i)
			if i+8 > n {
				break
			}
			// The block at i has an escape code.
			if err := decodeFixed12Slow(code, sm, x, f, base, start, esc, i, i+8); err != nil {
				return err
			}
			i += 8
		}
	}
	if err := decodeFixed12Slow(code, sm, x, f, base, start, esc, i, n); err != nil {
		return err
	}
	if n%2 == 1 && code[n/2]>>4 != 0 {
		return errCorrupt(status.Corrupt, "group %d: padding nibble after element %d is not zero", esc.gi, start+n-1)
	}
	return nil
}

// decodeFixed12BF16 decodes bf16 elements (into the bytes xb) from i on,
// eight at a time, until the end or a block of eight with an escape code;
// it returns where it stopped.
func decodeFixed12BF16(code, sm, xb []byte, base uint8, i int) int {
	n := len(xb) / 2
	bl := uint64(base) * lanes1
	for ; i+8 <= n; i += 8 {
		c := binary.LittleEndian.Uint32(code[i/2 : i/2+4])
		c0 := uint64(c & 0xFFFF)
		c1 := uint64(c >> 16)
		c0 = (c0 | c0<<24) & 0x000000FF000000FF
		c1 = (c1 | c1<<24) & 0x000000FF000000FF
		c0 = (c0 | c0<<12) & lanesNibble
		c1 = (c1 | c1<<12) & lanesNibble
		if ((c0+lanes1)|(c1+lanes1))&lanesBit4 != 0 { // a code 15
			return i
		}
		s := binary.LittleEndian.Uint64(sm[i : i+8])
		s0 := s & 0xFFFFFFFF
		s1 := s >> 32
		s0 = (s0 | s0<<16) & 0x0000FFFF0000FFFF
		s1 = (s1 | s1<<16) & 0x0000FFFF0000FFFF
		s0 = (s0 | s0<<8) & lanesByte
		s1 = (s1 | s1<<8) & lanesByte
		b := xb[2*i : 2*i+16]
		binary.LittleEndian.PutUint64(b, (c0+bl)<<7|(s0&lanesBit7)<<8|s0&lanesLo7)
		binary.LittleEndian.PutUint64(b[8:], (c1+bl)<<7|(s1&lanesBit7)<<8|s1&lanesLo7)
	}
	return i
}

// decodeFixed12Slow decodes elements [lo, hi) one at a time.
func decodeFixed12Slow(code, sm []byte, x []uint16, f field, base uint8, start int, esc *escReader, lo, hi int) error {
	for j := lo; j < hi; j++ {
		c := code[j/2] >> (4 * (j & 1)) & 15
		e := base + c
		if c == 15 {
			var err error
			if e, err = esc.take(start + j); err != nil {
				return err
			}
		}
		v := uint16(e) << f.shift
		if f.bf16 {
			v |= smOneBF16(sm[j])
		}
		x[j] = v
	}
	return nil
}
