package format

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// ReaderOptions control Open.
type ReaderOptions struct {
	// MaxFormatVersion is the newest format version to accept; 0 means
	// FormatVersion, the newest this library reads. A checkpoint of a newer
	// format gives status.Version.
	MaxFormatVersion int
	// Workers is the number of goroutines used to validate, unpack and
	// verify; 0 means runtime.GOMAXPROCS(0).
	Workers int
}

// TensorInfo describes one tensor of a checkpoint.
type TensorInfo struct {
	Name   string
	Layout codec.Layout // codec.Raw for a tensor stored as it is
	// DType is the safetensors dtype of the original tensor ("BF16" or
	// "F16" for a packed one).
	DType string
	// RawDType is DType for a raw tensor and "" for a packed one.
	RawDType      string
	Shape         []int64 // empty for a scalar
	Elements      uint64  // product of Shape
	OriginalBytes uint64  // bytes of the original tensor
	// PackedBytes is what the tensor occupies in the shards: the sum of its
	// planes, or OriginalBytes for a raw tensor.
	PackedBytes    uint64
	Groups         int    // groups of a packed tensor (experts); 0 if raw
	Escapes        uint64 // escaped elements of a packed tensor
	Checksum       uint32 // CRC-32C of the original little-endian bytes
	BitsPerWeight  float64
	EscapeFraction float64
	Shard          string // file name of the shard holding the tensor
}

// RawInfo describes a raw tensor.
type RawInfo struct {
	Name     string
	DType    string // safetensors dtype
	Shape    []int64
	Checksum uint32
	Shard    string
}

// Reader reads a checkpoint folder. Its shards are memory-mapped read-only;
// the planes of Packed tensors and the bytes Raw returns point into the
// mapping, stay valid until Close, and must not be written to. The files
// must not be modified while the Reader is open. All methods may be called
// from several goroutines at once; Close waits for calls in progress.
type Reader struct {
	dir     string
	format  string
	version int
	library string
	workers int

	mu      sync.RWMutex
	closed  bool
	maps    [][]byte
	entries []entry // sorted by name
	byName  map[string]int
}

type entry struct {
	info   TensorInfo
	file   string        // path of the shard, for messages
	packed *codec.Tensor // nil for a raw tensor
	raw    []byte
}

// Open opens the checkpoint folder dir and validates all of it before
// returning: the descriptor (status.Descriptor, status.Version), the shard
// list (model.safetensors, or model.safetensors.index.json naming files
// inside dir), every shard's size, header and byte ranges (status.Truncated,
// Header, Overflow, SizeMismatch, RangeOverlap, RangeGap, RangeOutOfBounds,
// DType), the agreement of descriptor, index and shards (status.Descriptor),
// and the structure of every packed tensor (codec's Validate). It does not
// decode the data: Verify and VerifyAll check it against the checksums.
func Open(dir string, opt ReaderOptions) (*Reader, error) {
	maxV := opt.MaxFormatVersion
	if maxV == 0 {
		maxV = FormatVersion
	}
	if maxV < 0 || maxV > FormatVersion {
		return nil, status.Errorf(status.InvalidArgument, "MaxFormatVersion %d: this library reads format versions 1 to %d", opt.MaxFormatVersion, FormatVersion)
	}
	if opt.Workers < 0 {
		return nil, status.Errorf(status.InvalidArgument, "negative worker count %d", opt.Workers)
	}
	if dir == "" {
		return nil, status.Errorf(status.InvalidArgument, "empty checkpoint folder name")
	}
	dir = filepath.Clean(dir)
	if strings.Contains(filepath.Base(dir), ".glyd-tmp-") {
		return nil, status.Errorf(status.InvalidArgument, "%s is the temporary folder of a checkpoint writer that never committed, not a checkpoint", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, status.Wrap(err, "opening checkpoint %s", dir)
	}
	if !fi.IsDir() {
		return nil, status.Errorf(status.InvalidArgument, "%s is not a folder", dir)
	}
	r := &Reader{dir: dir, workers: opt.Workers, byName: map[string]int{}}
	if r.workers == 0 {
		r.workers = runtime.GOMAXPROCS(0)
	}
	if err := r.open(maxV); err != nil {
		for _, m := range r.maps {
			_ = unmapFile(m)
		}
		return nil, err
	}
	return r, nil
}

func (r *Reader) open(maxVersion int) error {
	descPath := filepath.Join(r.dir, DescriptorFile)
	buf, err := readCapped(descPath, MaxDescriptorSize, status.Descriptor)
	if errors.Is(err, fs.ErrNotExist) {
		return status.Errorf(status.NotFound, "%s: no %s: not a Glyd checkpoint", r.dir, DescriptorFile)
	}
	if err != nil {
		return err
	}
	d, err := decodeDescriptor(descPath, buf, maxVersion)
	if err != nil {
		return err
	}
	r.format, r.version, r.library = d.format, d.version, d.library

	list, err := readShardList(r.dir)
	if err != nil {
		return err
	}
	descNames := make([]string, len(d.shards))
	for i, s := range d.shards {
		descNames[i] = s.name
	}
	slices.Sort(descNames)
	if !slices.Equal(descNames, list.files) {
		return status.Errorf(status.Descriptor, "invalid input: %s lists shards %q, but %s names %q", descPath, descNames, list.source, list.files)
	}

	files := make([]*stFile, len(d.shards))
	paths := make([]string, len(d.shards))
	for i, s := range d.shards {
		paths[i] = filepath.Join(r.dir, s.name)
		if files[i], err = r.mapShard(paths[i], s.size); err != nil {
			return err
		}
	}
	if err := crossCheck(descPath, d, list, files, paths); err != nil {
		return err
	}

	// Every stored tensor is where the descriptor says: build the entries.
	keys := map[string]*stTensor{}
	for _, f := range files {
		for i := range f.tensors {
			keys[f.tensors[i].key] = &f.tensors[i]
		}
	}
	r.entries = make([]entry, len(d.tensors))
	for i := range d.tensors {
		t := &d.tensors[i]
		e := &r.entries[i]
		m, f := r.maps[t.shard], files[t.shard]
		bytesOf := func(key string) []byte {
			st := keys[key]
			lo, hi := f.dataStart+st.begin, f.dataStart+st.end
			return m[lo:hi:hi]
		}
		e.file = paths[t.shard]
		e.info = TensorInfo{
			Name: t.name, Layout: t.layout, DType: t.dtype.name, Shape: t.shape, Elements: t.elements,
			Checksum: t.checksum, Shard: d.shards[t.shard].name,
		}
		e.info.OriginalBytes, _ = byteSize(t.elements, t.dtype.size)
		if t.layout == codec.Raw {
			e.raw = bytesOf(t.name)
			e.info.RawDType = t.dtype.name
			e.info.PackedBytes = e.info.OriginalBytes
			if t.elements > 0 {
				e.info.BitsPerWeight = 8 * float64(t.dtype.size)
			}
		} else {
			ct := &codec.Tensor{Layout: t.layout, DType: codec.DType(t.dtype.code), Shape: t.shape, Groups: t.groups, Checksum: t.checksum}
			for p := range ct.Planes {
				ct.Planes[p] = bytesOf(t.planes[p].key)
			}
			e.info.PackedBytes = ct.PackedBytes()
			for _, g := range t.groups {
				e.info.Escapes += g.Escapes
			}
			e.packed = ct
			e.info.Groups = len(t.groups)
			e.info.BitsPerWeight = ct.BitsPerWeight()
			e.info.EscapeFraction = ct.EscapeFraction()
		}
		r.byName[t.name] = i
	}
	return parallelFirst(len(r.entries), r.workers, func(i int) error {
		e := &r.entries[i]
		if e.packed == nil {
			return nil
		}
		if err := e.packed.Validate(); err != nil {
			return status.Errorf(status.CodeOf(err), "%s: tensor %q: %v", e.file, e.info.Name, err)
		}
		return nil
	})
}

// mapShard maps and parses the shard at path, which glyd.fb says is size
// bytes long.
func (r *Reader) mapShard(path string, size uint64) (*stFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, status.Wrap(err, "opening shard %s", path)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, status.Wrap(err, "opening shard %s", path)
	}
	if !fi.Mode().IsRegular() {
		return nil, status.Errorf(status.InvalidArgument, "shard %s is not a regular file", path)
	}
	got := uint64(fi.Size())
	if got < size {
		return nil, status.Errorf(status.Truncated, "invalid input: %s: file is %d bytes, %s declares %d: truncated", path, got, DescriptorFile, size)
	}
	if got > size {
		return nil, status.Errorf(status.Descriptor, "invalid input: %s: file is %d bytes, %s declares %d", path, got, DescriptorFile, size)
	}
	if size > math.MaxInt {
		return nil, status.Errorf(status.Overflow, "shard %s is too large to map (%d bytes)", path, size)
	}
	m, err := mapFile(f, int(size))
	if err != nil {
		return nil, status.Errorf(status.IO, "mapping shard %s: %v", path, err)
	}
	r.maps = append(r.maps, m)
	return parseSafetensors(path, m)
}

// shardList is the list of shard files a folder names.
type shardList struct {
	files     []string          // sorted, unique
	source    string            // the file that names them
	weightMap map[string]string // nil without an index
	totalSize *uint64           // the index's metadata.total_size, if any
}

// readShardList returns model.safetensors if the folder has one (as
// transformers does), else the files named by model.safetensors.index.json.
func readShardList(dir string) (*shardList, error) {
	single := filepath.Join(dir, SingleShardFile)
	if _, err := os.Stat(single); err == nil {
		return &shardList{files: []string{SingleShardFile}, source: single}, nil
	}
	path := filepath.Join(dir, IndexFile)
	buf, err := readCapped(path, MaxDescriptorSize, status.Header)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(status.NotFound, "%s: neither %s nor %s exists", dir, SingleShardFile, IndexFile)
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		Metadata  map[string]json.RawMessage `json:"metadata"`
		WeightMap map[string]string          `json:"weight_map"`
	}
	if err := json.Unmarshal(buf, &idx); err != nil {
		return nil, status.Errorf(status.Header, "invalid input: %s: %v", path, err)
	}
	if idx.WeightMap == nil {
		return nil, status.Errorf(status.Header, "invalid input: %s: no weight_map", path)
	}
	l := &shardList{source: path, weightMap: idx.WeightMap}
	if ts, ok := idx.Metadata["total_size"]; ok {
		v, err := strconv.ParseUint(string(ts), 10, 64)
		if err != nil {
			return nil, status.Errorf(status.Header, "invalid input: %s: metadata.total_size %s is not a byte count", path, ts)
		}
		l.totalSize = &v
	}
	seen := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		file := idx.WeightMap[key]
		if !validFileName(file) {
			return nil, status.Errorf(status.Header, "invalid input: %s: tensor %q is mapped to %q, which is not a file name inside the folder", path, key, file)
		}
		if !seen[file] {
			seen[file] = true
			l.files = append(l.files, file)
		}
	}
	slices.Sort(l.files)
	return l, nil
}

// crossCheck checks that the shards hold exactly the stored tensors the
// descriptor describes, where it says, with the dtype and shape it implies,
// and that metadata and index agree.
func crossCheck(descPath string, d *descriptor, list *shardList, files []*stFile, paths []string) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(status.Descriptor, "invalid input: "+format, args...)
	}
	type loc struct {
		shard int
		t     *stTensor
	}
	keys := map[string]loc{}
	var total uint64
	for si, f := range files {
		if v := f.metadata["format"]; v != "pt" {
			return bad("%s: __metadata__ format is %q, want \"pt\"", paths[si], v)
		}
		if v := f.metadata["glyd"]; v != d.format {
			return bad("%s: __metadata__ glyd is %q, %s says %q", paths[si], v, descPath, d.format)
		}
		for ti := range f.tensors {
			st := &f.tensors[ti]
			if prev, dup := keys[st.key]; dup {
				return bad("%q is stored in both %s and %s", st.key, paths[prev.shard], paths[si])
			}
			keys[st.key] = loc{si, st}
			total += st.end - st.begin
		}
	}
	if list.weightMap != nil {
		for _, key := range slices.Sorted(maps.Keys(list.weightMap)) {
			file := list.weightMap[key]
			l, ok := keys[key]
			if !ok {
				return bad("%s maps %q to %s, which does not hold it", list.source, key, file)
			}
			if name := d.shards[l.shard].name; file != name {
				return bad("%s maps %q to %s, but it is in %s", list.source, key, file, name)
			}
		}
		if len(list.weightMap) != len(keys) {
			for _, key := range slices.Sorted(maps.Keys(keys)) {
				if _, ok := list.weightMap[key]; !ok {
					return bad("%s does not map %q, stored in %s", list.source, key, paths[keys[key].shard])
				}
			}
		}
		if list.totalSize != nil && *list.totalSize != total {
			return bad("%s: metadata.total_size is %d, the shards hold %d bytes of tensors", list.source, *list.totalSize, total)
		}
	}
	for i := range d.tensors {
		t := &d.tensors[i]
		for _, p := range t.planes {
			l, ok := keys[p.key]
			if !ok {
				return bad("%s: tensor %q: %q is in no shard", descPath, t.name, p.key)
			}
			if l.shard != int(t.shard) {
				return bad("%s: tensor %q: %q is in %s, %s says %s", descPath, t.name, p.key, paths[l.shard], DescriptorFile, d.shards[t.shard].name)
			}
			st := l.t
			if t.layout == codec.Raw {
				if st.dtype != t.dtype || !slices.Equal(st.shape, t.shape) {
					return bad("%s: tensor %q is %s %v, %s says %s %v", paths[l.shard], t.name, st.dtype.name, st.shape, DescriptorFile, t.dtype.name, t.shape)
				}
			} else if st.dtype != dtypeU8 || len(st.shape) != 1 || uint64(st.shape[0]) != p.length {
				return bad("%s: tensor %q: plane %q is %s %v, %s says U8 [%d]", paths[l.shard], t.name, p.key, st.dtype.name, st.shape, DescriptorFile, p.length)
			}
			delete(keys, p.key)
		}
	}
	if len(keys) > 0 {
		first := slices.Min(slices.Collect(maps.Keys(keys)))
		return bad("%s holds %q, which %s does not describe", paths[keys[first].shard], first, DescriptorFile)
	}
	return nil
}

// readCapped reads the file at path, failing with code if it is larger than
// limit bytes.
func readCapped(path string, limit int64, code status.Code) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, status.Wrap(err, "reading %s", path)
	}
	if int64(len(b)) > limit {
		return nil, status.Errorf(code, "invalid input: %s is larger than the limit of %d bytes", path, limit)
	}
	return b, nil
}

// parallelFirst runs fn(0..n-1) on up to workers goroutines and returns the
// error of the smallest i that failed.
func parallelFirst(n, workers int, fn func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Dir returns the checkpoint folder.
func (r *Reader) Dir() string { return r.dir }

// Format returns the checkpoint's format name, "glyd-v1" or "glyd-v2".
func (r *Reader) Format() string { return r.format }

// FormatVersion returns the checkpoint's format version, 1 or 2.
func (r *Reader) FormatVersion() int { return r.version }

// Library returns the version of the library that wrote the checkpoint, as
// recorded in glyd.fb.
func (r *Reader) Library() string { return r.library }

// Tensors describes every tensor, sorted by name.
func (r *Reader) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(r.entries))
	for i := range r.entries {
		out[i] = r.entries[i].info
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// lookup returns the entry of name; the caller holds r.mu.
func (r *Reader) lookup(name string) (*entry, error) {
	if r.closed {
		return nil, status.Errorf(status.State, "checkpoint reader for %s is closed", r.dir)
	}
	i, ok := r.byName[name]
	if !ok {
		return nil, status.Errorf(status.NotFound, "%s: no tensor named %q", r.dir, name)
	}
	return &r.entries[i], nil
}

// Info describes the tensor name.
func (r *Reader) Info(name string) (TensorInfo, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.lookup(name)
	if err != nil {
		return TensorInfo{}, err
	}
	info := e.info
	info.Shape = slices.Clone(info.Shape)
	return info, nil
}

// Packed returns the packed tensor name. Its planes are read-only views of
// the memory map, valid until Close; Shape and Groups are the caller's.
func (r *Reader) Packed(name string) (*codec.Tensor, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	if e.packed == nil {
		return nil, status.Errorf(status.InvalidArgument, "%s: tensor %q is stored raw, not packed", e.file, name)
	}
	t := *e.packed
	t.Shape = slices.Clone(t.Shape)
	t.Groups = slices.Clone(t.Groups)
	return &t, nil
}

// Raw returns the raw tensor name and its bytes, a read-only view of the
// memory map valid until Close.
func (r *Reader) Raw(name string) (RawInfo, []byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.lookup(name)
	if err != nil {
		return RawInfo{}, nil, err
	}
	if e.packed != nil {
		return RawInfo{}, nil, status.Errorf(status.InvalidArgument, "%s: tensor %q is packed, not raw", e.file, name)
	}
	i := e.info
	return RawInfo{Name: i.Name, DType: i.DType, Shape: slices.Clone(i.Shape), Checksum: i.Checksum, Shard: i.Shard}, e.raw, nil
}

// Unpack writes the elements of tensor name into dst, which must hold at
// least Elements values (status.BufferTooSmall otherwise): a packed tensor
// is decoded, a raw BF16 or F16 tensor copied; other raw dtypes give
// status.DType (use Raw).
func (r *Reader) Unpack(name string, dst []uint16) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.lookup(name)
	if err != nil {
		return err
	}
	n := e.info.Elements
	if uint64(len(dst)) < n {
		return status.Errorf(status.BufferTooSmall, "tensor %q has %d elements, dst holds %d", name, n, len(dst))
	}
	dst = dst[:n]
	if e.packed == nil {
		if e.info.DType != "BF16" && e.info.DType != "F16" {
			return status.Errorf(status.DType, "%s: tensor %q is raw %s, not a 16-bit float", e.file, name, e.info.DType)
		}
		for i := range dst {
			dst[i] = binary.LittleEndian.Uint16(e.raw[2*i:])
		}
		return nil
	}
	if err := codec.Unpack(e.packed, dst, r.workers); err != nil {
		return status.Errorf(status.CodeOf(err), "%s: tensor %q: %v", e.file, name, err)
	}
	return nil
}

// Verify decodes tensor name (or reads a raw one) and compares the CRC-32C
// of the original bytes with the checksum in glyd.fb: a mismatch gives
// status.Checksum naming the tensor and its shard file.
func (r *Reader) Verify(name string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.lookup(name)
	if err != nil {
		return err
	}
	return r.verify(e)
}

func (r *Reader) verify(e *entry) error {
	if e.packed == nil {
		if got := crc32.Checksum(e.raw, castagnoli); got != e.info.Checksum {
			return status.Errorf(status.Checksum, "%s: tensor %q: checksum mismatch: the stored bytes have CRC-32C %08x, %s says %08x", e.file, e.info.Name, got, DescriptorFile, e.info.Checksum)
		}
		return nil
	}
	if err := codec.Verify(e.packed, r.workers); err != nil {
		return status.Errorf(status.CodeOf(err), "%s: tensor %q: %v", e.file, e.info.Name, err)
	}
	return nil
}

// VerifyAll verifies every tensor in name order, calling progress (if not
// nil) after each with the number done and the total. It returns the first
// failure.
func (r *Reader) VerifyAll(progress func(i, n int)) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return status.Errorf(status.State, "checkpoint reader for %s is closed", r.dir)
	}
	for i := range r.entries {
		if err := r.verify(&r.entries[i]); err != nil {
			return err
		}
		if progress != nil {
			progress(i+1, len(r.entries))
		}
	}
	return nil
}

// Close unmaps the shards. Views from Packed and Raw become invalid. Calling
// Close again is a no-op.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var first error
	for _, m := range r.maps {
		if err := unmapFile(m); err != nil && first == nil {
			first = status.Errorf(status.IO, "unmapping %s: %v", r.dir, err)
		}
	}
	r.maps = nil
	return first
}
