package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/format/internal/fb"
	"github.com/glyd/glyd/core/status"
)

func TestRoundTripShardedExperts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	fx := writeFixture(t, dir, 8000, true)

	files := shardFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("MaxShardSize 8000 gave %d shards, want several", len(files))
	}
	for i, f := range files {
		if want := filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(files))); f != want {
			t.Errorf("shard %d is %s, want %s", i, f, want)
		}
	}
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	if r.Format() != "glyd-v2" || r.FormatVersion() != 2 || r.Library() != "glyd-test" || r.Dir() != dir {
		t.Errorf("Format %q version %d library %q dir %q", r.Format(), r.FormatVersion(), r.Library(), r.Dir())
	}
	checkFixture(t, r, fx)
	checkIndex(t, dir, r)
	checkShardLayout(t, dir)
}

func TestRoundTripSingleShardDense(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	fx := writeFixture(t, dir, 0, false)
	if files := shardFiles(t, dir); len(files) != 1 || filepath.Base(files[0]) != SingleShardFile {
		t.Fatalf("shards %v, want only %s", files, SingleShardFile)
	}
	if _, err := os.Stat(filepath.Join(dir, IndexFile)); err == nil {
		t.Errorf("a single-shard checkpoint has %s", IndexFile)
	}
	r, err := Open(dir, ReaderOptions{MaxFormatVersion: 1})
	must(t, err)
	defer r.Close()
	if r.Format() != "glyd-v1" {
		t.Errorf("Format %q, want glyd-v1", r.Format())
	}
	checkFixture(t, r, fx)
	checkShardLayout(t, dir)
}

func TestRoundTripEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "empty")
	w, err := Create(dir, WriterOptions{})
	must(t, err)
	must(t, w.Commit())
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	if n := len(r.Tensors()); n != 0 {
		t.Errorf("%d tensors, want 0", n)
	}
	must(t, r.VerifyAll(nil))
}

// checkFixture compares everything a Reader returns with what was written.
func checkFixture(t *testing.T, r *Reader, fx *fixture) {
	t.Helper()
	infos := r.Tensors()
	if len(infos) != len(fx.packed)+len(fx.raw) {
		t.Fatalf("%d tensors, want %d", len(infos), len(fx.packed)+len(fx.raw))
	}
	if !slices.IsSortedFunc(infos, func(a, b TensorInfo) int { return cmpString(a.Name, b.Name) }) {
		t.Errorf("Tensors() is not sorted by name")
	}
	for _, info := range infos {
		if pt, ok := fx.packed[info.Name]; ok {
			got, err := r.Packed(info.Name)
			must(t, err)
			if got.Layout != pt.Layout || got.DType != pt.DType || got.Checksum != pt.Checksum ||
				!slices.Equal(got.Shape, pt.Shape) || !slices.Equal(got.Groups, pt.Groups) {
				t.Errorf("%s: packed tensor differs: %+v", info.Name, got)
			}
			for p := range got.Planes {
				if !bytes.Equal(got.Planes[p], pt.Planes[p]) {
					t.Errorf("%s: plane %d differs", info.Name, p)
				}
			}
			n := len(fx.src[info.Name])
			if info.Layout != codec.Fixed12 || info.DType != "BF16" || info.RawDType != "" || info.Elements != uint64(n) ||
				info.OriginalBytes != 2*uint64(n) || info.PackedBytes != pt.PackedBytes() || info.Groups != len(pt.Groups) ||
				info.Checksum != pt.Checksum || info.BitsPerWeight != pt.BitsPerWeight() || info.EscapeFraction != pt.EscapeFraction() {
				t.Errorf("%s: info %+v", info.Name, info)
			}
			dst := make([]uint16, n+3)
			must(t, r.Unpack(info.Name, dst))
			if !slices.Equal(dst[:n], fx.src[info.Name]) {
				t.Errorf("%s: unpacked elements differ", info.Name)
			}
			wantCode(t, r.Unpack(info.Name, dst[:n-1]), status.BufferTooSmall, info.Name)
			_, _, err = r.Raw(info.Name)
			wantCode(t, err, status.InvalidArgument, info.Name)
		} else {
			want := fx.raw[info.Name]
			ri, data, err := r.Raw(info.Name)
			must(t, err)
			if !bytes.Equal(data, want) {
				t.Errorf("%s: raw bytes differ", info.Name)
			}
			if ri.Name != info.Name || ri.DType != info.DType || !slices.Equal(ri.Shape, info.Shape) ||
				ri.Checksum != crc32.Checksum(want, castagnoli) || ri.Shard != info.Shard {
				t.Errorf("%s: raw info %+v", info.Name, ri)
			}
			if info.Layout != codec.Raw || info.RawDType != info.DType || info.PackedBytes != uint64(len(want)) ||
				info.OriginalBytes != uint64(len(want)) || info.Groups != 0 {
				t.Errorf("%s: info %+v", info.Name, info)
			}
			_, err = r.Packed(info.Name)
			wantCode(t, err, status.InvalidArgument, info.Name)
			if info.DType == "BF16" || info.DType == "F16" {
				dst := make([]uint16, info.Elements)
				must(t, r.Unpack(info.Name, dst))
				for i, v := range dst {
					if v != binary.LittleEndian.Uint16(want[2*i:]) {
						t.Fatalf("%s: element %d differs", info.Name, i)
					}
				}
			} else {
				wantCode(t, r.Unpack(info.Name, make([]uint16, info.Elements)), status.DType, info.Name)
			}
		}
		must(t, r.Verify(info.Name))
		got, err := r.Info(info.Name)
		must(t, err)
		if got.Name != info.Name || got.Shard != info.Shard {
			t.Errorf("Info(%q) = %+v", info.Name, got)
		}
	}
	var seen []int
	must(t, r.VerifyAll(func(i, n int) {
		if n != len(infos) {
			t.Errorf("progress total %d, want %d", n, len(infos))
		}
		seen = append(seen, i)
	}))
	if len(seen) != len(infos) || seen[len(seen)-1] != len(infos) {
		t.Errorf("progress calls %v", seen)
	}
	_, err := r.Packed("no.such.tensor")
	wantCode(t, err, status.NotFound, "no.such.tensor")
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkIndex checks model.safetensors.index.json against the shards.
func checkIndex(t *testing.T, dir string, r *Reader) {
	t.Helper()
	buf, err := os.ReadFile(filepath.Join(dir, IndexFile))
	must(t, err)
	var idx struct {
		Metadata struct {
			TotalSize uint64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	must(t, json.Unmarshal(buf, &idx))
	var total uint64
	keys := 0
	for _, info := range r.Tensors() {
		total += info.PackedBytes
		if info.Layout == codec.Raw {
			keys++
			if idx.WeightMap[info.Name] != info.Shard {
				t.Errorf("index maps %q to %q, want %q", info.Name, idx.WeightMap[info.Name], info.Shard)
			}
			continue
		}
		for p := codec.Plane(0); p < codec.NumPlanes; p++ {
			keys++
			if k := PlaneKey(info.Name, p); idx.WeightMap[k] != info.Shard {
				t.Errorf("index maps %q to %q, want %q", k, idx.WeightMap[k], info.Shard)
			}
		}
	}
	if len(idx.WeightMap) != keys || idx.Metadata.TotalSize != total {
		t.Errorf("index has %d keys and total_size %d, want %d and %d", len(idx.WeightMap), idx.Metadata.TotalSize, keys, total)
	}
}

// checkShardLayout checks what transformers relies on in every shard: the
// metadata, the header padding, and data aligned to its element size.
func checkShardLayout(t *testing.T, dir string) {
	t.Helper()
	for _, path := range shardFiles(t, dir) {
		data, err := os.ReadFile(path)
		must(t, err)
		st, err := parseSafetensors(path, data)
		must(t, err)
		if st.metadata["format"] != "pt" || st.metadata["glyd"] != readDescriptor(t, dir).format {
			t.Errorf("%s: metadata %v", path, st.metadata)
		}
		if st.dataStart%8 != 0 {
			t.Errorf("%s: data starts at %d, not a multiple of 8", path, st.dataStart)
		}
		for _, e := range st.tensors {
			if (st.dataStart+e.begin)%uint64(e.dtype.size) != 0 {
				t.Errorf("%s: %s tensor %q at file offset %d is misaligned", path, e.dtype.name, e.key, st.dataStart+e.begin)
			}
		}
	}
}

func TestWriterProgress(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	var last [2]int64
	calls := 0
	w, err := Create(dir, WriterOptions{MaxShardSize: 5000, Progress: func(done, total int64) {
		if done < last[0] || done > total {
			t.Errorf("progress (%d, %d) after (%d, %d)", done, total, last[0], last[1])
		}
		last = [2]int64{done, total}
		calls++
	}})
	must(t, err)
	var size int64
	for i := 0; i < 4; i++ {
		_, pt := packed(t, []int64{64, 64}, 1, uint64(i))
		must(t, w.AddPacked(fmt.Sprint("w", i), pt))
		size += int64(pt.PackedBytes())
	}
	must(t, w.Commit())
	if calls < 4 || last != [2]int64{size, size} {
		t.Errorf("%d progress calls, last %v, want >= 4 calls ending at (%d, %d)", calls, last, size, size)
	}
}

func TestCallerFilesInTempDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	w, err := Create(dir, WriterOptions{})
	must(t, err)
	defer w.Abort()
	must(t, os.WriteFile(filepath.Join(w.TempDir(), "config.json"), []byte(`{"model_type":"llama"}`), 0o644))
	must(t, os.Mkdir(filepath.Join(w.TempDir(), "extra"), 0o755))
	must(t, os.WriteFile(filepath.Join(w.TempDir(), "extra", "a.txt"), []byte("a"), 0o644))
	must(t, w.AddRaw("x", "F32", []int64{2}, make([]byte, 8)))
	must(t, w.Commit())
	got, err := os.ReadFile(filepath.Join(dir, "config.json"))
	must(t, err)
	if string(got) != `{"model_type":"llama"}` {
		t.Errorf("config.json = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "extra", "a.txt")); err != nil {
		t.Error(err)
	}
}

func TestCallerFileClashesWithDescriptor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	w, err := Create(dir, WriterOptions{})
	must(t, err)
	defer w.Abort()
	must(t, os.WriteFile(filepath.Join(w.TempDir(), DescriptorFile), nil, 0o644))
	wantCode(t, w.Commit(), status.InvalidArgument, DescriptorFile)
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("a failed commit created %s", dir)
	}
}

func TestConcurrentReads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	fx := writeFixture(t, dir, 8000, true)
	r, err := Open(dir, ReaderOptions{Workers: 2})
	must(t, err)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name, src := range fx.src {
				dst := make([]uint16, len(src))
				if err := r.Unpack(name, dst); err != nil || !slices.Equal(dst, src) {
					t.Errorf("concurrent Unpack(%q): %v", name, err)
				}
				if err := r.Verify(name); err != nil {
					t.Error(err)
				}
				if _, err := r.Packed(name); err != nil {
					t.Error(err)
				}
				_ = r.Tensors()
			}
		}()
	}
	wg.Wait()
	must(t, r.Close())
	must(t, r.Close())
	for name := range fx.src {
		_, err := r.Packed(name)
		wantCode(t, err, status.State, "closed")
		wantCode(t, r.Verify(name), status.State, "closed")
		break
	}
	wantCode(t, r.VerifyAll(nil), status.State, "closed")
}

// TestDescriptorSlots reads an encoded descriptor through the generated
// accessors, so the decoder's slot numbers cannot drift from glyd.fbs.
func TestDescriptorSlots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	buf, err := os.ReadFile(filepath.Join(dir, DescriptorFile))
	must(t, err)
	d := readDescriptor(t, dir)
	if !fb.CheckpointBufferHasIdentifier(buf) {
		t.Fatal("no GLYD identifier")
	}
	c := fb.GetRootAsCheckpoint(buf, 0)
	if string(c.Format()) != d.format || int(c.FormatVersion()) != d.version || string(c.LibraryVersion()) != d.library ||
		c.ShardsLength() != len(d.shards) || c.TensorsLength() != len(d.tensors) {
		t.Fatalf("checkpoint fields differ")
	}
	var s fb.Shard
	for i := range d.shards {
		c.Shards(&s, i)
		if string(s.Name()) != d.shards[i].name || s.Size() != d.shards[i].size {
			t.Errorf("shard %d differs", i)
		}
	}
	var tt fb.Tensor
	var pl fb.Plane
	var g fb.Group
	for i, want := range d.tensors {
		c.Tensors(&tt, i)
		if string(tt.Name()) != want.name || codec.Layout(tt.Layout()) != want.layout || uint8(tt.Dtype()) != want.dtype.code ||
			tt.Checksum() != want.checksum || uint8(tt.Order()) != want.order || tt.Shard() != want.shard ||
			tt.ShapeLength() != len(want.shape) || tt.PlanesLength() != len(want.planes) || tt.GroupsLength() != len(want.groups) {
			t.Fatalf("tensor %q differs", want.name)
		}
		for j, d := range want.shape {
			if tt.Shape(j) != d {
				t.Errorf("tensor %q: shape differs", want.name)
			}
		}
		for j, p := range want.planes {
			tt.Planes(&pl, j)
			if string(pl.Key()) != p.key || pl.Length() != p.length {
				t.Errorf("tensor %q: plane %d differs", want.name, j)
			}
		}
		for j, wg := range want.groups {
			tt.Groups(&g, j)
			var got codec.Group
			got.Elements, got.Base, got.Escapes = g.Elements(), g.Base(), g.Escapes()
			for k := range got.Table {
				got.Table[k] = g.ExpTable(k)
			}
			for k := range got.Offsets {
				got.Offsets[k] = g.Offsets(k)
			}
			if got != wg {
				t.Errorf("tensor %q: group %d differs", want.name, j)
			}
		}
	}
}

// TestShardPerTensor: a tensor larger than MaxShardSize gets a shard of its
// own, and the planes of a packed tensor are never split.
func TestShardPerTensor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	fx := writeFixture(t, dir, 1, true)
	if got, want := len(shardFiles(t, dir)), len(fx.packed)+len(fx.raw); got != want {
		t.Errorf("%d shards, want one per tensor (%d)", got, want)
	}
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	checkFixture(t, r, fx)
}

// TestSymlinkedShards: shards may be symbolic links to files elsewhere, as
// in the Hugging Face cache (snapshots/<rev>/x -> ../../blobs/<sha>).
func TestSymlinkedShards(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	fx := writeFixture(t, dir, 8000, true)
	blobs := t.TempDir()
	for i, shard := range shardFiles(t, dir) {
		blob := filepath.Join(blobs, fmt.Sprint("blob", i))
		must(t, os.Rename(shard, blob))
		must(t, os.Symlink(blob, shard))
	}
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	checkFixture(t, r, fx)
}
