package codec

import (
	"encoding/binary"

	"github.com/glyd/glyd/core/status"
)

// Pack packs src, the elements of a tensor of the given dtype and shape in
// row-major order, into the layout of opt. Every element, whatever its bits
// (±0, subnormals, ±Inf, NaN payloads), decodes to the same bits. The
// packed bytes depend only on src, dt, shape, opt.Layout and opt.Groups.
//
// Errors: status.DType for an unknown dtype; status.InvalidArgument for bad
// options, a negative dimension, or groups that do not split Shape[0];
// status.Overflow if the shape has more than MaxElements elements;
// status.InvalidArgument if a group would hold more than MaxGroupElements;
// status.SizeMismatch if len(src) differs from the shape's element count.
func Pack(src []uint16, dt DType, shape []int64, opt Options) (*Tensor, error) {
	d, ok := dt.info()
	if !ok {
		return nil, status.Errorf(status.DType, "cannot pack dtype %v (want bf16 or fp16)", dt)
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	for _, s := range shape {
		if s < 0 {
			return nil, status.Errorf(status.InvalidArgument, "negative dimension %d in shape %v", s, shape)
		}
	}
	total, err := shapeElements(shape)
	if err != nil {
		return nil, err
	}
	G := max(opt.Groups, 1)
	if G > 1 && (len(shape) == 0 || shape[0] < int64(G) || shape[0]%int64(G) != 0) {
		return nil, status.Errorf(status.InvalidArgument, "%d groups do not split shape %v along axis 0", G, shape)
	}
	if per := uint64(total / G); per > MaxGroupElements {
		return nil, status.Errorf(status.InvalidArgument, "group of %d elements exceeds 2^32-1; pack with groups=%d or more (a divisor of shape[0] = %d)", per, (uint64(total)+MaxGroupElements-1)/MaxGroupElements, shape[0])
	}
	if len(src) != total {
		return nil, status.Errorf(status.SizeMismatch, "%d elements given for shape %v (%d elements)", len(src), shape, total)
	}
	workers, err := workerCount(opt.Workers)
	if err != nil {
		return nil, err
	}
	pk := &packer{src: src, shape: shape, d: d, dt: dt, layout: opt.Layout, G: G, per: total / G}
	return pk.run(workers)
}

type packer struct {
	src    []uint16
	shape  []int64
	d      dtypeInfo
	dt     DType
	layout Layout
	G, per int

	units      []unit
	chunksPer  int      // chunks per group
	hist       []uint16 // per chunk, 256 exponent counts
	unitCRC    []uint32
	used       []uint8 // Smallest: table slots used, per group
	cnt2, cnt3 []int   // per chunk: level-2 and level-3 codes (Smallest)
	cntEsc     []int   // per chunk: escapes
	off2, off3 []int   // per chunk: segment offsets within the group
	offEsc     []int   // per chunk: first escape entry within the group
	t          *Tensor
}

// scratch is one worker's buffers.
type scratch struct {
	buf2 [seg2Buf]byte
	buf3 [seg3Buf]byte
	fast smallestScratch
	e    chunkSM // exponent bytes of a chunk (fast Smallest encoder)
	// Pair table of the group pairG (-1: none) for the fast Smallest
	// encoder, built once per group and worker for large groups only.
	pair  *pairSymTable
	pairG int
}

func (pk *packer) run(workers int) (*Tensor, error) {
	G, per := pk.G, pk.per
	pk.units = makeUnits(0, G, per)
	pk.chunksPer = numChunks(per)
	C := G * pk.chunksPer
	U := len(pk.units)
	pk.hist = make([]uint16, 256*C)
	pk.unitCRC = make([]uint32, U)
	t := &Tensor{Layout: pk.layout, DType: pk.dt, Shape: append(make([]int64, 0, len(pk.shape)), pk.shape...), Groups: make([]Group, G)}
	pk.t = t

	// Pass 1: exponent histogram of every chunk, and CRC of every unit.
	if err := parallel(U, workers, pk.histUnit); err != nil {
		return nil, err
	}
	var crc uint32
	for u, us := range pk.units {
		crc = crcCombine(crc, pk.unitCRC[u], 2*uint64(us.hi-us.lo))
	}
	t.Checksum = crc

	// Tables of every group, from the histograms of its chunks.
	if pk.layout == Smallest {
		pk.used = make([]uint8, G)
	}
	if err := parallel(G, workers, pk.chooseGroup); err != nil {
		return nil, err
	}

	// Pass 2: per chunk counts of level-2/3 codes and escapes.
	pk.cnt2, pk.cnt3, pk.cntEsc = make([]int, C), make([]int, C), make([]int, C)
	if err := parallel(U, workers, pk.countUnit); err != nil {
		return nil, err
	}

	// Offsets of every chunk and group; allocate the planes.
	pk.off2, pk.off3, pk.offEsc = make([]int, C), make([]int, C), make([]int, C)
	var tot2, tot3, totEsc int
	for g := range t.Groups {
		grp := &t.Groups[g]
		var o2, o3, oe int
		for c := g * pk.chunksPer; c < (g+1)*pk.chunksPer; c++ {
			pk.off2[c], pk.off3[c], pk.offEsc[c] = o2, o3, oe
			o2 += (pk.cnt2[c] + 3) / 4
			o3 += (pk.cnt3[c] + 1) / 2
			oe += pk.cntEsc[c]
		}
		grp.Escapes = uint64(oe)
		grp.Offsets[PlaneSM] = uint64(g * pk.d.smSize(per))
		grp.Offsets[PlaneCode] = uint64(g * codeSize(pk.layout, per))
		grp.Offsets[PlaneEscIdx] = uint64(EscIdxBytes * totEsc)
		grp.Offsets[PlaneEscExp] = uint64(totEsc)
		if pk.layout == Smallest {
			grp.Offsets[PlaneCode2] = uint64(tot2)
			grp.Offsets[PlaneCode3] = uint64(tot3)
			grp.Offsets[PlaneChunks] = uint64(g * ChunkEntryBytes * pk.chunksPer)
		}
		tot2 += o2
		tot3 += o3
		totEsc += oe
	}
	t.Planes[PlaneSM] = make([]byte, G*pk.d.smSize(per))
	t.Planes[PlaneCode] = make([]byte, G*codeSize(pk.layout, per))
	t.Planes[PlaneEscIdx] = make([]byte, EscIdxBytes*totEsc)
	t.Planes[PlaneEscExp] = make([]byte, totEsc)
	if pk.layout == Smallest {
		t.Planes[PlaneCode2] = make([]byte, tot2)
		t.Planes[PlaneCode3] = make([]byte, tot3)
		t.Planes[PlaneChunks] = make([]byte, ChunkEntryBytes*C)
		for c := 0; c < C; c++ {
			binary.LittleEndian.PutUint64(t.Planes[PlaneChunks][ChunkEntryBytes*c:], uint64(pk.off2[c]))
			binary.LittleEndian.PutUint64(t.Planes[PlaneChunks][ChunkEntryBytes*c+8:], uint64(pk.off3[c]))
		}
	}

	// Pass 3: encode.
	scr := make([]scratch, min(workers, max(U, 1)))
	for i := range scr {
		scr[i].pairG = -1
	}
	if err := parallel(U, workers, func(w, u int) error { return pk.encodeUnit(&scr[w], u) }); err != nil {
		return nil, err
	}
	pk.hist = nil
	return t, nil
}

// chunkSrc returns the elements of chunk c (global index) and its group
// and first element within the group.
func (pk *packer) chunkSrc(c int) (x []uint16, g, lo int) {
	g, lo = c/pk.chunksPer, (c%pk.chunksPer)*ChunkElements
	hi := min(lo+ChunkElements, pk.per)
	base := g * pk.per
	return pk.src[base+lo : base+hi], g, lo
}

// ahead returns the elements after chunk c (global index), for reading
// ahead: the next chunk, in this group or the next.
func (pk *packer) ahead(c int) readAhead {
	if c+1 >= pk.G*pk.chunksPer {
		return nil
	}
	x, _, _ := pk.chunkSrc(c + 1)
	return readAhead(u16bytes(x))
}

// unitChunks returns the global indices [c0, c1) of unit us's chunks.
func (pk *packer) unitChunks(us unit) (c0, c1 int) {
	first := us.g * pk.chunksPer
	return first + us.lo/ChunkElements, first + numChunks(us.hi)
}

// histUnit is pass 1 for unit u: chunk histograms, unit histogram, CRC.
func (pk *packer) histUnit(_, u int) error {
	us := pk.units[u]
	var crc uint32
	ws := -1 // histWindow's window, from an earlier chunk of the unit (-1: none)
	c0, c1 := pk.unitChunks(us)
	for c := c0; c < c1; c++ {
		x, _, _ := pk.chunkSrc(c)
		ra := pk.ahead(c)
		crc = crcUpdate(crc, x) // chunk by chunk: the histogram then reads x from L1
		h := (*[256]uint16)(pk.hist[256*c : 256*c+256])
		switch {
		case pk.dt != BF16:
			histFP16(x, h)
		case ws >= 0 && littleEndian && !forceGeneric && len(x) == ChunkElements:
			xb := asChunkX(x)
			next := &xb[0] // only a hint
			if len(ra) > 0 {
				next = &ra[0]
			}
			*h = [256]uint16{}
			if histWindow(xb, h, ws, next) > ChunkElements/16 {
				ws = windowStart(h)
			}
		default:
			histBF16(x, h, &ra)
			ws = windowStart(h)
		}
	}
	pk.unitCRC[u] = crc
	return nil
}

// chooseGroup picks the base and table of group g from its chunks'
// histograms.
func (pk *packer) chooseGroup(_, g int) error {
	var h [256]uint64
	for c := g * pk.chunksPer; c < (g+1)*pk.chunksPer; c++ {
		for e, n := range (*[256]uint16)(pk.hist[256*c : 256*c+256]) {
			h[e] += uint64(n)
		}
	}
	grp := &pk.t.Groups[g]
	grp.Elements = uint64(pk.per)
	if pk.layout == Fixed12 {
		grp.Base = chooseBase(&h, pk.d.maxExp)
	} else {
		var used int
		grp.Table, used, grp.Base = chooseSmallest(&h, pk.d.maxExp)
		pk.used[g] = uint8(used)
	}
	return nil
}

// symbols returns the Smallest symbols of group g.
func (pk *packer) symbols(g int) [256]uint8 {
	grp := &pk.t.Groups[g]
	return smallestSyms(grp.Table, int(pk.used[g]), grp.Base)
}

// countUnit is pass 2 for unit u: per chunk, the number of level-2 and
// level-3 codes and escapes.
func (pk *packer) countUnit(_, u int) error {
	us := pk.units[u]
	var sym [256]uint8
	if pk.layout == Smallest {
		sym = pk.symbols(us.g)
	}
	c0, c1 := pk.unitChunks(us)
	for c := c0; c < c1; c++ {
		h := (*[256]uint16)(pk.hist[256*c : 256*c+256])
		x, _, _ := pk.chunkSrc(c)
		if pk.layout == Fixed12 {
			// Escapes: all but the 15 exponents of the window.
			b := int(pk.t.Groups[us.g].Base)
			n := len(x)
			for _, k := range h[b : b+15] {
				n -= int(k)
			}
			pk.cntEsc[c] = n
		} else {
			grp := &pk.t.Groups[us.g]
			pk.cnt2[c], pk.cnt3[c], pk.cntEsc[c] = smallestCounts(h, &sym, grp.Table, int(pk.used[us.g]), grp.Base, len(x))
		}
	}
	return nil
}

// encodeUnit is pass 3 for unit u: every plane of its chunks.
func (pk *packer) encodeUnit(s *scratch, u int) error {
	t := pk.t
	us := pk.units[u]
	grp := &t.Groups[us.g]
	smg := t.Planes[PlaneSM][grp.Offsets[PlaneSM]:]
	codeg := t.Planes[PlaneCode][grp.Offsets[PlaneCode]:]
	escIdx := t.Planes[PlaneEscIdx][grp.Offsets[PlaneEscIdx] : grp.Offsets[PlaneEscIdx]+EscIdxBytes*grp.Escapes]
	escExp := t.Planes[PlaneEscExp][grp.Offsets[PlaneEscExp] : grp.Offsets[PlaneEscExp]+grp.Escapes]
	var sym [256]uint8
	if pk.layout == Smallest {
		sym = pk.symbols(us.g)
	}
	c0, c1 := pk.unitChunks(us)
	for c := c0; c < c1; c++ {
		x, _, lo := pk.chunkSrc(c)
		ra := pk.ahead(c)
		m := len(x)
		sm := smg[pk.d.smSize(lo):pk.d.smSize(lo+m)]
		f := pk.d.field()
		if !f.bf16 {
			splitFP16(x, sm)
		}
		esc := escWriter{
			idx: escIdx[EscIdxBytes*pk.offEsc[c] : EscIdxBytes*(pk.offEsc[c]+pk.cntEsc[c])],
			exp: escExp[pk.offEsc[c] : pk.offEsc[c]+pk.cntEsc[c]],
		}
		code := codeg[codeSize(pk.layout, lo):codeSize(pk.layout, lo+m)]
		if pk.layout == Fixed12 {
			// In pieces, reading ahead between them.
			for p := 0; p < m; p += ChunkElements / aheadPieces {
				ra.step()
				q := min(p+ChunkElements/aheadPieces, m)
				if !encodeFixed12(x[p:q], sm[pk.d.smSize(p):], code[p/2:], f, grp.Base, lo+p, &esc) {
					return status.Errorf(status.Internal, "internal error: escape count of chunk %d", c)
				}
			}
		} else {
			var len2, len3 int
			var ok bool
			b2, b3 := s.buf2[:], s.buf3[:]
			if f.bf16 && littleEndian && !forceGeneric {
				len2, len3, ok = encodeSmallestFast(x, sm, code, &s.fast, &s.e, &sym, pk.pairTable(s, us.g, &sym), grp.Table, grp.Base, lo, &esc, &ra)
				b2, b3 = s.fast.buf2[:], s.fast.buf3[:]
			} else {
				len2, len3, ok = encodeSmallest(x, sm, code, b2, b3, f, &sym, grp.Base, lo, &esc)
			}
			if !ok || len2 != (pk.cnt2[c]+3)/4 || len3 != (pk.cnt3[c]+1)/2 {
				return status.Errorf(status.Internal, "internal error: level-2/3 sizes of chunk %d", c)
			}
			o2 := int(grp.Offsets[PlaneCode2]) + pk.off2[c]
			o3 := int(grp.Offsets[PlaneCode3]) + pk.off3[c]
			copy(t.Planes[PlaneCode2][o2:o2+len2], b2[:len2])
			copy(t.Planes[PlaneCode3][o3:o3+len3], b3[:len3])
		}
		if esc.k != len(esc.exp) {
			return status.Errorf(status.Internal, "internal error: escape count of chunk %d", c)
		}
	}
	return nil
}

// pairMinElements is the smallest group that the fast Smallest encoder
// builds a pair table for (64 KiB, about as long to build as encoding a
// few chunks).
const pairMinElements = 1 << 20

// pairTable returns the pair table of group g for s (nil for small groups).
func (pk *packer) pairTable(s *scratch, g int, sym *[256]uint8) *pairSymTable {
	if pk.per < pairMinElements {
		return nil
	}
	if s.pairG != g {
		if s.pair == nil {
			s.pair = new(pairSymTable)
		}
		s.pair.build(sym)
		s.pairG = g
	}
	return s.pair
}

// histBF16 counts the exponents of x into h (len(x) <= ChunkElements),
// reading ra ahead during a whole chunk.
func histBF16(x []uint16, h *[256]uint16, ra *readAhead) {
	var hs [4][256]uint32 // four histograms: fewer stalls on repeated exponents
	i := 0
	if littleEndian && len(x) == ChunkElements {
		histChunk(asChunkX(x), &hs, ra)
		i = len(x)
	}
	if littleEndian {
		xb := u16bytes(x)
		for ; i+4 <= len(x); i += 4 {
			w := binary.LittleEndian.Uint64(xb[2*i : 2*i+8])
			hs[0][uint8(w>>7)]++
			hs[1][uint8(w>>23)]++
			hs[2][uint8(w>>39)]++
			hs[3][uint8(w>>55)]++
		}
	}
	for ; i < len(x); i++ {
		hs[0][uint8(x[i]>>7)]++
	}
	for e := range h {
		h[e] = uint16(hs[0][e] + hs[1][e] + hs[2][e] + hs[3][e])
	}
}

// windowLen is the number of consecutive exponents histWindow counts in
// vector lanes.
const windowLen = 12

// windowStart returns the start of the window of windowLen exponents that
// holds the most of the counts h (at most 256-windowLen), or -1 if even
// that one misses more than 1/16 of them: histWindow would then be slower
// than histBF16.
func windowStart(h *[256]uint16) int {
	var total, sum, best, ws int
	for e, n := range h {
		total += int(n)
		sum += int(n)
		if e >= windowLen {
			sum -= int(h[e-windowLen])
		}
		if e >= windowLen-1 && sum > best {
			best, ws = sum, e-(windowLen-1)
		}
	}
	if total-best > total/16 {
		return -1
	}
	return ws
}

// histChunk is histBF16's loop for a whole chunk: fixed sizes, no bounds
// checks.
func histChunk(xb *chunkX, hs *[4][256]uint32, ra *readAhead) {
	for p := range aheadPieces {
		ra.step()
		piece := (*[len(xb) / aheadPieces]byte)(xb[p*len(xb)/aheadPieces:])
		for i := 0; i < len(piece); i += 8 {
			w := binary.LittleEndian.Uint64(piece[i : i+8])
			hs[0][uint8(w>>7)]++
			hs[1][uint8(w>>23)]++
			hs[2][uint8(w>>39)]++
			hs[3][uint8(w>>55)]++
		}
	}
}

// histFP16 counts the exponents of x into h (len(x) <= ChunkElements).
func histFP16(x []uint16, h *[256]uint16) {
	*h = [256]uint16{}
	for _, v := range x {
		h[v>>10&0x1F]++
	}
}
