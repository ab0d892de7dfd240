package format_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/format"
	"github.com/glyd/glyd/core/status"
)

// A shard truncated while a Reader has it mapped makes its pages fault
// (SIGBUS). Decoding must report an I/O error, not crash the process (the host
// is often a Python interpreter).
func TestShardTruncatedWhileMapped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	src := make([]uint16, 1<<20) // 2 MiB of bf16, planes far beyond one page
	for i := range src {
		src[i] = 0x3c00 + uint16(i%97)
	}
	packed, err := codec.Pack(src, codec.BF16, []int64{1024, 1024}, codec.Options{Layout: codec.Fixed12})
	if err != nil {
		t.Fatal(err)
	}
	w, err := format.Create(dir, format.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddPacked("w", packed); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := format.Open(dir, format.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Truncate(filepath.Join(dir, format.SingleShardFile), 4096); err != nil {
		t.Fatal(err)
	}
	err = r.Unpack("w", make([]uint16, len(src)))
	if !errors.Is(err, &status.Error{Code: status.IO}) {
		t.Fatalf("Unpack of a truncated mapped shard: got %v, want an IO error", err)
	}
}
