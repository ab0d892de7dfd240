package codec_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/glyd/glyd/core/bf16"
	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/codec/internal/ref"
	"github.com/glyd/glyd/core/status"
)

var layouts = []codec.Layout{codec.Fixed12, codec.Smallest}

// toRef converts a tensor to the reference decoder's mirror type.
func toRef(t *codec.Tensor) *ref.Tensor {
	r := &ref.Tensor{Layout: uint8(t.Layout), DType: uint8(t.DType), Shape: t.Shape}
	for _, g := range t.Groups {
		r.Groups = append(r.Groups, ref.Group{Elements: g.Elements, Base: g.Base, Table: g.Table, Offsets: g.Offsets, Escapes: g.Escapes})
	}
	for p := range t.Planes {
		r.Planes[p] = t.Planes[p]
	}
	return r
}

// clone returns a deep copy of t, for corrupting.
func clone(t *codec.Tensor) *codec.Tensor {
	c := *t
	c.Shape = slices.Clone(t.Shape)
	c.Groups = slices.Clone(t.Groups)
	for p := range t.Planes {
		c.Planes[p] = slices.Clone(t.Planes[p])
	}
	return &c
}

// codeOf returns the status code of err.
func codeOf(err error) status.Code { return status.CodeOf(err) }

// randnBF16 is defined in bench_test.go; randnFP16 is its fp16 twin.
func randnFP16(n int, sigma float64, seed uint64) []uint16 {
	r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	x := make([]uint16, n)
	for i := range x {
		x[i] = bf16.FP16FromFloat32(float32(r.NormFloat64() * sigma))
	}
	return x
}

func randn(dt codec.DType, n int, sigma float64, seed uint64) []uint16 {
	if dt == codec.FP16 {
		return randnFP16(n, sigma, seed)
	}
	return randnBF16(n, sigma, seed)
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []uint16) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// checkRoundTrip packs src with opt, and checks everything that must hold of
// the result: Validate passes; Unpack (1 and 3 workers), UnpackGroup for
// every group and the reference decoder all return src bit for bit; Verify
// passes; the checksum is Checksum(src); packing again (other worker
// count) gives identical bytes. It returns the packed tensor.
func checkRoundTrip(tb testing.TB, src []uint16, dt codec.DType, shape []int64, opt codec.Options) *codec.Tensor {
	tb.Helper()
	name := fmt.Sprintf("%v %v shape %v groups %d", opt.Layout, dt, shape, opt.Groups)
	t, err := codec.Pack(src, dt, shape, opt)
	if err != nil {
		tb.Fatalf("%s: Pack: %v", name, err)
	}
	if err := t.Validate(); err != nil {
		tb.Fatalf("%s: Validate: %v", name, err)
	}
	if t.NumElements() != uint64(len(src)) {
		tb.Fatalf("%s: NumElements %d, want %d", name, t.NumElements(), len(src))
	}
	if t.Checksum != codec.Checksum(src) {
		tb.Fatalf("%s: checksum %#x, want %#x", name, t.Checksum, codec.Checksum(src))
	}
	for _, w := range []int{1, 3} {
		dst := make([]uint16, len(src))
		for i := range dst {
			dst[i] = 0xDEAD
		}
		if err := codec.Unpack(t, dst, w); err != nil {
			tb.Fatalf("%s: Unpack(workers=%d): %v", name, w, err)
		}
		if i := firstDiff(src, dst); i >= 0 {
			tb.Fatalf("%s: Unpack(workers=%d): element %d is %#04x, want %#04x", name, w, i, dst[i], src[i])
		}
	}
	got, err := ref.Decode(toRef(t))
	if err != nil {
		tb.Fatalf("%s: reference decoder: %v", name, err)
	}
	if i := firstDiff(src, got); i >= 0 {
		tb.Fatalf("%s: reference decoder: element %d is %#04x, want %#04x", name, i, got[i], src[i])
	}
	per := len(src) / len(t.Groups)
	for g := range t.Groups {
		dst := make([]uint16, per)
		if err := codec.UnpackGroup(t, g, dst); err != nil {
			tb.Fatalf("%s: UnpackGroup(%d): %v", name, g, err)
		}
		if i := firstDiff(src[g*per:(g+1)*per], dst); i >= 0 {
			tb.Fatalf("%s: UnpackGroup(%d): element %d differs", name, g, i)
		}
	}
	if err := codec.Verify(t, 0); err != nil {
		tb.Fatalf("%s: Verify: %v", name, err)
	}
	opt2 := opt
	opt2.Workers = 1 + opt.Workers%3
	t2, err := codec.Pack(src, dt, shape, opt2)
	if err != nil {
		tb.Fatalf("%s: second Pack: %v", name, err)
	}
	if !sameTensor(t, t2) {
		tb.Fatalf("%s: packing twice (workers %d and %d) gives different bytes", name, opt.Workers, opt2.Workers)
	}
	return t
}

func sameTensor(a, b *codec.Tensor) bool {
	if a.Layout != b.Layout || a.DType != b.DType || !slices.Equal(a.Shape, b.Shape) || a.Checksum != b.Checksum || !slices.Equal(a.Groups, b.Groups) {
		return false
	}
	for p := range a.Planes {
		if !slices.Equal(a.Planes[p], b.Planes[p]) {
			return false
		}
	}
	return true
}

// wantCode fails unless err carries code c.
func wantCode(tb testing.TB, what string, err error, c status.Code) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("%s: no error, want %v", what, c)
	}
	if got := codeOf(err); got != c {
		tb.Fatalf("%s: error %q has code %v (%d), want %v (%d)", what, err, got, got, c, c)
	}
	if !errors.Is(err, &status.Error{Code: c}) {
		tb.Fatalf("%s: errors.Is does not match code %v", what, c)
	}
}
