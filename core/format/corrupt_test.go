package format

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// tryOpen opens dir expecting failure.
func tryOpen(t *testing.T, dir string, opt ReaderOptions) error {
	t.Helper()
	r, err := Open(dir, opt)
	if err == nil {
		r.Close()
	}
	return err
}

func TestTruncatedShard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	shard := shardFiles(t, dir)[1]
	fi, err := os.Stat(shard)
	must(t, err)
	must(t, os.Truncate(shard, fi.Size()-100))
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Truncated, shard, "truncated")
}

func TestShardLongerThanDescriptorSays(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 0, false)
	shard := filepath.Join(dir, SingleShardFile)
	f, err := os.OpenFile(shard, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.Write([]byte("extra"))
	must(t, err)
	must(t, f.Close())
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, shard)
}

func TestV1ReaderRefusesV2(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 0, true)
	err := tryOpen(t, dir, ReaderOptions{MaxFormatVersion: 1})
	wantCode(t, err, status.Version, "glyd-v2", "glyd-v1", DescriptorFile)
}

func TestFutureFormatBuiltWithBuilder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 0, false)
	d := readDescriptor(t, dir)
	d.format, d.version = "glyd-v3", 3
	writeDescriptor(t, dir, d)
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Version,
		"checkpoint format glyd-v3 is newer than this library reads (glyd-v2); upgrade Glyd")

	d.format, d.version = "glyd-v2", 7 // the number disagrees with the name: still newer
	writeDescriptor(t, dir, d)
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Version, "format version 7")
}

// TestFlippedBitInPlane: the structure is intact, so Open succeeds, and
// Verify finds the change and names the tensor and the shard file.
func TestFlippedBitInPlane(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	const name = "model.layers.0.mlp.up.weight"
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	info, err := r.Info(name)
	must(t, err)
	must(t, r.Close())

	shard := filepath.Join(dir, info.Shard)
	data, err := os.ReadFile(shard)
	must(t, err)
	st, err := parseSafetensors(shard, data)
	must(t, err)
	key := PlaneKey(name, codec.PlaneSM)
	for _, e := range st.tensors {
		if e.key == key {
			data[st.dataStart+e.begin+17] ^= 0x04
		}
	}
	must(t, os.WriteFile(shard, data, 0o644))

	r, err = Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	wantCode(t, r.Verify(name), status.Checksum, name, shard)
	wantCode(t, r.VerifyAll(nil), status.Checksum, name, shard)
	for _, other := range r.Tensors() {
		if other.Name != name {
			must(t, r.Verify(other.Name))
		}
	}
}

func TestFlippedBitInRawTensor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 0, false)
	const name = "model.norm.weight"
	shard := filepath.Join(dir, SingleShardFile)
	data, err := os.ReadFile(shard)
	must(t, err)
	st, err := parseSafetensors(shard, data)
	must(t, err)
	for _, e := range st.tensors {
		if e.key == name {
			data[st.dataStart+e.begin] ^= 1
		}
	}
	must(t, os.WriteFile(shard, data, 0o644))
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	wantCode(t, r.Verify(name), status.Checksum, name, shard)
}

// editDescriptor writes a fixture, applies edit to its descriptor and
// returns the folder.
func editDescriptor(t *testing.T, edit func(d *descriptor)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	d := readDescriptor(t, dir)
	edit(d)
	writeDescriptor(t, dir, d)
	return dir
}

func findTensor(d *descriptor, name string) *descTensor {
	for i := range d.tensors {
		if d.tensors[i].name == name {
			return &d.tensors[i]
		}
	}
	return nil
}

func TestDescriptorPlaneLengthDisagrees(t *testing.T) {
	const name = "model.layers.0.mlp.up.weight"
	dir := editDescriptor(t, func(d *descriptor) { findTensor(d, name).planes[codec.PlaneSM].length++ })
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, name, PlaneKey(name, codec.PlaneSM))
}

func TestDescriptorWrongShard(t *testing.T) {
	const name = "model.layers.0.mlp.up.weight"
	dir := editDescriptor(t, func(d *descriptor) {
		tt := findTensor(d, name)
		tt.shard = (tt.shard + 1) % uint32(len(d.shards))
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, name)
}

func TestDescriptorMissesStoredTensor(t *testing.T) {
	const name = "model.norm.weight"
	dir := editDescriptor(t, func(d *descriptor) {
		var keep []descTensor
		for _, tt := range d.tensors {
			if tt.name != name {
				keep = append(keep, tt)
			}
		}
		d.tensors = keep
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, name, "does not describe")
}

func TestDescriptorRawShapeDisagrees(t *testing.T) {
	const name = "model.mask"
	dir := editDescriptor(t, func(d *descriptor) {
		tt := findTensor(d, name)
		tt.shape = []int64{5, 3}
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, name)
}

func TestDescriptorUnsorted(t *testing.T) {
	dir := editDescriptor(t, func(d *descriptor) {
		d.tensors[0], d.tensors[1] = d.tensors[1], d.tensors[0]
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, "sorted")
}

func TestDescriptorWrongPlaneKey(t *testing.T) {
	const name = "model.layers.0.mlp.up.weight"
	dir := editDescriptor(t, func(d *descriptor) {
		findTensor(d, name).planes[codec.PlaneCode].key = "model.norm.weight"
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, name, "key")
}

func TestDescriptorGroupsInV1(t *testing.T) {
	dir := editDescriptor(t, func(d *descriptor) { d.format, d.version = "glyd-v1", 1 })
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, "model.layers.0.mlp.experts.w13", "glyd-v2")
}

func TestDescriptorShardListDisagrees(t *testing.T) {
	dir := editDescriptor(t, func(d *descriptor) { d.shards = d.shards[:len(d.shards)-1] })
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor)
}

func TestDescriptorBadGroupsFailCodecValidate(t *testing.T) {
	const name = "model.layers.0.mlp.experts.w13"
	dir := editDescriptor(t, func(d *descriptor) { findTensor(d, name).groups[1].Offsets[codec.PlaneSM]++ })
	err := tryOpen(t, dir, ReaderOptions{})
	if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), ".safetensors") {
		t.Fatalf("Open with a bad group offset: %v", err)
	}
}

func TestShardMetadataDisagrees(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 0, true)
	shard := filepath.Join(dir, SingleShardFile)
	data, err := os.ReadFile(shard)
	must(t, err)
	copy(data[metadataValueOffset:], "glyd-v1")
	must(t, os.WriteFile(shard, data, 0o644))
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, shard, "glyd-v2")
}

// editIndex writes a sharded fixture and rewrites its index with edit.
func editIndex(t *testing.T, edit func(wm map[string]string, meta map[string]any)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	path := filepath.Join(dir, IndexFile)
	buf, err := os.ReadFile(path)
	must(t, err)
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	must(t, json.Unmarshal(buf, &idx))
	edit(idx.WeightMap, idx.Metadata)
	buf, err = json.Marshal(idx)
	must(t, err)
	must(t, os.WriteFile(path, buf, 0o644))
	return dir
}

func TestIndexPathTraversal(t *testing.T) {
	dir := editIndex(t, func(wm map[string]string, _ map[string]any) {
		wm["model.norm.weight"] = "../model-00001-of-00009.safetensors"
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Header, IndexFile, "../model-00001-of-00009.safetensors")
}

func TestIndexMissingShardFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	shard := shardFiles(t, dir)[0]
	must(t, os.Remove(shard))
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.NotFound, shard)
}

func TestIndexMapsWrongShard(t *testing.T) {
	dir := editIndex(t, func(wm map[string]string, _ map[string]any) {
		// Swap the shards of two keys, so that every shard is still named.
		const a = "model.norm.weight"
		for b, v := range wm {
			if v != wm[a] {
				wm[a], wm[b] = v, wm[a]
				return
			}
		}
	})
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, IndexFile, "but it is in")
}

func TestIndexTotalSizeDisagrees(t *testing.T) {
	dir := editIndex(t, func(_ map[string]string, meta map[string]any) { meta["total_size"] = 12345 })
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Descriptor, "total_size")
}

func TestIndexMalformed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 8000, true)
	must(t, os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map": [`), 0o644))
	wantCode(t, tryOpen(t, dir, ReaderOptions{}), status.Header, IndexFile)
}
