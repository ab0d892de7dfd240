package codec

import (
	"math/rand/v2"
	"testing"

	"github.com/glyd/glyd/core/bf16"
)

// Per-stage benchmarks on N(0, 0.02) bf16 weights, in MB/s of bf16 (2 bytes
// per element), to see where the time of Pack and Unpack goes. They cycle
// through kernelChunks different chunks so that branch predictors cannot
// learn one chunk's escape pattern.

const kernelChunks = 64

type kchunk struct {
	x          []uint16
	sm, smS    []byte
	code       []byte
	code1      []byte
	seg2, seg3 []byte
	escIdx     []byte
	escExp     []byte
	nesc       int
	nescS      int
	escIdxS    []byte
	escExpS    []byte
}

func kernelData() ([]kchunk, uint8, [6]uint8, uint8, [256]uint8) {
	r := rand.New(rand.NewPCG(7, 7))
	var h [256]uint64
	cs := make([]kchunk, kernelChunks)
	for c := range cs {
		x := make([]uint16, ChunkElements)
		for i := range x {
			x[i] = bf16.FromFloat32(float32(r.NormFloat64() * 0.02))
			h[uint8(x[i]>>7)]++
		}
		cs[c].x = x
	}
	base := chooseBase(&h, 255)
	f := field{shift: 7, mask: 0xFF, bf16: true}
	table, used, sbase := chooseSmallest(&h, 255)
	sym := smallestSyms(table, used, sbase)
	var buf2 [seg2Buf]byte
	var buf3 [seg3Buf]byte
	for c := range cs {
		k := &cs[c]
		k.sm, k.smS = make([]byte, ChunkElements), make([]byte, ChunkElements)
		k.code = make([]byte, ChunkElements/2)
		k.escIdx, k.escExp = make([]byte, 8*ChunkElements), make([]byte, ChunkElements)
		w := escWriter{idx: k.escIdx, exp: k.escExp}
		encodeFixed12(k.x, k.sm, k.code, f, base, 0, &w)
		k.nesc = w.k
		k.code1 = make([]byte, ChunkElements/4)
		k.escIdxS, k.escExpS = make([]byte, 8*ChunkElements), make([]byte, ChunkElements)
		w = escWriter{idx: k.escIdxS, exp: k.escExpS}
		l2, l3, _ := encodeSmallest(k.x, k.smS, k.code1, buf2[:], buf3[:], f, &sym, sbase, 0, &w)
		k.nescS = w.k
		k.seg2 = append([]byte(nil), buf2[:l2]...)
		k.seg3 = append([]byte(nil), buf3[:l3]...)
	}
	return cs, base, table, sbase, sym
}

func BenchmarkKernel(b *testing.B) {
	cs, base, table, sbase, sym := kernelData()
	f := field{shift: 7, mask: 0xFF, bf16: true}
	var sm, code [ChunkElements]byte
	var buf2 [seg2Buf]byte
	var buf3 [seg3Buf]byte
	out := make([]uint16, ChunkElements)
	escIdx := make([]byte, 8*ChunkElements)
	escExp := make([]byte, ChunkElements)
	run := func(name string, fn func(k *kchunk)) {
		b.Run(name, func(b *testing.B) {
			i := 0
			reportCPU(b, 2*ChunkElements, func() {
				fn(&cs[i%kernelChunks])
				i++
			})
		})
	}
	run("histBF16", func(k *kchunk) {
		var hh [256]uint16
		histBF16(k.x, &hh, new(readAhead))
	})
	var h0 [256]uint16
	histBF16(cs[0].x, &h0, new(readAhead))
	ws := windowStart(&h0)
	run("histWindow", func(k *kchunk) {
		var hh [256]uint16
		histWindow(asChunkX(k.x), &hh, ws, nil)
	})
	run("encodeFixed12", func(k *kchunk) {
		w := escWriter{idx: escIdx, exp: escExp}
		encodeFixed12(k.x, sm[:], code[:], f, base, 0, &w)
	})
	run("decodeFixed12", func(k *kchunk) {
		r := escReader{idx: k.escIdx, exp: k.escExp, end: k.nesc}
		if err := decodeFixed12(k.code, k.sm, out, f, base, 0, &r); err != nil {
			b.Fatal(err)
		}
	})
	run("encodeSmallest", func(k *kchunk) {
		w := escWriter{idx: escIdx, exp: escExp}
		encodeSmallest(k.x, sm[:], code[:], buf2[:], buf3[:], f, &sym, sbase, 0, &w)
	})
	var fs smallestScratch
	var fe chunkSM
	run("encodeSmallestFast", func(k *kchunk) {
		w := escWriter{idx: escIdx, exp: escExp}
		encodeSmallestFast(k.x, sm[:], code[:], &fs, &fe, &sym, nil, table, sbase, 0, &w, new(readAhead))
	})
	var dt smallestDecTables
	dt.build(table, f)
	b.Run("buildDecTables", func(b *testing.B) {
		for b.Loop() {
			dt.built = false
			dt.build(table, f)
		}
	})
	run("decodeSmallest", func(k *kchunk) {
		r := escReader{idx: k.escIdxS, exp: k.escExpS, end: k.nescS}
		if err := decodeSmallest(k.code1, k.seg2, k.seg3, k.smS, out, f, &dt, sbase, 0, &r, buf2[:], buf3[:]); err != nil {
			b.Fatal(err)
		}
	})
	run("decodeSmallestFast", func(k *kchunk) {
		r := escReader{idx: k.escIdxS, exp: k.escExpS, end: k.nescS}
		if err := decodeSmallestFast(k.code1, k.seg2, k.seg3, k.smS, out, &dt, sbase, 0, &r, &fs); err != nil {
			b.Fatal(err)
		}
	})
	run("crc", func(k *kchunk) { crcUpdate(0, k.x) })
}

// BenchmarkPasses times the passes of the fast Smallest encoder one by one.
func BenchmarkPasses(b *testing.B) {
	cs, _, table, sbase, sym := kernelData()
	var s smallestScratch
	var e chunkSM
	var c1 chunkL1
	var sm chunkSM
	_ = table
	run := func(name string, fn func(k *kchunk)) {
		b.Run(name, func(b *testing.B) {
			i := 0
			reportCPU(b, 2*ChunkElements, func() {
				fn(&cs[i%kernelChunks])
				i++
			})
		})
	}
	run("split", func(k *kchunk) { splitChunk(asChunkX(k.x), &sm, &e) })
	splitChunk(asChunkX(cs[0].x), &sm, &e) // A and APair read cs[0]'s exponents
	run("A", func(k *kchunk) { smallestEncA(&e, &c1, &s.te, &sym, new(readAhead)) })
	var pair pairSymTable
	pair.build(&sym)
	run("APair", func(k *kchunk) { smallestEncAPair(&e, &c1, &s.te, &pair, new(readAhead)) })
	splitChunk(asChunkX(cs[0].x), &sm, &e)
	smallestEncA(&e, &c1, &s.te, &sym, new(readAhead))
	run("B", func(k *kchunk) { smallestEncB(&s.te, &s.buf2) })
	run("L", func(k *kchunk) { smallestEncL(&s.te, &s.l3) })
	nl3 := smallestEncL(&s.te, &s.l3)
	run("C", func(k *kchunk) {
		w := bitWriter{buf: s.buf3[:]}
		smallestEncC(asChunkX(cs[0].x), &s.l3, nl3, &s.buf3, sbase, 0, &w)
	})
}
