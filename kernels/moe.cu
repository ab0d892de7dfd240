/*
 * moe.cu — kernels over every expert of a packed experts tensor at once.
 *
 * An experts tensor is packed with one group per expert (fixed12). The host
 * builds its experts table once (core/gpu/moe.go): p.experts = glyd_expert
 * [E] in device memory (each expert's sm/code planes, escape planes, escape
 * row index, base and the exponent the fused kernel gives escapes). The
 * kernels read it, so one launch covers all experts and the routing never
 * goes through the host (CUDA graphs capture a whole MoE block).
 *
 * glyd_decode_f12_groups   grid (X, E): blockIdx.y = expert, decodes its
 *                          p.n elements to p.dst + expert * p.n (bf16), the
 *                          loop of glyd_decode_f12_vec (decode_f12_span).
 *                          Preconditions as glyd_decode_f12_vec, per expert.
 * glyd_escape_scatter_groups grid (X, E): the escapes of each expert, as
 *                          glyd_escape_scatter. Launched after the decode.
 * glyd_lin_f12g_m1n1w1k8u1[_safe]  the grouped fused linear:
 *     x [rows, K] and y [rows, N] hold the rows sorted by expert; p.offs =
 *     int32 [E] cumulative end rows (torch grouped_mm's offsets), clamped to
 *     [0, rows] here so that bad offsets cannot fault. Grid (1, ceil(N/16),
 *     Z = min(E, rows)); block z takes the z-th expert that has rows (warp 0
 *     scans p.offs with ballots, all loads issued first), points a copy of
 *     the parameters at that expert (planes, escape index, base, ebase, bias
 *     row, x and y rows) and runs the tile code of linear.cu (linear_f12,
 *     m1n1w1k8u1: 16 weight rows, 8 warps splitting K) for its rows, 8 at a
 *     time. Blocks past the last expert with rows return at once. Needs
 *     K % 16 == 0, every expert's sm and code 16-byte aligned, x too (the
 *     host checks). p.bias: bf16 [E, N] or 0.
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256, 3) glyd_decode_f12_groups(const glyd_kparams p) {
	const glyd_expert ex = ((const glyd_expert *)p.experts)[blockIdx.y];
	decode_f12_span((const uint8_t *)ex.sm, (const uint8_t *)ex.code, (uint16_t *)p.dst + blockIdx.y * p.n, p.n,
	                ex.base);
}

extern "C" __global__ void __launch_bounds__(256) glyd_escape_scatter_groups(const glyd_kparams p) {
	const glyd_expert ex = ((const glyd_expert *)p.experts)[blockIdx.y];
	const uint8_t *sm = (const uint8_t *)ex.sm;
	const uint32_t *escidx = (const uint32_t *)ex.escidx;
	const uint8_t *escexp = (const uint8_t *)ex.escexp;
	uint16_t *dst = (uint16_t *)p.dst + blockIdx.y * p.n;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < ex.escapes; e += stride) {
		const uint64_t i = escidx[e];
		if (i < p.n) dst[i] = bf16_bits(sm[i], escexp[e]);
	}
}

// The z-th expert (0-based) that has rows, with its rows [*r0, *r1); -1 if
// fewer experts have rows. Warp-wide (every lane returns the same). Each pass
// issues the loads of 32*CH offsets before using any.
__device__ __forceinline__ int64_t nth_expert(const int32_t *offs, int64_t E, int64_t R, int64_t z, int64_t *r0,
                                              int64_t *r1) {
	constexpr int CH = 8;
	const int lane = threadIdx.x & 31;
	int64_t carry = 0; // clamped end row of the expert before this pass
	for (int64_t b0 = 0; b0 < E; b0 += 32 * CH) {
		int32_t v[CH];
#pragma unroll
		for (int j = 0; j < CH; j++) {
			const int64_t e = b0 + 32 * j + lane;
			v[j] = e < E ? offs[e] : 0;
		}
#pragma unroll
		for (int j = 0; j < CH; j++) {
			const int64_t e = b0 + 32 * j + lane;
			const int64_t end = v[j] < 0 ? 0 : (v[j] > R ? R : v[j]);
			int64_t beg = __shfl_up_sync(0xffffffffu, end, 1);
			if (lane == 0) beg = carry;
			carry = __shfl_sync(0xffffffffu, end, 31);
			uint32_t m = __ballot_sync(0xffffffffu, e < E && end > beg);
			const int c = __popc(m);
			if (z < c) {
				for (int64_t i = 0; i < z; i++) m &= m - 1;
				const int src = __ffs(m) - 1;
				*r0 = __shfl_sync(0xffffffffu, beg, src);
				*r1 = __shfl_sync(0xffffffffu, end, src);
				return b0 + 32 * j + src;
			}
			z -= c;
		}
	}
	return -1;
}

template <bool SAFE>
__device__ __forceinline__ void linear_f12_experts(const glyd_kparams &p, float *smem) {
	__shared__ int64_t pick[3];
	if (threadIdx.x < 32) {
		int64_t r0 = 0, r1 = 0;
		const int64_t e = nth_expert((const int32_t *)p.offs, p.num_experts, p.rows, blockIdx.z, &r0, &r1);
		if (threadIdx.x == 0) {
			pick[0] = e;
			pick[1] = r0;
			pick[2] = r1;
		}
	}
	__syncthreads();
	const int64_t e = pick[0], r0 = pick[1], r1 = pick[2];
	if (e < 0) return;
	const glyd_expert ex = ((const glyd_expert *)p.experts)[e];
	glyd_kparams q = p;
	q.sm = ex.sm;
	q.code = ex.code;
	q.escrows = ex.escrows;
	q.escrecs = ex.escrecs;
	q.base = ex.base;
	q.ebase = ex.ebase;
	q.x = p.x + (glyd_u64)r0 * (glyd_u64)p.K * 2u;
	q.y = p.y + (glyd_u64)r0 * (glyd_u64)p.N * 2u;
	q.bias = p.bias ? p.bias + (glyd_u64)e * (glyd_u64)p.N * 2u : 0;
	q.rows = r1 - r0;
	q.splits = 1;
	for (int64_t mt = 0; mt * 8 < q.rows; mt++) linear_f12<1, 1, 1, 8, 1, SAFE>(q, smem, mt, blockIdx.y, 0);
}

extern "C" __global__ void __launch_bounds__(256) glyd_lin_f12g_m1n1w1k8u1(const glyd_kparams p) {
	extern __shared__ float smem[];
	linear_f12_experts<false>(p, smem);
}
extern "C" __global__ void __launch_bounds__(256) glyd_lin_f12g_m1n1w1k8u1_safe(const glyd_kparams p) {
	extern __shared__ float smem[];
	linear_f12_experts<true>(p, smem);
}
