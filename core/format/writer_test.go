package format

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestAbortLeavesNothing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "ckpt")
	w, err := Create(dir, WriterOptions{MaxShardSize: 1000})
	must(t, err)
	if !strings.HasPrefix(filepath.Base(w.TempDir()), "ckpt.glyd-tmp-") || filepath.Dir(w.TempDir()) != parent {
		t.Errorf("TempDir %s is not a ckpt.glyd-tmp-* sibling of %s", w.TempDir(), dir)
	}
	for i := 0; i < 3; i++ {
		_, pt := packed(t, []int64{32, 64}, 1, uint64(i))
		must(t, w.AddPacked(string(rune('a'+i)), pt))
	}
	must(t, w.Abort())
	must(t, w.Abort()) // twice is fine
	if got := entries(t, parent); len(got) != 0 {
		t.Errorf("Abort left %v", got)
	}
	_, pt := packed(t, []int64{4}, 1, 1)
	wantCode(t, w.AddPacked("z", pt), status.State, "aborted")
	wantCode(t, w.AddRaw("z", "F32", nil, make([]byte, 4)), status.State, "aborted")
	wantCode(t, w.Commit(), status.State, "aborted")
}

// TestUncommittedWriterIsNoCheckpoint: a writer that never commits (a crash)
// leaves only its *.glyd-tmp-* folder, which Open refuses, and nothing under
// the final name.
func TestUncommittedWriterIsNoCheckpoint(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "ckpt")
	w, err := Create(dir, WriterOptions{MaxShardSize: 1000})
	must(t, err)
	for i := 0; i < 3; i++ {
		_, pt := packed(t, []int64{32, 64}, 1, uint64(i))
		must(t, w.AddPacked(string(rune('a'+i)), pt))
	}
	got := entries(t, parent)
	if len(got) != 1 || !strings.HasPrefix(got[0], "ckpt.glyd-tmp-") {
		t.Fatalf("folder holds %v, want only ckpt.glyd-tmp-*", got)
	}
	_, err = Open(dir, ReaderOptions{})
	wantCode(t, err, status.NotFound, dir)
	_, err = Open(w.TempDir(), ReaderOptions{})
	wantCode(t, err, status.InvalidArgument, "never committed")
}

func TestCommitThenCalls(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	w, err := Create(dir, WriterOptions{})
	must(t, err)
	must(t, w.AddRaw("x", "U8", []int64{3}, []byte{1, 2, 3}))
	must(t, w.Commit())
	if _, err := os.Stat(w.TempDir()); !os.IsNotExist(err) {
		t.Errorf("temporary folder still exists after Commit: %v", err)
	}
	wantCode(t, w.AddRaw("y", "U8", []int64{3}, []byte{1, 2, 3}), status.State, "committed")
	wantCode(t, w.Commit(), status.State, "committed")
	must(t, w.Abort()) // no-op
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	if _, b, err := r.Raw("x"); err != nil || string(b) != "\x01\x02\x03" {
		t.Errorf("Raw(x) = %v, %v after Abort following Commit", b, err)
	}
}

func TestCreateExistsWithoutOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	writeFixture(t, dir, 0, false)
	_, err := Create(dir, WriterOptions{})
	wantCode(t, err, status.Exists, dir)
}

func TestCommitExistsWithoutOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	w, err := Create(dir, WriterOptions{})
	must(t, err)
	defer w.Abort()
	must(t, os.MkdirAll(filepath.Join(dir, "other"), 0o755)) // appears meanwhile
	wantCode(t, w.Commit(), status.Exists, dir)
	if _, err := os.Stat(filepath.Join(dir, "other")); err != nil {
		t.Errorf("the folder that appeared was touched: %v", err)
	}
	wantCode(t, w.AddRaw("x", "U8", nil, []byte{1}), status.State, "failed")
	must(t, w.Abort())
	if _, err := os.Stat(w.TempDir()); !os.IsNotExist(err) {
		t.Errorf("Abort after a failed Commit left %s", w.TempDir())
	}
}

func TestOverwriteReplacesCheckpoint(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "ckpt")
	writeFixture(t, dir, 8000, true) // several shards, glyd-v2
	w, err := Create(dir, WriterOptions{Overwrite: true})
	must(t, err)
	must(t, w.AddRaw("only", "F32", []int64{1}, []byte{0, 0, 128, 63}))
	// The old checkpoint is untouched until Commit.
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	if r.Format() != "glyd-v2" {
		t.Errorf("old checkpoint changed before Commit")
	}
	must(t, r.Close())
	must(t, w.Commit())
	r, err = Open(dir, ReaderOptions{})
	must(t, err)
	defer r.Close()
	if infos := r.Tensors(); len(infos) != 1 || infos[0].Name != "only" || r.Format() != "glyd-v1" {
		t.Errorf("after Overwrite: %s with %+v", r.Format(), infos)
	}
	if got := entries(t, parent); len(got) != 1 || got[0] != "ckpt" {
		t.Errorf("folder holds %v, want only ckpt", got)
	}
	if got := entries(t, dir); len(got) != 2 {
		t.Errorf("new checkpoint holds %v, want model.safetensors and glyd.fb", got)
	}
}

func TestOverwriteRefusesOtherFolders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644))
	_, err := Create(dir, WriterOptions{Overwrite: true})
	wantCode(t, err, status.Exists, "not a Glyd checkpoint")

	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, nil, 0o644))
	_, err = Create(file, WriterOptions{Overwrite: true})
	wantCode(t, err, status.Exists, "not a folder")
}

func TestOverwriteEmptyFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	must(t, os.MkdirAll(dir, 0o755))
	w, err := Create(dir, WriterOptions{Overwrite: true})
	must(t, err)
	must(t, w.Commit())
	r, err := Open(dir, ReaderOptions{})
	must(t, err)
	must(t, r.Close())
}

func TestDuplicateName(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "ckpt"), WriterOptions{})
	must(t, err)
	defer w.Abort()
	_, pt := packed(t, []int64{8}, 1, 1)
	must(t, w.AddPacked("w", pt))
	wantCode(t, w.AddPacked("w", pt), status.InvalidArgument, `"w"`, "already")
	wantCode(t, w.AddRaw("w", "U8", nil, []byte{1}), status.InvalidArgument, `"w"`, "already")
	must(t, w.AddRaw("b", "U8", nil, []byte{1}))
	wantCode(t, w.AddPacked("b", pt), status.InvalidArgument, `"b"`, "already")
	must(t, w.Commit()) // validation errors do not spoil the writer
}

func TestReservedNames(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "ckpt"), WriterOptions{})
	must(t, err)
	defer w.Abort()
	for _, name := range []string{"", "__metadata__", "w.glyd_sm", "a\x00b", "bad\xffutf8"} {
		wantCode(t, w.AddRaw(name, "U8", nil, []byte{1}), status.InvalidArgument)
	}
}

func TestAddRawChecks(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "ckpt"), WriterOptions{})
	must(t, err)
	defer w.Abort()
	wantCode(t, w.AddRaw("a", "F32", []int64{3}, make([]byte, 8)), status.SizeMismatch, `"a"`)
	wantCode(t, w.AddRaw("a", "Q4", []int64{3}, make([]byte, 3)), status.DType, `"Q4"`)
	wantCode(t, w.AddRaw("a", "U8", []int64{-1}, nil), status.InvalidArgument, `"a"`)
	wantCode(t, w.AddRaw("a", "U8", []int64{1 << 40, 1 << 40}, nil), status.Overflow, `"a"`)
	wantCode(t, w.AddRaw("a", "U8", make([]int64, MaxDims+1), nil), status.InvalidArgument, "dimensions")
}

func TestAddPackedChecks(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "ckpt"), WriterOptions{})
	must(t, err)
	defer w.Abort()
	wantCode(t, w.AddPacked("a", nil), status.InvalidArgument, `"a"`)
	_, pt := packed(t, []int64{64}, 1, 1)
	bad := *pt
	bad.Planes[codec.PlaneSM] = bad.Planes[codec.PlaneSM][:10]
	err = w.AddPacked("a", &bad)
	if err == nil || !strings.Contains(err.Error(), `tensor "a"`) {
		t.Errorf("AddPacked of a corrupt tensor: %v", err)
	}
	raw := *pt
	raw.Layout = codec.Raw
	wantCode(t, w.AddPacked("a", &raw), status.InvalidArgument, `"a"`)
	must(t, w.AddPacked("a", pt))
}

func TestCreateChecks(t *testing.T) {
	_, err := Create("", WriterOptions{})
	wantCode(t, err, status.InvalidArgument)
	_, err = Create(filepath.Join(t.TempDir(), "x"), WriterOptions{MaxShardSize: -1})
	wantCode(t, err, status.InvalidArgument, "MaxShardSize")
}

func TestOpenChecks(t *testing.T) {
	_, err := Open(t.TempDir(), ReaderOptions{MaxFormatVersion: 3})
	wantCode(t, err, status.InvalidArgument, "MaxFormatVersion")
	_, err = Open(filepath.Join(t.TempDir(), "missing"), ReaderOptions{})
	wantCode(t, err, status.NotFound, "missing")
	dir := t.TempDir()
	_, err = Open(dir, ReaderOptions{})
	wantCode(t, err, status.NotFound, "not a Glyd checkpoint")
}
