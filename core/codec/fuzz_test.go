package codec_test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/codec/internal/ref"
)

// FuzzRoundTrip packs arbitrary elements, with options taken from the first
// byte, in both layouts, and checks that Unpack, the reference decoder and
// Verify agree with the input.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{1, 0x80, 0x3F, 0x00, 0x00, 0xFF, 0x7F, 0x80, 0x7F})
	f.Add(append([]byte{0x1D}, u16le(randnBF16(300, 0.02, 1))...))
	f.Add(append([]byte{0x02}, u16le(randnBF16(4099, 1, 2))...))
	f.Add(append([]byte{0x0B}, u16le(randnFP16(1000, 0.5, 3))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		opt := data[0]
		data = data[1:]
		x := make([]uint16, len(data)/2)
		for i := range x {
			x[i] = binary.LittleEndian.Uint16(data[2*i:])
		}
		dt := codec.BF16
		if opt&1 != 0 {
			dt = codec.FP16
		}
		groups := 1 + int(opt>>2&7)
		shape := []int64{int64(len(x))}
		if len(x)%groups == 0 && len(x) >= groups {
			shape = []int64{int64(groups), int64(len(x) / groups)}
		} else {
			groups = 1
		}
		if opt&2 != 0 && len(x) == 1 {
			shape = []int64{}
		}
		for _, l := range layouts {
			checkRoundTrip(t, x, dt, shape, codec.Options{Layout: l, Groups: groups, Workers: int(opt >> 5)})
		}
	})
}

// FuzzUnpack builds a tensor from arbitrary bytes (see decodeFuzzTensor):
// Validate, Unpack, UnpackGroup and Verify must not panic, and Unpack must
// succeed exactly when the reference decoder does, with the same elements.
func FuzzUnpack(f *testing.F) {
	for i, c := range []struct {
		n, groups int
		dt        codec.DType
		sigma     float64
	}{{0, 1, codec.BF16, 1}, {1, 1, codec.BF16, 1}, {37, 1, codec.BF16, 0.02}, {4100, 2, codec.BF16, 0.02},
		{64, 4, codec.FP16, 0.02}, {513, 1, codec.FP16, 100}, {9000, 3, codec.BF16, 1e-3}} {
		x := randn(c.dt, c.n, c.sigma, uint64(i))
		for j := 0; j < len(x); j += 11 {
			x[j] = uint16(j * 7919)
		}
		shape := []int64{int64(c.groups), int64(c.n / c.groups)}
		if c.n == 1 {
			shape = []int64{}
		}
		for _, l := range layouts {
			pt, err := codec.Pack(x, c.dt, shape, codec.Options{Layout: l, Groups: c.groups})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(encodeFuzzTensor(pt))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pt := decodeFuzzTensor(data)
		verr := pt.Validate()
		n := pt.NumElements()
		if n > 1<<22 {
			if verr == nil {
				t.Fatalf("Validate accepted %d elements in %d bytes", n, pt.PackedBytes())
			}
			return
		}
		dst := make([]uint16, n)
		err := codec.Unpack(pt, dst, 2)
		want, rerr := ref.Decode(toRef(pt))
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Unpack: %v, reference decoder: %v", err, rerr)
		}
		if verr != nil && err == nil {
			t.Fatalf("Validate failed (%v) but Unpack succeeded", verr)
		}
		if err == nil && !slices.Equal(dst, want) {
			t.Fatalf("Unpack and the reference decoder disagree at element %d", firstDiff(dst, want))
		}
		verifyErr := codec.Verify(pt, 1)
		if err != nil && verifyErr == nil {
			t.Fatalf("Unpack failed (%v) but Verify succeeded", err)
		}
		if err == nil && (verifyErr == nil) != (pt.Checksum == codec.Checksum(want)) {
			t.Fatalf("Verify: %v, checksum of the decoded data %#x, tensor %#x", verifyErr, codec.Checksum(want), pt.Checksum)
		}
		if len(pt.Groups) > 0 && len(pt.Groups) <= 8 {
			for g := range pt.Groups {
				per := int(n) / len(pt.Groups)
				gd := make([]uint16, per)
				gerr := codec.UnpackGroup(pt, g, gd)
				if err == nil && (gerr != nil || !slices.Equal(gd, want[g*per:(g+1)*per])) {
					t.Fatalf("UnpackGroup(%d): %v, or different elements", g, gerr)
				}
			}
		}
	})
}

func u16le(x []uint16) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return b
}

// encodeFuzzTensor serializes a tensor for FuzzUnpack: layout, dtype,
// checksum (4 bytes), the number of dimensions and each one (varints), the
// number of groups (uvarint) and each group (elements, base, table,
// escapes, offsets), then each plane's length (uvarint) and bytes.
func encodeFuzzTensor(t *codec.Tensor) []byte {
	b := []byte{byte(t.Layout), byte(t.DType)}
	b = binary.LittleEndian.AppendUint32(b, t.Checksum)
	b = binary.AppendUvarint(b, uint64(len(t.Shape)))
	for _, s := range t.Shape {
		b = binary.AppendVarint(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(t.Groups)))
	for _, g := range t.Groups {
		b = binary.AppendUvarint(b, g.Elements)
		b = append(b, g.Base)
		b = append(b, g.Table[:]...)
		b = binary.AppendUvarint(b, g.Escapes)
		for _, o := range g.Offsets {
			b = binary.AppendUvarint(b, o)
		}
	}
	for _, p := range t.Planes {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// decodeFuzzTensor is the lenient inverse of encodeFuzzTensor: missing
// bytes read as zero, counts are capped by what is left.
func decodeFuzzTensor(b []byte) *codec.Tensor {
	byte1 := func() byte {
		if len(b) == 0 {
			return 0
		}
		v := b[0]
		b = b[1:]
		return v
	}
	uvarint := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	varint := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	t := &codec.Tensor{Layout: codec.Layout(byte1()), DType: codec.DType(byte1())}
	var cs [4]byte
	for i := range cs {
		cs[i] = byte1()
	}
	t.Checksum = binary.LittleEndian.Uint32(cs[:])
	t.Shape = []int64{}
	for n := min(uvarint(), 8); n > 0; n-- {
		t.Shape = append(t.Shape, varint())
	}
	for n := min(uvarint(), 64); n > 0; n-- {
		var g codec.Group
		g.Elements = uvarint()
		g.Base = byte1()
		for i := range g.Table {
			g.Table[i] = byte1()
		}
		g.Escapes = uvarint()
		for i := range g.Offsets {
			g.Offsets[i] = uvarint()
		}
		t.Groups = append(t.Groups, g)
	}
	for p := range t.Planes {
		n := min(uvarint(), uint64(len(b)))
		t.Planes[p] = b[:n:n]
		b = b[n:]
	}
	return t
}

// TestOracleMutations is a deterministic cousin of FuzzUnpack: it damages
// packed tensors at random (byte flips in every plane, field changes) and
// checks that the fast decoder and the reference decoder agree on every
// one: both fail, or both return the same elements.
func TestOracleMutations(t *testing.T) {
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	seed := uint64(1)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	var bases []*codec.Tensor
	for i, dt := range []codec.DType{codec.BF16, codec.FP16} {
		x := randn(dt, 2*5000, 0.02, uint64(i))
		for j := 0; j < len(x); j += 97 {
			x[j] = uint16(j * 40503)
		}
		for _, l := range layouts {
			pt, err := codec.Pack(x, dt, []int64{2, 5000}, codec.Options{Layout: l, Groups: 2})
			if err != nil {
				t.Fatal(err)
			}
			bases = append(bases, pt)
		}
	}
	agree, failed := 0, 0
	for it := 0; it < iters; it++ {
		pt := clone(bases[it%len(bases)])
		for k := 1 + rnd(3); k > 0; k-- {
			switch r := rnd(10); {
			case r < 7: // flip bits in a plane
				p := rnd(codec.NumPlanes)
				if len(pt.Planes[p]) > 0 {
					pt.Planes[p][rnd(len(pt.Planes[p]))] ^= byte(1 + rnd(255))
				}
			case r == 7:
				g := &pt.Groups[rnd(2)]
				g.Table[rnd(6)] = byte(rnd(256))
			case r == 8:
				g := &pt.Groups[rnd(2)]
				g.Base = byte(rnd(256))
			default:
				g := &pt.Groups[rnd(2)]
				g.Offsets[rnd(codec.NumPlanes)] += uint64(rnd(3)) - 1
			}
		}
		dst := make([]uint16, pt.NumElements())
		err := codec.Unpack(pt, dst, 1+it%3)
		// The error does not depend on the number of workers.
		err2 := codec.Unpack(pt, make([]uint16, pt.NumElements()), 4)
		if fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("iteration %d: Unpack errors differ with the worker count: %v / %v", it, err, err2)
		}
		want, rerr := ref.Decode(toRef(pt))
		if (err == nil) != (rerr == nil) {
			t.Fatalf("iteration %d: Unpack: %v, reference decoder: %v", it, err, rerr)
		}
		if err == nil {
			if !slices.Equal(dst, want) {
				t.Fatalf("iteration %d: decoders disagree at element %d", it, firstDiff(dst, want))
			}
			agree++
		} else {
			failed++
		}
	}
	t.Logf("%d mutations decoded identically, %d rejected by both", agree, failed)
}
