package codec

import (
	"encoding/binary"
	"math/bits"

	"github.com/glyd/glyd/core/status"
)

// Smallest codes: a 2-bit level-1 code per element in PlaneCode (c1 < 3:
// exponent Table[c1]); the elements with c1 = 3 take the next 2-bit level-2
// code of their chunk's segment in PlaneCode2 (c2 < 3: Table[3+c2]); those
// with c2 = 3 take the next 4-bit level-3 code of the chunk's segment in
// PlaneCode3 (c3 < 15: Base+c3; 15: escape).
//
// Both coders work on blocks of four elements: one level-1 byte.

// Segment buffers: a chunk's level-2 and level-3 segments are copied into
// (decoder) or built in (encoder) buffers with 8 bytes of slack so that
// they can be read and written a word at a time.
const (
	seg2Buf = maxSeg2 + 8
	seg3Buf = maxSeg3 + 8
)

// chooseSmallest picks the table (the 6 most frequent exponents, ties to
// the smaller exponent; unused slots 0) and the base (the window of 15
// exponents covering most of the others) of a group with histogram h, and
// returns how many table slots are used (the exponents present, up to 6).
func chooseSmallest(h *[256]uint64, maxExp uint8) (table [6]uint8, used int, base uint8) {
	var in [256]bool
	for r := range table {
		best := -1
		for e := 0; e <= int(maxExp); e++ {
			if !in[e] && h[e] > 0 && (best < 0 || h[e] > h[best]) {
				best = e
			}
		}
		if best < 0 {
			break
		}
		in[best] = true
		table[r] = uint8(best)
		used++
	}
	var rem [256]uint64
	for e := 0; e <= int(maxExp); e++ {
		if !in[e] {
			rem[e] = h[e]
		}
	}
	return table, used, chooseBase(&rem, maxExp)
}

// chooseBase returns the start of the window of 15 consecutive exponents
// that covers the most of h (ties: the smallest base), with base+14 <= maxExp.
func chooseBase(h *[256]uint64, maxExp uint8) uint8 {
	var cover uint64
	for e := 0; e < 15; e++ {
		cover += h[e]
	}
	best, bestCover := 0, cover
	for b := 1; b+14 <= int(maxExp); b++ {
		cover += h[b+14] - h[b-1]
		if cover > bestCover {
			best, bestCover = b, cover
		}
	}
	return uint8(best)
}

// Symbols: the encoder first maps each exponent to a symbol, 0..5 for the
// table slots, symL3 for the base window and symEsc for an escape; four
// symbols (12 bits) then index the static table encTable.
const (
	symL3  = 6
	symEsc = 7
)

// smallestSyms returns the symbol of every exponent for a group whose
// first used table slots are taken (the others are unused zeros).
func smallestSyms(table [6]uint8, used int, base uint8) (sym [256]uint8) {
	for e := range sym {
		if e >= int(base) && e <= int(base)+14 {
			sym[e] = symL3
		} else {
			sym[e] = symEsc
		}
	}
	for r := min(used, len(table)) - 1; r >= 0; r-- {
		sym[table[r]] = uint8(r)
	}
	return sym
}

// encTable[s0 | s1<<3 | s2<<6 | s3<<9], for the symbols of the four
// elements of a block, holds their level-1 byte (bits 0..7), their level-2
// codes packed in order (bits 8..15), the number of level-2 bits (bits
// 16..19) and the mask of elements that take a level-3 code (bits 20..23).
var encTable = func() (t [4096]uint32) {
	for s4 := range t {
		var l1, l2, n2, l3 int
		for j := 0; j < 4; j++ {
			s := s4 >> (3 * j) & 7
			l1 |= min(s, 3) << (2 * j)
			if s >= 3 {
				l2 |= min(s-3, 3) << n2
				n2 += 2
				if s >= symL3 {
					l3 |= 1 << j
				}
			}
		}
		t[s4] = uint32(l1 | l2<<8 | n2<<16 | l3<<20)
	}
	return t
}()

// l3Table[m], for the mask m of the elements of a block that take a level-3
// code, holds 0xFFFF (sel) and 0x000F (sel4) in their lanes, the position
// of each one's code among the block's level-3 bits in byte j of sh (4 *
// its rank among them; 0 for the others), and the number of those bits.
var l3Table = func() (t [16]struct {
	sel, sel4 uint64
	sh        uint32
	bits      uint
}) {
	for m := range t {
		r := 0
		for j := 0; j < 4; j++ {
			if m>>j&1 != 0 {
				t[m].sel |= 0xFFFF << (16 * j)
				t[m].sel4 |= 0xF << (16 * j)
				t[m].sh |= uint32(4*r) << (8 * j)
				r++
			}
		}
		t[m].bits = uint(4 * r)
	}
	return t
}()

// smallestCounts returns how many of the n elements of a chunk with
// histogram h take a level-2 code, a level-3 code, and an escape, for a
// group with symbols sym whose first used table slots are taken. It reads
// the 21 entries of the table slots and the base window, not all 256.
func smallestCounts(h *[256]uint16, sym *[256]uint8, table [6]uint8, used int, base uint8, n int) (n2, n3, nesc int) {
	n2, n3 = n, n
	for r, e := range table[:used] {
		if r < 3 {
			n2 -= int(h[e])
		}
		n3 -= int(h[e])
	}
	nesc = n3
	for e := int(base); e <= int(base)+14; e++ {
		if sym[e] == symL3 {
			nesc -= int(h[e])
		}
	}
	return
}

// bitWriter appends little-endian bit fields to a buffer with 8 bytes of
// slack past the longest content.
type bitWriter struct {
	buf []byte
	acc uint64
	nb  uint // bits pending in acc (< 8 after flush)
	q   int  // bytes written
}

// flush writes the whole bytes of acc.
func (w *bitWriter) flush() bool {
	if w.q+8 > len(w.buf) {
		return false
	}
	binary.LittleEndian.PutUint64(w.buf[w.q:], w.acc)
	w.q += int(w.nb >> 3)
	w.acc >>= w.nb &^ 7
	w.nb &= 7
	return true
}

// finish writes the last partial byte and returns the length.
func (w *bitWriter) finish() (int, bool) {
	if !w.flush() {
		return 0, false
	}
	if w.nb > 0 {
		w.q++
	}
	return w.q, true
}

// smallestEnc is the state of the encoder within one chunk.
type smallestEnc struct {
	x          []uint16
	sm, code1  []byte
	f          field
	sym        *[256]uint8
	base       uint8
	start      int
	esc        *escWriter
	w2, w3     bitWriter
	overflowed bool
}

// encodeSmallest codes the elements x of one chunk (generic version; see
// encodeSmallestFast): level-1 codes to code1
// (ceil(len(x)/4) bytes), level-2 and level-3 segments to buf2 and buf3
// (seg2Buf and seg3Buf bytes of scratch), escapes to esc, and for bf16 the
// sign+mantissa bytes to sm. start is the group index of x[0]. It returns
// the segment lengths in bytes, and false if a buffer runs out of room (a
// bug).
func encodeSmallest(x []uint16, sm, code1, buf2, buf3 []byte, f field, sym *[256]uint8, base uint8, start int, esc *escWriter) (len2, len3 int, ok bool) {
	n := len(x)
	st := smallestEnc{x: x, code1: code1[:(n+3)/4], f: f, sym: sym, base: base, start: start, esc: esc,
		w2: bitWriter{buf: buf2[:seg2Buf]}, w3: bitWriter{buf: buf3[:seg3Buf]}}
	if f.bf16 {
		st.sm = sm[:n]
	}
	for i := 0; i < n; i += 4 {
		st.block(i)
	}
	len2, ok2 := st.w2.finish()
	len3, ok3 := st.w3.finish()
	return len2, len3, ok2 && ok3 && !st.overflowed && len2 <= maxSeg2 && len3 <= maxSeg3
}

// block codes the block of (up to) four elements at i, one at a time.
func (st *smallestEnc) block(i int) {
	n := len(st.x)
	var s uint32 // the block's symbols; padding symbols 0
	for j := i; j < min(i+4, n); j++ {
		v := st.x[j]
		s |= uint32(st.sym[uint8(v>>st.f.shift)&uint8(st.f.mask)]) << (3 * (j - i))
		if st.f.bf16 {
			st.sm[j] = uint8(v>>8)&0x80 | uint8(v)&0x7F
		}
	}
	te := encTable[s&4095]
	st.code1[i/4] = byte(te)
	st.w2.acc |= uint64(te>>8&0xFF) << (st.w2.nb & 63)
	st.w2.nb += uint(te >> 16 & 0xF)
	for j := 0; j < 4; j++ {
		if te>>(20+j)&1 == 0 {
			continue
		}
		e := uint8(st.x[i+j]>>st.f.shift) & uint8(st.f.mask)
		c := uint64(e - st.base)
		if c > 14 {
			c = 15
			if !st.esc.add(st.start+i+j, e) {
				st.overflowed = true
			}
		}
		st.w3.acc |= c << (st.w3.nb & 63)
		st.w3.nb += 4
	}
	if !st.w2.flush() || !st.w3.flush() {
		st.overflowed = true
	}
}

// t2Off[m] is where the level-2 entries for the level-1 mask m (the
// elements of a block with c1 = 3) start in smallestDecTables.t2: the sum
// over m' < m of 4^popcount(m').
var t2Off = func() (o [17]int) {
	for m := 0; m < 16; m++ {
		o[m+1] = o[m] + 1<<(2*bits.OnesCount(uint(m)))
	}
	return o
}()

// smallestDecTables decode one level-1 byte (a block of four elements) at
// a time, for one exponent table and one dtype.
//
// t1[b] holds the exponents, in place in their lanes, of the elements of
// level-1 byte b with c1 < 3 (0 in the other lanes). t1m[b] holds t2Off[m]
// for the mask m of the others (bits 0..9), the mask of their
// 2*popcount(m) level-2 bits (bits 16..23) and that count (bits 24..27).
//
// t2[t2Off[m] + x], for the level-2 codes x of the elements of m in order,
// holds the exponents of those with c2 < 3 in their lanes, and bit 15 in
// the lanes of those with c2 = 3, which take a level-3 code.
type smallestDecTables struct {
	t1  [256]uint64
	t1m [256]uint32
	t2  [1024]uint64 // 625 used

	table [6]uint8 // what the tables were built for
	shift uint
	built bool
}

// build makes the tables for an exponent table and field, unless they are
// already built for them.
func (d *smallestDecTables) build(table [6]uint8, f field) {
	if d.built && d.table == table && d.shift == f.shift {
		return
	}
	for b := range d.t1 {
		var lanes uint64
		var m int
		for j := 0; j < 4; j++ {
			if c1 := b >> (2 * j) & 3; c1 < 3 {
				lanes |= uint64(table[c1]) << (16*j + int(f.shift))
			} else {
				m |= 1 << j
			}
		}
		k := bits.OnesCount(uint(m))
		d.t1[b] = lanes
		d.t1m[b] = uint32(t2Off[m] | (1<<(2*k)-1)<<16 | (2*k)<<24)
	}
	for m := 0; m < 16; m++ {
		k := bits.OnesCount(uint(m))
		for x := 0; x < 1<<(2*k); x++ {
			var lanes uint64
			r := 0
			for j := 0; j < 4; j++ {
				if m>>j&1 == 0 {
					continue
				}
				if c2 := x >> (2 * r) & 3; c2 < 3 {
					lanes |= uint64(table[3+c2]) << (16*j + int(f.shift))
				} else {
					lanes |= 0x8000 << (16 * j)
				}
				r++
			}
			d.t2[t2Off[m]+x] = lanes
		}
	}
	d.table, d.shift, d.built = table, f.shift, true
}

// gatherBit15 returns bit 15 of the four lanes of w as a 4-bit mask.
func gatherBit15(w uint64) uint32 {
	return uint32((w>>15&lanes1)*(1|1<<15|1<<30|1<<45)>>45) & 15
}

// smallestDec is the state of the decoder within one chunk.
type smallestDec struct {
	code1, sm  []byte
	buf2, buf3 []byte
	x          []uint16
	f          field
	d          *smallestDecTables
	base       uint8
	start      int
	esc        *escReader
	p2, p3     int // bits taken from the level-2 and level-3 segments
}

// decodeSmallest (generic version; see decodeSmallestFast) writes to x
// (len(x) elements) the exponents of one chunk
// in place, from its level-1 codes and its level-2 and level-3 segments,
// and for bf16 the sign+mantissa bytes sm; start is the group index of
// x[0]; buf2 and buf3 are scratch (seg2Buf and seg3Buf bytes). It checks
// that the segments hold exactly the codes the chunk takes, that their
// padding bits and those after the last level-1 code are zero, and the
// escapes.
func decodeSmallest(code1, seg2, seg3, sm []byte, x []uint16, f field, d *smallestDecTables, base uint8, start int, esc *escReader, buf2, buf3 []byte) error {
	n := len(x)
	if len(seg2) > maxSeg2 || len(seg3) > maxSeg3 || n > ChunkElements {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: segments too long", esc.gi, start)
	}
	st := smallestDec{code1: code1[:(n+3)/4], buf2: buf2[:seg2Buf], buf3: buf3[:seg3Buf], x: x, f: f, d: d, base: base, start: start, esc: esc}
	if f.bf16 {
		st.sm = sm[:n]
	}
	copy(st.buf2, seg2)
	copy(st.buf3, seg3)
	clear(st.buf2[len(seg2):]) // zeros past the segments: see loadSegments
	clear(st.buf3[len(seg3):])
	for i := 0; i < n; i += 4 {
		if err := st.block(i); err != nil {
			return err
		}
	}
	p2, p3 := st.p2, st.p3
	if (p2+7)/8 != len(seg2) || p2%8 != 0 && seg2[p2/8]>>(p2%8) != 0 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: level-2 segment of %d bytes for %d codes, or nonzero padding", esc.gi, start, len(seg2), p2/2)
	}
	if (p3+7)/8 != len(seg3) || p3%8 != 0 && seg3[p3/8]>>(p3%8) != 0 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: level-3 segment of %d bytes for %d codes, or nonzero padding", esc.gi, start, len(seg3), p3/4)
	}
	if n%4 != 0 && st.code1[n/4]>>(2*(n%4)) != 0 {
		return errCorrupt(status.Corrupt, "group %d: level-1 padding bits after element %d are not zero", esc.gi, start+n-1)
	}
	return nil
}

// block decodes the block of (up to) four elements at i, with escapes.
func (st *smallestDec) block(i int) error {
	n := len(st.x)
	b := st.code1[i/4]
	if i+4 > n {
		b &= 1<<(2*(n-i)) - 1 // padding codes are checked at the end
	}
	d := st.d
	m := d.t1m[b]
	w2 := binary.LittleEndian.Uint64(st.buf2[(st.p2>>3)&1023:]) >> (st.p2 & 7)
	w := d.t1[b] | d.t2[(uint64(m&0x3FF)+w2&uint64(m>>16&0xFF))&1023]
	st.p2 += int(m >> 24)
	for j := 0; j < 4; j++ {
		if w>>(16*j+15)&1 == 0 {
			continue
		}
		c := st.buf3[(st.p3>>3)&2047] >> (st.p3 & 4) & 15
		st.p3 += 4
		e := st.base + c
		if c == 15 {
			var err error
			if e, err = st.esc.take(st.start + i + j); err != nil {
				return err
			}
		}
		w = w&^(0xFFFF<<(16*j)) | uint64(e)<<(16*j+int(st.f.shift))
	}
	for j := i; j < min(i+4, n); j++ {
		v := uint16(w >> (16 * (j - i)))
		if st.f.bf16 {
			v |= smOneBF16(st.sm[j])
		}
		st.x[j] = v
	}
	return nil
}
