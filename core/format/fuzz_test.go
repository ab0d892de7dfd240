package format

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/glyd/glyd/core/codec"
)

// addSamples adds every file under testdata/sub to the corpus.
func addSamples(f *testing.F, sub string) {
	files, err := filepath.Glob(filepath.Join("testdata", sub, "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzSafetensorsHeader: the parser never panics, and never allocates more
// than a fixed multiple of its input (a hostile header cannot make a Reader
// allocate what the file does not contain).
func FuzzSafetensorsHeader(f *testing.F) {
	addSamples(f, "safetensors")
	f.Add(safetensorsFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[],"data_offsets":[8,9]}}`, make([]byte, 9)))
	f.Add(safetensorsFile(string(encodeHeader("glyd-v1", []stTensor{{key: "x", dtype: dtypeU8, shape: []int64{3}, end: 3}})), make([]byte, 3)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st, err := parseSafetensors("fuzz.safetensors", data)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16*uint64(len(data))+64<<10 {
			t.Fatalf("parsing %d bytes allocated %d bytes", len(data), alloc)
		}
		if err != nil {
			return
		}
		// What the parser accepts tiles the data exactly.
		pos := uint64(0)
		for _, e := range st.tensors {
			if e.begin != pos || e.end < e.begin {
				t.Fatalf("accepted ranges do not tile: %+v", st.tensors)
			}
			pos = e.end
		}
		if st.dataStart+pos != uint64(len(data)) {
			t.Fatalf("accepted ranges end at %d, the file at %d", st.dataStart+pos, len(data))
		}
	})
}

// FuzzDescriptor: decoding arbitrary bytes never panics (the decoder runs
// without its recover safety net here), and what it accepts re-encodes to a
// descriptor that decodes to the same content.
func FuzzDescriptor(f *testing.F) {
	addSamples(f, "descriptor")
	seed, err := encodeDescriptor(&descriptor{
		format: "glyd-v2", version: 2, library: "fuzz",
		shards: []descShard{{name: "model-00001-of-00002.safetensors", size: 100}, {name: "model-00002-of-00002.safetensors", size: 50}},
		tensors: []descTensor{
			{name: "a", layout: codec.Raw, dtype: dtypes[2], shape: []int64{2, 3}, checksum: 7, shard: 1, planes: []descPlane{{key: "a", length: 24}}},
			{name: "e", layout: codec.Fixed12, dtype: dtypes[0], shape: []int64{2, 4}, checksum: 9, planes: planesOf("e", 8),
				groups: []codec.Group{{Elements: 4, Base: 100, Table: [6]uint8{1, 2, 3, 4, 5, 6}}, {Elements: 4, Offsets: [7]uint64{4, 2}}}},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d, err := decodeDescriptorNoRecover("fuzz.fb", data, FormatVersion)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16*uint64(len(data))+64<<10 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(data), alloc)
		}
		if err != nil {
			return
		}
		again, err := encodeDescriptor(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := decodeDescriptorNoRecover("again.fb", again, FormatVersion)
		if err != nil {
			t.Fatalf("re-encoded descriptor does not decode: %v", err)
		}
		if len(d2.tensors) != len(d.tensors) || len(d2.shards) != len(d.shards) || d2.format != d.format {
			t.Fatalf("re-encoded descriptor differs")
		}
	})
}
