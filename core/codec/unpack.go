package codec

import (
	"encoding/binary"
	"runtime"
	"sort"

	"github.com/glyd/glyd/core/status"
)

// Unpack decodes t into dst (NumElements elements, row-major) on up to
// workers goroutines (0 means runtime.GOMAXPROCS(0)). It validates t as
// Validate does, and every code while decoding: any inconsistency is an
// error (and dst's contents are then unspecified). Unpack allocates only a
// few kilobytes of scratch per worker and per unit of 64Ki elements.
//
// The error returned for a damaged tensor does not depend on the number of
// workers: Validate's checks come first, then those of the first damaged
// piece of 64Ki elements, in element order.
//
// Errors: those of Validate; status.BufferTooSmall if dst is shorter than
// NumElements, status.SizeMismatch if it is longer; status.EscapeMissing
// for an escape code without its escape entry or an entry without its
// code; status.Corrupt for level-2/3 segments that do not hold exactly the
// codes their chunk takes, or nonzero padding bits.
func Unpack(t *Tensor, dst []uint16, workers int) error {
	w, err := workerCount(workers)
	if err != nil {
		return err
	}
	p, err := newPlan(t)
	if err != nil {
		return err
	}
	if err := checkDst(len(dst), p.total, "tensor"); err != nil {
		return err
	}
	for g := range t.Groups {
		if err := p.validateGroup(g); err != nil {
			return err
		}
	}
	return p.decodeUnits(makeUnits(0, len(t.Groups), p.per), dst, 0, w)
}

// UnpackGroup decodes group g of t alone into dst (t.Groups[g].Elements
// elements: rows [g*R, (g+1)*R) of the tensor, R = Shape[0]/len(Groups)),
// on runtime.GOMAXPROCS(0) goroutines. It checks t's structure and group
// g's codes, as Unpack does.
func UnpackGroup(t *Tensor, g int, dst []uint16) error {
	p, err := newPlan(t)
	if err != nil {
		return err
	}
	if g < 0 || g >= len(t.Groups) {
		return status.Errorf(status.InvalidArgument, "group %d out of range [0, %d)", g, len(t.Groups))
	}
	if err := checkDst(len(dst), p.per, "group"); err != nil {
		return err
	}
	if err := p.validateGroup(g); err != nil {
		return err
	}
	return p.decodeUnits(makeUnits(g, g+1, p.per), dst, g*p.per, runtime.GOMAXPROCS(0))
}

func checkDst(have, want int, what string) error {
	if have < want {
		return status.Errorf(status.BufferTooSmall, "destination holds %d elements, the %s has %d", have, what, want)
	}
	if have != want {
		return status.Errorf(status.SizeMismatch, "destination holds %d elements, the %s has %d", have, what, want)
	}
	return nil
}

// decodeScratch is one worker's decoding buffers.
type decodeScratch struct {
	buf2   [seg2Buf]byte
	buf3   [seg3Buf]byte
	tables smallestDecTables
	fast   smallestScratch
}

// decodeUnits decodes units into dst, whose element 0 is element dst0 of
// the tensor.
func (p *plan) decodeUnits(units []unit, dst []uint16, dst0, workers int) error {
	scr := make([]decodeScratch, max(min(workers, len(units)), 1))
	return parallel(len(units), workers, func(w, i int) error {
		u := units[i]
		o := u.g*p.per - dst0
		return p.decodeUnit(&scr[w], u, dst[o+u.lo:o+u.hi])
	})
}

// escStart returns the first entry of a group's escape list whose index is
// >= i (the list is ascending: validateGroup checked it).
func escStart(idx []byte, i int) int {
	n := len(idx) / EscIdxBytes
	return sort.Search(n, func(k int) bool {
		return uint64(binary.LittleEndian.Uint32(idx[EscIdxBytes*k:])) >= uint64(i)
	})
}

// decodeUnit decodes unit u into dst (u.hi-u.lo elements).
func (p *plan) decodeUnit(s *decodeScratch, u unit, dst []uint16) error {
	t := p.t
	gi := u.g
	grp := &t.Groups[gi]
	idx := p.slice(gi, PlaneEscIdx)
	esc := escReader{gi: gi, idx: idx, exp: p.slice(gi, PlaneEscExp), k: escStart(idx, u.lo), end: escStart(idx, u.hi)}
	sm := p.slice(gi, PlaneSM)
	code := p.slice(gi, PlaneCode)
	f := p.d.field()
	if t.Layout == Smallest {
		s.tables.build(grp.Table, f)
	}
	for lo := u.lo; lo < u.hi; lo += ChunkElements {
		hi := min(lo+ChunkElements, u.hi)
		out := dst[lo-u.lo : hi-u.lo]
		smc := sm[p.d.smSize(lo):p.d.smSize(hi)]
		c := code[codeSize(t.Layout, lo):codeSize(t.Layout, hi)]
		if t.Layout == Fixed12 {
			if err := decodeFixed12(c, smc, out, f, grp.Base, lo, &esc); err != nil {
				return err
			}
		} else {
			seg2, seg3 := p.chunkSegments(gi, lo/ChunkElements)
			var err error
			if f.bf16 && littleEndian && !forceGeneric {
				err = decodeSmallestFast(c, seg2, seg3, smc, out, &s.tables, grp.Base, lo, &esc, &s.fast)
			} else {
				err = decodeSmallest(c, seg2, seg3, smc, out, f, &s.tables, grp.Base, lo, &esc, s.buf2[:], s.buf3[:])
			}
			if err != nil {
				return err
			}
		}
		if !f.bf16 && !mergeFP16(out, smc) {
			return errCorrupt(status.Corrupt, "group %d: sign+mantissa padding bits after element %d are not zero", gi, hi-1)
		}
	}
	return esc.done()
}

// Verify decodes t in pieces of at most 64Ki elements per worker (0 workers
// means runtime.GOMAXPROCS(0)) and compares the CRC-32C of the decoded
// tensor with t.Checksum: status.Checksum, naming both, if they differ.
// It reports the errors of Unpack for inconsistent packed data.
func Verify(t *Tensor, workers int) error {
	w, err := workerCount(workers)
	if err != nil {
		return err
	}
	p, err := newPlan(t)
	if err != nil {
		return err
	}
	for g := range t.Groups {
		if err := p.validateGroup(g); err != nil {
			return err
		}
	}
	units := makeUnits(0, len(t.Groups), p.per)
	nw := max(min(w, len(units)), 1)
	scr := make([]decodeScratch, nw)
	bufs := make([][]uint16, nw)
	crcs := make([]uint32, len(units))
	err = parallel(len(units), w, func(wi, i int) error {
		u := units[i]
		if bufs[wi] == nil {
			bufs[wi] = make([]uint16, unitElements)
		}
		out := bufs[wi][:u.hi-u.lo]
		if err := p.decodeUnit(&scr[wi], u, out); err != nil {
			return err
		}
		crcs[i] = crcUpdate(0, out)
		return nil
	})
	if err != nil {
		return err
	}
	var crc uint32
	for i, u := range units {
		crc = crcCombine(crc, crcs[i], 2*uint64(u.hi-u.lo))
	}
	if crc != t.Checksum {
		return status.Errorf(status.Checksum, "invalid input: checksum mismatch: expected %#08x, decoded data has %#08x", t.Checksum, crc)
	}
	return nil
}
