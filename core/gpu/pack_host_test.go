package gpu

import (
	"testing"

	"github.com/glyd/glyd/core/codec"
)

// The host's share of one GPU pack of a 8192 x 8192 bf16 tensor (smallest):
// combining the tile CRCs, the plane offsets from the tile counts, and the
// chunk table. The GPU does the rest; the H200 profile is in
// docs/PERFORMANCE.md.
func BenchmarkPackHostSide(b *testing.B) {
	g, err := packGeometry(codec.BF16, codec.Smallest, []int64{8192, 8192}, 1)
	if err != nil {
		b.Fatal(err)
	}
	crcs := make([]uint32, g.tcrc)
	b.Run("crc", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			codec.CRCCombineEqual(crcs, packCRCTile, 2*g.total-(g.tcrc-1)*packCRCTile)
		}
	})
	b.Run("offsets+chunks", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cnt := make([]uint32, g.stride*g.G*g.T)
			off := make([]uint64, len(cnt))
			sizes, _ := packOffsetsSmall(make([]codec.Group, g.G), g, cnt, off)
			chunksFromOffsets(g, off, make([]byte, sizes[codec.PlaneChunks]))
		}
	})
}
