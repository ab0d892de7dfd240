package format

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

var update = flag.Bool("update", false, "rewrite the hostile sample files under testdata/")

// hostileShards are the hostile safetensors samples kept under
// testdata/safetensors, each with the code a Reader must answer.
var hostileShards = []struct {
	file string
	data []byte
	code status.Code
}{
	{"truncated_length.safetensors", []byte{4, 0, 0, 0, 0}, status.Truncated},
	{"header_too_long.safetensors", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), status.Header},
	{"header_past_end.safetensors", append(binary.LittleEndian.AppendUint64(nil, 1000), `{"__metadata__":{}}`...), status.Header},
	{"bad_json.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],`, make([]byte, 4)), status.Header},
	{"not_object.safetensors", safetensorsFile(`[1,2,3]`, nil), status.Header},
	{"duplicate_key.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, make([]byte, 8)), status.Header},
	{"unknown_field.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"extra":1}}`, make([]byte, 4)), status.Header},
	{"missing_offsets.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4]}}`, make([]byte, 4)), status.Header},
	{"three_offsets.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}}`, make([]byte, 4)), status.Header},
	{"too_many_dims.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,4],"data_offsets":[0,4]}}`, make([]byte, 4)), status.Header},
	{"negative_dim.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}`, make([]byte, 4)), status.Header},
	{"fractional_dim.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4.5],"data_offsets":[0,4]}}`, make([]byte, 4)), status.Header},
	{"offsets_reversed.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}}`, make([]byte, 8)), status.Header},
	{"metadata_not_string.safetensors", safetensorsFile(`{"__metadata__":{"format":1}}`, nil), status.Header},
	{"invalid_utf8.safetensors", safetensorsFile("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", make([]byte, 4)), status.Header},
	{"unknown_dtype.safetensors", safetensorsFile(`{"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,2]}}`, make([]byte, 2)), status.DType},
	{"dims_overflow.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, make([]byte, 4)), status.Overflow},
	{"bytes_overflow.safetensors", safetensorsFile(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}}`, make([]byte, 4)), status.Overflow},
	{"dim_out_of_range.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,4]}}`, make([]byte, 4)), status.Overflow},
	{"size_mismatch.safetensors", safetensorsFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), status.SizeMismatch},
	{"overlap.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, make([]byte, 12)), status.RangeOverlap},
	{"gap.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, make([]byte, 12)), status.RangeGap},
	{"trailing_bytes.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 8)), status.RangeGap},
	{"out_of_bounds.safetensors", safetensorsFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[96],"data_offsets":[4,100]}}`, make([]byte, 8)), status.RangeOutOfBounds},
}

// hostileDescriptors are the hostile glyd.fb samples kept under
// testdata/descriptor.
func hostileDescriptors(t testing.TB) map[string][]byte {
	valid := func(format string, version int) []byte {
		buf, err := encodeDescriptor(&descriptor{
			format: format, version: version, library: "test",
			shards: []descShard{{name: SingleShardFile, size: 8}},
			tensors: []descTensor{{
				name: "w", layout: 1, dtype: dtypes[0], shape: []int64{2},
				planes: planesOf("w", 2), groups: []codec.Group{{Elements: 2}},
			}},
		})
		must(t, err)
		return buf
	}
	rng := rand.New(rand.NewPCG(7, 7))
	garbage := make([]byte, 512)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	withID := bytes.Clone(garbage)
	copy(withID[4:], descriptorIdentifier)
	good := valid(FormatName(FormatV1), FormatV1)
	badID := bytes.Clone(good)
	copy(badID[4:], "GLYX")
	return map[string][]byte{
		"garbage.fb":            garbage,
		"garbage_identifier.fb": withID,
		"truncated.fb":          good[:len(good)/2],
		"bad_identifier.fb":     badID,
		"future_v3.fb":          valid("glyd-v3", 3),
	}
}

// TestHostileSamplesUpToDate keeps testdata/ equal to the generators above
// (go test -run HostileSamples -update rewrites it).
func TestHostileSamplesUpToDate(t *testing.T) {
	files := map[string][]byte{}
	for _, h := range hostileShards {
		files[filepath.Join("safetensors", h.file)] = h.data
	}
	for name, data := range hostileDescriptors(t) {
		files[filepath.Join("descriptor", name)] = data
	}
	for name, data := range files {
		path := filepath.Join("testdata", name)
		if *update {
			must(t, os.MkdirAll(filepath.Dir(path), 0o755))
			must(t, os.WriteFile(path, data, 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s is missing or stale; run go test ./core/format -run HostileSamples -update", path)
		}
	}
}

// TestHostileShardsParse runs every hostile sample through the parser alone.
func TestHostileShardsParse(t *testing.T) {
	for _, h := range hostileShards {
		t.Run(h.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "safetensors", h.file))
			must(t, err)
			_, err = parseSafetensors(h.file, data)
			wantCode(t, err, h.code, h.file)
		})
	}
}

// openHostile opens a folder whose shard is the hostile sample file and
// checks the Reader's code and that the message names the shard.
func openHostile(t *testing.T, file string, code status.Code, subs ...string) {
	t.Helper()
	dir, shard := hostileFolder(t, file)
	r, err := Open(dir, ReaderOptions{})
	if err == nil {
		r.Close()
	}
	wantCode(t, err, code, append(subs, shard)...)
}

func TestShardLengthTruncated(t *testing.T) {
	openHostile(t, "truncated_length.safetensors", status.Truncated, "8-byte header length")
}

func TestHeaderTooLong(t *testing.T) {
	openHostile(t, "header_too_long.safetensors", status.Header, "exceeds the limit")
}

func TestHeaderPastEnd(t *testing.T) {
	openHostile(t, "header_past_end.safetensors", status.Header, "past the end")
}

func TestHeaderBadJSON(t *testing.T) {
	openHostile(t, "bad_json.safetensors", status.Header)
}

func TestHeaderDuplicateKey(t *testing.T) {
	openHostile(t, "duplicate_key.safetensors", status.Header, `"a" appears twice`)
}

func TestHeaderUnknownDType(t *testing.T) {
	openHostile(t, "unknown_dtype.safetensors", status.DType, `"Q4"`)
}

func TestHeaderDimsOverflow(t *testing.T) {
	openHostile(t, "dims_overflow.safetensors", status.Overflow, `tensor "a"`)
}

func TestHeaderSizeMismatch(t *testing.T) {
	openHostile(t, "size_mismatch.safetensors", status.SizeMismatch, `tensor "a"`, "12 bytes")
}

func TestRangeOverlap(t *testing.T) {
	openHostile(t, "overlap.safetensors", status.RangeOverlap, `"a"`, `"b"`)
}

func TestRangeGap(t *testing.T) {
	openHostile(t, "gap.safetensors", status.RangeGap, `"b"`)
}

func TestRangeTrailingBytes(t *testing.T) {
	openHostile(t, "trailing_bytes.safetensors", status.RangeGap, "trailing")
}

func TestRangeOutOfBounds(t *testing.T) {
	openHostile(t, "out_of_bounds.safetensors", status.RangeOutOfBounds, `"b"`)
}

// openHostileDescriptor opens a folder whose glyd.fb is the sample file.
func openHostileDescriptor(t *testing.T, file string, opt ReaderOptions, code status.Code, subs ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "descriptor", file))
	must(t, err)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, DescriptorFile), data, 0o644))
	_, err = Open(dir, opt)
	wantCode(t, err, code, append(subs, filepath.Join(dir, DescriptorFile))...)
}

func TestDescriptorGarbage(t *testing.T) {
	openHostileDescriptor(t, "garbage.fb", ReaderOptions{}, status.Descriptor, "identifier")
}

func TestDescriptorGarbageWithIdentifier(t *testing.T) {
	openHostileDescriptor(t, "garbage_identifier.fb", ReaderOptions{}, status.Descriptor)
}

func TestDescriptorTruncated(t *testing.T) {
	openHostileDescriptor(t, "truncated.fb", ReaderOptions{}, status.Descriptor)
}

func TestDescriptorBadIdentifier(t *testing.T) {
	openHostileDescriptor(t, "bad_identifier.fb", ReaderOptions{}, status.Descriptor, `"GLYX"`)
}

func TestDescriptorFutureFormat(t *testing.T) {
	openHostileDescriptor(t, "future_v3.fb", ReaderOptions{}, status.Version,
		"checkpoint format glyd-v3 is newer than this library reads (glyd-v2); upgrade Glyd")
}
