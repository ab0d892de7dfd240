package gpu

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed fatbin must have been built from the committed kernel
// sources: kernels.manifest records their sha256 (kernels/build.sh writes it).
// Run `make kernels` after editing a .cu/.cuh file or glyd_kernel_params.h.
func TestFatbinManifestMatchesSources(t *testing.T) {
	f, err := os.Open("kernels.manifest")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[0] != "source" {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", "..", fields[2]))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != fields[1] {
			t.Errorf("%s changed since core/gpu/kernels.fatbin was built; run make kernels", fields[2])
		}
		n++
	}
	if n == 0 {
		t.Fatal("kernels.manifest lists no sources")
	}
	if len(fatbin) == 0 || len(fatbin) > 5<<20 {
		t.Fatalf("embedded fatbin is %d bytes", len(fatbin))
	}
}
