package codec

import "sync"

// Exported pieces of Pack for encoders that run elsewhere (core/gpu packs
// on the GPU and must produce exactly Pack's bytes).

// Fixed12Base returns the Base Pack chooses for a Fixed12 group whose
// exponent field histogram is h (h[e] = elements with exponent field e):
// the window of 15 exponents covering the most elements, ties to the
// smallest Base, Base+14 <= maxExp of dt. It returns 0 for an unknown dtype.
func Fixed12Base(h *[256]uint64, dt DType) uint8 {
	d, ok := dt.info()
	if !ok {
		return 0
	}
	return chooseBase(h, d.maxExp)
}

// CRCCombineEqual returns the CRC-32C of the concatenation of consecutive
// segments whose CRC-32Cs are crcs: every segment segLen bytes long except
// the last, which is lastLen bytes. The result equals Checksum over the
// whole byte range.
func CRCCombineEqual(crcs []uint32, segLen, lastLen uint64) uint32 {
	var crc uint32
	if len(crcs) == 0 {
		return 0
	}
	t := shiftTables(segLen)
	for _, c := range crcs[:len(crcs)-1] {
		crc = t[0][crc&0xff] ^ t[1][crc>>8&0xff] ^ t[2][crc>>16&0xff] ^ t[3][crc>>24] ^ c
	}
	return crcCombine(crc, crcs[len(crcs)-1], lastLen)
}

// shiftTables returns the multiplication by x^(8 segLen) modulo the CRC
// polynomial as four byte tables (the map is linear over GF(2): a product is
// the XOR of its bytes' products), built once per segment length: the GPU
// packer combines thousands of segment CRCs of one length per call.
func shiftTables(segLen uint64) *[4][256]uint32 {
	if t, ok := shiftCache.Load(segLen); ok {
		return t.(*[4][256]uint32)
	}
	sh := crcShift(segLen)
	t := new([4][256]uint32)
	for k := range t {
		for b := range t[k] {
			t[k][b] = crcMulMod(sh, uint32(b)<<(8*k))
		}
	}
	shiftCache.Store(segLen, t)
	return t
}

var shiftCache sync.Map // segment length -> *[4][256]uint32

// Smallest symbols returned by SmallestChoice: 0..5 = table slot, then
// SymLevel3 (coded by a level-3 code in the Base window) and SymEscape.
const (
	SymLevel3 = symL3
	SymEscape = symEsc
)

// SmallestChoice returns the Table and Base Pack chooses for a Smallest
// group whose exponent histogram is h, and the symbol Pack codes each
// exponent field with (sym[e]: table slot 0..5, SymLevel3 or SymEscape).
func SmallestChoice(h *[256]uint64, dt DType) (table [6]uint8, base uint8, sym [256]uint8) {
	d, ok := dt.info()
	if !ok {
		return
	}
	table, used, base := chooseSmallest(h, d.maxExp)
	return table, base, smallestSyms(table, used, base)
}
