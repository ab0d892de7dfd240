/*
 * linear.cu — y = x · Wᵀ (+ bias) with W read packed (fixed12) and decoded in
 * registers straight into tensor-core fragments. W is never written to memory
 * as bf16.
 *
 * Contract
 *   x    bf16 [R, K] row-major, contiguous (row stride K); R = p.rows >= 1
 *   W    fixed12 packed [N, K], ONE group (G = 1), planes sm/code/escidx/escexp,
 *        element (n, k) is element n*K + k of the group
 *   bias bf16 [N] or 0;  y bf16 [R, N] row-major, contiguous (row stride N)
 *   escrows: uint32 [N+1] from glyd_escape_rows (decode.cu), or 0 when the
 *        group has no escapes.
 *   Math: y[m][n] = bf16_rn( sum_k x[m][k] * W[n][k] + bias[n] ), the sum in
 *   fp32 (tensor-core order, then the split-K partial sums added in a fixed
 *   order): deterministic, and within bf16 rounding of a bf16 matmul.
 *
 * Kernels glyd_lin_f12_m{MT}n{NT}w{WN}k{WK}u{U}[_safe]
 *   Block = WN*WK warps. The block owns ROWS = 16*MT*WN weight rows
 *   (blockIdx.y) and TB = 8*NT tokens (blockIdx.x; tokens vary fastest so the
 *   blocks that share a weight tile run together and hit L2 in prefill).
 *   Warp (wn, wk) owns 16*MT rows and every WK-th 64-wide k-block; it keeps
 *   2*U k-blocks of weights in flight per lane (MT*2*24 bytes each: a software
 *   pipeline loads the next U while the current U are decoded and multiplied).
 *   mma.sync.m16n8k16 with the WEIGHTS as operand A (16 rows) and the tokens as
 *   operand B (8 columns): at 1..8 tokens only the token dimension is padded.
 *   K order inside a 64-block is permuted (the dot product does not care, as
 *   long as A and B agree): lane (g = lane/4, t = lane%4) holds k = 16t..16t+15
 *   of rows g and g+8, i.e. ONE 16-byte sm load + ONE 8-byte code load per row,
 *   decoded into the pairs (0,4) (2,6) (1,5) (3,7) (8,12) (10,14) (9,13) (11,15)
 *   which feed the 4 mma k-steps; the activations are permuted the same way with
 *   one prmt per register.
 *   Dynamic shared memory = (align4(ROWS+1) + max((WK/2)*ROWS*TB, TB*(ROWS+1))) * 4
 *   bytes: the escape ranges of the block's rows, the tree reduction of the
 *   WK warps, then the [TB][ROWS+1] output tile.
 *   Split-K over blocks (p.splits > 1, gridDim.z = splits): each block sums
 *   its share of the k-blocks and writes fp32 partials to p.ws [splits][R][N];
 *   glyd_lin_reduce (same stream, next launch) adds them in split order and
 *   finishes. Used when N/ROWS blocks alone would leave SMs idle. The sm_90
 *   prompt tiles of 64 and 256 tokens, where the clusters fit on the GPU at
 *   once, are launched in clusters of their splits with p.ws = 0 instead and
 *   add the partials in each other's shared memory, in the same order
 *   (block_epilogue's CLUSTER): no workspace traffic, no second launch.
 *   Epilogue per output: escape corrections of its weight row (the fast decode
 *   gives code 15 the exponent base+15, or 0 in _safe; the epilogue adds
 *   x*(w_true - w_decoded) in list order), bias, round to bf16, store.
 *   Preconditions (host checks, else glyd_lin_f12_generic): K % 16 == 0;
 *   sm, code, x 16-byte aligned. _safe variants: base + 15 >= 255 (the
 *   escape value must not be Inf/NaN or carry into the next byte).
 *   Several weights of the same K, one launch (the _many kernels;
 *   glyd_kparams.seg, nseg <= GLYD_MAX_SEGMENTS): blockIdx.y runs over the
 *   weight tiles of each in turn and every block takes its weight's fields
 *   (segment_tile); each weight's output is its own contiguous [R, N_i].
 *   q/k/v or gate/up of a layer are one launch instead of three or two. The
 *   split-K reduce takes its outputs' weights the same way (segment_of).
 *
 * glyd_lin_f12_generic: any K and alignment; one warp per (weight row, 8
 *   tokens), 4 warps per block; grid (ceil(R/8), ceil(N/4)). Slow, exact same
 *   math contract.
 *
 * Decode cost in the fast kernels: per 8 weights 2x(and, add) for the codes,
 * then per pair prmt + shift + lop3: ~2.1 integer ops per weight.
 */
#include "common.cuh"
#include "wgmma.cuh"
#include <cuda_bf16.h>

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
	// Not volatile: the compiler may move independent activation loads
	// above earlier mma's (a volatile asm would pin the program order).
	asm(
	    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The exponents of 8 weights from their 4-bit codes (one 32-bit code word):
// ca = elements 0 2 4 6 in bytes 0..3, cb = elements 1 3 5 7, each code + base
// (code 15: base + 15, or 0 when SAFE).
template <bool SAFE>
__device__ __forceinline__ void code_bytes(const uint32_t cw, const uint32_t B4, uint32_t &ca, uint32_t &cb) {
	ca = cw & 0x0f0f0f0fu;
	cb = (cw >> 4) & 0x0f0f0f0fu;
	if (SAFE) {
		ca = __vadd4(ca, B4) & __vcmpne4(ca, 0x0f0f0f0fu);
		cb = __vadd4(cb, B4) & __vcmpne4(cb, 0x0f0f0f0fu);
	} else {
		ca += B4; // no carry between bytes: base + 15 <= 254 here
		cb += B4;
	}
}

// 8 weights (sm bytes s0 = elements 0..3, s1 = 4..7, one code word) -> 4
// bf16x2 words W[0..3] in the pair order (0,4) (2,6) (1,5) (3,7): the order in
// which each pair's two exponents sit 16 bits apart in ca or cb, so one shift
// places both.
template <bool SAFE>
__device__ __forceinline__ void decode8(const uint32_t s0, const uint32_t s1, const uint32_t cw, const uint32_t B4,
                                        uint32_t *W) {
	uint32_t ca, cb;
	code_bytes<SAFE>(cw, B4, ca, cb);
	W[0] = lop3_sel(prmt_sr(s0, s1, 0xC480), ca << 7); // (0,4)
	W[1] = lop3_sel(prmt_sr(s0, s1, 0xE6A2), ca >> 1); // (2,6)
	W[2] = lop3_sel(prmt_sr(s0, s1, 0xD591), cb << 7); // (1,5)
	W[3] = lop3_sel(prmt_sr(s0, s1, 0xF7B3), cb >> 1); // (3,7)
}

// 16 weights of one row (16 sm bytes, 8 code bytes) -> 8 bf16x2 words in the
// pair order (0,4) (2,6) (1,5) (3,7) (8,12) (10,14) (9,13) (11,15).
template <bool SAFE>
__device__ __forceinline__ void decode16(const uint4 s, const uint2 c, const uint32_t B4, uint32_t (&W)[8]) {
	decode8<SAFE>(s.x, s.y, c.x, B4, W);
	decode8<SAFE>(s.z, s.w, c.y, B4, W + 4);
}

// 16 activations (a = elements 0..7, b = 8..15) in decode16's pair order
// (0,4) (2,6) (1,5) (3,7) (8,12) (10,14) (9,13) (11,15), the order in
// which decode16 gives a row's weights: the mma.sync B fragments, and the
// words of a wgmma stage item (word i goes to logical k 8i + 2t of the
// stage, so wgmma k-step s reads logical k 16s..16s+15).
__device__ __forceinline__ void permute_x16(const uint4 a, const uint4 b, uint32_t (&w)[8]) {
	w[0] = __byte_perm(a.x, a.z, 0x5410);
	w[1] = __byte_perm(a.y, a.w, 0x5410);
	w[2] = __byte_perm(a.x, a.z, 0x7632);
	w[3] = __byte_perm(a.y, a.w, 0x7632);
	w[4] = __byte_perm(b.x, b.z, 0x5410);
	w[5] = __byte_perm(b.y, b.w, 0x5410);
	w[6] = __byte_perm(b.x, b.z, 0x7632);
	w[7] = __byte_perm(b.y, b.w, 0x7632);
}

// The escape correction of one output: v + x*(w_true - w_decoded) for the
// escape record r (k, true bf16 bits) of its row, whose weight the kernel
// decoded with exponent ebase.
__device__ __forceinline__ float add_escape(float v, float xv, uint32_t bits, uint32_t ebase) {
	const float wt = bf16_to_f32(bits);
	const float wd = bf16_to_f32((bits & 0x807fu) | (ebase << 7));
	return fmaf(xv, wt, fmaf(-xv, wd, v));
}

// Epilogue of one output (the split-K reduce, the generic kernel): v = the
// fp32 sum of output (m, n) with the escapes of row n taken as decoded with
// exponent p.ebase; e0/e1 = the row's range in the escape list. Returns the
// bf16 bits.
__device__ __forceinline__ uint16_t finish(const glyd_kparams &p, int64_t m, int64_t n, float v, uint32_t e0,
                                           uint32_t e1) {
	const uint16_t *x = (const uint16_t *)p.x;
	const uint2 *rec = (const uint2 *)p.escrecs;
	for (uint32_t e = e0; e < e1; e++) {
		const uint2 r = rec[e];
		v = add_escape(v, bf16_to_f32(x[m * p.K + r.x]), r.y, p.ebase);
	}
	if (p.bias) v += bf16_to_f32(((const uint16_t *)p.bias)[n]);
	return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ __forceinline__ uint32_t ld_u32(const void *p) {
	uint32_t v;
	asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
}
// One record of the escape index into r (immutable: the non-coherent path).
__device__ __forceinline__ void ld_record(uint2 &r, const uint2 *p) {
	asm("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
}

template <int MT, int U>
struct WBatch {
	uint4 s[U][MT][2];
	uint2 c[U][MT][2];
};

// Whether a tile finishes 4 outputs per step (block_epilogue's VEC). Measured
// on the H200 against one output per step: the prompt tiles 5-8% faster
// (table 1, 128-512 tokens, session 12), the 64-token wgmma tile 2% (o 9%,
// down 4%; session 13); slower are the 1-32-token tiles (1 token 0.786 ->
// 0.86, session 12) and the grouped experts tiles of 64 and 128 tokens (MoE
// blocks at 512 tokens 8-12%, session 13). core/gpu/linear.go (smem) knows.
template <int TB, bool DENSE> struct vec_epilogue { static constexpr bool value = DENSE && TB >= 64; };

// The sum, in split order, of the partial sums at shared address addr in
// the blocks of a cluster of S (block z holds split z; S <= 8): the sum
// glyd_lin_reduce makes of the same partials, bit for bit.
__device__ __forceinline__ float4 cluster_sum16(uint32_t addr, uint32_t S) {
	float4 a[8];
#pragma unroll
	for (uint32_t z = 0; z < 8; z++)
		if (z < S) a[z] = ld_cluster16(cluster_map(addr, z));
	float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
	for (uint32_t z = 0; z < 8; z++)
		if (z < S) {
			v.x += a[z].x;
			v.y += a[z].y;
			v.z += a[z].z;
			v.w += a[z].w;
		}
	return v;
}
// Whether a dense launch's split-K blocks are in clusters (their partial
// sums meet in shared memory, block_epilogue's CLUSTER; core/gpu/linear.go,
// inClusters) rather than in the workspace p.ws.
__device__ __forceinline__ bool cluster_launch(const glyd_kparams &p) { return p.splits > 1 && !p.ws; }

// The first escape record of the row of this thread's first item in
// block_epilogue's one-row-per-item path (row = threadIdx.x % rows of the
// tile), loaded during the k loop so that the epilogue's first correction of
// the row waits for its activations only (two dependent round trips at the
// tile's end before). start() before griddep_wait (the index is immutable);
// fetch() right after it, where reading the range waits on nothing the
// first k-block does not (a read inside the k loop would wait for the weight
// loads in flight too: session 19). r.x = ~0: none.
struct FirstEscape {
	uint32_t e0 = 0, e1 = 0;
	uint2 r = make_uint2(~0u, 0u);
	__device__ __forceinline__ void start(const glyd_kparams &p, int64_t n) {
		if (p.splits == 1 && p.escrows && n < p.N) {
			e0 = ld_u32((const uint32_t *)p.escrows + n);
			e1 = ld_u32((const uint32_t *)p.escrows + n + 1);
		}
	}
	__device__ __forceinline__ void fetch(const glyd_kparams &p) {
		if (e0 < e1) ld_record(r, (const uint2 *)p.escrecs + e0);
	}
};

// Block epilogue shared by the kernels: reduce the WK warps' accumulators
// (tree, fixed order), then write the tile and either finish the
// outputs (escapes, bias, bf16) or store the split-K partials of split
// split_z. srows holds the escape ranges of the block's rows. Ends with the
// block in sync.
// CLUSTER (the sm_90 prompt tiles launched in clusters of their p.splits > 1
// blocks along z, p.ws = 0: cluster_launch): the splits add their tiles in
// shared memory instead — block z finishes the z-th slice of the tile's
// outputs from the sum of every block's tile. A separate instantiation: the
// run-time choice inside one epilogue made the 128-token tile 3-5% slower
// without clusters (session 17).
template <int MT, int NT, int WN, int WK, bool SAFE, bool VEC, bool CLUSTER = false>
__device__ __forceinline__ void block_epilogue(const glyd_kparams &p, float *red, const uint32_t *srows,
                                               float (&acc)[MT][NT][4], int64_t n0, int64_t m0,
                                               uint32_t split_z, const FirstEscape &first = FirstEscape()) {
	constexpr int ROWS = 16 * MT * WN, TB = 8 * NT, FR = MT * NT * 4;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wn = warp % WN, wk = warp / WN;
	const int g = lane >> 2, t = lane & 3;
	const int64_t N = p.N, R = p.rows;
	const uint32_t S = p.splits;
	const bool split = S > 1 && !CLUSTER; // partial sums to p.ws for glyd_lin_reduce
	static_assert(VEC || !CLUSTER, "clusters finish 4 outputs per step");
	// Split-K reduction across the WK warps of a row slice: a tree in a fixed
	// order (deterministic), through shared memory in fragment order.
	if (WK > 1) {
#pragma unroll
		for (int hh = WK / 2; hh >= 1; hh >>= 1) {
			if (wk >= hh && wk < 2 * hh) {
				float *b = red + (size_t)((wk - hh) * WN + wn) * FR * 32;
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int nt = 0; nt < NT; nt++)
#pragma unroll
						for (int i = 0; i < 4; i++) b[((mt * NT + nt) * 4 + i) * 32 + lane] = acc[mt][nt][i];
			}
			__syncthreads();
			if (wk < hh) {
				const float *b = red + (size_t)(wk * WN + wn) * FR * 32;
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int nt = 0; nt < NT; nt++)
#pragma unroll
						for (int i = 0; i < 4; i++) acc[mt][nt][i] += b[((mt * NT + nt) * 4 + i) * 32 + lane];
			}
			__syncthreads();
		}
	}
	// VEC (the dense tiles of 64 tokens or more, vec_epilogue): 4 consecutive
	// outputs of one token per item, one 16-byte load from a [TB][ROWS+4]
	// tile (rows 16-byte aligned; the fragment stores conflict-free, 2 * LD =
	// 8 mod 32 banks) and one 8-byte store of y (one 16-byte store of fp32
	// partials), scalar where N or the pointers do not allow. Else one output
	// per step from a [TB][ROWS+1] tile.
	constexpr int LD = VEC ? ROWS + 4 : ROWS + 1;
	float *tile = red;
	if (wk == 0) {
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int nt = 0; nt < NT; nt++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const int row = wn * 16 * MT + mt * 16 + g + 8 * (i >> 1);
					const int tok = nt * 8 + 2 * t + (i & 1);
					tile[tok * LD + row] = acc[mt][nt][i];
				}
	}
	if (CLUSTER)
		cluster_sync(); // every split's tile is written
	else
		__syncthreads();
	const uint32_t tile_s = (uint32_t)__cvta_generic_to_shared(tile);
	if (VEC) {
		const uint16_t *x = (const uint16_t *)p.x;
		const uint2 *rec = (const uint2 *)p.escrecs;
		uint16_t *y = (uint16_t *)p.y;
		const uint16_t *bias = (const uint16_t *)p.bias;
		float *ws = (float *)p.ws + (size_t)split_z * (size_t)R * (size_t)N;
		const bool vec = N % 4 == 0 && (split ? p.ws % 16 == 0 : p.y % 8 == 0 && p.bias % 8 == 0);
		// CLUSTER: this block's slice of the items, the split_z-th of S
		constexpr int ITEMS = TB * (ROWS / 4);
		const int it0 = CLUSTER ? (int)(split_z * ITEMS / S) : 0;
		const int it1 = CLUSTER ? (int)((split_z + 1) * ITEMS / S) : ITEMS;
		for (int item = it0 + threadIdx.x; item < it1; item += blockDim.x) {
			const int r4 = (item % (ROWS / 4)) * 4, tok = item / (ROWS / 4);
			const int64_t n = n0 + r4, m = m0 + tok;
			if (n >= N || m >= R) continue;
			const float4 a = CLUSTER ? cluster_sum16(tile_s + 4 * (tok * LD + r4), S)
			                      : *(const float4 *)&tile[tok * LD + r4];
			float v[4] = {a.x, a.y, a.z, a.w};
			const bool full = vec && n + 4 <= N;
			if (split) { // partial sums of this split; glyd_lin_reduce finishes them
				if (full) {
					*(float4 *)&ws[m * N + n] = a;
				} else {
#pragma unroll
					for (int j = 0; j < 4; j++)
						if (n + j < N) ws[m * N + n + j] = v[j];
				}
				continue;
			}
			// finish(): escape corrections in record order, then the bias
			if (p.escrows) {
#pragma unroll
				for (int j = 0; j < 4; j++) {
					const uint32_t e1 = n + j < N ? srows[r4 + j + 1] : 0u;
					for (uint32_t e = srows[r4 + j]; e < e1; e++) {
						const uint2 r = rec[e];
						v[j] = add_escape(v[j], bf16_to_f32(x[m * p.K + r.x]), r.y, p.ebase);
					}
				}
			}
			if (full) {
				uint2 b2 = make_uint2(0, 0);
				if (bias) b2 = *(const uint2 *)&bias[n];
				const uint32_t bb[4] = {b2.x & 0xffffu, b2.x >> 16, b2.y & 0xffffu, b2.y >> 16};
				uint32_t o[4];
#pragma unroll
				for (int j = 0; j < 4; j++)
					o[j] = __bfloat16_as_ushort(__float2bfloat16_rn(bias ? v[j] + bf16_to_f32(bb[j]) : v[j]));
				*(uint2 *)&y[m * N + n] = make_uint2(o[0] | o[1] << 16, o[2] | o[3] << 16);
			} else { // escapes are in v already: finish() adds the bias and rounds
#pragma unroll
				for (int j = 0; j < 4; j++)
					if (n + j < N) y[m * N + n + j] = finish(p, m, n + j, v[j], 0u, 0u);
			}
		}
	} else if (split) {
		// Partial sums of this split; glyd_lin_reduce finishes them.
		float *ws = (float *)p.ws + (size_t)split_z * (size_t)R * (size_t)N;
		for (int idx = threadIdx.x; idx < ROWS * TB; idx += blockDim.x) {
			const int row = idx % ROWS, tok = idx / ROWS;
			const int64_t n = n0 + row, m = m0 + tok;
			if (n < N && m < R) ws[m * N + n] = tile[tok * LD + row];
		}
	} else {
		// finish() of every output, TG tokens of one row per item: the
		// row's escape records are read once per item and the TG
		// activations of each record are loaded together (one round trip
		// per record, not two dependent ones per output: at 64 tokens the
		// per-output form took a quarter of the kernel's warp time). Same
		// operations in the same order per output as finish(), so the same
		// bits. TG = 8: 16 would cost t16k1s4u4p2 17 registers (a block
		// per SM); 1 for tiles of 8 tokens (1..8-token steps: one real
		// token, the grouped form measured 4% slower there).
		constexpr int TG = TB > 8 ? 8 : 1;
		const uint16_t *x = (const uint16_t *)p.x;
		const uint2 *rec = (const uint2 *)p.escrecs;
		uint16_t *y = (uint16_t *)p.y;
		for (int item = threadIdx.x; item < ROWS * (TB / TG); item += blockDim.x) {
			const int row = item % ROWS, tok0 = item / ROWS * TG;
			const int64_t n = n0 + row;
			if (n >= N || m0 + tok0 >= R) continue;
			float v[TG];
#pragma unroll
			for (int j = 0; j < TG; j++) v[j] = tile[(tok0 + j) * LD + row];
			const uint32_t e1 = p.escrows ? srows[row + 1] : 0u;
			uint32_t e = p.escrows ? srows[row] : 0u;
			auto correct = [&](const uint2 r) {
				float xv[TG];
#pragma unroll
				for (int j = 0; j < TG; j++) {
					const int64_t m = m0 + tok0 + j;
					xv[j] = m < R ? bf16_to_f32(x[m * p.K + r.x]) : 0.f;
				}
#pragma unroll
				for (int j = 0; j < TG; j++) v[j] = add_escape(v[j], xv[j], r.y, p.ebase);
			};
			if (item == (int)threadIdx.x && first.r.x != ~0u && e < e1) { // first = rec[e]
				correct(first.r);
				e++;
			}
			for (; e < e1; e++) correct(rec[e]);
			const float b = p.bias ? bf16_to_f32(((const uint16_t *)p.bias)[n]) : 0.f;
#pragma unroll
			for (int j = 0; j < TG; j++) {
				const int64_t m = m0 + tok0 + j;
				if (m < R) y[m * N + n] = __bfloat16_as_ushort(__float2bfloat16_rn(p.bias ? v[j] + b : v[j]));
			}
		}
	}
	if (CLUSTER)
		cluster_sync(); // no block leaves while the others read its tile
	else
		__syncthreads(); // red/srows are reused by the next tile
}

// One tile of the output: weight rows [ntile*ROWS, +ROWS), tokens
// [mtile*TB, +TB), the k-blocks of split split_z of p.splits. The kernels
// below pass their block indices; the experts kernel (moe.cu) its own.
template <int MT, int NT, int WN, int WK, int U, bool SAFE, bool DEP = false>
__device__ __forceinline__ void linear_f12(const glyd_kparams &p, float *smem, int64_t mtile, int64_t ntile,
                                           uint32_t split_z) {
	constexpr int ROWS = 16 * MT * WN, TB = 8 * NT;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int wn = warp % WN, wk = warp / WN;
	const int g = lane >> 2, t = lane & 3;
	const int64_t N = p.N, K = p.K, R = p.rows;
	const int64_t n0 = ntile * ROWS;
	const int64_t m0 = mtile * TB;
	const int64_t KB = (K + 63) >> 6;
	// This block's k-blocks: [kb_lo, kb_hi) of split split_z.
	const int64_t kb_lo = KB * split_z / p.splits, kb_hi = KB * (split_z + 1) / p.splits;
	const uint8_t *sm = (const uint8_t *)p.sm;
	const uint8_t *code = (const uint8_t *)p.code;
	const uint16_t *x = (const uint16_t *)p.x;
	const uint32_t B4 = p.base * 0x01010101u;
	uint32_t *srows = (uint32_t *)(smem + 0); // escape ranges of the block's rows, [ROWS+1]
	float *red = smem + ((ROWS + 1 + 3) & ~3);

	// Row pointers of this lane, computed once and pinned: without the pin
	// the compiler recomputed them (clamps, 64-bit multiplies) in the k loop,
	// ~130 of its ~300 instructions per k-block at 32 tokens (SASS, sm_90a).
	// Rows past N or R read row N-1 or R-1 instead: their results are never
	// stored, and each output depends on its own weight row and token only.
	// Row-major or tiled planes (p.tiled): k-block kb of a row is kb * KS
	// bytes of sm (half of that of code) past its first.
	const uint8_t *smr[MT][2];
	const uint8_t *cdr[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int64_t n = n0 + wn * 16 * MT + mt * 16 + g + 8 * h;
			if (n >= N) n = N - 1;
			const int64_t at = row_at(n, K, p.tiled);
			smr[mt][h] = pin(sm + at + 16 * t);
			cdr[mt][h] = pin(code + at / 2 + 8 * t);
		}
	const uint32_t KS = kblock_step(p.tiled);
	const uint16_t *xr[NT];
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
		int64_t m = m0 + nt * 8 + g;
		if (m >= R) m = R - 1;
		xr[nt] = pin(x + m * K + 16 * t);
	}
	const int32_t K32 = (int32_t)K, kb_hi32 = (int32_t)kb_hi; // K < 2^31 (host)

	float acc[MT][NT][4];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.f;

	auto load = [&](WBatch<MT, U> &b, int32_t kbase) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int32_t kb = kbase + u * WK;
			const int32_t k0 = kb * 64; // this lane's k is k0 + 16t (in the pointers)
			const uint32_t at = (uint32_t)kb * KS; // its bytes of sm from the rows' first (code: half)
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					if (kb < kb_hi32 && k0 + 16 * t < K32) {
						b.s[u][mt][h] = ld_stream16(smr[mt][h] + at);
						b.c[u][mt][h] = ld_stream8(cdr[mt][h] + (at >> 1));
					} else {
						b.s[u][mt][h] = make_uint4(0, 0, 0, 0);
						b.c[u][mt][h] = make_uint2(0, 0);
					}
				}
		}
	};
	auto compute = [&](const WBatch<MT, U> &b, int32_t kbase) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int32_t kb = kbase + u * WK;
			const int32_t k0 = kb * 64;
			const bool ok = kb < kb_hi32 && k0 + 16 * t < K32;
			uint32_t A[MT][2][8];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int h = 0; h < 2; h++) decode16<SAFE>(b.s[u][mt][h], b.c[u][mt][h], B4, A[mt][h]);
#pragma unroll
			for (int nt = 0; nt < NT; nt++) {
				uint4 xa = make_uint4(0, 0, 0, 0), xb = make_uint4(0, 0, 0, 0);
				if (ok) {
					xa = ld_act16(xr[nt] + k0);
					xb = ld_act16(xr[nt] + k0 + 8);
				}
				uint32_t XB[8];
				permute_x16(xa, xb, XB);
#pragma unroll
				for (int s = 0; s < 4; s++)
#pragma unroll
					for (int mt = 0; mt < MT; mt++)
						mma16816(acc[mt][nt], A[mt][0][2 * s], A[mt][1][2 * s], A[mt][0][2 * s + 1],
						         A[mt][1][2 * s + 1], XB[2 * s], XB[2 * s + 1]);
			}
		}
	};

	// Software pipeline: the next batch of weights is in flight while the
	// current one is decoded and multiplied.
	constexpr int32_t STEP = WK * U;
	int32_t kbase = (int32_t)kb_lo + wk;
	WBatch<MT, U> cur, nxt;
	if (DEP) griddep_launch();
	load(cur, kbase);
	// Escape ranges of the block's rows, fetched behind the first weights.
	const bool split = p.splits > 1;
	if (!split && p.escrows) {
		for (int i = threadIdx.x; i <= ROWS; i += blockDim.x) {
			const int64_t r = n0 + i < N ? n0 + i : N;
			srows[i] = ld_u32((const uint32_t *)p.escrows + r);
		}
	}
	FirstEscape first; // (the dense kernels': the grouped experts kernels' registers are tighter)
	if (DEP) first.start(p, n0 + (int)threadIdx.x % ROWS);
	if (DEP) griddep_wait(); // the activations are the previous kernel's output
	if (DEP) first.fetch(p);
	for (; kbase < kb_hi32; kbase += STEP) {
		if (kbase + STEP < kb_hi32) load(nxt, kbase + STEP);
		compute(cur, kbase);
		cur = nxt;
	}

	block_epilogue<MT, NT, WN, WK, SAFE, vec_epilogue<8 * NT, DEP>::value>(p, red, srows, acc, n0, m0, split_z,
	                                                                      first);
}

// A dense launch's parameters for its segment sel (glyd_kparams.seg), whose
// outputs start after pre rows of weights: that weight's fields, its output
// and its split-K partial sums. Unrolled selects: a dynamic index into the
// parameter block would copy the block to local memory.
__device__ __forceinline__ glyd_kparams segment_params(const glyd_kparams &p, int sel, int64_t pre) {
	glyd_kparams q = p;
#pragma unroll
	for (int s = 0; s < GLYD_MAX_SEGMENTS; s++)
		if (s == sel) {
			q.sm = p.seg[s].sm;
			q.code = p.seg[s].code;
			q.escrows = p.seg[s].escrows;
			q.escrecs = p.seg[s].escrecs;
			q.bias = p.seg[s].bias;
			q.N = p.seg[s].N;
			q.base = p.seg[s].base;
			q.ebase = p.seg[s].ebase;
		}
	q.y = p.y + (glyd_u64)(2 * p.rows * pre);
	q.ws = p.ws + (glyd_u64)(4 * (int64_t)p.splits * p.rows * pre);
	return q;
}

// The segment of item *i of a dense launch whose items are seg[0]'s, then
// seg[1]'s, ... (units(N) of them for a segment of N rows): its parameters,
// with *i set to the item's index within the segment. One walk for the weight
// tiles (segment_tile) and the split-K reduce's outputs (lin_reduce<true>).
template <typename Units>
__device__ __forceinline__ glyd_kparams segment_of(const glyd_kparams &p, int64_t *i, Units units) {
	int64_t t = *i, pre = 0;
	int sel = 0;
#pragma unroll
	for (int s = 0; s + 1 < GLYD_MAX_SEGMENTS; s++) {
		const int64_t items = units(p.seg[s].N);
		if (sel == s && s + 1 < (int)p.nseg && t >= items) {
			t -= items;
			pre += p.seg[s].N;
			sel = s + 1;
		}
	}
	*i = t;
	return segment_params(p, sel, pre);
}

// The segment of a dense launch's weight tile `*tile` (blockIdx.y counts the
// ROWS-row tiles of seg[0], then those of seg[1], ...): its parameters, with
// *tile set to the tile's index within the segment.
template <int ROWS>
__device__ __forceinline__ glyd_kparams segment_tile(const glyd_kparams &p, int64_t *tile) {
	return segment_of(p, tile, [](int64_t n) { return (n + ROWS - 1) / ROWS; });
}

// Split-K: y[m][n] = finish(sum over splits z in order of ws[z][m][n]).
// MANY (glyd_lin_reduce_many): the outputs of every segment (p.N = the
// segments' rows together; output i of the launch is element i of the
// segments' outputs laid end to end). The single-weight reduce reads its
// weight from the parameter block as it is (with the lookup, 64 tokens
// measured 5% slower, session 8).
// The escape index is immutable: its row range and first record are loaded
// before the wait for the partial sums, so an escape costs the reduce one
// round trip (its activation, beside the partials) instead of three
// dependent ones after it (session 19: escapes cost the split 16- to
// 64-token steps 5-9%).
template <bool MANY>
__device__ __forceinline__ void lin_reduce(const glyd_kparams &p) {
	griddep_launch();
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= p.rows * p.N) return;
	glyd_kparams q = p;
	if (MANY) q = segment_of(p, &i, [&p](int64_t n) { return p.rows * n; });
	const int64_t total = q.rows * q.N;
	const int64_t m = i / q.N, n = i % q.N;
	uint32_t e0 = 0, e1 = 0;
	uint2 r0 = make_uint2(0, 0);
	if (q.escrows) {
		e0 = ((const uint32_t *)q.escrows)[n];
		e1 = ((const uint32_t *)q.escrows)[n + 1];
		if (e0 < e1) r0 = ((const uint2 *)q.escrecs)[e0];
	}
	griddep_wait(); // the partial sums are the previous kernel's output
	const float *ws = (const float *)q.ws;
	float v = 0.f;
	for (uint32_t z = 0; z < q.splits; z++) v += ws[(size_t)z * (size_t)total + i];
	if (e0 < e1) { // finish()'s first record, in its order
		v = add_escape(v, bf16_to_f32(((const uint16_t *)q.x)[m * q.K + r0.x]), r0.y, q.ebase);
		e0++;
	}
	((uint16_t *)q.y)[i] = finish(q, m, n, v, e0, e1);
}
extern "C" __global__ void __launch_bounds__(256) glyd_lin_reduce(const glyd_kparams p) { lin_reduce<false>(p); }
extern "C" __global__ void __launch_bounds__(256) glyd_lin_reduce_many(const glyd_kparams p) { lin_reduce<true>(p); }

// Hopper (sm_90a): the same decode feeding wgmma. y^T = W * x^T with the
// weights as wgmma's A operand from registers: a block owns 64 weight rows;
// warp w of a consumer warpgroup decodes rows 16w..16w+15 (the fragments of
// decode16 are wgmma's A layout), and ONE wgmma.m64n{TB}k16 per 16 k
// multiplies them by all TB tokens, where mma.sync needed TB/8 instructions
// per warp plus the activation fragments in registers.
//
// Warp roles. KG consumer warpgroups split the block's k-blocks (warpgroup c
// takes blocks j = c, c + KG, ...; their partial sums meet in the epilogue's
// tree), each lane keeping U of its k-blocks of weights in flight in a
// register ring; they never touch the activations. PW producer warps stage
// the activations of each 64-k block j in stage j % S of a shared-memory
// ring: B of the wgmma, K-major, no swizzle (8x8 core matrices of 128 bytes,
// LBO = 128 between k-groups, SBO = 1024 between token groups), k permuted as
// decode16 orders it (word i of a chunk's 16 elements, pair (0,4), (2,6),
// ..., goes to logical k 8i + 2t, so wgmma k-step s reads logical k
// 16s..16s+15). KG and PW divide S, so a stage always has the same producer
// warp and the same consumer warpgroup; named barriers FULL[s] (the producer
// arrives after fence.proxy.async, the consumers wait) and EMPTY[s] (the
// consumers arrive after their wgmma's, the producer waits) couple just those
// 160 threads. The async-proxy fence waits for the producer's outstanding
// loads; split this way it never stalls the weight stream.
// Shared memory: srows (align32(65) words) then max(S stages of TB*128 bytes,
// the epilogue's tree and [TB][65] tile).
__device__ __forceinline__ void bar_sync(int id, int count) {
	asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
	asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// A 64-k block of activations in shared memory as the wgmma tiles' B
// operand (K-major, no swizzle): 8x8 core matrices of 128 bytes, 128 bytes
// between k-groups, 1024 between groups of 8 tokens. Item (tok, ch) = the
// 16 activations k = 16ch..16ch+15 of token tok, permuted by permute_x16
// into 8 words; word q lies at stage_offset(tok, ch) + 128q.
__device__ __forceinline__ uint32_t stage_offset(int tok, int ch) {
	return (tok >> 3) * 1024 + (tok & 7) * 16 + 4 * ch;
}
// The two weight rows of a consumer lane (g = lane/4, t = lane%4) in a warp
// that owns rows row0..row0+15: rows row0 + g and row0 + g + 8 (clamped to
// N-1: their results are never stored), pointers pinned to their 16 bytes
// of sm and 8 of code at k = 16t of k-block 0; k-block kb is kb * ks bytes
// of sm (half of that of code) further (row-major or tiled planes).
struct WarpRows {
	const uint8_t *smr[2], *cdr[2];
	int t;
	uint32_t ks;
	__device__ __forceinline__ WarpRows(const glyd_kparams &p, int64_t row0) {
		const int lane = threadIdx.x & 31;
		t = lane & 3;
		ks = kblock_step(p.tiled);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int64_t n = row0 + (lane >> 2) + 8 * h;
			if (n >= p.N) n = p.N - 1;
			const int64_t at = row_at(n, p.K, p.tiled);
			smr[h] = pin((const uint8_t *)p.sm + at + 16 * t);
			cdr[h] = pin((const uint8_t *)p.code + at / 2 + 8 * t);
		}
	}
	// Both rows' weights of k-block kb, or zeros (valid false, or past K).
	__device__ __forceinline__ void load(uint4 (&s2)[2], uint2 (&c2)[2], int32_t kb, bool valid, int32_t K32) const {
		const uint32_t at = (uint32_t)kb * ks;
#pragma unroll
		for (int h = 0; h < 2; h++) {
			if (valid && kb * 64 + 16 * t < K32) {
				s2[h] = ld_stream16(smr[h] + at);
				c2[h] = ld_stream8(cdr[h] + (at >> 1));
			} else {
				s2[h] = make_uint4(0, 0, 0, 0);
				c2[h] = make_uint2(0, 0);
			}
		}
	}
	// The same 48 bytes copied asynchronously into shared memory: row h's sm
	// bytes at dst + pitch * h, both rows' code bytes at dst + 2 * pitch (row
	// 0 first), zeros past K; nothing is copied when valid is false.
	__device__ __forceinline__ void stage(uint32_t dst, uint32_t pitch, int32_t kb, bool valid, int32_t K32) const {
		if (!valid) return;
		const uint32_t bytes = kb * 64 + 16 * t < K32 ? 16 : 0, at = (uint32_t)kb * ks;
#pragma unroll
		for (int h = 0; h < 2; h++) {
			cp_async16(dst + pitch * h, smr[h] + at, bytes);
			cp_async8(dst + 2 * pitch + 8 * h, cdr[h] + (at >> 1), bytes / 2);
		}
	}
};

// The escape records of one weight row (the escape index: k ascending, the
// true bf16 bits), walked in k order by a consumer lane: cur the first not
// yet passed, nxt the one after (loaded ahead); k = ~0 past the row's last.
struct RowEscapes {
	uint32_t e, e1; // the index of the record after nxt; the row's end
	uint2 cur, nxt;
	// rec: the weight's escape records (p.escrecs), for every call.
	__device__ __forceinline__ uint2 fetch(const uint2 *rec) {
		uint2 r = make_uint2(~0u, 0u);
		if (e < e1) ld_record(r, rec + e);
		e++;
		return r;
	}
	// Row row of the weight (none past N or without an escape index).
	__device__ __forceinline__ void start(const glyd_kparams &p, const uint2 *rec, int64_t row) {
		e = e1 = 0;
		if (p.escrows && row < p.N) {
			e = ld_u32((const uint32_t *)p.escrows + row);
			e1 = ld_u32((const uint32_t *)p.escrows + row + 1);
		}
		cur = fetch(rec);
		nxt = fetch(rec);
	}
	// Puts the true bits of the row's escapes among this lane's 16 weights
	// k = lo..lo+15 into W (decode16's order) and passes every record below
	// lo + 16 (the other lanes' k, or blocks before a split's first). Called
	// only when cur.x < lo + 16: rare.
	__device__ __forceinline__ void patch(const uint2 *rec, uint32_t (&W)[8], uint32_t lo) {
		while (cur.x < lo + 16) {
			if (cur.x >= lo) {
				const uint32_t i = cur.x - lo; // element i of the 16: word and half as decode8 places it
				const uint32_t word = ((i & 1) << 1) | ((i >> 1) & 1) | ((i >> 3) << 2), sh = (i & 4) << 2;
#pragma unroll
				for (uint32_t w = 0; w < 8; w++)
					if (w == word) W[w] = (W[w] & ~(0xffffu << sh)) | ((cur.y & 0xffffu) << sh);
			}
			cur = nxt;
			nxt = fetch(rec);
		}
	}
};

// A consumer lane's ring of U k-blocks of its two rows' weights (the prompt
// tiles), block j of the split in slot j % U, the next U - 1 on their way:
// in registers, or (SMEM_W) in shared memory from sbase on, 48 bytes per
// thread of the block's THREADS and slot: sm of row 0 at +0, row 1 at
// +PITCH, both rows' code bytes at +2 * PITCH, 16 bytes per thread in each
// (PITCH = 16 * THREADS); one cp.async
// commit group per block (empty past the split's last), so that block j is
// there when U - 2 groups are pending. Weights are immutable: the
// constructor starts the first blocks, before griddep_wait.
template <int U, bool SMEM_W, int THREADS = 256>
struct WeightRing {
	static constexpr uint32_t PITCH = 16 * THREADS, SLOT = 3 * PITCH;
	WarpRows wr;
	uint32_t slot0;
	int32_t kb_lo, nkb, K32;
	uint4 ws[SMEM_W ? 1 : U][2];
	uint2 wc[SMEM_W ? 1 : U][2];
	__device__ __forceinline__ WeightRing(const glyd_kparams &p, int64_t row0, uint32_t sbase, int32_t kb_lo_,
	                                      int32_t nkb_)
	    : wr(p, row0), slot0(sbase + 16 * threadIdx.x), kb_lo(kb_lo_), nkb(nkb_), K32((int32_t)p.K) {
#pragma unroll
		for (int u = 0; u < U - (SMEM_W ? 1 : 0); u++) fill(u, u);
	}
	__device__ __forceinline__ void fill(int u, int32_t j) {
		if (SMEM_W) {
			wr.stage(slot0 + u * SLOT, PITCH, kb_lo + j, j < nkb, K32);
			cp_async_commit();
		} else {
			wr.load(ws[u], wc[u], kb_lo + j, j < nkb, K32);
		}
	}
	// Block j's weights, from slot u = j % U (a run-time u for the shared
	// ring only).
	__device__ __forceinline__ void take(int u, uint4 (&s2)[2], uint2 (&c2)[2]) {
		if (SMEM_W) {
			cp_async_wait<U - 2>();
			const uint32_t at = slot0 + u * SLOT;
			const uint4 cw = lds16(at + 2 * PITCH);
			s2[0] = lds16(at);
			s2[1] = lds16(at + PITCH);
			c2[0] = make_uint2(cw.x, cw.y);
			c2[1] = make_uint2(cw.z, cw.w);
		} else {
#pragma unroll
			for (int h = 0; h < 2; h++) {
				s2[h] = ws[u][h];
				c2[h] = wc[u][h];
			}
		}
	}
	// After block j (slot u) is decoded: the next block into the ring. The
	// shared ring refills the slot block j - 1 was read from (its reads are
	// done: its words were decoded), the register ring slot u itself.
	__device__ __forceinline__ void advance(int u, int32_t j) {
		if (SMEM_W)
			fill(u == 0 ? U - 1 : u - 1, j + U - 1);
		else
			fill(u, j + U);
	}
};

// One 64-k block of a consumer warpgroup: its decoded rows A (decode16
// order) times the stage at shared address stage, four wgmma's, committed
// (the caller waits for them: wgmma_wait<0>).
template <int TB>
__device__ __forceinline__ void wgmma_kblock(float (&acc)[TB / 8][4], const uint32_t (&A)[2][8], uint32_t stage) {
	wgmma_fence();
	const uint64_t desc = (uint64_t)((stage & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) |
	                      ((uint64_t)(1024 >> 4) << 32);
#pragma unroll
	for (int s = 0; s < 4; s++)
		wgmma_rs<TB>(acc, A[0][2 * s], A[1][2 * s], A[0][2 * s + 1], A[1][2 * s + 1],
		             desc + (uint64_t)(2 * s * 128 >> 4));
	wgmma_commit();
}

// One output tile: weight rows [ntile*64, +64), tokens [mtile*TB, +TB), the
// k-blocks of split split_z of p.splits. The dense kernels pass their block
// indices, the grouped experts kernel (moe.cu) its own; consecutive calls in
// one block are safe (every barrier use is paired within a call, and the
// epilogue ends with the block in sync).
template <int TB, int KG, int S, int U, int PW, bool SAFE, bool DEP = false>
__device__ __forceinline__ void wgmma_tile(const glyd_kparams &p, float *smem, int64_t mtile, int64_t ntile,
                                           uint32_t split_z) {
#ifdef GLYD_WGMMA
	constexpr int ROWS = 64, NT = TB / 8;
	constexpr int BAR = 128 + 32;   // a stage's barriers: one consumer warpgroup, one producer warp
	constexpr int STAGE = TB * 128; // bytes of one 64-k block of x
	constexpr int PER = TB / 8;     // (token, 16-k chunk) items per producer lane and stage
	// At most 32 registers of activations (the consumers set the budget), a divisor of PER.
	constexpr int BATCH = PER % 4 == 0 ? 4 : PER % 3 == 0 ? 3 : PER;
	static_assert(S % PW == 0 && S % KG == 0 && (KG & (KG - 1)) == 0 && PER % BATCH == 0 && 2 * S < 16,
	              "stages, warps, barriers; the epilogue tree needs a power of two KG");
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t N = p.N, K = p.K, R = p.rows;
	const int64_t n0 = ntile * ROWS, m0 = mtile * TB;
	const int64_t KB = (K + 63) >> 6;
	const int32_t kb_lo = (int32_t)(KB * split_z / p.splits), kb_hi = (int32_t)(KB * (split_z + 1) / p.splits);
	const int32_t nkb = kb_hi - kb_lo, K32 = (int32_t)K;
	uint32_t *srows = (uint32_t *)smem;
	char *ring = (char *)(smem + ((ROWS + 1 + 31) & ~31));
	const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

	if (DEP) griddep_launch();
	// The escape ranges of the tile's rows (needed by the epilogue only) are
	// the producers' to load: a consumer that stored them would wait a round
	// trip before its first weight loads.
	const bool esc = p.splits == 1 && p.escrows;
	constexpr int EPL = (ROWS + 1 + 32 * PW - 1) / (32 * PW); // entries per producer lane
	float acc[1][NT][4];
#pragma unroll
	for (int j = 0; j < NT; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) acc[0][j][i] = 0.f;
	// The dense kernels' consumers prefetch their first escape record (the
	// producers' items load theirs in the epilogue); not t32k1s4u4p2: at 96
	// registers (3 blocks per SM) it spilled and lost 3-5% at 32 tokens.
	constexpr bool FIRST = DEP && TB * U <= 64;
	FirstEscape first;

	if (warp >= 4 * KG) {
		// Producer warp pw fills the stages of blocks j = pw, pw + PW, ....
		// Item (token tok, chunk ch) = 16 activations, one 32-byte load, 8
		// permuted words. Rows past R read row R-1 (never stored); k past K
		// reads as 0 (0 * w, never 0 * garbage).
		const int pw = warp - 4 * KG;
		uint32_t er[EPL];
#pragma unroll
		for (int e = 0; e < EPL; e++) {
			const int i = pw * 32 + lane + e * 32 * PW;
			const int64_t r = n0 + i < N ? n0 + i : N;
			if (esc && i <= ROWS) er[e] = ld_u32((const uint32_t *)p.escrows + r);
		}
		if (DEP) griddep_wait(); // the activations are the previous kernel's output
		for (int32_t j = pw; j < nkb; j += PW) {
			const int32_t kb = kb_lo + j;
			const int stage = j % S;
			if (j >= S) bar_sync(1 + S + stage, BAR); // EMPTY: the wgmma's of block j - S are done
#pragma unroll
			for (int i0 = 0; i0 < PER; i0 += BATCH) {
				uint4 xv[BATCH][2];
#pragma unroll
				for (int i = 0; i < BATCH; i++) {
					const int item = lane + (i0 + i) * 32, tok = item >> 2, ch = item & 3;
					const int64_t m = m0 + tok < R ? m0 + tok : R - 1;
					const int32_t k = kb * 64 + 16 * ch;
					const uint16_t *src = (const uint16_t *)p.x + m * K + k;
					xv[i][0] = xv[i][1] = make_uint4(0, 0, 0, 0);
					if (k < K32) {
						xv[i][0] = ld_act16(src);
						xv[i][1] = ld_act16(src + 8);
					}
				}
#pragma unroll
				for (int i = 0; i < BATCH; i++) {
					const int item = lane + (i0 + i) * 32, tok = item >> 2, ch = item & 3;
					uint32_t w[8];
					permute_x16(xv[i][0], xv[i][1], w);
					const uint32_t base = ring_s + stage * STAGE + stage_offset(tok, ch);
#pragma unroll
					for (int q = 0; q < 8; q++)
						asm volatile("st.shared.b32 [%0], %1;" ::"r"(base + 128 * q), "r"(w[q]) : "memory");
				}
			}
			fence_proxy_async();
			bar_arrive(1 + stage, BAR); // FULL
		}
#pragma unroll
		for (int e = 0; e < EPL; e++) {
			const int i = pw * 32 + lane + e * 32 * PW;
			if (esc && i <= ROWS) srows[i] = er[e];
		}
	} else {
		// Consumer warpgroup c: blocks j = c, c + KG, ...; a ring of U of
		// them per lane.
		const int c = warp >> 2, w16 = warp & 3;
		const uint32_t B4 = p.base * 0x01010101u;
		const WarpRows wr(p, n0 + w16 * 16);
		uint4 ws[U][2];
		uint2 wc[U][2];
		auto ld_w = [&](uint4 (&s2)[2], uint2 (&c2)[2], int32_t j) { wr.load(s2, c2, kb_lo + j, j < nkb, K32); };
#pragma unroll
		for (int u = 0; u < U; u++) ld_w(ws[u], wc[u], c + u * KG);
		if (FIRST) first.start(p, n0 + (int)threadIdx.x % ROWS);
		if (DEP) griddep_wait(); // before the epilogue writes y (or the partial sums)
		if (FIRST) first.fetch(p);
		for (int32_t j0 = c; j0 < nkb; j0 += U * KG) {
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int32_t j = j0 + u * KG;
				if (j >= nkb) break;
				const int stage = j % S;
				uint32_t A[2][8];
				decode16<SAFE>(ws[u][0], wc[u][0], B4, A[0]);
				decode16<SAFE>(ws[u][1], wc[u][1], B4, A[1]);
				ld_w(ws[u], wc[u], j + U * KG);
				bar_sync(1 + stage, BAR); // FULL: block j's activations are staged
				wgmma_kblock<TB>(acc[0], A, ring_s + stage * STAGE);
				wgmma_wait<0>();
				if (j + S < nkb) bar_arrive(1 + S + stage, BAR); // EMPTY, when the producer waits for it
			}
		}
		// The accumulators are final only after the wait: keep the compiler
		// from reading them earlier.
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int i = 0; i < 4; i++) asm volatile("" : "+f"(acc[0][j][i])::"memory");
	}
	__syncthreads(); // the epilogue's tree and tile overlay the stages
	block_epilogue<1, NT, 4, KG, SAFE, vec_epilogue<TB, DEP>::value>(p, (float *)ring, srows, acc, n0, m0, split_z,
	                                                                   first);
#else
	__trap(); // the host picks these kernels on sm_90 only
#endif
}

// MANY: the _many kernels, several weights per launch (segment_tile). The
// single-weight kernels read the weight from the parameter block as it is:
// the selected fields live in registers through the k loop instead (t64:
// 122 -> 127 registers, 64 tokens 8% slower, session 8).
template <int TB, int KG, int S, int U, int PW, bool MANY, bool SAFE>
__device__ __forceinline__ void linear_f12_wgmma(const glyd_kparams &p, float *smem) {
	if (MANY) {
		int64_t tile = blockIdx.y;
		const glyd_kparams q = segment_tile<64>(p, &tile);
		wgmma_tile<TB, KG, S, U, PW, SAFE, true>(q, smem, blockIdx.x, tile, blockIdx.z);
	} else {
		wgmma_tile<TB, KG, S, U, PW, SAFE, true>(p, smem, blockIdx.x, blockIdx.y, blockIdx.z);
	}
}

// BOUNDS: the launch bounds, (threads) or (threads, blocks per SM the
// registers must allow: ptxas caps them). A minimum of 1 is not neutral:
// ptxas then spent 15 more registers on t16k1s4u4p2 and lost 9%.
#define GLYD_LINW(TB, KG, S, U, PW, BOUNDS)                                                           \
	GLYD_KERNEL_PAIR(glyd_lin_f12w_t##TB##k##KG##s##S##u##U##p##PW, BOUNDS, linear_f12_wgmma, TB, KG, S, U, PW,  \
	                 false)                                                                                  \
	GLYD_KERNEL_PAIR(glyd_lin_f12w_t##TB##k##KG##s##S##u##U##p##PW##_many, BOUNDS, linear_f12_wgmma, TB, KG, S, \
	                 U, PW, true)

GLYD_LINW(16, 1, 4, 2, 2, (192))
GLYD_LINW(16, 1, 4, 4, 2, (192))
GLYD_LINW(16, 2, 4, 2, 2, (320))
GLYD_LINW(32, 1, 4, 2, 2, (192))
GLYD_LINW(32, 2, 4, 2, 2, (320))
GLYD_LINW(32, 1, 4, 4, 2, (192, 3))
GLYD_LINW(64, 1, 4, 4, 4, (256))

// Hopper (sm_90a), many tokens (prompts, large batches): the wgmma tile with
// WG consumer warpgroups on 64 * WG weight rows (warpgroup c owns rows
// 64c..64c+63, warp w of the block rows 16w..16w+15) sharing each stage of
// TB tokens and taking turns at the tensor cores (below), so that one
// warpgroup's decode runs under another's wgmma's. WG = 2 (two blocks per
// SM) or 3 (one block per SM of 192 rows): a block's time is mostly its own
// chain of weights, decode, turn and wgmma, so what an SM gets done grows
// with the warpgroups it holds, and Qwen3-8B's 24,576 rows make 128 tiles of
// 192 (a wave on 132 SMs) where 192 tiles of 128 leave 72 SMs one block
// (session 25: gate_up at 128 tokens 0.879 -> 0.760 ms for 12 layers).
// Activations come by the bulk copy engine from a copy of x laid out as the
// stages (glyd_lin_xperm_t{TB}, launched just before, into p.dst): stage
// image (mtile, kb) at p.dst + (mtile * KB + kb) * TB * 128, KB the 64-k
// blocks of K. No producer warp (a ninth warp would cap every thread at 168
// registers: three warps on one scheduler's register file): thread 0 starts
// the first S copies, and the last of the 4 * WG warps to finish its
// wgmma's on a stage (a shared counter) starts the stage's next copy; each
// copy completes on the stage's mbarrier FULL[s], whose phase the warps
// wait on.
// Weights: a ring of U k-blocks per lane, U - 1 ahead (WeightRing): in
// registers, or (SMEM_W) each lane copying its own 48 bytes of a k-block
// into shared memory and reading them back when it decodes (no registers
// held while the bytes are in flight). Measured (session 16): the 128-token
// tile with a shared ring of 4 makes table 1 at 128 tokens 6-9% faster
// (each shape alone: within 3% either way); the 64- and 256-token tiles are
// 4-22% slower with it (their loop also reads and writes 24 KiB more shared
// memory per k-block). The shared ring's loop is not unrolled: unrolled 4
// times, the 128-token tile was 10% slower.
// Escapes: each lane puts the true bits of its rows' escapes into the
// decoded fragments (RowEscapes: one compare per row and k-block, rare
// loads), so the products are exact and the epilogue has no escape loop (at
// 512 tokens that loop, 32 groups of 8 tokens per escape with a dependent
// load each, took a quarter of the kernel).
// Shared memory: FULL[S] at byte 640, the counters at 768, the stages from
// byte 1024, then (SMEM_W) the U weight slots (48 bytes per thread: 12 KiB
// at WG = 2), all overlaid by the epilogue's [TB][64 * WG + 4] tile.
template <int TB, int S, int U, bool SMEM_W, bool CLUSTERS, bool SAFE, int WG = 2>
__device__ __forceinline__ void prompt_tile(const glyd_kparams &p, float *smem, int64_t mtile, int64_t ntile,
                                            uint32_t split_z) {
#ifdef GLYD_WGMMA
	constexpr int ROWS = 64 * WG, NT = TB / 8, STAGE = TB * 128, WARPS = 4 * WG;
	static_assert(8 * S <= 128 && 4 * S <= 256 && U >= 2, "shared layout, ring");
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = warp >> 2;
	const int64_t K = p.K;
	const int64_t n0 = ntile * ROWS, m0 = mtile * TB;
	const int32_t KB = (int32_t)((K + 63) >> 6);
	const int32_t kb_lo = (int32_t)((int64_t)KB * split_z / p.splits);
	const int32_t nkb = (int32_t)((int64_t)KB * (split_z + 1) / p.splits) - kb_lo;
	uint32_t *done = (uint32_t *)((char *)smem + 768);
	const uint32_t full_s = (uint32_t)__cvta_generic_to_shared(smem) + 640;
	char *ring = (char *)smem + 1024;
	const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);
	const char *src = (const char *)p.dst + ((int64_t)mtile * KB + kb_lo) * STAGE;
	auto stage_in = [&](int32_t j) { // block j into its stage (one thread)
		const uint32_t bar = full_s + 8 * (j % S);
		mbar_expect_bytes(bar, STAGE);
		bulk_copy(ring_s + (j % S) * STAGE, src + (int64_t)j * STAGE, STAGE, bar);
	};

	griddep_launch();
	const uint32_t B4 = p.base * 0x01010101u;
	WeightRing<U, SMEM_W, 128 * WG> wts(p, n0 + warp * 16, ring_s + S * STAGE, kb_lo, nkb);
	const uint2 *rec = pin((const uint2 *)p.escrecs);
	RowEscapes re[2];
#pragma unroll
	for (int h = 0; h < 2; h++) re[h].start(p, rec, n0 + warp * 16 + (lane >> 2) + 8 * h);
	if (threadIdx.x == 0) {
#pragma unroll
		for (int s = 0; s < S; s++) {
			mbar_init(full_s + 8 * s, 1);
			done[s] = 0;
		}
	}
	__syncthreads(); // the barriers are initialized
	griddep_wait(); // the stages' source is the previous kernel's output; y is written below
	if (threadIdx.x == 0)
		for (int32_t j = 0; j < S && j < nkb; j++) stage_in(j);

	float acc[1][NT][4];
#pragma unroll
	for (int j = 0; j < NT; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) acc[0][j][i] = 0.f;
	// The register ring needs its slots named at compile time: its loop is
	// unrolled U times; the shared ring's is not (see above).
	constexpr int STEP = SMEM_W ? 1 : U;
	int slot = 0; // the shared ring's slot of block j
	for (int32_t j0 = 0; j0 < nkb; j0 += STEP) {
#pragma unroll
		for (int u = 0; u < STEP; u++) {
			const int32_t j = j0 + u;
			if (j >= nkb) break;
			const int r = SMEM_W ? slot : u; // j % U
			const int stage = j % S;
			uint4 s2[2];
			uint2 c2[2];
			wts.take(r, s2, c2);
			uint32_t A[2][8];
			decode16<SAFE>(s2[0], c2[0], B4, A[0]);
			decode16<SAFE>(s2[1], c2[1], B4, A[1]);
			// (Patched after the next loads and the FULL wait instead: 12-17%
			// slower, session 11.)
			const uint32_t lo = (uint32_t)(kb_lo + j) * 64 + 16 * (lane & 3);
#pragma unroll
			for (int h = 0; h < 2; h++)
				if (re[h].cur.x < lo + 16) re[h].patch(rec, A[h], lo);
			wts.advance(r, j);
			if (SMEM_W) slot = slot == U - 1 ? 0 : slot + 1;
			mbar_wait(full_s + 8 * stage, (uint32_t)(j / S) & 1u); // FULL: block j is staged
			// Turns: warpgroup 0 issues block j's wgmma's after warpgroup 1
			// issued block j - 1's (named barrier 1), warpgroup 1 after
			// warpgroup 0 issued block j's (barrier 2), so the tensor cores
			// run one group's wgmma's while the other decodes.
			// (WG warpgroups: c waits for c - 1, 0 for WG - 1's previous block.)
			if (c > 0 || j > 0) bar_sync(1 + c, 256);
			wgmma_kblock<TB>(acc[0], A, ring_s + stage * STAGE);
			if (c < WG - 1) bar_arrive(2 + c, 256);
			else if (j + 1 < nkb) bar_arrive(1, 256);
			wgmma_wait<0>();
			// The last warp done with the stage refills it (the counter is
			// reset before the copy can complete, so before its next use).
			if (lane == 0 && j + S < nkb && atomicAdd(&done[stage], 1u) == WARPS - 1) {
				done[stage] = 0;
				stage_in(j + S);
			}
		}
	}
#pragma unroll
	for (int j = 0; j < NT; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) asm volatile("" : "+f"(acc[0][j][i])::"memory");
	if (SMEM_W) cp_async_wait<0>(); // (the groups left are empty; kept so no copy can land on the epilogue's tile)
	__syncthreads(); // the epilogue's tile overlays the stages
	glyd_kparams q = p;
	q.escrows = 0; // the escapes are in the products already
	if (CLUSTERS && cluster_launch(p))
		block_epilogue<1, NT, 4 * WG, 1, SAFE, true, true>(q, (float *)ring, nullptr, acc, n0, m0, split_z);
	else
		block_epilogue<1, NT, 4 * WG, 1, SAFE, true>(q, (float *)ring, nullptr, acc, n0, m0, split_z);
#else
	__trap(); // the host picks these kernels on sm_90 only
#endif
}

template <int TB, int S, int U, bool SMEM_W, bool CLUSTERS, int WG, bool MANY, bool SAFE>
__device__ __forceinline__ void linear_f12_prompt(const glyd_kparams &p, float *smem) {
	if (MANY) {
		int64_t tile = blockIdx.y;
		glyd_kparams q = segment_tile<64 * WG>(p, &tile);
		if (CLUSTERS && cluster_launch(p)) q.ws = 0; // (segment_tile offsets it)
		prompt_tile<TB, S, U, SMEM_W, CLUSTERS, SAFE, WG>(q, smem, blockIdx.x, tile, blockIdx.z);
	} else {
		prompt_tile<TB, S, U, SMEM_W, CLUSTERS, SAFE, WG>(p, smem, blockIdx.x, blockIdx.y, blockIdx.z);
	}
}
// BOUNDS as for GLYD_LINW: t64 and t128 capped for two blocks per SM, the
// three-warpgroup tile (g3: GLYD_LINPW3) one, t64s4w2 three (80 registers:
// its weights' ring in shared memory leaves room, one in registers spills).
// GLYD_LINP: weights in registers (u: U k-blocks per lane); GLYD_LINPW: in
// shared memory (w: U slots). CLUSTERS: the kernel can add its splits in a
// cluster (core/gpu/linear.go's linConfig.Clusters must agree). Not the
// 128-token tile (nor the wgmma tiles of 9-64 tokens): with that epilogue
// compiled in it ran 1-3% slower without clusters (session 17), and on the
// H200 the clusters of the Qwen3-8B and 32B shapes there never fit (48
// tiles of qkv in 5 splits where 47 clusters of 5 fit; 64 tiles of o in 4
// where 62 of 4 fit).
#define GLYD_LINP_(NAME, TB, S, U, SMEM_W, CLUSTERS, WG, BOUNDS)                                         \
	GLYD_KERNEL_PAIR(NAME, BOUNDS, linear_f12_prompt, TB, S, U, SMEM_W, CLUSTERS, WG, false)            \
	GLYD_KERNEL_PAIR(NAME##_many, BOUNDS, linear_f12_prompt, TB, S, U, SMEM_W, CLUSTERS, WG, true)
#define GLYD_LINP(TB, S, U, CLUSTERS, BOUNDS)                                                             \
	GLYD_LINP_(glyd_lin_f12p_t##TB##s##S##u##U, TB, S, U, false, CLUSTERS, 2, BOUNDS)
#define GLYD_LINPW(TB, S, U, CLUSTERS, BOUNDS)                                                            \
	GLYD_LINP_(glyd_lin_f12p_t##TB##s##S##w##U, TB, S, U, true, CLUSTERS, 2, BOUNDS)
// Three consumer warpgroups, 192 weight rows per block (g3).
#define GLYD_LINPW3(TB, S, U, BOUNDS) GLYD_LINP_(glyd_lin_f12p_t##TB##s##S##w##U##g3, TB, S, U, true, false, 3, BOUNDS)

GLYD_LINP(64, 4, 2, true, (256, 2))
GLYD_LINPW(64, 4, 2, true, (256, 3))
GLYD_LINPW(128, 4, 4, false, (256, 2))
GLYD_LINP(256, 4, 2, true, (256, 1))
GLYD_LINPW3(128, 4, 4, (384, 1))

// x [rows, K] as the prompt tiles' stage images (prompt_tile) at p.dst: one
// thread per item (mtile, kb, tok, ch), 32 consecutive threads writing 8
// full 128-byte lines. Tokens past rows and k past K are zeros. A
// programmatic launch on sm_90: it waits for x's producer first.
template <int TB>
__device__ __forceinline__ void lin_xperm(const glyd_kparams &p) {
	griddep_launch();
	griddep_wait();
	const int64_t K = p.K, R = p.rows, KB = (K + 63) >> 6;
	const int64_t items = (R + TB - 1) / TB * KB * TB * 4;
	const uint16_t *x = (const uint16_t *)p.x;
	for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < items;
	     idx += (int64_t)gridDim.x * blockDim.x) {
		const int ch = (int)(idx & 3), tok = (int)((idx >> 2) % TB);
		const int64_t blk = idx / (4 * TB), m = blk / KB * TB + tok, k = blk % KB * 64 + 16 * ch;
		uint4 a = make_uint4(0, 0, 0, 0), b = a;
		if (m < R && k < K) {
			a = ld_act16(x + m * K + k);
			b = ld_act16(x + m * K + k + 8);
		}
		uint32_t w[8];
		permute_x16(a, b, w);
		uint32_t *dst = (uint32_t *)((char *)p.dst + blk * (TB * 128) + stage_offset(tok, ch));
#pragma unroll
		for (int q = 0; q < 8; q++) dst[32 * q] = w[q];
	}
}
extern "C" __global__ void __launch_bounds__(256) glyd_lin_xperm_t64(const glyd_kparams p) { lin_xperm<64>(p); }
extern "C" __global__ void __launch_bounds__(256) glyd_lin_xperm_t128(const glyd_kparams p) { lin_xperm<128>(p); }
extern "C" __global__ void __launch_bounds__(256) glyd_lin_xperm_t256(const glyd_kparams p) { lin_xperm<256>(p); }

// The dense kernels: one output tile per block, at the block's indices (MANY:
// the tile index picks the segment, segment_tile); programmatic dependent
// launches on sm_90 (DEP: the grouped experts kernels of moe.cu are launched
// plainly and keep the code without the waits).
template <int MT, int NT, int WN, int WK, int U, bool MANY, bool SAFE>
__device__ __forceinline__ void linear_f12_block(const glyd_kparams &p, float *smem) {
	if (MANY) {
		int64_t tile = blockIdx.y;
		const glyd_kparams q = segment_tile<16 * MT * WN>(p, &tile);
		linear_f12<MT, NT, WN, WK, U, SAFE, true>(q, smem, blockIdx.x, tile, blockIdx.z);
	} else {
		linear_f12<MT, NT, WN, WK, U, SAFE, true>(p, smem, blockIdx.x, blockIdx.y, blockIdx.z);
	}
}
#define GLYD_LIN(MT, NT, WN, WK, U)                                                                   \
	GLYD_KERNEL_PAIR(glyd_lin_f12_m##MT##n##NT##w##WN##k##WK##u##U, (32 * WN * WK), linear_f12_block, MT, NT, WN, \
	                 WK, U, false)                                                                           \
	GLYD_KERNEL_PAIR(glyd_lin_f12_m##MT##n##NT##w##WN##k##WK##u##U##_many, (32 * WN * WK), linear_f12_block, MT, \
	                 NT, WN, WK, U, true)

// The configurations the host may pick (core/gpu/linear.go holds the table and
// the reason for each). Names are looked up at module load.
GLYD_LIN(1, 1, 1, 8, 1)
GLYD_LIN(1, 1, 1, 16, 1)
GLYD_LIN(1, 2, 1, 8, 1)
GLYD_LIN(2, 4, 1, 8, 1)
GLYD_LIN(1, 8, 2, 4, 1)
GLYD_LIN(1, 8, 4, 2, 1)

extern "C" __global__ void __launch_bounds__(128) glyd_lin_f12_generic(const glyd_kparams p) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t n = (int64_t)blockIdx.y * 4 + warp;
	const int64_t m0 = (int64_t)blockIdx.x * 8;
	if (n >= p.N) return;
	const int64_t K = p.K;
	const uint8_t *sm = (const uint8_t *)p.sm;
	const uint8_t *code = (const uint8_t *)p.code;
	const uint16_t *x = (const uint16_t *)p.x;
	float acc[8];
#pragma unroll
	for (int j = 0; j < 8; j++) acc[j] = 0.f;
	for (int64_t k = lane; k < K; k += 32) {
		const uint64_t i = plane_index((uint64_t)n * K + k, p.tiled);
		const uint32_t c = (code[i >> 1] >> ((i & 1) * 4)) & 15u;
		const float w = bf16_to_f32(bf16_bits(sm[i], c == 15u ? 0u : p.base + c));
#pragma unroll
		for (int j = 0; j < 8; j++)
			if (m0 + j < p.rows) acc[j] = fmaf(bf16_to_f32(x[(m0 + j) * K + k]), w, acc[j]);
	}
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int o = 16; o >= 1; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
	uint16_t *y = (uint16_t *)p.y;
#pragma unroll
	for (int j = 0; j < 8; j++)
		if (lane == j && m0 + j < p.rows) {
			uint32_t e0 = 0, e1 = 0;
			if (p.escrows) {
				e0 = ((const uint32_t *)p.escrows)[n];
				e1 = ((const uint32_t *)p.escrows)[n + 1];
			}
			y[(m0 + j) * p.N + n] = finish(p, m0 + j, n, acc[j], e0, e1);
		}
}
