package codec_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/glyd/glyd/core/bf16"
	"github.com/glyd/glyd/core/codec"
)

// benchElements is the size of the benchmark tensor: 16Mi bf16 weights
// drawn from N(0, 0.02), like a trained LLM weight matrix.
const benchElements = 16 << 20

var (
	benchOnce sync.Once
	benchSrc  []uint16
)

func randnBF16(n int, sigma float64, seed uint64) []uint16 {
	r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	x := make([]uint16, n)
	for i := range x {
		x[i] = bf16.FromFloat32(float32(r.NormFloat64() * sigma))
	}
	return x
}

func benchData() []uint16 {
	benchOnce.Do(func() { benchSrc = randnBF16(benchElements, 0.02, 42) })
	return benchSrc
}

func benchWorkers() []int {
	if n := runtime.GOMAXPROCS(0); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

// BenchmarkPack reports packing throughput in MB/s of bf16 input.
func BenchmarkPack(b *testing.B) {
	src := benchData()
	for _, l := range []codec.Layout{codec.Fixed12, codec.Smallest} {
		for _, w := range benchWorkers() {
			b.Run(l.String()+"/workers="+strconv.Itoa(w), func(b *testing.B) {
				b.ReportAllocs()
				codec.ReportCPU(b, 2*int64(len(src)), func() {
					if _, err := codec.Pack(src, codec.BF16, []int64{4096, int64(len(src) / 4096)}, codec.Options{Layout: l, Workers: w}); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// BenchmarkUnpack reports unpacking throughput in MB/s of bf16 output.
func BenchmarkUnpack(b *testing.B) {
	src := benchData()
	dst := make([]uint16, len(src))
	for _, l := range []codec.Layout{codec.Fixed12, codec.Smallest} {
		t, err := codec.Pack(src, codec.BF16, []int64{4096, int64(len(src) / 4096)}, codec.Options{Layout: l})
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range benchWorkers() {
			b.Run(l.String()+"/workers="+strconv.Itoa(w), func(b *testing.B) {
				b.ReportAllocs()
				codec.ReportCPU(b, 2*int64(len(src)), func() {
					if err := codec.Unpack(t, dst, w); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// BenchmarkVerify reports verification throughput in MB/s of bf16.
func BenchmarkVerify(b *testing.B) {
	src := benchData()
	for _, l := range []codec.Layout{codec.Fixed12, codec.Smallest} {
		t, err := codec.Pack(src, codec.BF16, []int64{int64(len(src))}, codec.Options{Layout: l})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(l.String(), func(b *testing.B) {
			codec.ReportCPU(b, 2*int64(len(src)), func() {
				if err := codec.Verify(t, 0); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkChecksum reports CRC-32C throughput.
func BenchmarkChecksum(b *testing.B) {
	src := benchData()
	b.SetBytes(2 * int64(len(src)))
	for b.Loop() {
		codec.Checksum(src)
	}
}

// BenchmarkFP16 reports fp16 throughput (generic paths) with one worker.
func BenchmarkFP16(b *testing.B) {
	src := randnFP16(4<<20, 0.02, 5)
	dst := make([]uint16, len(src))
	for _, l := range []codec.Layout{codec.Fixed12, codec.Smallest} {
		opt := codec.Options{Layout: l, Workers: 1}
		t, err := codec.Pack(src, codec.FP16, []int64{int64(len(src))}, opt)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("pack/"+l.String(), func(b *testing.B) {
			codec.ReportCPU(b, 2*int64(len(src)), func() {
				if _, err := codec.Pack(src, codec.FP16, []int64{int64(len(src))}, opt); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run("unpack/"+l.String(), func(b *testing.B) {
			codec.ReportCPU(b, 2*int64(len(src)), func() {
				if err := codec.Unpack(t, dst, 1); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
