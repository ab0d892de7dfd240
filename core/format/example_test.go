package format_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/format"
)

// Example writes a checkpoint with one packed and one raw tensor, then
// reads it back and verifies it.
func Example() {
	parent, err := os.MkdirTemp("", "glyd-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(parent)
	dir := filepath.Join(parent, "tiny-model")

	// A 64x64 bf16 weight matrix and an fp32 bias.
	weight := make([]uint16, 64*64)
	for i := range weight {
		weight[i] = uint16(math.Float32bits(float32(math.Sin(float64(i))*0.02)) >> 16)
	}
	bias := make([]byte, 4*64)

	packed, err := codec.Pack(weight, codec.BF16, []int64{64, 64}, codec.Options{Layout: codec.Fixed12})
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := format.Create(dir, format.WriterOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Abort() // removes the temporary folder unless Commit succeeded
	if err := w.AddPacked("layer.weight", packed); err != nil {
		fmt.Println(err)
		return
	}
	if err := w.AddRaw("layer.bias", "F32", []int64{64}, bias); err != nil {
		fmt.Println(err)
		return
	}
	// Callers may add their own files before Commit.
	if err := os.WriteFile(filepath.Join(w.TempDir(), "config.json"), []byte("{}\n"), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Commit(); err != nil {
		fmt.Println(err)
		return
	}

	r, err := format.Open(dir, format.ReaderOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	fmt.Println(r.Format())
	for _, t := range r.Tensors() {
		fmt.Printf("%s %s %s %v in %s\n", t.Name, t.Layout, t.DType, t.Shape, t.Shard)
	}
	got := make([]uint16, len(weight))
	if err := r.Unpack("layer.weight", got); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("lossless:", fmt.Sprint(got) == fmt.Sprint(weight))
	fmt.Println("verify:", r.VerifyAll(nil))
	// Output:
	// glyd-v1
	// layer.bias raw F32 [64] in model.safetensors
	// layer.weight fixed12 BF16 [64 64] in model.safetensors
	// lossless: true
	// verify: <nil>
}
