package codec_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/codec/internal/ref"
	"github.com/glyd/glyd/core/status"
)

// corruptBase packs weights with some escapes (zeros, infinities, huge
// values) over 3 groups of 2 chunks and a bit, so that every plane is used.
func corruptBase(tb testing.TB, dt codec.DType, l codec.Layout) ([]uint16, *codec.Tensor) {
	x := randn(dt, 3*9000, 0.02, 11)
	for i := 0; i < len(x); i += 501 {
		x[i] = [...]uint16{0, 0x8000, 0x7C00, 0x7F80, 0x0001, 0x7FFF}[i%6]
	}
	t, err := codec.Pack(x, dt, []int64{3, 9000}, codec.Options{Layout: l, Groups: 3})
	if err != nil {
		tb.Fatal(err)
	}
	if t.Groups[1].Escapes < 2 {
		tb.Fatalf("base tensor has too few escapes (%d)", t.Groups[1].Escapes)
	}
	return x, t
}

// group1 returns group 1's slice of plane p.
func group1(t *codec.Tensor, p codec.Plane) []byte {
	return t.Planes[p][t.Groups[1].Offsets[p]:t.Groups[2].Offsets[p]]
}

// checkCorrupt checks that Unpack, Verify and the reference decoder all
// reject t with code c, and that Validate does too when structural is set
// (and passes otherwise: the error is in the codes).
func checkCorrupt(t *testing.T, name string, pt *codec.Tensor, c status.Code, structural bool) {
	t.Helper()
	dst := make([]uint16, pt.NumElements())
	wantCode(t, name+": Unpack", codec.Unpack(pt, dst, 2), c)
	wantCode(t, name+": Verify", codec.Verify(pt, 2), c)
	_, err := ref.Decode(toRef(pt))
	wantCode(t, name+": reference decoder", err, c)
	if structural {
		wantCode(t, name+": Validate", pt.Validate(), c)
	} else if err := pt.Validate(); err != nil {
		t.Fatalf("%s: Validate: %v, want nil (the damage is in the codes)", name, err)
	}
}

// TestCorruption damages packed tensors one way at a time and checks that
// each damage gives its own status code.
func TestCorruption(t *testing.T) {
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for _, l := range layouts {
			x, base := corruptBase(t, dt, l)
			maxExp := uint8(255)
			if dt == codec.FP16 {
				maxExp = 31
			}
			run := func(name string, c status.Code, structural bool, damage func(t *testing.T, pt *codec.Tensor)) {
				t.Run(fmt.Sprintf("%v/%v/%s", dt, l, name), func(t *testing.T) {
					pt := clone(base)
					damage(t, pt)
					checkCorrupt(t, name, pt, c, structural)
				})
			}
			idx := func(pt *codec.Tensor, k int) []byte { return group1(pt, codec.PlaneEscIdx)[codec.EscIdxBytes*k:] }

			// Escape entries versus escape codes.
			run("entry-without-code-removed", status.EscapeMissing, false, func(t *testing.T, pt *codec.Tensor) {
				// Drop group 1's last escape entry: its code has no entry.
				g := &pt.Groups[1]
				k := int(g.Escapes) - 1
				for _, p := range []codec.Plane{codec.PlaneEscIdx, codec.PlaneEscExp} {
					w := 1
					if p == codec.PlaneEscIdx {
						w = codec.EscIdxBytes
					}
					at := int(g.Offsets[p]) + w*k
					pt.Planes[p] = append(pt.Planes[p][:at:at], pt.Planes[p][at+w:]...)
					pt.Groups[2].Offsets[p] -= uint64(w)
				}
				g.Escapes--
			})
			run("escape-index-moved", status.EscapeMissing, false, func(t *testing.T, pt *codec.Tensor) {
				// The last entry of group 1 names an element after its code.
				k := int(pt.Groups[1].Escapes) - 1
				v := binary.LittleEndian.Uint32(idx(pt, k))
				if uint64(v)+1 >= pt.Groups[1].Elements {
					t.Skip("last escape is the last element")
				}
				binary.LittleEndian.PutUint32(idx(pt, k), v+1)
			})
			switch l {
			case codec.Fixed12:
				run("code-15-without-entry", status.EscapeMissing, false, func(t *testing.T, pt *codec.Tensor) {
					code := group1(pt, codec.PlaneCode)
					for i := range code {
						if code[i]&15 != 15 && code[i]>>4 != 15 {
							code[i] |= 0x0F
							return
						}
					}
				})
				run("escape-code-cleared", status.EscapeMissing, false, func(t *testing.T, pt *codec.Tensor) {
					e := binary.LittleEndian.Uint32(idx(pt, 0))
					code := group1(pt, codec.PlaneCode)
					code[e/2] &^= 0x0F << (4 * (e % 2)) // now code 0: the entry has no code
				})
			case codec.Smallest:
				run("code3-15-without-entry", status.EscapeMissing, false, func(t *testing.T, pt *codec.Tensor) {
					c3 := group1(pt, codec.PlaneCode3)
					for i := range c3 {
						if c3[i]&15 != 15 {
							c3[i] |= 0x0F
							return
						}
					}
				})
				run("chunk-offset", status.Corrupt, false, func(t *testing.T, pt *codec.Tensor) {
					ct := group1(pt, codec.PlaneChunks)
					v := binary.LittleEndian.Uint64(ct[16:])
					binary.LittleEndian.PutUint64(ct[16:], v-1) // chunk 1's level-2 segment starts a byte early
				})
				run("chunk-first-nonzero", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
					binary.LittleEndian.PutUint64(group1(pt, codec.PlaneChunks)[8:], 1)
				})
				run("chunk-backwards", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
					ct := group1(pt, codec.PlaneChunks)
					binary.LittleEndian.PutUint64(ct[16:], 1<<40)
				})
				t.Run(fmt.Sprintf("%v/level1-changed", dt), func(t *testing.T) {
					// A level-1 code 3 that was not: the chunk then takes one
					// level-2 code more, and every later code of the chunk
					// shifts. Both decoders must fail; which check trips
					// first (segment length, or an escape code out of place)
					// depends on the data.
					pt := clone(base)
					c1 := group1(pt, codec.PlaneCode)
					for i := range c1 {
						if c1[i]&3 == 0 {
							c1[i] |= 3
							break
						}
					}
					err1 := codec.Unpack(pt, make([]uint16, pt.NumElements()), 2)
					_, err2 := ref.Decode(toRef(pt))
					for _, err := range []error{err1, err2} {
						if c := codeOf(err); c != status.Corrupt && c != status.EscapeMissing {
							t.Fatalf("error %v, want corrupt or escape-missing", err)
						}
					}
				})
				run("table-entry", status.ExponentTable, true, func(t *testing.T, pt *codec.Tensor) {
					if maxExp == 255 {
						t.Skip("every byte is a bf16 exponent")
					}
					pt.Groups[1].Table[4] = maxExp + 1
				})
			}

			// Escape indices.
			run("escape-index-out-of-range", status.EscapeRange, true, func(t *testing.T, pt *codec.Tensor) {
				k := int(pt.Groups[1].Escapes) - 1
				binary.LittleEndian.PutUint32(idx(pt, k), uint32(pt.Groups[1].Elements))
			})
			run("escape-index-huge", status.EscapeRange, true, func(t *testing.T, pt *codec.Tensor) {
				binary.LittleEndian.PutUint32(idx(pt, 0), 1<<32-1)
			})
			run("escape-indices-not-ascending", status.EscapeRange, true, func(t *testing.T, pt *codec.Tensor) {
				a, b := idx(pt, 0), idx(pt, 1)
				va, vb := binary.LittleEndian.Uint32(a), binary.LittleEndian.Uint32(b)
				binary.LittleEndian.PutUint32(a, vb)
				binary.LittleEndian.PutUint32(b, va)
			})
			run("escape-indices-equal", status.EscapeRange, true, func(t *testing.T, pt *codec.Tensor) {
				copy(idx(pt, 1)[:codec.EscIdxBytes], idx(pt, 0)[:codec.EscIdxBytes])
			})

			// Exponent base and escaped exponents.
			run("base-too-high", status.ExponentTable, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[1].Base = maxExp - 13
			})
			run("escaped-exponent", status.ExponentTable, true, func(t *testing.T, pt *codec.Tensor) {
				if maxExp == 255 {
					t.Skip("every byte is a bf16 exponent")
				}
				group1(pt, codec.PlaneEscExp)[0] = maxExp + 1
			})

			// Plane lengths and offsets.
			run("sm-truncated", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Planes[codec.PlaneSM] = pt.Planes[codec.PlaneSM][:len(pt.Planes[codec.PlaneSM])-1]
			})
			run("code-extra-byte", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Planes[codec.PlaneCode] = append(pt.Planes[codec.PlaneCode], 0)
			})
			run("escexp-truncated", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Planes[codec.PlaneEscExp] = pt.Planes[codec.PlaneEscExp][:len(pt.Planes[codec.PlaneEscExp])-1]
			})
			run("offset-shifted", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[2].Offsets[codec.PlaneSM]++
			})
			run("offset-first-group", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[0].Offsets[codec.PlaneCode] = 1
			})
			run("offset-huge", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[2].Offsets[codec.PlaneCode3] = 1 << 63
			})
			run("escape-count", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[1].Escapes++
			})
			run("escape-count-huge", status.EscapeRange, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[1].Escapes = 1 << 62
			})
			run("unused-plane", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				if l == codec.Fixed12 {
					pt.Planes[codec.PlaneChunks] = []byte{0}
				} else {
					t.Skip("smallest uses every plane")
				}
			})
			if l == codec.Smallest {
				run("code2-truncated", status.Corrupt, false, func(t *testing.T, pt *codec.Tensor) {
					p := codec.PlaneCode2
					pt.Planes[p] = pt.Planes[p][:len(pt.Planes[p])-1]
				})
			}

			// Shape and dtype.
			run("dtype", status.DType, true, func(t *testing.T, pt *codec.Tensor) { pt.DType = 9 })
			run("dtype-zero", status.DType, true, func(t *testing.T, pt *codec.Tensor) { pt.DType = 0 })
			run("layout", status.InvalidArgument, true, func(t *testing.T, pt *codec.Tensor) { pt.Layout = 7 })
			run("layout-raw", status.InvalidArgument, true, func(t *testing.T, pt *codec.Tensor) { pt.Layout = codec.Raw })
			run("shape-elements", status.SizeMismatch, true, func(t *testing.T, pt *codec.Tensor) { pt.Shape = []int64{3, 9001} })
			run("shape-overflow", status.Overflow, true, func(t *testing.T, pt *codec.Tensor) { pt.Shape = []int64{1 << 40, 1 << 40} })
			run("shape-negative", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) { pt.Shape = []int64{-3, -9000} })
			run("groups-uneven", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) {
				pt.Groups[0].Elements++
				pt.Groups[1].Elements--
			})
			run("groups-do-not-split", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) { pt.Shape = []int64{1, 27000} })
			run("no-groups", status.Corrupt, true, func(t *testing.T, pt *codec.Tensor) { pt.Groups = nil })
			_ = x
		}
	}
}

// TestPaddingBits checks that nonzero padding bits are rejected: the high
// nibble after an odd fixed12 group, the level-1 bits after the last
// element, the fp16 sign+mantissa bits after the last field, and the
// padding bits of a level-2 segment.
func TestPaddingBits(t *testing.T) {
	for _, dt := range []codec.DType{codec.BF16, codec.FP16} {
		for _, l := range layouts {
			x := randn(dt, 4097, 0.02, 5)
			pt, err := codec.Pack(x, dt, []int64{4097}, codec.Options{Layout: l})
			if err != nil {
				t.Fatal(err)
			}
			code := pt.Planes[codec.PlaneCode]
			c := clone(pt)
			if l == codec.Fixed12 {
				c.Planes[codec.PlaneCode][len(code)-1] |= 0x10
			} else {
				c.Planes[codec.PlaneCode][len(code)-1] |= 0x04
			}
			checkCorrupt(t, fmt.Sprintf("%v %v level-1 padding", dt, l), c, status.Corrupt, false)
			if dt == codec.FP16 {
				c := clone(pt)
				sm := c.Planes[codec.PlaneSM]
				sm[len(sm)-1] |= 0x80 // 4097*11 bits = 45067: 5 padding bits
				checkCorrupt(t, fmt.Sprintf("%v %v sm padding", dt, l), c, status.Corrupt, false)
			}
			if l == codec.Smallest {
				c := clone(pt)
				c2 := c.Planes[codec.PlaneCode2]
				ct := c.Planes[codec.PlaneChunks]
				end := binary.LittleEndian.Uint64(ct[16:]) // end of chunk 0's segment
				c2[end-1] |= 0xC0                          // the top 2 bits, padding unless 4 | entries
				if err := codec.Unpack(c, make([]uint16, 4097), 1); err == nil {
					// The last entry was a full byte; the flip changed a
					// code instead, which the checksum catches.
					wantCode(t, "level-2 flip", codec.Verify(c, 1), status.Checksum)
				} else {
					checkCorrupt(t, fmt.Sprintf("%v level-2 padding", dt), c, status.Corrupt, false)
				}
			}
		}
	}
}

// TestVerifyChecksum flips one bit of the sign+mantissa plane, which decodes
// fine (it is stored raw) but changes the data: Verify must report
// status.Checksum and name both sums.
func TestVerifyChecksum(t *testing.T) {
	for _, l := range layouts {
		_, pt := corruptBase(t, codec.BF16, l)
		if err := codec.Verify(pt, 0); err != nil {
			t.Fatalf("%v: Verify of a good tensor: %v", l, err)
		}
		c := clone(pt)
		c.Planes[codec.PlaneSM][12345] ^= 0x10
		if err := codec.Unpack(c, make([]uint16, c.NumElements()), 0); err != nil {
			t.Fatalf("%v: a flipped sm bit must still decode: %v", l, err)
		}
		err := codec.Verify(c, 0)
		wantCode(t, "flipped sm bit", err, status.Checksum)
		if want := fmt.Sprintf("%#08x", pt.Checksum); !contains(err.Error(), want) {
			t.Fatalf("Verify error %q does not name the expected checksum %s", err, want)
		}
		c = clone(pt)
		c.Checksum ^= 1
		wantCode(t, "wrong checksum", codec.Verify(c, 1), status.Checksum)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestArguments checks the errors for bad arguments.
func TestArguments(t *testing.T) {
	x := randnBF16(12, 0.02, 1)
	ok := codec.Options{Layout: codec.Fixed12}
	_, err := codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: codec.Raw})
	wantCode(t, "Pack raw", err, status.InvalidArgument)
	_, err = codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: 9})
	wantCode(t, "Pack layout 9", err, status.InvalidArgument)
	_, err = codec.Pack(x, 0, []int64{3, 4}, ok)
	wantCode(t, "Pack dtype 0", err, status.DType)
	_, err = codec.Pack(x, 3, []int64{3, 4}, ok)
	wantCode(t, "Pack dtype 3", err, status.DType)
	_, err = codec.Pack(x, codec.BF16, []int64{3, 5}, ok)
	wantCode(t, "Pack wrong size", err, status.SizeMismatch)
	_, err = codec.Pack(x, codec.BF16, []int64{-3, -4}, ok)
	wantCode(t, "Pack negative dims", err, status.InvalidArgument)
	_, err = codec.Pack(x, codec.BF16, []int64{1 << 32, 1 << 32, 0}, ok)
	wantCode(t, "Pack zero with huge dims", err, status.SizeMismatch)
	_, err = codec.Pack(x, codec.BF16, []int64{1 << 32, 1 << 32}, ok)
	wantCode(t, "Pack overflow", err, status.Overflow)
	_, err = codec.Pack(x, codec.BF16, []int64{1<<62 + 1, 1<<62 + 1, 4}, ok)
	wantCode(t, "Pack overflow 64 bits", err, status.Overflow)
	_, err = codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: codec.Fixed12, Groups: 2})
	wantCode(t, "Pack groups not dividing", err, status.InvalidArgument)
	_, err = codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: codec.Fixed12, Groups: 6})
	wantCode(t, "Pack more groups than rows", err, status.InvalidArgument)
	_, err = codec.Pack(x[:1], codec.BF16, []int64{}, codec.Options{Layout: codec.Fixed12, Groups: 2})
	wantCode(t, "Pack scalar in groups", err, status.InvalidArgument)
	_, err = codec.Pack(nil, codec.BF16, []int64{0}, codec.Options{Layout: codec.Fixed12, Groups: 2})
	wantCode(t, "Pack groups of an empty axis", err, status.InvalidArgument)
	_, err = codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: codec.Fixed12, Groups: -1})
	wantCode(t, "Pack negative groups", err, status.InvalidArgument)
	_, err = codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: codec.Fixed12, Workers: -1})
	wantCode(t, "Pack negative workers", err, status.InvalidArgument)

	pt, err := codec.Pack(x, codec.BF16, []int64{3, 4}, codec.Options{Layout: codec.Smallest, Groups: 3})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "Unpack short dst", codec.Unpack(pt, make([]uint16, 11), 0), status.BufferTooSmall)
	wantCode(t, "Unpack long dst", codec.Unpack(pt, make([]uint16, 13), 0), status.SizeMismatch)
	wantCode(t, "Unpack negative workers", codec.Unpack(pt, make([]uint16, 12), -2), status.InvalidArgument)
	wantCode(t, "Unpack nil", codec.Unpack(nil, nil, 0), status.InvalidArgument)
	wantCode(t, "Verify nil", codec.Verify(nil, 0), status.InvalidArgument)
	wantCode(t, "Validate nil", (*codec.Tensor)(nil).Validate(), status.InvalidArgument)
	wantCode(t, "UnpackGroup -1", codec.UnpackGroup(pt, -1, make([]uint16, 4)), status.InvalidArgument)
	wantCode(t, "UnpackGroup 3", codec.UnpackGroup(pt, 3, make([]uint16, 4)), status.InvalidArgument)
	wantCode(t, "UnpackGroup short", codec.UnpackGroup(pt, 1, make([]uint16, 3)), status.BufferTooSmall)
	wantCode(t, "UnpackGroup long", codec.UnpackGroup(pt, 1, make([]uint16, 12)), status.SizeMismatch)
}

// TestUnpackAllocations checks that the decoder's memory use does not
// depend on what a (hostile) tensor claims: a tensor claiming 2^50
// elements with tiny planes is rejected without allocating them, and
// decoding a real tensor allocates only scratch.
func TestUnpackAllocations(t *testing.T) {
	huge := &codec.Tensor{Layout: codec.Smallest, DType: codec.BF16, Shape: []int64{1 << 50},
		Groups: []codec.Group{{Elements: 1 << 50}}}
	for p := range huge.Planes {
		huge.Planes[p] = make([]byte, 16)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	wantCode(t, "2^50 elements in 16 bytes", huge.Validate(), status.Corrupt)
	if err := codec.Unpack(huge, nil, 0); err == nil {
		t.Fatal("Unpack accepted a tensor claiming 2^50 elements")
	}
	wantCode(t, "Verify 2^50", codec.Verify(huge, 0), status.Corrupt)
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("rejecting a hostile tensor allocated %d bytes", d)
	}

	x := randnBF16(1<<20, 0.02, 9)
	for _, l := range layouts {
		pt, err := codec.Pack(x, codec.BF16, []int64{1 << 20}, codec.Options{Layout: l})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]uint16, len(x))
		allocs := testing.AllocsPerRun(3, func() {
			if err := codec.Unpack(pt, dst, 2); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 20 {
			t.Fatalf("%v: Unpack made %v allocations", l, allocs)
		}
		runtime.ReadMemStats(&before)
		if err := codec.Unpack(pt, dst, 2); err != nil {
			t.Fatal(err)
		}
		if err := codec.Verify(pt, 2); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > uint64(pt.PackedBytes()) {
			t.Fatalf("%v: Unpack and Verify allocated %d bytes for %d packed bytes", l, d, pt.PackedBytes())
		}
	}
}

// TestNegativeDimensionAfterZero pins a bug FuzzUnpack found
// (testdata/fuzz/FuzzUnpack/negative-dim-after-zero): a shape like [0, -25]
// has a zero dimension, and the element count stopped at it, so the
// negative dimension after it was never seen and Unpack accepted the
// tensor while the reference decoder rejected it.
func TestNegativeDimensionAfterZero(t *testing.T) {
	pt, err := codec.Pack(nil, codec.BF16, []int64{0, 25}, codec.Options{Layout: codec.Smallest})
	if err != nil {
		t.Fatal(err)
	}
	pt.Shape = []int64{0, -25}
	checkCorrupt(t, "shape [0 -25]", pt, status.Corrupt, true)
	if pt.NumElements() != 0 {
		t.Fatal("NumElements of a bad shape is not 0")
	}
	_, err = codec.Pack(nil, codec.BF16, []int64{0, -25}, codec.Options{Layout: codec.Fixed12})
	wantCode(t, "Pack [0 -25]", err, status.InvalidArgument)
}

// TestShapeOverflow: the element count of a shape must not wrap around
// 2^64 on its way to the MaxElements check (both decoders and Pack).
func TestShapeOverflow(t *testing.T) {
	for _, shape := range [][]int64{
		{1 << 28, 1 << 28, 1 << 28},
		{1 << 56, 256},
		{256, 1 << 56},
		{1 << 32, 1 << 32},
		{1<<63 - 1, 1<<63 - 1},
		{3, 1 << 62, 4},
	} {
		pt := &codec.Tensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: shape, Groups: []codec.Group{{Elements: 1}}}
		checkCorrupt(t, fmt.Sprint(shape), pt, status.Overflow, true)
		_, err := codec.Pack(nil, codec.BF16, shape, codec.Options{Layout: codec.Fixed12})
		wantCode(t, fmt.Sprintf("Pack %v", shape), err, status.Overflow)
	}
}

// TestGroupElementLimit: escape indices are uint32, so a group holds at most
// 2^32-1 elements. Pack says which groups= to use; Validate reports a larger
// group as corrupt.
func TestGroupElementLimit(t *testing.T) {
	_, err := codec.Pack(nil, codec.BF16, []int64{1 << 16, 1 << 16}, codec.Options{Layout: codec.Fixed12})
	wantCode(t, "Pack one group of 2^32", err, status.InvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "exceeds 2^32-1; pack with groups=2") {
		t.Fatalf("message %v", err)
	}
	// Two groups of 2^31: the limit passes and the (missing) elements are
	// the next error.
	_, err = codec.Pack(nil, codec.BF16, []int64{1 << 16, 1 << 16}, codec.Options{Layout: codec.Fixed12, Groups: 2})
	wantCode(t, "Pack two groups of 2^31", err, status.SizeMismatch)
	pt := &codec.Tensor{Layout: codec.Fixed12, DType: codec.BF16, Shape: []int64{1 << 32},
		Groups: []codec.Group{{Elements: 1 << 32}}}
	wantCode(t, "group of 2^32: Validate", pt.Validate(), status.Corrupt)
	_, err = ref.Decode(toRef(pt))
	wantCode(t, "group of 2^32: reference decoder", err, status.Corrupt)
	wantCode(t, "group of 2^32: Verify", codec.Verify(pt, 1), status.Corrupt)
}
