package codec

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// The fast Smallest coders (bf16 on little-endian machines) work on whole
// chunks (4096 elements, 1024 blocks of four) through fixed-size arrays, in
// short passes that each keep few values live, with no data-dependent
// branch but the rare escapes (Go's register allocator does much better
// with several simple loops than with one that does everything):
//
//   - encoder: splitChunk splits off the sign+mantissa and exponent bytes;
//     pass A maps each block to its encTable entry (level-1 byte, level-2
//     bits, level-3 mask); pass B writes the level-2 segment; pass L lists
//     the blocks that take level-3 codes; pass C writes the level-3 segment.
//   - decoder: pass A writes every element's level-1 or level-2 exponent
//     and sign+mantissa and lists the blocks with level-3 codes; pass C
//     adds their exponents.
//
// A pass stops at a block with an escape, which is then done one element
// at a time, and resumes. A last, partial chunk goes through padded copies
// (smallestScratch). The generic coders in smallest.go serve fp16 and
// big-endian machines; forceGeneric makes tests use them for bf16 too (and
// histBF16 instead of histWindow).

var forceGeneric = false

const blocksPerChunk = ChunkElements / 4

// Buffer sizes of the fast coders: twice the longest segment plus slack, so
// that an index masked to the segment range can be read or written a word
// at a time without bounds checks.
const (
	fastSeg2Buf = 2*maxSeg2 + 8
	fastSeg3Buf = 2*maxSeg3 + 8
)

type (
	chunkU16 = [ChunkElements]uint16
	chunkX   = [2 * ChunkElements]byte // a chunk's elements as little-endian bytes
	chunkSM  = [ChunkElements]byte
	chunkL1  = [blocksPerChunk]byte
)

// smallestScratch is one worker's buffers for the fast Smallest coders.
type smallestScratch struct {
	te   [blocksPerChunk]uint32 // encoder: each block's encTable entry
	l3   [blocksPerChunk]uint16 // blocks with level-3 codes (decoder: block<<4 | mask)
	buf2 [fastSeg2Buf]byte
	buf3 [fastSeg3Buf]byte
	// Padded copies for a partial chunk.
	x  chunkU16
	sm chunkSM
	c1 chunkL1
	// Bytes of buf2 and buf3 that may hold an earlier chunk's segment
	// (the rest is zero).
	dirty2, dirty3 int
}

// loadSegments copies a chunk's segments into buf2 and buf3 and zeroes
// what an earlier chunk left after them, so that reading past a (corrupt,
// too short) segment sees zeros, and the error it leads to does not depend
// on which chunks the worker decoded before.
func (s *smallestScratch) loadSegments(seg2, seg3 []byte) {
	copy(s.buf2[:], seg2)
	copy(s.buf3[:], seg3)
	if s.dirty2 > len(seg2) {
		clear(s.buf2[len(seg2):s.dirty2])
	}
	if s.dirty3 > len(seg3) {
		clear(s.buf3[len(seg3):s.dirty3])
	}
	s.dirty2, s.dirty3 = len(seg2), len(seg3)
}

// asChunkX returns the bytes of a full chunk of elements.
func asChunkX(x []uint16) *chunkX { return (*chunkX)(u16bytes(x)) }

// encodeSmallestFast is encodeSmallest for bf16 on little-endian machines;
// s.buf2 and s.buf3 receive the segments. It returns the segment lengths,
// and false if the escape list runs out of room (a bug).
//
// e receives the chunk's exponent bytes. pair, if not nil, is sym for two
// exponents at a time (pairSymTable): fewer instructions per block in
// pass A. Pass A reads ra ahead.
func encodeSmallestFast(x []uint16, sm, code1 []byte, s *smallestScratch, e *chunkSM, sym *[256]uint8, pair *pairSymTable, table [6]uint8, base uint8, start int, esc *escWriter, ra *readAhead) (len2, len3 int, ok bool) {
	n := len(x)
	xs, sms, c1s := x, sm, code1
	if n < ChunkElements {
		// Pad with the exponent of symbol 0 (Table[0], present in the
		// group): the padding then codes to level-1 code 0 and nothing else.
		copy(s.x[:], x)
		pad := uint16(table[0]) << 7
		for i := n; i < ChunkElements; i++ {
			s.x[i] = pad
		}
		xs, sms, c1s = s.x[:], s.sm[:], s.c1[:]
	}
	xb := asChunkX(xs)
	splitChunk(xb, (*chunkSM)(sms), e)
	if pair != nil {
		smallestEncAPair(e, (*chunkL1)(c1s), &s.te, pair, ra)
	} else {
		smallestEncA(e, (*chunkL1)(c1s), &s.te, sym, ra)
	}
	len2 = smallestEncB(&s.te, &s.buf2)
	nl3 := smallestEncL(&s.te, &s.l3)
	w3 := bitWriter{buf: s.buf3[:]}
	for i := 0; ; i++ {
		i = smallestEncC(xb, &s.l3, nl3, &s.buf3, base, i, &w3)
		if i >= nl3 {
			break
		}
		// Block s.l3[i] has an escape: one element at a time.
		blk := int(s.l3[i] >> 4)
		for j := 0; j < 4; j++ {
			if s.l3[i]>>j&1 == 0 {
				continue
			}
			e := uint8(xs[4*blk+j] >> 7)
			c := uint64(e - base)
			if c > 14 {
				c = 15
				if !esc.add(start+4*blk+j, e) {
					return 0, 0, false
				}
			}
			w3.acc |= c << (w3.nb & 63)
			w3.nb += 4
		}
		if !w3.flush() {
			return 0, 0, false
		}
	}
	len3, ok = w3.finish()
	copy(code1, c1s[:(n+3)/4]) // no-op for a full chunk
	if n < ChunkElements {
		copy(sm, s.sm[:n])
	}
	return len2, len3, ok && len2 <= maxSeg2 && len3 <= maxSeg3
}

// aheadBlocks is the number of blocks pass A codes per piece read ahead.
const aheadBlocks = blocksPerChunk / aheadPieces

// smallestEncA is the encoder's pass A for bf16: each block's encTable
// entry to te and its level-1 byte to c1, from the exponent bytes e.
func smallestEncA(e *chunkSM, c1 *chunkL1, te *[blocksPerChunk]uint32, sym *[256]uint8, ra *readAhead) {
	for blk := 0; blk < blocksPerChunk; blk++ {
		if blk%aheadBlocks == 0 {
			ra.step()
		}
		t := encTable[(uint32(sym[e[4*blk]])|uint32(sym[e[4*blk+1]])<<3|uint32(sym[e[4*blk+2]])<<6|uint32(sym[e[4*blk+3]])<<9)&4095]
		c1[blk] = byte(t)
		te[blk] = t
	}
}

// pairSymTable[e0 | e1<<8] = sym[e0] | sym[e1]<<3: the symbols of two
// consecutive elements with exponents e0, e1.
type pairSymTable [1 << 16]uint8

// build fills p from sym, eight entries at a time.
func (p *pairSymTable) build(sym *[256]uint8) {
	var lo [32]uint64 // sym[e0] for eight e0 per word
	for e := range sym {
		lo[e/8] |= uint64(sym[e]) << (8 * (e % 8))
	}
	for e1, s1 := range sym {
		hi := uint64(s1) << 3 * 0x0101010101010101
		row := p[256*e1 : 256*e1+256]
		for k, v := range lo {
			binary.LittleEndian.PutUint64(row[8*k:], v|hi)
		}
	}
}

// smallestEncAPair is smallestEncA with a pair table: two lookups per block
// for its 12-bit symbol index instead of four lookups and three shifts.
func smallestEncAPair(e *chunkSM, c1 *chunkL1, te *[blocksPerChunk]uint32, pair *pairSymTable, ra *readAhead) {
	for blk := 0; blk < blocksPerChunk; blk++ {
		if blk%aheadBlocks == 0 {
			ra.step()
		}
		v := binary.LittleEndian.Uint32(e[4*blk : 4*blk+4]) // e0 | e1<<8 | e2<<16 | e3<<24
		t := encTable[(uint32(pair[uint16(v)])|uint32(pair[uint16(v>>16)])<<6)&4095]
		c1[blk] = byte(t)
		te[blk] = t
	}
}

// smallestEncB is the encoder's pass B: the level-2 segment from the
// encTable entries te. It returns the segment's length in bytes. Four
// blocks' level-2 bits (at most 32) are joined before they are appended,
// which shortens the loop-carried chain.
func smallestEncB(te *[blocksPerChunk]uint32, buf *[fastSeg2Buf]byte) int {
	var acc uint64
	var nb, q uint
	for blk := 0; blk < blocksPerChunk; blk += 4 {
		t0, t1, t2, t3 := te[blk], te[blk+1], te[blk+2], te[blk+3]
		n0, n1, n2 := t0>>16&0xF, t1>>16&0xF, t2>>16&0xF
		v := uint64(t0>>8&0xFF) | uint64(t1>>8&0xFF)<<(n0&31) | uint64(t2>>8&0xFF)<<((n0+n1)&31) | uint64(t3>>8&0xFF)<<((n0+n1+n2)&31)
		acc |= v << (nb & 63)
		nb += uint(n0 + n1 + n2 + t3>>16&0xF)
		i := q & (2*maxSeg2 - 1) // q <= maxSeg2: no wrap
		binary.LittleEndian.PutUint64(buf[i:i+8], acc)
		q += nb >> 3
		acc >>= nb & 56
		nb &= 7
	}
	if nb > 0 {
		q++ // the last byte was written by the last store
	}
	return int(q)
}

// smallestEncL lists the blocks with level-3 codes (block<<4 | mask) in l3
// and returns their number.
func smallestEncL(te *[blocksPerChunk]uint32, l3 *[blocksPerChunk]uint16) int {
	k := 0
	for blk, t := range te {
		m := t >> 20 & 15
		l3[k&(blocksPerChunk-1)] = uint16(blk<<4) | uint16(m)
		k += int((m + 15) >> 4) // 1 if the block takes level-3 codes
	}
	return k
}

// smallestEncC is the encoder's pass C: the level-3 codes of the blocks
// l3[i:n], appended to w (whose buffer is buf). It stops at a block with an
// escape and returns its position in l3 (n when done).
func smallestEncC(xb *chunkX, l3 *[blocksPerChunk]uint16, n int, buf *[fastSeg3Buf]byte, base uint8, i int, w *bitWriter) int {
	acc, nb, q := w.acc, w.nb, w.q
	bl := (0x4000 - uint64(base)) * lanes1
	for ; i < n; i++ {
		ent := l3[i&(blocksPerChunk-1)]
		blk := int(ent>>4) & (blocksPerChunk - 1)
		lt := &l3Table[ent&15]
		x := binary.LittleEndian.Uint64(xb[8*blk : 8*blk+8])
		a := x>>7&lanesByte + bl // e - base + 0x4000: in the window iff bit 14 and no bit 15 after + 0x3FF1
		if (^a&lanesBit14|(a+0x3FF1*lanes1)&lanesBit15)&lt.sel != 0 {
			break // an escape
		}
		a &= lt.sel4
		acc |= (a&15<<(lt.sh&31) | a>>16&15<<(lt.sh>>8&31) | a>>32&15<<(lt.sh>>16&31) | a>>48<<(lt.sh>>24&31)) << (nb & 63)
		nb += lt.bits
		j := q & (2*maxSeg3 - 1) // q <= maxSeg3: no wrap
		binary.LittleEndian.PutUint64(buf[j:j+8], acc)
		q += int(nb >> 3)
		acc >>= nb &^ 7
		nb &= 7
	}
	w.acc, w.nb, w.q = acc, nb, q
	return i
}

// decodeSmallestFast is decodeSmallest for bf16 on little-endian machines.
func decodeSmallestFast(code1, seg2, seg3, sm []byte, x []uint16, d *smallestDecTables, base uint8, start int, esc *escReader, s *smallestScratch) error {
	n := len(x)
	if len(seg2) > maxSeg2 || len(seg3) > maxSeg3 || n > ChunkElements {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: segments too long", esc.gi, start)
	}
	n4 := (n + 3) / 4
	code1 = code1[:n4]
	if n%4 != 0 && code1[n/4]>>(2*(n%4)) != 0 {
		return errCorrupt(status.Corrupt, "group %d: level-1 padding bits after element %d are not zero", esc.gi, start+n-1)
	}
	c1s, xs, sms := code1, x, sm
	if n < ChunkElements {
		// Padding elements have level-1 code 0: they take no other code.
		copy(s.c1[:], code1)
		clear(s.c1[n4:])
		copy(s.sm[:], sm[:n])
		c1s, xs, sms = s.c1[:], s.x[:], s.sm[:]
	}
	s.loadSegments(seg2, seg3)
	xb := asChunkX(xs)
	p2, nl3 := smallestDecA((*chunkL1)(c1s), &s.buf2, (*chunkSM)(sms), xb, d, &s.l3)
	p3 := 0
	for i := 0; ; i++ {
		i, p3 = smallestDecC(xb, &s.l3, nl3, &s.buf3, base, i, p3)
		if i >= nl3 {
			break
		}
		// Block s.l3[i] has an escape: one element at a time.
		ent := s.l3[i]
		blk := int(ent >> 4)
		w := binary.LittleEndian.Uint64(xb[8*blk:])
		for j := 0; j < 4; j++ {
			if ent>>j&1 == 0 {
				continue
			}
			c := s.buf3[p3>>3] >> (p3 & 4) & 15
			p3 += 4
			e := base + c
			if c == 15 {
				var err error
				if e, err = esc.take(start + 4*blk + j); err != nil {
					return err
				}
			}
			w |= uint64(e) << (16*j + 7)
		}
		binary.LittleEndian.PutUint64(xb[8*blk:], w)
	}
	if (p2+7)/8 != len(seg2) || p2%8 != 0 && seg2[p2/8]>>(p2%8) != 0 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: level-2 segment of %d bytes for %d codes, or nonzero padding", esc.gi, start, len(seg2), p2/2)
	}
	if (p3+7)/8 != len(seg3) || p3%8 != 0 && seg3[p3/8]>>(p3%8) != 0 {
		return errCorrupt(status.Corrupt, "group %d chunk at element %d: level-3 segment of %d bytes for %d codes, or nonzero padding", esc.gi, start, len(seg3), p3/4)
	}
	if n < ChunkElements {
		copy(x, s.x[:n])
	}
	return nil
}

// smallestDecA is the decoder's pass A for bf16: every element's exponent
// from its level-1 or level-2 code and its sign+mantissa byte, and the blocks with level-3 codes (block<<4 | mask) to l3. It
// returns the level-2 bits taken and the number of those blocks.
func smallestDecA(c1 *chunkL1, buf2 *[fastSeg2Buf]byte, sm *chunkSM, xb *chunkX, d *smallestDecTables, l3 *[blocksPerChunk]uint16) (p2, k int) {
	for blk := 0; blk < blocksPerChunk; blk++ {
		b := c1[blk]
		m := d.t1m[b]
		j := (p2 >> 3) & (2*maxSeg2 - 1) // p2 < 8192 bits: no wrap
		w2 := binary.LittleEndian.Uint64(buf2[j:j+8]) >> (p2 & 7)
		w := d.t1[b] | d.t2[(uint64(m&0x3FF)+w2&uint64(m>>16&0xFF))&1023]
		p2 += int(m >> 24)
		fl := w & lanesBit15
		mask := gatherBit15(fl)
		l3[k&(blocksPerChunk-1)] = uint16(blk<<4) | uint16(mask)
		k += int((mask + 15) >> 4)
		s := uint64(binary.LittleEndian.Uint32(sm[4*blk : 4*blk+4]))
		s = (s | s<<16) & 0x0000FFFF0000FFFF
		s = (s | s<<8) & lanesByte
		binary.LittleEndian.PutUint64(xb[8*blk:8*blk+8], w^fl|(s&lanesBit7)<<8|s&lanesLo7)
	}
	return p2, k
}

// smallestDecC is the decoder's pass C: the exponents of the elements with
// level-3 codes, for the blocks l3[i:n], from bit p3 of buf. It stops at a
// block with an escape code and returns its position in l3 (n when done)
// and the bit position.
func smallestDecC(xb *chunkX, l3 *[blocksPerChunk]uint16, n int, buf *[fastSeg3Buf]byte, base uint8, i, p3 int) (int, int) {
	bl := uint64(base) * lanes1
	for ; i < n; i++ {
		ent := l3[i&(blocksPerChunk-1)]
		blk := int(ent>>4) & (blocksPerChunk - 1)
		lt := &l3Table[ent&15]
		j := (p3 >> 3) & (2*maxSeg3 - 1) // p3 < 16384 bits: no wrap
		w3 := uint64(binary.LittleEndian.Uint32(buf[j:j+4]) >> (p3 & 4))
		c := (w3>>(lt.sh&31)&15 | (w3>>(lt.sh>>8&31)&15)<<16 | (w3>>(lt.sh>>16&31)&15)<<32 | (w3>>(lt.sh>>24&31)&15)<<48) & lt.sel4
		if (c+lanes1)&lanesBit4 != 0 {
			break // an escape
		}
		w := binary.LittleEndian.Uint64(xb[8*blk:8*blk+8]) | (c+bl)<<7&lt.sel
		binary.LittleEndian.PutUint64(xb[8*blk:8*blk+8], w)
		p3 += int(lt.bits)
	}
	return i, p3
}
