package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/glyd/glyd/core/status"
)

// metadataKey is the safetensors header entry holding string metadata.
const metadataKey = "__metadata__"

// stTensor is one tensor entry of a safetensors header.
type stTensor struct {
	key        string
	dtype      dtypeInfo
	shape      []int64
	begin, end uint64 // byte range, relative to the start of the data
}

// stFile is a parsed and validated safetensors file.
type stFile struct {
	metadata  map[string]string
	tensors   []stTensor // sorted by byte range
	dataStart uint64     // 8 + header length
}

// parseSafetensors validates a whole safetensors file and returns its header.
// name is used in messages. It checks, in this order: the 8-byte length
// (Truncated), the header length against MaxHeaderSize and the file size
// (Header), the JSON (Header), every entry's dtype (DType), shape and offsets
// (Header, Overflow, SizeMismatch), and that the byte ranges tile the data
// exactly (RangeOverlap, RangeGap, RangeOutOfBounds). It never panics, and
// allocates O(header length).
func parseSafetensors(name string, file []byte) (*stFile, error) {
	if len(file) < 8 {
		return nil, status.Errorf(status.Truncated, "invalid input: %s: file is %d bytes, shorter than the 8-byte header length", name, len(file))
	}
	hlen := binary.LittleEndian.Uint64(file)
	if hlen > MaxHeaderSize {
		return nil, status.Errorf(status.Header, "invalid input: %s: header length %d exceeds the limit of %d bytes", name, hlen, MaxHeaderSize)
	}
	if hlen > uint64(len(file)-8) {
		return nil, status.Errorf(status.Header, "invalid input: %s: header length %d runs past the end of the %d-byte file", name, hlen, len(file))
	}
	st := &stFile{metadata: map[string]string{}, dataStart: 8 + hlen}
	header := file[8:st.dataStart]
	if !utf8.Valid(header) {
		return nil, status.Errorf(status.Header, "invalid input: %s: header is not valid UTF-8", name)
	}
	err := forEachMember(header, func(key string, val json.RawMessage) error {
		if key == metadataKey {
			return forEachMember(val, func(k string, v json.RawMessage) error {
				var s string
				if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
					return status.Errorf(status.Header, "__metadata__ value of %q is not a string", k)
				}
				st.metadata[k] = s
				return nil
			})
		}
		t, err := parseEntry(key, val)
		if err != nil {
			return err
		}
		st.tensors = append(st.tensors, t)
		return nil
	})
	if err != nil {
		return nil, corrupt(name, err)
	}
	if err := checkRanges(st.tensors, uint64(len(file))-st.dataStart); err != nil {
		return nil, corrupt(name, err)
	}
	return st, nil
}

// parseEntry decodes and checks one tensor entry of a header.
func parseEntry(key string, val json.RawMessage) (stTensor, error) {
	t := stTensor{key: key}
	var dtype, shape, offsets json.RawMessage
	err := forEachMember(val, func(k string, v json.RawMessage) error {
		switch k {
		case "dtype":
			dtype = v
		case "shape":
			shape = v
		case "data_offsets":
			offsets = v
		default:
			return status.Errorf(status.Header, "tensor %q: unknown field %q", key, k)
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	if dtype == nil || shape == nil || offsets == nil {
		return t, status.Errorf(status.Header, "tensor %q: entry needs dtype, shape and data_offsets", key)
	}
	var ds string
	if dtype[0] != '"' || json.Unmarshal(dtype, &ds) != nil {
		return t, status.Errorf(status.Header, "tensor %q: dtype is not a string", key)
	}
	var ok bool
	if t.dtype, ok = dtypeByName(ds); !ok {
		return t, status.Errorf(status.DType, "tensor %q: dtype %q is not one Glyd stores", key, ds)
	}
	dims, err := parseNumbers(key, "shape", shape, MaxDims)
	if err != nil {
		return t, err
	}
	t.shape = make([]int64, len(dims))
	for i, d := range dims {
		v, err := strconv.ParseInt(d.String(), 10, 64)
		if err != nil {
			return t, numberErr(key, "shape", d, err)
		}
		if v < 0 {
			return t, status.Errorf(status.Header, "tensor %q: negative dimension %d", key, v)
		}
		t.shape[i] = v
	}
	offs, err := parseNumbers(key, "data_offsets", offsets, 2)
	if err != nil {
		return t, err
	}
	if len(offs) != 2 {
		return t, status.Errorf(status.Header, "tensor %q: data_offsets has %d entries, want 2", key, len(offs))
	}
	var be [2]uint64
	for i, o := range offs {
		if be[i], err = strconv.ParseUint(o.String(), 10, 64); err != nil {
			return t, numberErr(key, "data_offsets", o, err)
		}
	}
	t.begin, t.end = be[0], be[1]
	if t.begin > t.end {
		return t, status.Errorf(status.Header, "tensor %q: data_offsets [%d, %d] end before they begin", key, t.begin, t.end)
	}
	n, ok := numElements(t.shape)
	if !ok {
		return t, status.Errorf(status.Overflow, "tensor %q: the product of shape %v overflows", key, t.shape)
	}
	size, ok := byteSize(n, t.dtype.size)
	if !ok {
		return t, status.Errorf(status.Overflow, "tensor %q: %d elements of %s overflow a byte count", key, n, t.dtype.name)
	}
	if t.end-t.begin != size {
		return t, status.Errorf(status.SizeMismatch, "tensor %q: %s %v needs %d bytes, data_offsets [%d, %d] hold %d", key, t.dtype.name, t.shape, size, t.begin, t.end, t.end-t.begin)
	}
	return t, nil
}

// parseNumbers decodes a JSON array of at most limit numbers.
func parseNumbers(key, field string, v json.RawMessage, limit int) ([]json.Number, error) {
	var out []json.Number
	if v[0] != '[' {
		return nil, status.Errorf(status.Header, "tensor %q: %s is not an array", key, field)
	}
	if bytes.Count(v, []byte{','}) >= limit {
		return nil, status.Errorf(status.Header, "tensor %q: %s has more than %d entries", key, field, limit)
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, status.Errorf(status.Header, "tensor %q: %s is not an array of numbers", key, field)
	}
	return out, nil
}

func numberErr(key, field string, n json.Number, err error) error {
	if errors.Is(err, strconv.ErrRange) && len(n) > 0 && n[0] != '-' {
		return status.Errorf(status.Overflow, "tensor %q: %s entry %s overflows", key, field, n)
	}
	return status.Errorf(status.Header, "tensor %q: %s entry %s is not a non-negative integer", key, field, n)
}

// checkRanges checks that the byte ranges of tensors tile [0, dataLen)
// exactly, and sorts tensors by range.
func checkRanges(tensors []stTensor, dataLen uint64) error {
	sort.SliceStable(tensors, func(i, j int) bool {
		a, b := tensors[i], tensors[j]
		return a.begin < b.begin || a.begin == b.begin && a.end < b.end
	})
	var pos uint64
	for i, t := range tensors {
		switch {
		case t.begin < pos:
			return status.Errorf(status.RangeOverlap, "tensors %q [%d, %d] and %q [%d, %d] overlap", tensors[i-1].key, tensors[i-1].begin, tensors[i-1].end, t.key, t.begin, t.end)
		case t.begin > pos:
			return status.Errorf(status.RangeGap, "%d bytes before tensor %q [%d, %d] belong to no tensor", t.begin-pos, t.key, t.begin, t.end)
		case t.end > dataLen:
			return status.Errorf(status.RangeOutOfBounds, "tensor %q [%d, %d] ends past the end of the data (%d bytes)", t.key, t.begin, t.end, dataLen)
		}
		pos = t.end
	}
	if pos < dataLen {
		return status.Errorf(status.RangeGap, "%d trailing bytes after the last tensor belong to no tensor", dataLen-pos)
	}
	return nil
}

// forEachMember calls fn for each member of the JSON object data, in order,
// and fails on anything that is not exactly one object (whitespace around it
// is allowed) or on a key seen twice.
func forEachMember(data []byte, fn func(key string, val json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return status.Errorf(status.Header, "not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return status.Errorf(status.Header, "malformed JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return status.Errorf(status.Header, "malformed JSON object key")
		}
		if seen[key] {
			return status.Errorf(status.Header, "key %q appears twice", key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return status.Errorf(status.Header, "malformed JSON value of %q: %v", key, err)
		}
		if err := fn(key, val); err != nil {
			return err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return status.Errorf(status.Header, "malformed JSON object")
	}
	if rest := data[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return status.Errorf(status.Header, "%d bytes of garbage after the JSON object", len(rest))
	}
	return nil
}

// corrupt returns err, which describes corrupt input, with its code and its
// message prefixed by "invalid input: " and file.
func corrupt(file string, err error) error {
	return status.Errorf(status.CodeOf(err), "invalid input: %s: %v", file, err)
}

// encodeHeader returns the JSON header of a shard holding tensors (in data
// order, with their final byte ranges), padded with spaces to a multiple of
// 8 bytes. The glyd metadata value is format; metadataValueOffset gives
// where it starts, so that it can be patched in place with another format
// name of the same length.
func encodeHeader(format string, tensors []stTensor) []byte {
	var b bytes.Buffer
	b.WriteString(`{"__metadata__":{"format":"pt","glyd":`)
	writeJSONString(&b, format)
	b.WriteByte('}')
	for _, t := range tensors {
		b.WriteByte(',')
		writeJSONString(&b, t.key)
		b.WriteString(`:{"dtype":"`)
		b.WriteString(t.dtype.name)
		b.WriteString(`","shape":[`)
		for i, d := range t.shape {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteString(`],"data_offsets":[`)
		b.WriteString(strconv.FormatUint(t.begin, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatUint(t.end, 10))
		b.WriteString("]}")
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes()
}

// metadataValueOffset is the offset in a shard file of the first character
// of the glyd metadata value (after its opening quote).
const metadataValueOffset = 8 + len(`{"__metadata__":{"format":"pt","glyd":"`)

func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}
