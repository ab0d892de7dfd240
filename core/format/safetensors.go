package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
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
	if !json.Valid(header) {
		return nil, status.Errorf(status.Header, "invalid input: %s: header is not valid JSON", name)
	}
	sc := &scanner{b: header}
	seen := map[string]bool{}
	if sc.peek() != '{' {
		return nil, status.Errorf(status.Header, "invalid input: %s: header is not a JSON object", name)
	}
	err := sc.object("header", func(key string) error {
		if seen[key] {
			return status.Errorf(status.Header, "key %q appears twice", key)
		}
		seen[key] = true
		if key == metadataKey {
			return sc.object(metadataKey, func(k string) error {
				if _, dup := st.metadata[k]; dup {
					return status.Errorf(status.Header, "__metadata__ key %q appears twice", k)
				}
				v, ok := sc.str()
				if !ok {
					return status.Errorf(status.Header, "__metadata__ value of %q is not a string", k)
				}
				st.metadata[k] = v
				return nil
			})
		}
		t, err := sc.entry(key)
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

// scanner walks a header that json.Valid accepted, so it only has to check
// that values have the types a safetensors header needs; it allocates only
// the strings and numbers it returns.
type scanner struct {
	b []byte
	i int
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *scanner) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// object reads a JSON object, the value of key, calling member with each of
// its keys; member must read the key's value.
func (s *scanner) object(key string, member func(key string) error) error {
	if s.peek() != '{' {
		return status.Errorf(status.Header, "the value of %q is not a JSON object", key)
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, _ := s.str() // valid JSON: a key is a string
		s.peek()
		s.i++ // ':'
		if err := member(key); err != nil {
			return err
		}
		c := s.peek()
		s.i++ // ',' or '}'
		if c == '}' {
			return nil
		}
	}
}

// str reads a string; ok is false (and nothing is read) if the next value
// is not a string.
func (s *scanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start, escaped := s.i, false
	for s.i++; s.b[s.i] != '"'; s.i++ {
		if s.b[s.i] == '\\' {
			s.i++
			escaped = true
		}
	}
	s.i++
	if !escaped {
		return string(s.b[start+1 : s.i-1]), true
	}
	var out string
	_ = json.Unmarshal(s.b[start:s.i], &out) // a valid JSON string
	return out, true
}

// numbers reads an array of at most limit numbers and returns their text.
func (s *scanner) numbers(key, field string, limit int, out []string) ([]string, error) {
	if s.peek() != '[' {
		return nil, status.Errorf(status.Header, "tensor %q: %s is not an array", key, field)
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return out, nil
	}
	for {
		c := s.peek()
		if c != '-' && (c < '0' || c > '9') {
			return nil, status.Errorf(status.Header, "tensor %q: %s is not an array of numbers", key, field)
		}
		if len(out) == limit {
			return nil, status.Errorf(status.Header, "tensor %q: %s has more than %d entries", key, field, limit)
		}
		start := s.i
		for s.i < len(s.b) && strings.IndexByte("+-.eE0123456789", s.b[s.i]) >= 0 {
			s.i++
		}
		out = append(out, string(s.b[start:s.i]))
		c = s.peek()
		s.i++ // ',' or ']'
		if c == ']' {
			return out, nil
		}
	}
}

// entry reads one tensor entry of a header and checks it.
func (s *scanner) entry(key string) (stTensor, error) {
	t := stTensor{key: key}
	var dtype string
	var shape, offsets []string
	var have [3]bool
	var buf [MaxDims + 2]string
	err := s.object(key, func(k string) error {
		var i int
		var err error
		switch k {
		case "dtype":
			var ok bool
			if dtype, ok = s.str(); !ok {
				err = status.Errorf(status.Header, "tensor %q: dtype is not a string", key)
			}
		case "shape":
			i = 1
			shape, err = s.numbers(key, k, MaxDims, buf[:0:MaxDims])
		case "data_offsets":
			i = 2
			offsets, err = s.numbers(key, k, 2, buf[MaxDims:MaxDims])
		default:
			return status.Errorf(status.Header, "tensor %q: unknown field %q", key, k)
		}
		if have[i] {
			return status.Errorf(status.Header, "tensor %q: field %q appears twice", key, k)
		}
		have[i] = true
		return err
	})
	if err != nil {
		return t, err
	}
	if have != [3]bool{true, true, true} {
		return t, status.Errorf(status.Header, "tensor %q: entry needs dtype, shape and data_offsets", key)
	}
	var ok bool
	if t.dtype, ok = dtypeByName(dtype); !ok {
		return t, status.Errorf(status.DType, "tensor %q: dtype %q is not one Glyd stores", key, dtype)
	}
	t.shape = make([]int64, len(shape))
	for i, d := range shape {
		v, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return t, numberErr(key, "shape", d, err)
		}
		if v < 0 {
			return t, status.Errorf(status.Header, "tensor %q: negative dimension %d", key, v)
		}
		t.shape[i] = v
	}
	if len(offsets) != 2 {
		return t, status.Errorf(status.Header, "tensor %q: data_offsets has %d entries, want 2", key, len(offsets))
	}
	var be [2]uint64
	for i, o := range offsets {
		var err error
		if be[i], err = strconv.ParseUint(o, 10, 64); err != nil {
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

func numberErr(key, field, n string, err error) error {
	if errors.Is(err, strconv.ErrRange) && n[0] != '-' {
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
