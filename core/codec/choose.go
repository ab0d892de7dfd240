package codec

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
	sh := crcShift(segLen)
	for _, c := range crcs[:len(crcs)-1] {
		crc = crcMulMod(sh, crc) ^ c
	}
	return crcCombine(crc, crcs[len(crcs)-1], lastLen)
}

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
