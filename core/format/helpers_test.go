package format

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// weights returns n bf16 values distributed like trained weights
// (N(0, 0.02)), with a few zeros, infinities and NaNs to force escapes.
func weights(n int, seed uint64) []uint16 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]uint16, n)
	for i := range out {
		f := float32(rng.NormFloat64() * 0.02)
		out[i] = uint16(math.Float32bits(f) >> 16)
		switch rng.IntN(500) {
		case 0:
			out[i] = 0x8000 // -0
		case 1:
			out[i] = 0x7F80 // +Inf
		case 2:
			out[i] = 0x7FC1 // NaN with payload
		}
	}
	return out
}

// packed packs n = prod(shape) weights into groups groups.
func packed(t testing.TB, shape []int64, groups int, seed uint64) ([]uint16, *codec.Tensor) {
	t.Helper()
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	src := weights(n, seed)
	pt, err := codec.Pack(src, codec.BF16, shape, codec.Options{Layout: codec.Fixed12, Groups: groups})
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return src, pt
}

// wantCode fails unless err has code c and its message contains every one
// of subs.
func wantCode(t testing.TB, err error, c status.Code, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", c)
	}
	var se *status.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %q (%T) carries no status code, want %v", err, err, c)
	}
	if se.Code != c {
		t.Fatalf("got code %v (%q), want %v", se.Code, err, c)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q does not contain %q", err, s)
		}
	}
}

// must fails the test on err.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fixture is a small checkpoint written by writeFixture.
type fixture struct {
	dir    string
	src    map[string][]uint16 // original elements of the packed tensors
	packed map[string]*codec.Tensor
	raw    map[string][]byte
}

// writeFixture writes a checkpoint with packed and raw tensors into dir. With
// experts, one packed tensor has 4 groups (glyd-v2).
func writeFixture(t testing.TB, dir string, maxShard int64, experts bool) *fixture {
	t.Helper()
	fx := &fixture{dir: dir, src: map[string][]uint16{}, packed: map[string]*codec.Tensor{}, raw: map[string][]byte{}}
	w, err := Create(dir, WriterOptions{MaxShardSize: maxShard, Library: "glyd-test"})
	must(t, err)
	defer w.Abort()
	add := func(name string, shape []int64, groups int, seed uint64) {
		src, pt := packed(t, shape, groups, seed)
		fx.src[name], fx.packed[name] = src, pt
		must(t, w.AddPacked(name, pt))
	}
	addRaw := func(name, dtype string, shape []int64, size int) {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		data := make([]byte, n*size)
		for i := range data {
			data[i] = byte(i*7 + len(name))
		}
		fx.raw[name] = data
		must(t, w.AddRaw(name, dtype, shape, data))
	}
	add("model.layers.0.self_attn.q_proj.weight", []int64{64, 96}, 1, 1)
	addRaw("model.layers.0.input_layernorm.weight", "BF16", []int64{96}, 2)
	add("model.layers.0.mlp.up.weight", []int64{128, 64}, 1, 2)
	addRaw("model.layers.0.self_attn.q_proj.bias", "F32", []int64{64}, 4)
	addRaw("model.rotary.step", "I64", nil, 8)
	addRaw("model.mask", "BOOL", []int64{3, 5}, 1)
	if experts {
		add("model.layers.0.mlp.experts.w13", []int64{4, 32, 64}, 4, 3)
	}
	addRaw("model.norm.weight", "F16", []int64{96}, 2)
	add("model.layers.1.self_attn.o_proj.weight", []int64{96, 64}, 1, 4)
	must(t, w.Commit())
	return fx
}

// shardFiles returns the safetensors files of a checkpoint folder.
func shardFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	must(t, err)
	return m
}

// readDescriptor decodes dir's glyd.fb.
func readDescriptor(t testing.TB, dir string) *descriptor {
	t.Helper()
	buf, err := os.ReadFile(filepath.Join(dir, DescriptorFile))
	must(t, err)
	d, err := decodeDescriptor(DescriptorFile, buf, FormatVersion)
	must(t, err)
	return d
}

// writeDescriptor replaces dir's glyd.fb with d.
func writeDescriptor(t testing.TB, dir string, d *descriptor) {
	t.Helper()
	buf, err := encodeDescriptor(d)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, DescriptorFile), buf, 0o644))
}

// safetensorsFile builds a safetensors file from a header and data.
func safetensorsFile(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), data...)
}

// hostileFolder makes a checkpoint folder whose only shard is the file
// testdata/safetensors/name and whose descriptor agrees with its size, and
// returns the folder and the shard's path.
func hostileFolder(t testing.TB, name string) (string, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "safetensors", name))
	must(t, err)
	dir := t.TempDir()
	shard := filepath.Join(dir, SingleShardFile)
	must(t, os.WriteFile(shard, data, 0o644))
	writeDescriptor(t, dir, &descriptor{
		format: FormatName(FormatV1), version: FormatV1, library: "test",
		shards: []descShard{{name: SingleShardFile, size: uint64(len(data))}},
	})
	return dir, shard
}

// planesOf returns the plane list of a Fixed12 bf16 tensor name of n
// elements without escapes.
func planesOf(name string, n uint64) []descPlane {
	out := make([]descPlane, codec.NumPlanes)
	for p := range out {
		out[p].key = PlaneKey(name, codec.Plane(p))
	}
	out[codec.PlaneSM].length = n
	out[codec.PlaneCode].length = (n + 1) / 2
	return out
}
