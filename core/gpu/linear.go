package gpu

/*
#include "driver.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/status"
)

// linConfig is one tile configuration of the fused fixed12 kernel
// (kernels/linear.cu): MT m16 weight tiles and NT n8 token tiles per warp,
// WN warps along the weight rows, WK warps splitting K, U k-blocks in flight.
//
// Warpgroup configurations (glyd_lin_f12w_t{tokens}k{WK}s{S}u{U}p{PW}, sm_90
// only) multiply with wgmma: 64 rows per block, WK consumer warpgroups of
// WN = 4 warps splitting K, U k-blocks of weights in flight per lane, PW
// producer warps staging the activations in S stages.

type linConfig struct {
	MT, NT, WN, WK, U int
	Kind              linKind
	S, PW             int  // warpgroup configurations: activation stages, producer warps
	SmemW             bool // prompt configurations: the U k-blocks of weights in shared memory
	// Clusters: the kernel can run the splits of a tile as a cluster
	// (inClusters; the prompt tiles of 64 and 256 tokens; kernels/linear.cu's
	// CLUSTERS).
	Clusters bool
}

// promptConfig is the many-token configuration (glyd_lin_f12p_t{tb}s{s}u{u},
// sm_90 only): tb tokens, 128 weight rows per block in two consumer
// warpgroups (8 warps, WN = 8; prompt3Config: 192 in three), s activation
// stages filled by the bulk copy engine from x laid out as the stages
// (glyd_lin_xperm_t{tb}, into the workspace), a ring of u k-blocks of weights
// per lane in registers, or in shared memory when smemW
// (glyd_lin_f12p_t{tb}s{s}w{u}); clusters: the kernel can add its splits in a
// cluster (linConfig.Clusters).
func promptConfig(tb, s, u int, smemW, clusters bool) linConfig {
	return linConfig{MT: 1, NT: tb / 8, WN: 8, WK: 1, U: u, Kind: linPrompt, S: s, SmemW: smemW, Clusters: clusters}
}

// prompt3Config is promptConfig with three consumer warpgroups: 192 weight
// rows per block, one block per SM (glyd_lin_f12p_…g3; no clusters).
func prompt3Config(tb, s, u int, smemW bool) linConfig {
	c := promptConfig(tb, s, u, smemW, false)
	c.WN = 12
	return c
}

// regConfig is the mma.sync configuration of mt x nt tiles per warp, wn x wk
// warps and u k-blocks in flight per lane.
func regConfig(mt, nt, wn, wk, u int) linConfig {
	return linConfig{MT: mt, NT: nt, WN: wn, WK: wk, U: u, Kind: linRegs}
}

// wgConfig is the warpgroup configuration of tb tokens, kg consumer
// warpgroups splitting K, s activation stages, u k-blocks of weights in
// flight per lane and pw producer warps.
func wgConfig(tb, kg, s, u, pw int) linConfig {
	return linConfig{MT: 1, NT: tb / 8, WN: 4, WK: kg, U: u, Kind: linWgmma, S: s, PW: pw}
}

type linKind int

const (
	linRegs   linKind = iota // glyd_lin_f12_*: mma.sync, weights pipelined in registers
	linWgmma                 // glyd_lin_f12w_*: sm_90 (Hopper) only
	linPrompt                // glyd_lin_f12p_*: sm_90 only, x staged from its stage images
)

// hopperOnly reports the configurations that exist for sm_90 only.
func (c linConfig) hopperOnly() bool { return c.Kind != linRegs }

// patchesEscapes reports the configurations whose kernels put the true bits
// of escaped weights into the decoded fragments (kernels/linear.cu,
// RowEscapes: the prompt tiles), so that their split-K partial sums need no
// escape corrections.
func (c linConfig) patchesEscapes() bool { return c.Kind == linPrompt }

func (c linConfig) name() string {
	switch c.Kind {
	case linWgmma:
		return fmt.Sprintf("glyd_lin_f12w_t%dk%ds%du%dp%d", c.tokens(), c.WK, c.S, c.U, c.PW)
	case linPrompt:
		ring := "u" // the weights' ring: registers (u), shared memory (w)
		if c.SmemW {
			ring = "w"
		}
		name := fmt.Sprintf("glyd_lin_f12p_t%ds%d%s%d", c.tokens(), c.S, ring, c.U)
		if wg := c.WN / 4; wg != 2 { // consumer warpgroups, when not the two of promptConfig
			name += fmt.Sprintf("g%d", wg)
		}
		return name
	}
	return fmt.Sprintf("glyd_lin_f12_m%dn%dw%dk%du%d", c.MT, c.NT, c.WN, c.WK, c.U)
}
func (c linConfig) rows() int   { return 16 * c.MT * c.WN } // weight rows per block
func (c linConfig) tokens() int { return 8 * c.NT }         // tokens per block
func (c linConfig) threads() int {
	return 32*c.WN*c.WK + 32*c.PW
}

// smem is the dynamic shared memory of a block of the dense kernel, as it lays it out.
func (c linConfig) smem() int { return c.smemWith(c.tokens() >= 64) }

// groupedSmem is smem for the grouped experts kernel (kernels/moe.cu).
func (c linConfig) groupedSmem() int { return c.smemWith(false) }

// smemWith: block_epilogue's tile is [tokens][rows + 4] where it finishes 4
// outputs per step (vec: kernels/linear.cu, vec_epilogue), else [tokens][rows + 1].
func (c linConfig) smemWith(vec bool) int {
	pad := 1
	if vec {
		pad = 4
	}
	tile := c.tokens() * (c.rows() + pad) * 4
	tree := (c.WK / 2) * c.rows() * c.tokens() * 4
	switch c.Kind {
	case linWgmma:
		// escape ranges padded to 128 bytes, then the activation stages of
		// 64 k x tokens bf16, overlaid by the epilogue at the end
		return ((c.rows()+1+31)&^31)*4 + max(c.S*c.tokens()*128, tile, tree)
	case linPrompt:
		// the stage barriers and counters in the first KiB, the stages and
		// (SmemW) the weight ring's 48 bytes per thread and slot, overlaid by
		// the epilogue's tile
		ring := 0
		if c.SmemW {
			ring = c.U * c.threads() * 48
		}
		return 1024 + max(c.S*c.tokens()*128+ring, tile)
	}
	srows := ((c.rows() + 1 + 3) &^ 3) * 4
	return srows + max(tree, tile)
}

// linConfigs is the table of configurations compiled into the fatbin (the
// GLYD_LIN and GLYD_LINW lines of kernels/linear.cu); pickConfig's choices
// and a few runners-up kept for sweeps. Why each exists:
//   - 1..8 tokens: reading the weights is everything. 16 weight rows per
//     block and 8 or 16 warps splitting K give N/16 blocks, each lane with a
//     k-block (48 bytes) in flight;
//   - 9..128 tokens, mma.sync (sm_80..89, sm_100, sm_120): the activations
//     are re-read by every block, so blocks grow to 32..128 rows;
//   - 9..64 tokens on sm_90: the wgmma kernel (one instruction per 64 rows x
//     all tokens x 16 k; kernels/linear.cu) in 16-, 32- and 64-token tiles;
//   - 65 tokens and more on sm_90, and 33..64 on weights of >= 96 tiles: the
//     prompt tiles (128 weight rows in two warpgroups, 64, 128 or 256
//     tokens per block; 192 rows in three for 128 tokens, where the
//     two-warpgroup tile is a runner-up since session 25); the 64-token
//     tile also at three blocks per SM, its weights in shared memory (wide
//     weights that two per SM leave under a wave, session 29).
//
// Sweeps of the configurations tried and removed: docs/PERFORMANCE.md.
var linConfigs = []linConfig{
	regConfig(1, 1, 1, 8, 1),             // 0
	regConfig(1, 1, 1, 16, 1),            // 1
	regConfig(1, 2, 1, 8, 1),             // 2
	regConfig(2, 4, 1, 8, 1),             // 3
	regConfig(1, 8, 2, 4, 1),             // 4
	regConfig(1, 8, 4, 2, 1),             // 5
	wgConfig(16, 1, 4, 2, 2),             // 6
	wgConfig(16, 1, 4, 4, 2),             // 7
	wgConfig(16, 2, 4, 2, 2),             // 8
	wgConfig(32, 1, 4, 2, 2),             // 9
	wgConfig(32, 2, 4, 2, 2),             // 10
	wgConfig(32, 1, 4, 4, 2),             // 11: registers capped for 3 blocks per SM
	wgConfig(64, 1, 4, 4, 4),             // 12
	promptConfig(128, 4, 4, true, false), // 13: no clusters (kernels/linear.cu, GLYD_LINP_); runner-up
	promptConfig(256, 4, 2, false, true), // 14
	promptConfig(64, 4, 2, false, true),  // 15
	prompt3Config(128, 4, 4, true),       // 16
	promptConfig(64, 4, 2, true, true),   // 17: registers capped for 3 blocks per SM
}

// pickConfig returns the index in linConfigs for rows tokens and n weight
// rows, from the configuration sweeps on the H200 (docs/PERFORMANCE.md):
//   - 1-8 tokens: when the 16-row blocks are few (o, down of Qwen3-8B: 256
//     blocks), 16 warps splitting K (twice the warps of u1 in flight: down
//     0.295 -> 0.279 ms, o 0.138 -> 0.136 for 12 layers, session 3), else
//     one k-block in flight per lane (u1, higher occupancy; qkv 384, gate_up
//     1536 blocks); on sm_90 weights of >= 264 tiles of 64 rows (gate_up)
//     take the 16-token wgmma tile already (session 5: gate_up 0.517 ->
//     0.498 ms at 1 token, 0.524 -> 0.501 at 8; narrower shapes lose).
//   - from 9 tokens on sm_90 (hopper), the wgmma kernel (session 4 sweeps):
//     16-token tiles to 16 tokens, one warpgroup on weights of >= 264 tiles
//     (gate_up), two splitting K on < 96 (o, down: 12 layers of o at 9
//     tokens 0.175 -> 0.154 ms, session 8), and between them (qkv) the
//     mma.sync tile of 16 rows, whose 384 blocks need no split-K
//     (0.200 -> 0.177 ms at 9 tokens, 0.202 -> 0.191 at 16); to 32, 4 k-blocks in flight per lane at
//     3 blocks per SM on weights of >= 96 tiles (qkv, gate_up), two
//     warpgroups splitting K on narrower ones (o, down); 64-token tiles
//     beyond, 4 k-blocks in flight at 2 blocks per SM (session 5, with the
//     grouped epilogue: best on every Qwen3-8B shape at 64 tokens, gate_up
//     0.772 ms against 0.803 for 3 in flight at 3 blocks per SM), but on
//     weights of >= 80 tiles the 64-token prompt tile (session 11 at 48 and
//     64 tokens: qkv 0.322 -> 0.309 ms, gate_up 0.760 -> 0.712; o and down
//     of Qwen3-8B, 64 tiles, stay faster on the wgmma tile, those of
//     Qwen3-32B, 80 tiles, do not: session 28, 16 layers of o 0.499 ->
//     0.466 ms, down 1.313 -> 1.150); from 65
//     tokens the prompt tiles, 128 tokens per block to 128 tokens (two
//     64-token tiles cost 1.4-1.6x as much at 96-128 tokens, session 11;
//     its weights in a shared-memory ring of 4: table 1 at 128 tokens 6-9%
//     faster than 2 in registers, session 16), since session 25 in three
//     warpgroups, 192 rows, one block per SM (ms for 12 layers at 128
//     tokens: gate_up 0.879 -> 0.760, qkv 0.367 -> 0.346, down 0.546 ->
//     0.527, o within 3%; table 1, 36 layers, 96 / 128 tokens 1.449 / 1.469
//     -> 1.294-1.305 / 1.338-1.364; the 64-token tile in three warpgroups
//     was level with two at 48-64 tokens and is not built); 256 tokens
//     beyond (2 k-blocks in flight in registers: 4 measured slower at 2
//     blocks per SM and no faster at 1; the shared ring of 5-8 4-10%
//     slower, session 16), but on weights of >= 264 tiles (gate_up) the
//     three-warpgroup 128-token tile to 384 tokens (session 25, 12 layers
//     of the four linears: 192 / 256 / 384 tokens 3.248 / 3.522 / 5.077 ->
//     3.170 / 3.333 / 4.951 ms; qkv, o and down faster on the 256-token
//     tile), and on weights of 96-263 tiles (qkv) at 257-384 tokens (session
//     27, tiled planes: 12 layers of qkv alone at 384 tokens 0.800 -> 0.734
//     ms, table 1 at 384 tokens 4.84 / 4.76 -> 4.71 / 4.69 ms; at 512 and
//     768 qkv alone gained 7% too but table 1 lost 0-3%).
//   - elsewhere, the session-3 sweep: m1n2w1k8u1 to 16 tokens, m2n4w1k8u1
//     to 32, m1n8w2k4u1 to 64, m1n8w4k2u1 beyond.
//
// On sm_90 device.pick may run the 64-token tiles instead of a prompt tile
// whose blocks would be short (smallPrompt: small models at 65-256 tokens),
// and alternative's configuration where that fills the GPU's waves better.
func pickConfig(rows, n int64, hopper bool) int {
	if f := forced.Load(); f > 0 {
		return int(f - 1)
	}
	tiles := (n + 63) / 64
	switch {
	case hopper && rows <= 8 && tiles >= splitTarget:
		return cfgWide16
	case rows <= 8:
		if (n+15)/16 <= splitTarget {
			return cfgRows16k16
		}
		return cfgRows16k8
	case hopper && rows <= 16 && tiles >= splitTarget:
		return cfgWide16
	case hopper && rows <= 16 && tiles >= 96:
		return cfgRows16t16
	case hopper && rows <= 16:
		return cfgSplit16
	case hopper && rows <= 32 && tiles >= 96:
		return cfgWide32
	case hopper && rows <= 32:
		return 10 // t32k2s4u2p2
	case hopper && rows <= 64 && tiles >= 80:
		return cfgPrompt64
	case hopper && rows <= 64:
		return cfgWgmma64
	case hopper && rows <= 128, hopper && rows <= 384 && tiles >= splitTarget,
		hopper && rows > 256 && rows <= 384 && tiles >= 96:
		return cfgPrompt128g3
	case hopper:
		return cfgPrompt256
	case rows <= 16:
		return cfgRows16t16
	case rows <= 32:
		return 3 // m2n4w1k8u1
	case rows <= 64:
		return 4 // m1n8w2k4u1
	default:
		return 5 // m1n8w4k2u1
	}
}

// Configurations device.pick weighs against each other.
const (
	cfgRows16k8    = 0  // m1n1w1k8u1
	cfgRows16k16   = 1  // m1n1w1k16u1
	cfgRows16t16   = 2  // m1n2w1k8u1
	cfgWide16u2    = 6  // t16k1s4u2p2
	cfgWide16      = 7  // t16k1s4u4p2
	cfgSplit16     = 8  // t16k2s4u2p2
	cfgWide32u2    = 9  // t32k1s4u2p2
	cfgWide32      = 11 // t32k1s4u4p2
	cfgWgmma64     = 12 // t64k1s4u4p4
	cfgPrompt64    = 15 // t64s4u2: weights in registers, two blocks per SM
	cfgPrompt64w   = 17 // t64s4w2: weights in shared memory, three blocks per SM
	cfgPrompt128   = 13 // t128s4w4: two warpgroups
	cfgPrompt256   = 14 // t256s4u2
	cfgPrompt128g3 = 16 // t128s4w4g3: three warpgroups, one block per SM
)

// alternative is the configuration that device.pick runs instead of
// pickConfig's choice ci for rows tokens where its blocks fill the GPU's
// waves better (-1: none; always off sm_90, whose sweeps these pairs are).
// pickConfig's choices were swept on Qwen3-8B's shapes; wider weights land
// in other waves. Each pair differs in blocks
// per SM (registers) or in splitting K, and in the session-28 sweeps on
// Qwen3-8B's and Qwen3-32B's shapes the one with the better fill was the
// faster every time (docs/PERFORMANCE.md, session 28, item 3):
//   - the three-warpgroup prompt tile against the two-warpgroup one (session
//     25: gate_up of Qwen3-8B makes one wave of 128 tiles on 132 SMs, two on
//     a 114-SM H100 PCIe, where the 192 two-warpgroup tiles make one of 228);
//   - at 1-8 tokens, the 16-token wgmma tile (3 blocks per SM) against 16-row
//     blocks (4 per SM) on weights of >= 264 tiles: 51,200 rows, 800 tiles,
//     take 3 waves of 396 (16 layers of gate_up 1.882 -> 1.623 ms); and the
//     16-row blocks of 8 warps, unsplit, against the wgmma tile of two
//     warpgroups splitting K: 320 blocks fill 61% of 528 slots (o 0.389 ->
//     0.360, down 1.006 -> 0.908). Not the 16-warp blocks of weights of <=
//     264 such blocks (small models' o and down: a split and its reduce
//     launch there were never measured against them);
//   - at 9-32 tokens, 4 k-blocks in flight per lane at 3 blocks per SM
//     against 2 at 4 (gate_up at 16 tokens 1.907 -> 1.838, at 32 2.093 ->
//     2.016, qkv at 32 0.523 -> 0.511), and at 9-16 the mma.sync tile of 16
//     rows against the wgmma tile splitting K (qkv 0.522 -> 0.440);
//   - at 33-64 tokens (session 29), the 64-token prompt tile at 3 blocks per
//     SM (its weights in shared memory, 80 registers) against 2 (in
//     registers): Qwen3-8B's gate_up, 192 tiles in 2 splits filling 384 of
//     396 slots against 192 of 264, 12 layers at 64 tokens 0.720 -> 0.604 ms.
//
// Blocks left fewer than minKBlocks k-blocks by the alternative's split are
// not worth its fill (pick).
func alternative(ci, rows int, hopper bool) int {
	if !hopper {
		return -1
	}
	switch ci {
	case cfgPrompt128g3:
		if rows > 128 {
			return cfgPrompt256
		}
		return cfgPrompt128
	case cfgWide16:
		if rows <= 8 {
			return cfgRows16k8
		}
		return cfgWide16u2
	case cfgRows16k8: // not cfgRows16k16: weights of <= 264 blocks of 16 rows, never measured split
		return cfgSplit16
	case cfgRows16t16:
		return cfgWide16u2
	case cfgWide32:
		return cfgWide32u2
	case cfgPrompt64:
		return cfgPrompt64w
	}
	return -1
}

// pick is pickConfig on device d for one launch of the weights ws (K = k),
// or on sm_90 the 64-token tiles where pickConfig's prompt tile would run
// short or few blocks (smallPrompt), then the alternative of what it chose
// where that fills the GPU's waves better (the choice where they tie)
// without splitting K into blocks of fewer than minKBlocks k-blocks. A
// forced configuration (sweeps) runs as forced.
func (d *device) pick(rows int, ws []*DeviceTensor, k int64) int {
	n := sumRows(ws)
	ci := pickConfig(int64(rows), n, d.hopper())
	alt, sp := alternative(ci, rows, d.hopper()), smallPrompt(ci, rows, n)
	if forced.Load() > 0 || alt < 0 && sp < 0 {
		return ci
	}
	kb := (k + 63) / 64
	fill, splits, waves := d.waveFill(ci, rows, ws, k)
	if sp >= 0 && (kb < promptKBlocksMin*splits || kb < minKBlocks*splits && waves == 1 && fill < promptFillMin) {
		ci, alt = sp, alternative(sp, rows, d.hopper())
		fill, _, _ = d.waveFill(ci, rows, ws, k)
	}
	if alt < 0 {
		return ci
	}
	altFill, altSplits, _ := d.waveFill(alt, rows, ws, k)
	if altFill <= fill || kb < minKBlocks*altSplits {
		return ci
	}
	return alt
}

// smallPrompt is the 64-token tile that device.pick runs instead of the
// prompt tile ci at 65-256 tokens whose blocks would be short: fewer than
// promptKBlocksMin k-blocks, or fewer than minKBlocks in one wave filling
// less than promptFillMin of the GPU's slots (-1: ci is not such a tile).
// Small models' weights (K of 1,024-2,048, N of 1,024-4,096) split ci's few
// tiles into short blocks whose partial sums weigh as much as their
// weights; the 64-token tiles, in two to four token tiles, have blocks
// enough with fewer splits: the two-warpgroup one from 64 weight tiles of 64
// rows (at 64 tokens, one token tile, it needs 80), the wgmma tile below.
// Sweeps of session 30 (docs/PERFORMANCE.md), 12 layers, ms: at 128 tokens
// Qwen3-1.7B's qkv 0.205 -> 0.183, o 0.165 -> 0.121, down 0.244 -> 0.224,
// Qwen3-0.6B's four 0.665 -> 0.511; at 256 Qwen3-0.6B's qkv, o and down
// 0.544 -> 0.416. Qwen3-4B's, 8B's and 32B's tiles keep their blocks, where
// they were as fast or faster (4B's o, 8 k-blocks filling 0.85: level).
func smallPrompt(ci, rows int, n int64) int {
	if rows <= 64 || rows > 256 || (ci != cfgPrompt128g3 && ci != cfgPrompt256) {
		return -1
	}
	if (n+63)/64 >= 64 {
		return cfgPrompt64
	}
	return cfgWgmma64
}

// The fewest k-blocks per block, and the least fill of a single wave, of a
// prompt tile at 65-256 tokens (smallPrompt).
const (
	promptKBlocksMin = 8
	promptFillMin    = 0.7
)

// minKBlocks is the fewest k-blocks (64 of K) per block for which a better
// fill pays for an alternative's finer split: its blocks fill their
// pipelines (4 stages) anew and add more partial sums. On the H200 (session
// 29) the 64-token tile at 3 blocks per SM lost with 8 per block (Qwen3-8B's
// qkv, 8 splits of K = 4,096: 0.247 -> 0.260 ms; Qwen3-1.7B's gate_up, 4
// of 2,048: table 1 at 64 tokens 1.171 -> 1.274) and won with 32 (Qwen3-8B's
// gate_up, 2 splits). It also keeps Qwen3-8B's qkv at 65-128 tokens on the
// three-warpgroup tile (the two-warpgroup one splits it into 5 of 12.8):
// faster in session 25 (0.367 -> 0.346 ms), level on tiled planes (session
// 29: table 1 at 128 tokens 5.58-5.64 ms against 5.63).
const minKBlocks = 16

// waveFill is the share of the GPU's resident slots that a launch of
// configuration ci over ws keeps busy through its waves, blocks / (waves x
// slots), the splits of K it launches with, and its waves.
func (d *device) waveFill(ci, rows int, ws []*DeviceTensor, k int64) (fill float64, splits, waves int64) {
	c := linConfigs[ci]
	many := len(ws) > 1
	slots := int64(d.occ[ci][boolIndex(many)] * d.info.SMs)
	if slots <= 0 {
		return 0, 1, 1
	}
	tiles := weightTiles(c, ws)
	s, _ := d.splitOf(ci, many, tiles, k, rows)
	blocks := tiles * c.tokenTiles(int64(rows)) * s
	waves = (blocks + slots - 1) / slots
	return float64(blocks) / float64(waves*slots), s, waves
}

// splitTarget is the number of blocks below which K is split over blocks:
// two per multiprocessor of a 132-SM H100/H200. It is a constant, not read
// from the device, so the workspace bound and the summation order (hence the
// result bits) do not depend on the GPU.
const splitTarget = 264

// wgmmaSlotsMax caps the resident blocks a warpgroup configuration counts on
// (4 blocks per SM on 132 SMs, the largest sm_90 parts), so that the
// workspace bound holds for every GPU without asking the device.
const wgmmaSlotsMax = 4 * 132

// tilesOf is the number of weight tiles (blocks along the weight rows) of a
// weight of n rows.
func (c linConfig) tilesOf(n int64) int64 { return (n + int64(c.rows()) - 1) / int64(c.rows()) }

// tokenTiles is the number of token tiles (blocks along the tokens) of rows
// tokens.
func (c linConfig) tokenTiles(rows int64) int64 {
	return (rows + int64(c.tokens()) - 1) / int64(c.tokens())
}

// splits returns how many blocks share the K of one output tile, for a launch
// of tiles weight tiles (at most 8: the largest portable cluster, see
// inClusters).
//
// Warpgroup configurations run one long block per 64-row tile; a second
// wave of blocks would double the time, so they split K until the blocks
// fill every resident slot of the GPU (slots = blocks per SM x SMs, at most
// wgmmaSlotsMax; the bound takes wgmmaSlotsMax). Their result bits thus
// depend on the GPU model (deterministic on each).
func (c linConfig) splits(tiles, k, rows int64, slots int) int64 {
	ctas := tiles * c.tokenTiles(rows)
	maxs := ((k + 63) / 64) / int64(2*c.WK) // each warp keeps >= 2 k-blocks
	target := int64(splitTarget)
	if c.hopperOnly() {
		target = int64(min(slots, wgmmaSlotsMax))
	}
	return max(1, min(target/ctas, maxs, 8))
}

// workspace returns what a launch of configuration c needs in its workspace,
// in bytes, for weights of n rows in all, K = k, rows tokens and splits: the
// fp32 partial sums when K is split, then (prompt configurations) x laid out
// as the stage images of every token tile and k-block, at byte offset
// xpermAt.
func (c linConfig) workspace(n, k, rows, splits int64) (total, xpermAt uint64) {
	if splits > 1 {
		total = uint64(splits) * uint64(rows) * uint64(n) * 4
	}
	if c.Kind != linPrompt {
		return total, 0
	}
	xpermAt = (total + 255) &^ 255
	tb := int64(c.tokens())
	return xpermAt + uint64((rows+tb-1)/tb*tb)*uint64((k+63)/64*64)*2, xpermAt
}

// escapeExponent is the exponent the fast decode gives an escaped weight (code
// 15): base + 15, or 0 when base + 15 would be Inf/NaN or carry into the next
// byte; then the _safe kernels decode escapes as 0.
func escapeExponent(base uint8) uint32 {
	if base >= 240 {
		return 0
	}
	return uint32(base) + 15
}

// setOperands fills the operand fields the grouped experts kernels read (x,
// bias, y and the sizes; one split).
func setOperands(p *C.glyd_kparams, x, bias, y uintptr, rows, n, k int64) {
	p.x = C.glyd_u64(x)
	p.bias = C.glyd_u64(bias)
	p.y = C.glyd_u64(y)
	p.rows = C.glyd_i64(rows)
	p.N = C.glyd_i64(n)
	p.K = C.glyd_i64(k)
	p.splits = 1
}

var (
	forced        atomic.Int32 // 1 + index into linConfigs, 0 = automatic, -1 = generic
	forcedGrouped atomic.Int32 // 1 + index into groupedConfigs, 0 = automatic
)

// ForceConfig makes Linear use the named kernel configuration (a
// glyd_lin_f12_* name of KernelNames, without _safe) for every call, or
// LinearExperts the named grouped one (glyd_lin_f12g*); "" goes back to the
// automatic choice for both. For benchmarks and tests only.
func ForceConfig(name string) error {
	if name == "" {
		forced.Store(0)
		forcedGrouped.Store(0)
		return nil
	}
	for i, c := range linConfigs {
		if c.name() == name {
			forced.Store(int32(i + 1))
			return nil
		}
	}
	for i, c := range groupedConfigs {
		if c.groupedName() == name {
			forcedGrouped.Store(int32(i + 1))
			return nil
		}
	}
	if name == "generic" {
		forced.Store(-1)
		return nil
	}
	return status.Errorf(status.NotFound, "gpu: no configuration %q", name)
}

// ConfigNames lists the configurations ForceConfig accepts (besides "generic").
func ConfigNames() []string {
	names := make([]string, len(linConfigs))
	for i, c := range linConfigs {
		names[i] = c.name()
	}
	return names
}

// ConfigFor names the kernel Linear would run on device dev for w and rows
// tokens.
func ConfigFor(dev int, w *DeviceTensor, rows int) (string, error) {
	if !fusedWeight(w) || !fastPath(w, 0) || forced.Load() < 0 {
		return "glyd_lin_f12_generic", nil
	}
	d, err := load(dev)
	if err != nil {
		return "", err
	}
	return linConfigs[d.pick(rows, []*DeviceTensor{w}, w.Shape[1])].name(), nil
}

// SplitFor reports how Linear would split K on device dev for w and rows
// tokens: the blocks per output tile, and whether they run as a cluster
// (no workspace, no reduce launch; inClusters) — 1 and false for the
// generic kernel and the prompt path's cuBLAS.
func SplitFor(dev int, w *DeviceTensor, rows int) (splits int, clusters bool, err error) {
	if !fusedWeight(w) || !fastPath(w, 0) || forced.Load() < 0 || rows <= 0 {
		return 1, false, nil
	}
	d, err := load(dev)
	if err != nil {
		return 0, false, err
	}
	ci := d.pick(rows, []*DeviceTensor{w}, w.Shape[1])
	c := linConfigs[ci]
	if d.canRun(c, c.name()) != nil {
		return 1, false, nil
	}
	s, cluster := d.splitOf(ci, false, c.tilesOf(w.Shape[0]), w.Shape[1], rows)
	return int(s), cluster, nil
}

func fastPath(w *DeviceTensor, x uintptr) bool {
	k := w.Shape[len(w.Shape)-1]
	g := &w.Groups[0]
	sm := uint64(w.Planes[codec.PlaneSM]) + g.Offsets[codec.PlaneSM]
	cd := uint64(w.Planes[codec.PlaneCode]) + g.Offsets[codec.PlaneCode]
	return k%16 == 0 && sm%16 == 0 && cd%16 == 0 && uint64(x)%16 == 0
}

// maxSegments is the number of weights one dense launch multiplies
// (GLYD_MAX_SEGMENTS); LinearMany launches once per that many.
const maxSegments = int(C.GLYD_MAX_SEGMENTS)

// chunks splits the weights of a LinearMany call into the launches it
// makes: runs of at most maxSegments weights whose planes are all tiled or
// all row-major (glyd_kparams.tiled is the launch's).
func chunks(ws []*DeviceTensor) [][]*DeviceTensor {
	var out [][]*DeviceTensor
	for i := 0; i < len(ws); {
		j := i + 1
		for j < len(ws) && j-i < maxSegments && ws[j].Tiled == ws[i].Tiled {
			j++
		}
		out = append(out, ws[i:j])
		i = j
	}
	return out
}

// fusedWeight reports whether Linear can run w: fixed12, a 2-D matrix of one
// group (whether on the fast kernels or the generic one: fastPath).
func fusedWeight(w *DeviceTensor) bool {
	return w.Layout == codec.Fixed12 && len(w.Shape) == 2 && len(w.Groups) == 1
}

// LinearWorkspaceBound returns the workspace Linear needs for w and rows
// tokens, in bytes: the fp32 partial sums when K is split over blocks, else 0
// (also for weights Linear does not take).
func LinearWorkspaceBound(w *DeviceTensor, rows int) (uint64, error) {
	if err := w.validate(); err != nil {
		return 0, err
	}
	if !fusedWeight(w) {
		return 0, nil
	}
	return LinearManyWorkspaceBound([]*DeviceTensor{w}, rows)
}

// LinearManyWorkspaceBound returns the workspace LinearMany needs for ws and
// rows tokens, in bytes (its launches run in stream order and share it). It
// does not depend on the device: the largest of the Hopper choices (with the
// alternative device.pick may run instead) and the other choice.
func LinearManyWorkspaceBound(ws []*DeviceTensor, rows int) (uint64, error) {
	k, err := manyDims(ws)
	if err != nil {
		return 0, err
	}
	if rows <= 0 || forced.Load() < 0 || k%16 != 0 { // the generic kernel: no split
		return 0, nil
	}
	var need uint64
	for _, ch := range chunks(ws) {
		n := sumRows(ch)
		for _, hopper := range []bool{false, true} {
			ci := pickConfig(int64(rows), n, hopper)
			sp := smallPrompt(ci, rows, n)
			for _, cj := range []int{ci, alternative(ci, rows, hopper), sp, alternative(sp, rows, hopper)} {
				if cj < 0 {
					continue
				}
				c := linConfigs[cj]
				total, _ := c.workspace(n, k, int64(rows), c.splits(weightTiles(c, ch), k, int64(rows), wgmmaSlotsMax))
				need = max(need, total)
			}
		}
	}
	return need, nil
}

// manyDims checks the weights of a LinearMany call (each a fixed12 matrix of
// one group with its escape index when it has escapes, all of the same K, K a
// multiple of 16 when there are several) and returns K.
func manyDims(ws []*DeviceTensor) (int64, error) {
	if len(ws) == 0 {
		return 0, status.Errorf(status.InvalidArgument, "gpu: linear of no weights")
	}
	var k int64
	for i, w := range ws {
		if err := w.validate(); err != nil {
			return 0, err
		}
		if w.Layout != codec.Fixed12 {
			return 0, status.Errorf(status.Unsupported, "gpu: no fused kernel for layout %d yet; decode the weight then multiply", w.Layout)
		}
		if len(w.Shape) != 2 {
			return 0, status.Errorf(status.Unsupported, "gpu: linear weight must be 2-D, have %v", w.Shape)
		}
		if _, _, err := matrixDims(w); err != nil {
			return 0, err
		}
		if g := &w.Groups[0]; g.Escapes > 0 && w.EscRows == 0 {
			return 0, status.Errorf(status.InvalidArgument, "gpu: weight %d has %d escapes but no escape row index (BuildEscapeIndex)", i, g.Escapes)
		}
		if i == 0 {
			k = w.Shape[1]
		} else if w.Shape[1] != k {
			return 0, status.Errorf(status.InvalidArgument, "gpu: weight %d has K = %d, weight 0 K = %d: one input needs one K", i, w.Shape[1], k)
		}
	}
	if len(ws) > 1 && k%16 != 0 {
		return 0, status.Errorf(status.Unsupported, "gpu: several weights in one launch need K %% 16 == 0, have K = %d", k)
	}
	return k, nil
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sumRows(ws []*DeviceTensor) int64 {
	var n int64
	for _, w := range ws {
		n += w.Shape[0]
	}
	return n
}

func weightTiles(c linConfig, ws []*DeviceTensor) int64 {
	var t int64
	for _, w := range ws {
		t += c.tilesOf(w.Shape[0])
	}
	return t
}

// segment describes weight w (bias: device address or 0) to the dense
// kernels; ebase as escapeExponent, or 0 for the _safe kernels.
func segment(w *DeviceTensor, bias uintptr, ebase uint32) C.glyd_segment {
	p := groupParams(w, 0)
	var s C.glyd_segment
	s.sm, s.code = p.sm, p.code
	s.escrows, s.escrecs = w.escapeIndex(w.Shape[0])
	s.bias = C.glyd_u64(bias)
	s.N = C.glyd_i64(w.Shape[0])
	s.base = p.base
	s.ebase = C.glyd_u32(ebase)
	return s
}

// Linear computes y = x·Wᵀ (+ bias) on the caller's stream, decoding W inside
// the kernel:
//
//	x    bf16 [rows, K], contiguous      w    packed [N, K] (fixed12, one group)
//	bias bf16 [N] or 0                   y    bf16 [rows, N], contiguous
//
// The sum is in fp32; results are deterministic and within bf16 rounding of
// a bf16 matmul on the decoded weight. A tensor with escapes needs its escape
// row index (BuildEscapeIndex, w.EscRows). workspace/wsBytes: a device buffer
// of at least LinearWorkspaceBound bytes (may be 0 when the bound is 0).
func Linear(dev int, stream uintptr, x uintptr, rows int, w *DeviceTensor, bias, y, workspace uintptr, wsBytes uint64) error {
	return LinearMany(dev, stream, x, rows, []*DeviceTensor{w}, []uintptr{bias}, y, workspace, wsBytes)
}

// LinearMany computes y_i = x·W_iᵀ (+ bias_i) for weights W_i [N_i, K] of the
// same K (q, k and v of a layer; gate and up), in one launch per maxSegments
// weights instead of one per weight:
//
//	biases  one device address per weight (0: none), or nil for none
//	y       the outputs end to end: output i, bf16 [rows, N_i], at
//	        y + 2·rows·(N_0 + ... + N_{i-1})
//
// Math as Linear. The tile configuration (and so the summation order) is
// chosen for the weights of a launch together, so an output's bits may
// differ from Linear of its weight alone, within the same bf16 rounding.
// workspace: at least LinearManyWorkspaceBound bytes.
func LinearMany(dev int, stream uintptr, x uintptr, rows int, ws []*DeviceTensor, biases []uintptr, y, workspace uintptr, wsBytes uint64) error {
	k, err := manyDims(ws)
	if err != nil {
		return err
	}
	if biases == nil {
		biases = make([]uintptr, len(ws))
	} else if len(biases) != len(ws) {
		return status.Errorf(status.InvalidArgument, "gpu: %d biases for %d weights", len(biases), len(ws))
	}
	if rows < 0 {
		return status.Errorf(status.InvalidArgument, "gpu: rows %d < 0", rows)
	}
	if rows == 0 || sumRows(ws) == 0 {
		return nil
	}
	if x == 0 || y == 0 {
		return status.Errorf(status.InvalidArgument, "gpu: nil x or y")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	fast := forced.Load() >= 0 && k > 0
	for _, w := range ws {
		fast = fast && fastPath(w, x)
	}
	if !fast {
		// The generic kernel, one weight at a time (one weight: K not a
		// multiple of 16, or unaligned planes or x).
		for i, w := range ws {
			n := w.Shape[0]
			gy := (n + 3) / 4
			if gy > 65535 {
				return status.Errorf(status.Unsupported, "gpu: %d weight rows is too many for one launch", n)
			}
			if n > 0 {
				// the generic kernel decodes escapes as 0, as the _safe ones do
				p := manyParams(ws[i:i+1], biases[i:i+1], true, x, y, rows, k)
				if err := launch(dev, kLinGeneric, uint32((int64(rows)+7)/8), uint32(gy), 1, 128, 0, stream, &p); err != nil {
					return err
				}
			}
			y += uintptr(2 * int64(rows) * n)
		}
		return nil
	}
	b0 := 0
	for _, ch := range chunks(ws) {
		if err := d.linearLaunch(dev, stream, x, rows, k, ch, biases[b0:b0+len(ch)], y, workspace, wsBytes); err != nil {
			return err
		}
		b0 += len(ch)
		y += uintptr(2 * int64(rows) * sumRows(ch))
	}
	return nil
}

// linearLaunch is one launch of LinearMany (plus its split-K reduce): at
// most maxSegments weights, all on the fast path; one weight runs the
// single-weight kernel, several the _many one.
func (d *device) linearLaunch(dev int, stream uintptr, x uintptr, rows int, k int64, ws []*DeviceTensor, biases []uintptr, y, workspace uintptr, wsBytes uint64) error {
	n := sumRows(ws)
	ci := d.pick(rows, ws, k)
	c := linConfigs[ci]
	if err := d.canRun(c, c.name()); err != nil {
		return err
	}
	tiles := weightTiles(c, ws)
	gx := c.tokenTiles(int64(rows))
	if tiles > 65535 || gx > 1<<31-1 {
		return status.Errorf(status.Unsupported, "gpu: %d x %d is too large for one launch", rows, n)
	}
	// The _safe kernel when any weight needs it (its escapes decode as 0
	// for every weight of the launch).
	safe := false
	for _, w := range ws {
		safe = safe || escapeExponent(w.Groups[0].Base) == 0
	}
	p := manyParams(ws, biases, safe, x, y, rows, k)
	many := len(ws) > 1
	kidx := linKernel(ci, many, safe)
	s, cluster := d.splitOf(ci, many, tiles, k, rows)
	need, xpermAt := c.workspace(n, k, int64(rows), s)
	if need > 0 && (workspace == 0 || wsBytes < need) {
		return status.Errorf(status.BufferTooSmall, "gpu: linear needs %d bytes of workspace (LinearWorkspaceBound), have %d", need, wsBytes)
	}
	if c.Kind == linPrompt && workspace%16 != 0 { // the bulk copies read x's stage images from it
		return status.Errorf(status.InvalidArgument, "gpu: linear workspace must be 16-byte aligned for %d rows, is at %#x", rows, workspace)
	}
	cz := uint32(1) // blocks per cluster
	if cluster {
		cz = uint32(s)
		p.splits = C.glyd_u32(s) // p.ws stays 0: the splits meet in their cluster
	} else if s > 1 {
		splitK(&p, s, workspace)
	}
	// On sm_90 the fused kernels are programmatic dependent launches: their
	// blocks start in the previous kernel's tail and load their first
	// weights before they wait for it.
	pdl := d.programmatic()
	if c.Kind == linPrompt {
		// x as the stage images, first (a programmatic launch too).
		if err := launchXperm(dev, stream, &p, c.tokens(), workspace+uintptr(xpermAt), pdl); err != nil {
			return err
		}
	}
	if err := launchClusters(dev, kidx, uint32(gx), uint32(tiles), uint32(s), uint32(c.threads()), uint32(c.smem()), stream, &p, pdl, cz); err != nil {
		return err
	}
	if s > 1 && cz == 1 {
		if c.patchesEscapes() {
			withoutEscapes(&p)
		}
		return launchAs(dev, reduceKernel(many), reduceBlocks(rows, n), 1, 1, 256, 0, stream, &p, pdl)
	}
	return nil
}

// splitOf is how a launch of configuration ci (many: the _many kernel) over
// tiles weight tiles, K = k and rows tokens splits K: s blocks per output
// tile, and whether they run as a cluster. Linear's launches and SplitFor's
// report share it.
func (d *device) splitOf(ci int, many bool, tiles, k int64, rows int) (s int64, cluster bool) {
	c := linConfigs[ci]
	s = c.splits(tiles, k, int64(rows), d.occ[ci][boolIndex(many)]*d.info.SMs)
	return s, d.inClusters(ci, many, s, tiles*c.tokenTiles(int64(rows)))
}

// inClusters reports whether the s > 1 split-K blocks of each output tile
// of a launch of configuration ci (many: the _many kernel; ctas: tiles times
// token tiles) run as a cluster and add their partial sums in each other's
// shared memory (kernels/linear.cu, block_epilogue's CLUSTER): no workspace
// traffic and no reduce launch. Only where every cluster fits on the GPU at
// once: one cluster launched after the others finish doubles the time, and
// GPCs leave slots no cluster of 3 or more can use (on the H200 62 clusters
// of 4 fit where 264 single blocks do; session 17).
func (d *device) inClusters(ci int, many bool, s, ctas int64) bool {
	return s > 1 && linConfigs[ci].Clusters && ctas <= int64(d.clusters[ci][boolIndex(many)][s])
}

// withoutEscapes makes the split-K reduce of p add no escape corrections.
func withoutEscapes(p *C.glyd_kparams) {
	p.escrows = 0
	for i := range p.seg {
		p.seg[i].escrows = 0
	}
}

// reduceKernel is the split-K reduce of a launch of one weight or several.
func reduceKernel(many bool) int {
	if many {
		return kLinReduceMany
	}
	return kLinReduce
}

// manyParams is the parameter block of a dense launch of the weights ws
// (LinearMany; safe: the _safe kernels, escapes decoded as 0), one split.
func manyParams(ws []*DeviceTensor, biases []uintptr, safe bool, x, y uintptr, rows int, k int64) C.glyd_kparams {
	var p C.glyd_kparams
	for i, w := range ws {
		eb := uint32(0)
		if !safe {
			eb = escapeExponent(w.Groups[0].Base)
		}
		p.seg[i] = segment(w, biases[i], eb)
	}
	p.nseg = C.glyd_u32(len(ws))
	// K / 64 when tiled, the same for every weight of a launch (chunks)
	p.tiled = C.glyd_u32(ws[0].kblocks())
	if len(ws) == 1 { // the single-weight kernels read the weight's fields directly
		sg := &p.seg[0]
		p.sm, p.code, p.escrows, p.escrecs, p.bias = sg.sm, sg.code, sg.escrows, sg.escrecs, sg.bias
		p.base, p.ebase = sg.base, sg.ebase
	}
	p.x, p.y = C.glyd_u64(x), C.glyd_u64(y)
	p.rows, p.N, p.K, p.splits = C.glyd_i64(rows), C.glyd_i64(sumRows(ws)), C.glyd_i64(k), 1
	return p
}

// splitK makes p a launch of splits blocks per output tile writing their
// partial sums to workspace, which glyd_lin_reduce then adds.
func splitK(p *C.glyd_kparams, splits int64, workspace uintptr) {
	p.splits = C.glyd_u32(splits)
	p.ws = C.glyd_u64(workspace)
}

// launchXperm lays the x of p out at dst as the stage images of a prompt
// configuration's token tiles of tb tokens (glyd_lin_xperm_t{tb}) and
// leaves p.dst = dst for the tile kernel.
func launchXperm(dev int, stream uintptr, p *C.glyd_kparams, tb int, dst uintptr, pdl bool) error {
	p.dst = C.glyd_u64(dst)
	return launchAs(dev, xpermKernel(tb), xpermBlocks(int(p.rows), int64(p.K), tb), 1, 1, 256, 0, stream, p, pdl)
}

// xpermKernel is the kernel index of glyd_lin_xperm_t{tb} (tb 64, 128 or
// 256: the prompt configurations' token tiles).
func xpermKernel(tb int) int { return kLinXperm + bits.TrailingZeros(uint(tb)) - 6 }

// xpermBlocks is the grid of glyd_lin_xperm_t{tb}: a thread per 16
// activations of the padded stage images, at most 8 blocks of 256 per SM of
// a large GPU (the kernel strides over the rest).
func xpermBlocks(rows int, k int64, tb int) uint32 {
	items := (int64(rows) + int64(tb) - 1) / int64(tb) * int64(tb) * ((k + 63) / 64) * 4
	return gridFor(uint64(items), 256, 8*132)
}

// reduceBlocks is the grid of glyd_lin_reduce: one thread per output.
func reduceBlocks(rows int, n int64) uint32 { return uint32((int64(rows)*n + 255) / 256) }
