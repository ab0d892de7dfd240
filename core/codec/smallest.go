package codec

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// Smallest codes: a 2-bit level-1 code per element in PlaneCode (c1 < 3:
// exponent Table[c1]); the elements with c1 = 3 take the next 2-bit level-2
// code of their chunk's segment in PlaneCode2 (c2 < 3: Table[3+c2]); those
// with c2 = 3 take the next 4-bit level-3 code of the chunk's segment in
// PlaneCode3 (c3 < 15: Base+c3; 15: escape).

// Encoder table entries (smallestEnc) pack, per exponent:
const (
	encC2Shift   = 2  // bits 2..3: level-2 code (0 unless c1 = 3)
	encC3Shift   = 4  // bits 4..7: level-3 code (0 unless c2 = 3)
	encAdv2Shift = 8  // bits 8..15: level-2 bits taken (0 or 2)
	encAdv3Shift = 16 // bits 16..23: level-3 bits taken (0 or 4)
	encEsc       = 1 << 24
)

// Decoder table entries (smallestDec), indexed by c1 | c2<<2 | c3<<4, hold
// the exponent in bits 0..7 and decEsc for an escape.
const decEsc = 0x100

// Segment buffers: a chunk's level-2 and level-3 segments are copied into
// buffers with 8 bytes of slack so that the decoder can read them a word at
// a time.
const (
	seg2Buf = maxSeg2 + 8
	seg3Buf = maxSeg3 + 8
)

// chooseSmallest picks the table (the 6 most frequent exponents, ties to
// the smaller exponent; unused slots 0) and the base (the window of 15
// exponents covering most of the others) of a group with histogram h.
func chooseSmallest(h *[256]uint64, maxExp uint8) (table [6]uint8, base uint8) {
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
	}
	var rem [256]uint64
	for e := 0; e <= int(maxExp); e++ {
		if !in[e] {
			rem[e] = h[e]
		}
	}
	return table, chooseBase(&rem, maxExp)
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

// smallestEnc builds the encoder table of a group. ranks are taken from
// the histogram h so that only exponents present in the group use the table.
func smallestEnc(h *[256]uint64, table [6]uint8, base uint8) (lut [256]uint32) {
	var rank [256]int
	for e := range rank {
		rank[e] = -1
	}
	for r, e := range table {
		if h[e] > 0 && rank[e] < 0 {
			rank[e] = r
		}
	}
	for e := range lut {
		r := rank[e]
		switch {
		case r >= 0 && r < 3:
			lut[e] = uint32(r)
		case r >= 3:
			lut[e] = 3 | uint32(r-3)<<encC2Shift | 2<<encAdv2Shift
		case e >= int(base) && e <= int(base)+14:
			lut[e] = 3 | 3<<encC2Shift | uint32(e-int(base))<<encC3Shift | 2<<encAdv2Shift | 4<<encAdv3Shift
		default:
			lut[e] = 3 | 3<<encC2Shift | 15<<encC3Shift | 2<<encAdv2Shift | 4<<encAdv3Shift | encEsc
		}
	}
	return lut
}

// smallestDec builds the decoder table of a group.
func smallestDec(table [6]uint8, base uint8) (lut [256]uint16) {
	for i := range lut {
		c1, c2, c3 := i&3, i>>2&3, i>>4
		switch {
		case c1 < 3:
			lut[i] = uint16(table[c1])
		case c2 < 3:
			lut[i] = uint16(table[3+c2])
		case c3 < 15:
			lut[i] = uint16(base) + uint16(c3)
		default:
			lut[i] = decEsc
		}
	}
	return lut
}

// smallestCounts returns how many elements of a chunk with histogram h take
// a level-2 code, a level-3 code, and an escape.
func smallestCounts(h *[256]uint16, lut *[256]uint32) (n2, n3, nesc int) {
	for e, c := range h {
		if c == 0 {
			continue
		}
		v := lut[e]
		if v>>encAdv2Shift&0xFF != 0 {
			n2 += int(c)
		}
		if v>>encAdv3Shift&0xFF != 0 {
			n3 += int(c)
		}
		if v&encEsc != 0 {
			nesc += int(c)
		}
	}
	return
}

// encodeSmallest codes the exponents of one chunk: level-1 codes to code1
// (ceil(len(exps)/4) bytes), level-2 and level-3 segments to buf2 and buf3
// (seg2Buf and seg3Buf bytes of scratch), escapes to esc. It returns the
// segment lengths in bytes, and false if esc runs out of room (a bug).
func encodeSmallest(exps, code1, buf2, buf3 []byte, lut *[256]uint32, start int, esc *escWriter) (len2, len3 int, ok bool) {
	n := len(exps)
	code1 = code1[:(n+3)/4]
	buf2 = buf2[:seg2Buf]
	buf3 = buf3[:seg3Buf]
	var acc2, acc3 uint64
	var b2, b3 uint // bits pending in acc2, acc3 (< 8 between blocks)
	q2, q3 := 0, 0  // bytes written to buf2, buf3
	i := 0
	for ; i+8 <= n && q2+8 <= len(buf2) && q3+8 <= len(buf3); i += 8 {
		var l1, flags uint32
		e := exps[i : i+8 : i+8]
		for j := 0; j < 8; j++ {
			v := lut[e[j]]
			l1 |= (v & 3) << (2 * j)
			acc2 |= uint64(v>>encC2Shift&3) << (b2 & 63)
			b2 += uint(v >> encAdv2Shift & 0xFF)
			acc3 |= uint64(v>>encC3Shift&15) << (b3 & 63)
			b3 += uint(v >> encAdv3Shift & 0xFF)
			flags |= v
		}
		binary.LittleEndian.PutUint16(code1[i/4:], uint16(l1))
		binary.LittleEndian.PutUint64(buf2[q2:], acc2)
		q2 += int(b2 >> 3)
		acc2 >>= b2 &^ 7
		b2 &= 7
		binary.LittleEndian.PutUint64(buf3[q3:], acc3)
		q3 += int(b3 >> 3)
		acc3 >>= b3 &^ 7
		b3 &= 7
		if flags&encEsc != 0 {
			for j := 0; j < 8; j++ {
				if lut[e[j]]&encEsc != 0 && !esc.add(start+i+j, e[j]) {
					return 0, 0, false
				}
			}
		}
	}
	// Tail (fewer than 8 elements): one element at a time.
	for ; i < n; i++ {
		v := lut[exps[i]]
		if i%4 == 0 {
			code1[i/4] = 0
		}
		code1[i/4] |= byte(v&3) << (2 * (i % 4))
		acc2 |= uint64(v>>encC2Shift&3) << (b2 & 63)
		b2 += uint(v >> encAdv2Shift & 0xFF)
		acc3 |= uint64(v>>encC3Shift&15) << (b3 & 63)
		b3 += uint(v >> encAdv3Shift & 0xFF)
		for b2 >= 8 {
			if q2 >= len(buf2) {
				return 0, 0, false
			}
			buf2[q2] = byte(acc2)
			q2++
			acc2 >>= 8
			b2 -= 8
		}
		for b3 >= 8 {
			if q3 >= len(buf3) {
				return 0, 0, false
			}
			buf3[q3] = byte(acc3)
			q3++
			acc3 >>= 8
			b3 -= 8
		}
		if v&encEsc != 0 && !esc.add(start+i, exps[i]) {
			return 0, 0, false
		}
	}
	if b2 > 0 {
		if q2 >= len(buf2) {
			return 0, 0, false
		}
		buf2[q2] = byte(acc2)
		q2++
	}
	if b3 > 0 {
		if q3 >= len(buf3) {
			return 0, 0, false
		}
		buf3[q3] = byte(acc3)
		q3++
	}
	return q2, q3, q2 <= maxSeg2 && q3 <= maxSeg3
}

// adv3 gives the level-3 bits taken by an element from c1 | c2<<2.
var adv3 = [16]uint8{15: 4}

// decodeSmallest writes to exps the exponents of one chunk (len(exps) of
// them) from its level-1 codes and its level-2 and level-3 segments; start
// is the group index of exps[0]; buf2 and buf3 are scratch (seg2Buf and
// seg3Buf bytes). It checks that the segments hold exactly the codes the
// chunk takes, that their padding bits and those after the last level-1
// code are zero, and the escapes.
func decodeSmallest(code1, seg2, seg3, exps, buf2, buf3 []byte, lut *[256]uint16, start int, esc *escReader) error {
	n := len(exps)
	code1 = code1[:(n+3)/4]
	if len(seg2) > maxSeg2 || len(seg3) > maxSeg3 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: segments too long", esc.gi, start)
	}
	buf2 = buf2[:seg2Buf]
	buf3 = buf3[:seg3Buf]
	copy(buf2, seg2)
	copy(buf3, seg3)
	p2, p3 := 0, 0 // bits taken from the level-2 and level-3 segments
	i := 0
	for ; i+8 <= n; i += 8 {
		c1s := uint32(binary.LittleEndian.Uint16(code1[i/4:]))
		w2 := binary.LittleEndian.Uint64(buf2[p2>>3:]) >> (p2 & 7)
		w3 := binary.LittleEndian.Uint64(buf3[p3>>3:]) >> (p3 & 7)
		m3 := c1s & (c1s >> 1) & 0x5555 // bit 2j: c1 of element j is 3
		var s2, s3 uint
		var out uint64
		var flags uint16
		for j := 0; j < 8; j++ {
			c1 := c1s >> (2 * j) & 3
			c2 := uint32(w2>>(s2&63)) & 3
			c3 := uint32(w3>>(s3&63)) & 15
			s2 += uint(m3>>(2*j)&1) * 2
			s3 += uint(adv3[c1|c2<<2])
			v := lut[(c1|c2<<2|c3<<4)&0xFF]
			out |= uint64(v&0xFF) << (8 * j)
			flags |= v
		}
		if flags&decEsc != 0 {
			if err := decodeSmallestSlow(code1, buf2, buf3, exps, lut, start, esc, i, i+8, &p2, &p3); err != nil {
				return err
			}
			continue
		}
		binary.LittleEndian.PutUint64(exps[i:], out)
		p2 += int(s2)
		p3 += int(s3)
	}
	if err := decodeSmallestSlow(code1, buf2, buf3, exps, lut, start, esc, i, n, &p2, &p3); err != nil {
		return err
	}
	if (p2+7)/8 != len(seg2) || p2%8 != 0 && seg2[p2/8]>>(p2%8) != 0 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: level-2 segment of %d bytes for %d codes, or nonzero padding", esc.gi, start, len(seg2), p2/2)
	}
	if (p3+7)/8 != len(seg3) || p3%8 != 0 && seg3[p3/8]>>(p3%8) != 0 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: level-3 segment of %d bytes for %d codes, or nonzero padding", esc.gi, start, len(seg3), p3/4)
	}
	if n%4 != 0 && code1[n/4]>>(2*(n%4)) != 0 {
		return errCorrupt(status.Corrupt, "group %d: level-1 padding bits after element %d are not zero", esc.gi, start+n-1)
	}
	return nil
}

// decodeSmallestSlow decodes elements [lo, hi) of a chunk one at a time,
// with escapes, advancing the bit positions *p2 and *p3.
func decodeSmallestSlow(code1, buf2, buf3, exps []byte, lut *[256]uint16, start int, esc *escReader, lo, hi int, p2, p3 *int) error {
	for j := lo; j < hi; j++ {
		c1 := uint32(code1[j/4]>>(2*(j%4))) & 3
		c2 := uint32(buf2[*p2/8]>>(*p2%8)) & 3
		c3 := uint32(binary.LittleEndian.Uint16(buf3[*p3/8:])>>(*p3%8)) & 15
		if c1 == 3 {
			*p2 += 2
			if c2 == 3 {
				*p3 += 4
			}
		}
		v := lut[(c1|c2<<2|c3<<4)&0xFF]
		if v&decEsc != 0 {
			e, err := esc.take(start + j)
			if err != nil {
				return err
			}
			exps[j] = e
		} else {
			exps[j] = uint8(v)
		}
	}
	return nil
}
