package format

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// WriterOptions control Create.
type WriterOptions struct {
	// MaxShardSize is the most tensor bytes a shard holds; 0 means
	// DefaultMaxShardSize (5 GB). A tensor larger than that gets a shard of
	// its own; the planes of a packed tensor always share one shard.
	MaxShardSize int64
	// Overwrite lets Commit replace an existing checkpoint folder at dir,
	// once the new one is complete. Only an empty folder or one holding a
	// glyd.fb is replaced; anything else gives status.Exists.
	Overwrite bool
	// Progress, if not nil, is called as tensor data reaches its final shard
	// file, with the bytes done so far and the bytes added so far (so done
	// equals total at the end of Commit).
	Progress func(done, total int64)
	// Library is recorded in glyd.fb as the version of the writing library;
	// "" records "glyd".
	Library string
}

// Writer writes a checkpoint folder, tensor by tensor, into a temporary
// sibling folder that Commit renames into place. Its memory use is
// proportional to the number of tensors, not to their size: tensor data goes
// to disk before AddPacked or AddRaw returns. A Writer may be used from one
// goroutine at a time.
type Writer struct {
	mu       sync.Mutex
	dir, tmp string
	opt      WriterOptions
	maxShard uint64

	state  writerState
	failed error // why state is writerFailed

	names   map[string]bool
	tensors []descTensor
	shards  []doneShard
	cur     *openShard
	multi   bool  // some packed tensor has several groups
	added   int64 // tensor bytes added
	done    int64 // tensor bytes in final shard files
}

type writerState int

const (
	writerOpen writerState = iota
	writerFailed
	writerCommitted
	writerAborted
)

// doneShard is a finished shard file in the temporary folder.
type doneShard struct {
	path string
	size uint64
}

// openShard is the shard being filled. Its tensors are appended to one
// temporary file per alignment (8, 4, 2 and 1-byte elements); Finish lays the
// four out in that order after the header, so every tensor's data is aligned
// to its element size in the final file, as safetensors' own writer does.
type openShard struct {
	index   int
	secs    [4]*section
	entries [4][]stTensor // byte ranges relative to their section
	size    uint64
}

type section struct {
	path string
	f    *os.File
	w    *bufio.Writer
	n    uint64
}

func sectionOf(dtypeSize int) int {
	switch dtypeSize {
	case 8:
		return 0
	case 4:
		return 1
	case 2:
		return 2
	}
	return 3
}

// Create starts a checkpoint that Commit will place at dir. It creates the
// temporary folder dir + ".glyd-tmp-*" beside dir (and dir's parent if
// needed). It fails with status.Exists if dir exists and opt.Overwrite is
// not set (or dir is not a replaceable checkpoint folder).
func Create(dir string, opt WriterOptions) (*Writer, error) {
	if opt.MaxShardSize < 0 {
		return nil, status.Errorf(status.InvalidArgument, "MaxShardSize %d is negative", opt.MaxShardSize)
	}
	if dir == "" {
		return nil, status.Errorf(status.InvalidArgument, "empty checkpoint folder name")
	}
	dir = filepath.Clean(dir)
	base := filepath.Base(dir)
	if !validFileName(base) {
		return nil, status.Errorf(status.InvalidArgument, "%q cannot be a checkpoint folder", dir)
	}
	if err := checkDestination(dir, opt.Overwrite); err != nil {
		return nil, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, status.Wrap(err, "creating %s", parent)
	}
	tmp, err := os.MkdirTemp(parent, base+".glyd-tmp-*")
	if err != nil {
		return nil, status.Wrap(err, "creating a temporary folder beside %s", dir)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.Remove(tmp)
		return nil, status.Wrap(err, "creating %s", tmp)
	}
	w := &Writer{dir: dir, tmp: tmp, opt: opt, maxShard: uint64(opt.MaxShardSize), names: map[string]bool{}}
	if w.maxShard == 0 {
		w.maxShard = DefaultMaxShardSize
	}
	return w, nil
}

// checkDestination fails with status.Exists if dir exists and may not be
// replaced.
func checkDestination(dir string, overwrite bool) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return status.Wrap(err, "checking %s", dir)
	}
	if !overwrite {
		return status.Errorf(status.Exists, "%s exists (overwrite to replace it)", dir)
	}
	if !fi.IsDir() {
		return status.Errorf(status.Exists, "%s exists and is not a folder; refusing to replace it", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return status.Wrap(err, "checking %s", dir)
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(dir, DescriptorFile)); err != nil {
		return status.Errorf(status.Exists, "%s exists and is not a Glyd checkpoint (it has no %s); refusing to replace it", dir, DescriptorFile)
	}
	return nil
}

// TempDir returns the temporary folder the checkpoint is written to. Callers
// may add their own files there (config.json, tokenizer files) before Commit,
// except the names the writer uses: glyd.fb, model.safetensors,
// model-*-of-*.safetensors, model.safetensors.index.json and .glyd-*.
func (w *Writer) TempDir() string { return w.tmp }

// usable returns a status.State error unless the writer can take more calls.
func (w *Writer) usable() error {
	switch w.state {
	case writerFailed:
		return status.Errorf(status.State, "checkpoint writer for %s failed earlier (%v); only Abort remains", w.dir, w.failed)
	case writerCommitted:
		return status.Errorf(status.State, "checkpoint writer for %s is already committed", w.dir)
	case writerAborted:
		return status.Errorf(status.State, "checkpoint writer for %s is aborted", w.dir)
	}
	return nil
}

// fail puts the writer in the failed state: after an error while writing,
// the temporary folder no longer holds a consistent checkpoint.
func (w *Writer) fail(err error) error {
	w.state, w.failed = writerFailed, err
	return err
}

func (w *Writer) checkNew(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if w.names[name] {
		return status.Errorf(status.InvalidArgument, "tensor %q was already added to %s", name, w.dir)
	}
	return nil
}

// AddPacked appends the packed tensor t under name. Its planes are stored as
// U8 tensors under PlaneKey(name, p), all in one shard. t is validated first
// (codec's errors, prefixed with the tensor's name). Duplicate names give
// status.InvalidArgument.
func (w *Writer) AddPacked(name string, t *codec.Tensor) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.checkNew(name); err != nil {
		return err
	}
	if t == nil {
		return status.Errorf(status.InvalidArgument, "%s: tensor %q: nil packed tensor", w.dir, name)
	}
	if t.Layout != codec.Fixed12 && t.Layout != codec.Smallest {
		return status.Errorf(status.InvalidArgument, "%s: tensor %q: layout %v is not a packed layout", w.dir, name, t.Layout)
	}
	dt, ok := packedDType(t.DType)
	if !ok {
		return status.Errorf(status.DType, "%s: tensor %q: packed dtype %v is not bf16 or fp16", w.dir, name, t.DType)
	}
	if len(t.Shape) > MaxDims {
		return status.Errorf(status.InvalidArgument, "%s: tensor %q: %d dimensions, more than %d", w.dir, name, len(t.Shape), MaxDims)
	}
	if err := t.Validate(); err != nil {
		return status.Wrap(err, "%s: tensor %q", w.dir, name)
	}
	elements, ok := numElements(t.Shape)
	if !ok {
		return status.Errorf(status.Overflow, "%s: tensor %q: the product of shape %v overflows", w.dir, name, t.Shape)
	}
	if err := w.reserve(t.PackedBytes()); err != nil {
		return err
	}
	e := descTensor{
		name: name, layout: t.Layout, dtype: dt, shape: append([]int64{}, t.Shape...), elements: elements,
		checksum: t.Checksum, shard: uint32(w.cur.index), groups: append([]codec.Group{}, t.Groups...),
	}
	for p, data := range t.Planes {
		key := PlaneKey(name, codec.Plane(p))
		if err := w.append(key, dtypeU8, []int64{int64(len(data))}, data); err != nil {
			return err
		}
		e.planes = append(e.planes, descPlane{key: key, length: uint64(len(data))})
	}
	w.names[name] = true
	w.tensors = append(w.tensors, e)
	w.multi = w.multi || len(t.Groups) > 1
	return nil
}

// AddRaw appends a tensor stored as it is: dtype is a safetensors dtype
// (BF16, F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3,
// F8_E5M2), data its little-endian row-major bytes, whose length must be the
// dtype's size times the product of shape (status.SizeMismatch otherwise).
func (w *Writer) AddRaw(name, dtype string, shape []int64, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.checkNew(name); err != nil {
		return err
	}
	dt, ok := dtypeByName(dtype)
	if !ok {
		return status.Errorf(status.DType, "%s: tensor %q: dtype %q is not a safetensors dtype Glyd stores", w.dir, name, dtype)
	}
	if len(shape) > MaxDims {
		return status.Errorf(status.InvalidArgument, "%s: tensor %q: %d dimensions, more than %d", w.dir, name, len(shape), MaxDims)
	}
	for _, d := range shape {
		if d < 0 {
			return status.Errorf(status.InvalidArgument, "%s: tensor %q: negative dimension in shape %v", w.dir, name, shape)
		}
	}
	n, ok := numElements(shape)
	size, ok2 := byteSize(n, dt.size)
	if !ok || !ok2 {
		return status.Errorf(status.Overflow, "%s: tensor %q: %s %v overflows a byte count", w.dir, name, dtype, shape)
	}
	if size != uint64(len(data)) {
		return status.Errorf(status.SizeMismatch, "%s: tensor %q: %s %v is %d bytes, the data is %d", w.dir, name, dtype, shape, size, len(data))
	}
	if err := w.reserve(size); err != nil {
		return err
	}
	shape = append([]int64{}, shape...)
	if err := w.append(name, dt, shape, data); err != nil {
		return err
	}
	w.names[name] = true
	w.tensors = append(w.tensors, descTensor{
		name: name, layout: codec.Raw, dtype: dt, shape: shape, elements: n,
		checksum: crc32.Checksum(data, castagnoli), shard: uint32(w.cur.index),
		planes: []descPlane{{key: name, length: size}},
	})
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// reserve makes w.cur a shard that can take size more bytes: it finishes
// the current shard if it is not empty and size would take it past the
// limit.
func (w *Writer) reserve(size uint64) error {
	if w.cur != nil && w.cur.size > 0 && w.cur.size+size > w.maxShard {
		if err := w.finishShard(); err != nil {
			return w.fail(err)
		}
	}
	if w.cur == nil {
		w.cur = &openShard{index: len(w.shards)}
	}
	return nil
}

// append writes one stored tensor to the current shard.
func (w *Writer) append(key string, dt dtypeInfo, shape []int64, data []byte) error {
	k := sectionOf(dt.size)
	s := w.cur.secs[k]
	if s == nil {
		s = &section{path: filepath.Join(w.tmp, fmt.Sprintf(".glyd-shard-%05d.align%d", w.cur.index+1, dt.size))}
		f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return w.fail(status.Wrap(err, "writing %s", w.dir))
		}
		s.f, s.w = f, bufio.NewWriterSize(f, 1<<20)
		w.cur.secs[k] = s
	}
	if _, err := s.w.Write(data); err != nil {
		return w.fail(status.Wrap(err, "writing tensor %q to %s", key, s.path))
	}
	n := uint64(len(data))
	w.cur.entries[k] = append(w.cur.entries[k], stTensor{key: key, dtype: dt, shape: shape, begin: s.n, end: s.n + n})
	s.n += n
	w.cur.size += n
	w.added += int64(n)
	return nil
}

// finishShard writes the current shard's file: the header, then its
// sections copied in order, and removes the sections.
func (w *Writer) finishShard() (err error) {
	sh := w.cur
	defer func() {
		for _, s := range sh.secs {
			if s != nil {
				_ = s.f.Close()
				_ = os.Remove(s.path)
			}
		}
		w.cur = nil
	}()
	var all []stTensor
	var base uint64
	for k, s := range sh.secs {
		for _, e := range sh.entries[k] {
			e.begin += base
			e.end += base
			all = append(all, e)
		}
		if s != nil {
			if err := s.w.Flush(); err != nil {
				return status.Wrap(err, "writing %s", s.path)
			}
			base += s.n
		}
	}
	header := encodeHeader(FormatName(FormatV1), all)
	path := filepath.Join(w.tmp, fmt.Sprintf(".glyd-shard-%05d.safetensors", sh.index+1))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return status.Wrap(err, "writing %s", w.dir)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = status.Wrap(cerr, "writing %s", path)
		}
	}()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	if _, err := f.Write(append(n[:], header...)); err != nil {
		return status.Wrap(err, "writing %s", path)
	}
	for _, s := range sh.secs {
		if s == nil {
			continue
		}
		if _, err := s.f.Seek(0, io.SeekStart); err != nil {
			return status.Wrap(err, "reading %s", s.path)
		}
		const chunk = 256 << 20
		for left := int64(s.n); left > 0; {
			c, err := io.CopyN(f, s.f, min(left, chunk))
			if err != nil {
				return status.Wrap(err, "copying %s to %s", s.path, path)
			}
			left -= c
			w.done += c
			if w.opt.Progress != nil {
				w.opt.Progress(w.done, w.added)
			}
		}
	}
	w.shards = append(w.shards, doneShard{path: path, size: 8 + uint64(len(header)) + base})
	return nil
}

// Commit finishes the last shard, writes the index (when there are several
// shards) and glyd.fb, syncs every file and folder, and renames the
// temporary folder to dir (replacing an existing checkpoint there only with
// Overwrite, and only now that the new one is complete). After an error the
// writer only accepts Abort, which removes the temporary folder.
func (w *Writer) Commit() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.commit(); err != nil {
		return w.fail(err)
	}
	w.state = writerCommitted
	return nil
}

func (w *Writer) commit() error {
	if w.cur == nil && len(w.shards) == 0 {
		w.cur = &openShard{} // an empty checkpoint still has one shard
	}
	if w.cur != nil {
		if err := w.finishShard(); err != nil {
			return err
		}
	}
	version := FormatV1
	if w.multi {
		version = FormatV2
	}
	d := &descriptor{format: FormatName(version), version: version, library: w.opt.Library}
	if d.library == "" {
		d.library = "glyd"
	}
	for i, s := range w.shards {
		name := shardFileName(i, len(w.shards))
		if err := w.finalizeShard(s, name, d.format); err != nil {
			return err
		}
		d.shards = append(d.shards, descShard{name: name, size: s.size})
	}
	sort.Slice(w.tensors, func(i, j int) bool { return w.tensors[i].name < w.tensors[j].name })
	d.tensors = w.tensors
	if len(w.shards) > 1 {
		if err := w.writeIndex(d); err != nil {
			return err
		}
	}
	desc, err := encodeDescriptor(d)
	if err != nil {
		return err
	}
	if err := w.writeNew(DescriptorFile, desc); err != nil {
		return err
	}
	if err := syncTree(w.tmp); err != nil {
		return err
	}
	if err := w.install(); err != nil {
		return err
	}
	if w.opt.Progress != nil {
		w.opt.Progress(w.done, w.added)
	}
	return nil
}

// finalizeShard gives shard s its final name and records the format in its
// metadata (commit syncs it with the rest).
func (w *Writer) finalizeShard(s doneShard, name, format string) error {
	path := filepath.Join(w.tmp, name)
	if _, err := os.Lstat(path); err == nil {
		return status.Errorf(status.InvalidArgument, "%s already holds %s, a name the checkpoint writer uses", w.tmp, name)
	}
	if err := os.Rename(s.path, path); err != nil {
		return status.Wrap(err, "renaming %s", s.path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return status.Wrap(err, "writing %s", path)
	}
	placeholder := FormatName(FormatV1)
	if format != placeholder {
		if len(format) != len(placeholder) {
			_ = f.Close()
			return status.Errorf(status.Internal, "format name %q does not fit the header of %s", format, path)
		}
		if _, err := f.WriteAt([]byte(format), int64(metadataValueOffset)); err != nil {
			_ = f.Close()
			return status.Wrap(err, "writing %s", path)
		}
	}
	return status.Wrap(f.Close(), "writing %s", path)
}

// writeIndex writes model.safetensors.index.json as transformers does.
func (w *Writer) writeIndex(d *descriptor) error {
	type index struct {
		Metadata struct {
			TotalSize uint64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	var idx index
	idx.WeightMap = map[string]string{}
	for _, t := range d.tensors {
		for _, p := range t.planes {
			idx.WeightMap[p.key] = d.shards[t.shard].name
			idx.Metadata.TotalSize += p.length
		}
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return status.Errorf(status.Internal, "encoding %s: %v", IndexFile, err)
	}
	return w.writeNew(IndexFile, append(data, '\n'))
}

// writeNew creates the file name in the temporary folder and writes data
// (commit syncs it with the rest).
func (w *Writer) writeNew(name string, data []byte) error {
	path := filepath.Join(w.tmp, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return status.Errorf(status.InvalidArgument, "%s already holds %s, a name the checkpoint writer uses", w.tmp, name)
	}
	if err != nil {
		return status.Wrap(err, "writing %s", path)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return status.Wrap(err, "writing %s", path)
	}
	return status.Wrap(f.Close(), "writing %s", path)
}

// install renames the finished temporary folder to w.dir.
func (w *Writer) install() error {
	if err := checkDestination(w.dir, w.opt.Overwrite); err != nil {
		return err
	}
	parent := filepath.Dir(w.dir)
	var old string
	if _, err := os.Lstat(w.dir); err == nil {
		// Move the old checkpoint aside under a unique sibling name.
		o, err := os.MkdirTemp(parent, filepath.Base(w.dir)+".glyd-old-*")
		if err != nil {
			return status.Wrap(err, "replacing %s", w.dir)
		}
		if err := os.Remove(o); err != nil {
			return status.Wrap(err, "replacing %s", w.dir)
		}
		if err := os.Rename(w.dir, o); err != nil {
			return status.Wrap(err, "moving the old %s aside", w.dir)
		}
		old = o
	}
	if err := os.Rename(w.tmp, w.dir); err != nil {
		if old != "" {
			_ = os.Rename(old, w.dir)
		}
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return status.Errorf(status.Exists, "%s appeared while the checkpoint was written: %v", w.dir, err)
		}
		return status.Wrap(err, "renaming %s to %s", w.tmp, w.dir)
	}
	if err := syncPath(parent); err != nil {
		return err
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return status.Wrap(err, "%s is committed, but the checkpoint it replaced could not be removed from %s", w.dir, old)
		}
	}
	return nil
}

// Abort removes the temporary folder and everything in it. It is a no-op
// after Commit succeeded or a previous Abort.
func (w *Writer) Abort() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == writerCommitted || w.state == writerAborted {
		return nil
	}
	if w.cur != nil {
		for _, s := range w.cur.secs {
			if s != nil {
				_ = s.f.Close()
			}
		}
		w.cur = nil
	}
	w.state = writerAborted
	if err := os.RemoveAll(w.tmp); err != nil {
		return status.Wrap(err, "removing %s", w.tmp)
	}
	return nil
}

// syncTree fsyncs every regular file and folder under root, root included.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return status.Wrap(err, "syncing %s", path)
		}
		if !e.Type().IsRegular() && !e.IsDir() {
			return nil
		}
		return syncPath(path)
	})
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return status.Wrap(err, "syncing %s", path)
	}
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		_ = f.Close()
		return status.Wrap(err, "syncing %s", path)
	}
	return status.Wrap(f.Close(), "syncing %s", path)
}
