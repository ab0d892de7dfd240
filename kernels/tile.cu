/*
 * tile.cu — fixed12 planes to and from the tiled arrangement that the fused
 * kernels read in longer runs (kernels/common.cuh, plane_index;
 * docs/FORMAT.md, "Planes on the GPU").
 *
 * glyd_tile_bytes: one plane of p.N rows of p.K bytes (the sm plane: K bytes
 *   per row; the code plane: K / 2) in tiles of 16 rows x p.n bytes (64 for
 *   sm, 32 for code): from the row-major plane at p.sm to the tiled one at
 *   p.dst (p.rows == 0), or back (p.rows == 1). A 16-byte copy per thread,
 *   grid-stride. The host checks p.N % 16 == 0, p.K % p.n == 0, p.n % 16 ==
 *   0 and 16-byte aligned planes that do not overlap.
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) glyd_tile_bytes(const glyd_kparams p) {
	const uint64_t RB = (uint64_t)p.K, W = p.n, per_row = RB / 16, units = (uint64_t)p.N * per_row;
	const uint8_t *src = (const uint8_t *)p.sm;
	uint8_t *dst = (uint8_t *)p.dst;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t v = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; v < units; v += stride) {
		const uint64_t r = v / per_row, c = (v - r * per_row) * 16; // row, byte in the row
		const uint64_t at = ((r >> 4) * (RB / W) + c / W) * 16 * W + (r & 15) * W + c % W;
		const uint64_t from = p.rows ? at : v * 16, to = p.rows ? v * 16 : at;
		*(uint4 *)(dst + to) = *(const uint4 *)(src + from);
	}
}
