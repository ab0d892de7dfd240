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
 * glyd_lin_f12g_<config>[_safe]  the grouped fused linear:
 *     x [rows, K] and y [rows, N] hold the rows sorted by expert; p.offs =
 *     int32 [E] cumulative end rows (torch grouped_mm's offsets), clamped to
 *     [0, rows] here so that bad offsets cannot fault. Grid (1, tiles,
 *     Z = min(E, rows)); block z takes the z-th expert that has rows (warp 0
 *     scans p.offs with ballots, all loads issued first), points a copy of
 *     the parameters at that expert (planes, escape index, base, ebase, bias
 *     row, x and y rows) and runs the tile code of linear.cu (linear_f12 with
 *     the configuration's tile: 16-32 weight rows, 8-64 rows of x at a time)
 *     for its rows. Grid y = ceil(N / weight rows of the tile). Blocks past the last expert with rows return at once.
 *     glyd_lin_f12gw_<config> (sm_90a): the same over linear.cu's wgmma
 *     tiles (64 weight rows, 16 or 64 rows of x at a time). Needs
 *     K % 16 == 0, every expert's sm and code 16-byte aligned, x too (the
 *     host checks). p.bias: bf16 [E, N] or 0.
 * glyd_lin_f12t_experts, glyd_lin_f12t1_experts + glyd_lin_f12t_reduce  the
 *     same for experts stored transposed, [in, out] (y = x · W[e]; Llama 4,
 *     gpt-oss): CUDA cores, for few rows per expert; 4 tokens per pass, or 1
 *     (t1: decode steps, four blocks per SM). Grid (ceil(out/256), S, Z as
 *     above): a block sums its slice of the S splits of the input rows for
 *     256 output columns into the fp32 workspace p.ws [S][rows][out]; the
 *     reduce kernel adds the S partials in order and rounds. Deterministic,
 *     no atomics. See the comments above tescapes and tpass.
 *
 * Routing without the host (a decode step is a handful of pairs; torch's
 * sort/histc/cumsum/index_copy/sum chain was ~30 small kernels):
 * glyd_moe_route   ONE block: bins every pair (routed expert, identity
 *     expert, or dropped = bin `experts_total`), scans the counts, writes p.offs
 *     [num_experts] (cumulative end rows of the routed experts) and places the
 *     pairs stably by bin: p.rowof[pair] = its sorted row, p.tok[row] = its
 *     token. W warps (route_warps: up to 32) each take a contiguous range of
 *     pairs, count it per bin, and place it 32 pairs at a time in pair order
 *     (__match_any_sync: the rank among equal bins of the same 32, plus the
 *     bin's start, the earlier warps' counts and the warp's running count), so
 *     the order equals a stable sort by bin, whatever W. (One warp placing
 *     every pair took 45 us at 4,096 pairs.) The block has exactly W warps. Dynamic shared memory: (experts_total + 2) * 4 +
 *     W * (experts_total + 1) * 4 + align16(pairs * 2) bytes, at most 96 KiB.
 * glyd_moe_combine grid (ceil(hidden / 2048), tokens), 256 threads, 8
 *     features per thread: out[t] = sum over slots s in order of
 *     rw[t*topk+s] * v, v = d[rowof[pair]] (routed), x[t] (identity) or
 *     nothing (dropped); fp32, one rounded multiply and one rounded add per
 *     term (the same bits as the torch expression it replaces), then bf16.
 * glyd_moe_silu_mul grid-stride over rows * ceil(I / 8) items of 8 features:
 *     the SwiGLU between the grouped linears, silu(gate) * up of x [rows, 2I]
 *     into y [rows, I], bit for bit torch's bf16 expression.
 * glyd_moe_row_experts grid ceil(rows / 8): Llama 4's routing ids from its
 *     expert-major input (the expert of each non-zero row, -1 for the rest).
 * glyd_moe_top1 grid ceil(tokens / 8), a warp per token: the expert of the
 *     largest router logit (the first of equal ones, NaN above everything:
 *     torch.topk's choice) as moe_route's ids, and its score bf16(sigmoid) as
 *     torch computes it in fp32 (Llama 4's top-1 routing).
 * glyd_moe_gather_scale grid-stride over rows * ceil(H / 8) items of 8
 *     features: out[r] = bf16(x[tok[r]] * score[tok[r]]), the rows of the
 *     sorted pairs scaled by their token's score (Llama 4 scales the experts'
 *     input), bit for bit torch's bf16 product.
 *
 * All of them are programmatic dependent launches on sm_90 (core/gpu): each
 * lets the next kernel start its blocks at once and waits for its
 * predecessor (griddep_wait) before it reads anything.
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256, 3) glyd_decode_f12_groups(const glyd_kparams p) {
	const glyd_expert ex = ((const glyd_expert *)p.experts)[blockIdx.y];
	decode_f12_span((const uint8_t *)ex.sm, (const uint8_t *)ex.code, (uint16_t *)p.dst + blockIdx.y * p.n, p.n,
	                ex.base);
}

extern "C" __global__ void __launch_bounds__(256) glyd_escape_scatter_groups(const glyd_kparams p) {
	const glyd_expert ex = ((const glyd_expert *)p.experts)[blockIdx.y];
	escape_scatter((const uint8_t *)ex.sm, (const uint32_t *)ex.escidx, (const uint8_t *)ex.escexp, ex.escapes, p.n,
	               (uint16_t *)p.dst + blockIdx.y * p.n);
}

// The z-th expert (0-based) that has rows, with its rows [*r0, *r1); -1 if
// fewer experts have rows (then *r0 = how many have). Warp-wide (every lane
// returns the same). Each pass issues the loads of 32*CH offsets before
// using any.
__device__ __forceinline__ int64_t nth_expert(const int32_t *offs, int64_t E, int64_t R, int64_t z, int64_t *r0,
                                              int64_t *r1) {
	const int64_t z0 = z;
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
	*r0 = z0 - z;
	return -1;
}

// This block's expert: the z-th expert that has rows (warp 0 scans p.offs,
// the block reads the answer from shared memory), with its rows [*r0, *r1);
// -1 if fewer experts have rows (the block has nothing to do).
__device__ __forceinline__ int64_t block_expert(const glyd_kparams &p, int64_t z, int64_t *r0, int64_t *r1) {
	__shared__ int64_t pick[3];
	if (threadIdx.x < 32) {
		int64_t a = 0, b = 0;
		const int64_t e = nth_expert((const int32_t *)p.offs, p.num_experts, p.rows, z, &a, &b);
		if (threadIdx.x == 0) {
			pick[0] = e;
			pick[1] = a;
			pick[2] = b;
		}
	}
	__syncthreads();
	*r0 = pick[1];
	*r1 = pick[2];
	return pick[0];
}

// How many experts have rows (warp 0 counts, the block reads the answer;
// every thread of the block calls it).
__device__ __forceinline__ int64_t experts_with_rows(const glyd_kparams &p) {
	__shared__ int64_t count;
	if (threadIdx.x < 32) {
		int64_t a = 0, b = 0;
		nth_expert((const int32_t *)p.offs, p.num_experts, p.rows, INT64_MAX, &a, &b);
		if (threadIdx.x == 0) count = a;
	}
	__syncthreads();
	return count;
}

// The slices of the Ri input rows each of the A experts with rows gets from
// the S x Z blocks of a column tile of the transposed kernel: S x Z / A,
// at most max(S, min(Ri / 64, 32)) (each warp keeps >= 8 rows; the host's
// workspace bound, core/gpu transposedSplits); S when A = Z.
__device__ __forceinline__ int64_t skew_splits(int64_t S, int64_t Z, int64_t A, int64_t Ri) {
	const int64_t cap = S > (Ri / 64 < 32 ? Ri / 64 : 32) ? S : (Ri / 64 < 32 ? Ri / 64 : 32);
	const int64_t s = A > 0 ? S * Z / A : S;
	return s < cap ? s : cap;
}

// The parameters of expert e for the tile code: its planes, escape index,
// base, bias row, and its rows [r0, r1) of x and y.
__device__ __forceinline__ glyd_kparams expert_params(const glyd_kparams &p, int64_t e, int64_t r0, int64_t r1) {
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
	q.tiled = 0; // experts keep row-major planes (a constant: the tiles' addresses fold as before)
	return q;
}

// Runs tile(q, mt) for every TB-row tile mt of this block's expert's rows of
// x (q: the expert's parameters, expert_params), nothing for a block past
// the last expert with rows.
template <int TB, class Tile>
__device__ __forceinline__ void expert_tiles(const glyd_kparams &p, Tile tile) {
	griddep_launch();
	griddep_wait(); // the offsets and x are the previous kernels' outputs
	int64_t r0, r1;
	const int64_t e = block_expert(p, blockIdx.z, &r0, &r1);
	if (e < 0) return;
	const glyd_kparams q = expert_params(p, e, r0, r1);
	for (int64_t mt = 0; mt * TB < q.rows; mt++) tile(q, mt);
}

template <int MT, int NT, int WN, int WK, int U, bool SAFE>
__device__ __forceinline__ void linear_f12_experts(const glyd_kparams &p, float *smem) {
	expert_tiles<8 * NT>(p, [&](const glyd_kparams &q, int64_t mt) {
		linear_f12<MT, NT, WN, WK, U, SAFE>(q, smem, mt, blockIdx.y, 0);
	});
}

// The same over the Hopper (sm_90a) wgmma tiles of linear.cu: 64 weight rows
// by TB rows of x at a time.
template <int TB, int KG, int S, int U, int PW, bool SAFE>
__device__ __forceinline__ void linear_f12w_experts(const glyd_kparams &p, float *smem) {
	expert_tiles<TB>(p, [&](const glyd_kparams &q, int64_t mt) {
		wgmma_tile<TB, KG, S, U, PW, SAFE>(q, smem, mt, blockIdx.y, 0);
	});
}

#define GLYD_LING(MT, NT, WN, WK, U, BOUNDS)                                                          \
	GLYD_KERNEL_PAIR(glyd_lin_f12g_m##MT##n##NT##w##WN##k##WK##u##U, BOUNDS, linear_f12_experts, MT, NT, WN, WK, U)

// Launch bounds: the 16-row tile capped for 3 blocks per SM (the expert loop
// took it to 121 registers, 2 blocks per SM; capped it spills 8 bytes).
#define GLYD_LINGW(TB, KG, S, U, PW, BOUNDS)                                                          \
	GLYD_KERNEL_PAIR(glyd_lin_f12gw_t##TB##k##KG##s##S##u##U##p##PW, BOUNDS, linear_f12w_experts, TB, KG, S, U, PW)

// The grouped configurations (core/gpu/moe.go, groupedConfigs: chosen by the
// mean rows per expert): tiles of the dense kernel for 8, 16, 32, 64 tokens,
// and on sm_90 the wgmma tiles for 16, 32, 48, 64, 96 and 128.
// The 8- and 16-row tiles (decode steps: up to 8 rows per expert) capped at
// 64 registers for 4 blocks per SM (the expert scan took them to 69 and 74,
// 3 blocks): Llama-4-Scout's 1-token block 0.129 -> 0.122 ms, Mixtral's 0.199
// -> 0.175, Mixtral at 32 tokens 0.761 -> 0.690 although the 16-row tile
// spills 24 bytes (session 15). The dense m1n2 tile and t16k2 capped the
// same way lost 9-20% (spills, and no gain from the occupancy).
GLYD_LING(1, 1, 1, 8, 1, (256, 4))
GLYD_LING(1, 2, 1, 8, 1, (256, 4))
GLYD_LING(2, 4, 1, 8, 1, (256))
GLYD_LING(1, 8, 2, 4, 1, (256))
GLYD_LINGW(16, 1, 4, 4, 2, (192, 3))
GLYD_LINGW(32, 1, 4, 4, 2, (192, 3))
GLYD_LINGW(48, 1, 4, 4, 4, (256))
GLYD_LINGW(64, 1, 4, 4, 4, (256))
GLYD_LINGW(96, 1, 4, 2, 2, (192))
GLYD_LINGW(128, 1, 4, 2, 2, (192))

// ---------------------------------------------------------------------------
// Transposed experts: each expert stored [Ri, Co] = [in, out] (y = x · W, as
// Llama 4, gpt-oss and Aria keep them), element (r, c) at r*Co + c of its
// group. In the table's escape index the rows are the Ri input rows.

// 8 consecutive weights as fp32, w[j] = element j (decode8's pairs unpacked).
// SAFE: code 15 (escape) gets exponent 0, i.e. the weight becomes its sign and
// mantissa bits as a subnormal; else base + 15 (the table's ebase). The
// caller adds x * (true - that) from the escape records.
template <bool SAFE>
__device__ __forceinline__ void decode8_f32(const uint2 s, const uint32_t cw, const uint32_t B4, float (&w)[8]) {
	uint32_t v[4];
	decode8<SAFE>(s.x, s.y, cw, B4, v);
	constexpr int lo[4] = {0, 2, 1, 3}; // pair i = elements (lo[i], lo[i] + 4)
#pragma unroll
	for (int i = 0; i < 4; i++) {
		w[lo[i]] = __uint_as_float(v[i] << 16);
		w[lo[i] + 4] = __uint_as_float(v[i] & 0xffff0000u);
	}
}

constexpr int UR = 4; // input rows per batch of a warp; two batches in flight

// The escape corrections of this warp's input rows r_lo + warp + 8i < r_hi
// for the block's columns [cb, cb + 256), added to acc (lane l owns columns
// cb + 8l .. +7) in row order, then column order: deterministic. The row's
// records are found 32 rows at a time (a scan of their counts), fetched one
// per lane with the x they need, and broadcast to the owning lane, so a warp
// waits three round trips per 32 rows instead of one per record.
template <int NT, int A>
__device__ __forceinline__ void tescapes(const glyd_expert &ex, const uint16_t *x, int64_t Ri, int64_t cb,
                                         int64_t r_lo, int64_t r_hi, int64_t t0, int64_t m1, float (&acc)[A][8]) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint32_t *erows = (const uint32_t *)ex.escrows;
	const uint2 *recs = (const uint2 *)ex.escrecs;
	for (int64_t rw = r_lo + warp; rw < r_hi; rw += 8 * 32) {
		const int64_t r = rw + 8 * lane;
		uint32_t e0 = 0, n = 0;
		if (r < r_hi) {
			e0 = erows[r];
			n = erows[r + 1] - e0;
		}
		uint32_t inc = n;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			const uint32_t v = __shfl_up_sync(0xffffffffu, inc, o);
			if (lane >= o) inc += v;
		}
		const uint32_t excl = inc - n, total = __shfl_sync(0xffffffffu, inc, 31);
		for (uint32_t q0 = 0; q0 < total; q0 += 32) {
			const uint32_t q = q0 + lane;
			int l = 0; // the row lane of record q: the last lane whose first record is <= q
#pragma unroll
			for (int step = 16; step >= 1; step >>= 1)
				if (__shfl_sync(0xffffffffu, excl, l + step) <= q) l += step;
			const uint32_t idx = __shfl_sync(0xffffffffu, e0, l) + q - __shfl_sync(0xffffffffu, excl, l);
			const int64_t row = rw + 8 * l;
			uint2 rec = make_uint2(0, 0);
			if (q < total) rec = recs[idx];
			const int64_t d = (int64_t)rec.x - cb;
			const bool mine = q < total && d >= 0 && d < 256;
			float xv[NT];
#pragma unroll
			for (int t = 0; t < NT; t++) xv[t] = mine && t0 + t < m1 ? bf16_to_f32(x[(t0 + t) * Ri + row]) : 0.f;
			for (uint32_t m = __ballot_sync(0xffffffffu, mine); m; m &= m - 1) {
				const int src = __ffs(m) - 1;
				const int col = __shfl_sync(0xffffffffu, (int)d, src);
				const uint32_t bits = __shfl_sync(0xffffffffu, rec.y, src);
				float xs[NT];
#pragma unroll
				for (int t = 0; t < NT; t++) xs[t] = __shfl_sync(0xffffffffu, xv[t], src);
				// a select per accumulator: a branch on (col & 7) made ptxas
				// move acc to local memory to index it
#pragma unroll
				for (int j = 0; j < 8; j++) {
					const bool hit = lane == col >> 3 && j == (col & 7);
#pragma unroll
					for (int t = 0; t < NT; t++) {
						const float v = add_escape(acc[t][j], xs[t], bits, ex.ebase);
						acc[t][j] = hit ? v : acc[t][j];
					}
				}
			}
		}
	}
}

// This warp's input rows, UR at a time: one batch of the planes and of x.
// Lane l < UR*NT fetches x of row u = l % UR, token t = l / UR; the lanes
// read it by shuffle. Rows past r_hi or columns past Co decode to a finite
// weight (sign and mantissa 0, code 15) times x = 0, or are never stored.
template <int NT>
struct TBatch {
	uint2 s[UR];
	uint32_t cw[UR];
	uint32_t xb;
};

// One pass over this warp's input rows [r_lo + warp, r_hi) step 8 for tokens
// t0 .. t0+NT-1 (rows of x; those >= m1 read as 0), columns c .. c+7: the
// escape corrections first (tescapes, behind the first batch's loads), then
// the decoded weights times x, the next batch in flight. SAFE as decode8_f32.
template <int NT, int A, bool SAFE>
__device__ __forceinline__ void tpass(const glyd_expert &ex, const uint16_t *x, int64_t Ri, int64_t Co, int64_t c,
                                      bool cok, int64_t r_lo, int64_t r_hi, int64_t t0, int64_t m1,
                                      float (&acc)[A][8]) {
	static_assert(UR * NT <= 32 && NT <= A, "a lane fetches one x per batch");
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const uint8_t *sm = (const uint8_t *)ex.sm;
	const uint8_t *code = (const uint8_t *)ex.code;
	const uint32_t B4 = ex.base * 0x01010101u;
	const int64_t rb0 = r_lo + warp;
	// the lane's planes at row rb (moved on by a batch's rows each load)
	const uint8_t *smp = pin(sm + rb0 * Co + c), *cdp = pin(code + (rb0 * Co + c) / 2);
	auto load = [&](TBatch<NT> &b, int64_t rb) {
#pragma unroll
		for (int u = 0; u < UR; u++) {
			const int64_t r = rb + 8 * u;
			b.s[u] = make_uint2(0, 0);
			b.cw[u] = 0xffffffffu;
			if (r < r_hi && cok) {
				b.s[u] = ld_stream8(smp + 8 * u * Co);
				b.cw[u] = ld_stream4(cdp + 4 * u * Co);
			}
		}
		smp += 8 * UR * Co;
		cdp += 4 * UR * Co;
		const int u = lane % UR, t = lane / UR;
		const int64_t r = rb + 8 * u;
		b.xb = 0;
		if (t < NT && r < r_hi && t0 + t < m1) b.xb = x[(t0 + t) * Ri + r];
	};
	auto compute = [&](const TBatch<NT> &b) {
#pragma unroll
		for (int u = 0; u < UR; u++) {
			float w[8], xv[NT];
			decode8_f32<SAFE>(b.s[u], b.cw[u], B4, w);
#pragma unroll
			for (int t = 0; t < NT; t++) xv[t] = bf16_to_f32(__shfl_sync(0xffffffffu, b.xb, t * UR + u));
#pragma unroll
			for (int t = 0; t < NT; t++)
#pragma unroll
				for (int j = 0; j < 8; j++) acc[t][j] = fmaf(xv[t], w[j], acc[t][j]);
		}
	};
	TBatch<NT> cur, nxt;
	load(cur, rb0);
	if (ex.escrows) tescapes<NT, A>(ex, x, Ri, c - 8 * lane, r_lo, r_hi, t0, m1, acc);
	for (int64_t rb = rb0; rb < r_hi; rb += 8 * UR) {
		if (rb + 8 * UR < r_hi) load(nxt, rb + 8 * UR);
		compute(cur);
		cur = nxt;
	}
}

// One pass of tpass, SAFE when the experts table gives escapes exponent 0
// (core/gpu: all experts, when one has base + 15 >= 255).
template <int NT, int A>
__device__ __forceinline__ void tpass_any(const glyd_expert &ex, const uint16_t *x, int64_t Ri, int64_t Co,
                                          int64_t c, bool cok, int64_t r_lo, int64_t r_hi, int64_t t0, int64_t m1,
                                          float (&acc)[A][8]) {
	if (ex.ebase == 0) tpass<NT, A, true>(ex, x, Ri, Co, c, cok, r_lo, r_hi, t0, m1, acc);
	else tpass<NT, A, false>(ex, x, Ri, Co, c, cok, r_lo, r_hi, t0, m1, acc);
}

// Tokens per pass TT: 4, or 1 for the launches where an expert gets about
// one row (decode steps): its accumulators leave room for four blocks per SM.
template <int TT>
__device__ __forceinline__ void transposed_experts(const glyd_kparams &p) {
	__shared__ float red[7][TT][256]; // warps 1..7: [warp-1][token][column in the tile]
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	// The S x Z blocks of a column tile (grid y, z) go to the A experts with
	// rows, S2 = skew_splits(...) slices of input rows each: S when all Z
	// expert slots have rows (A = Z), more when the rows crowd into fewer.
	// Not in the one-token kernel (rows <= experts): at its 64-register cap
	// the remap spilled.
	uint32_t slot = blockIdx.z, split = blockIdx.y, S2 = gridDim.y;
	if (TT > 1 && gridDim.z > 1) {
		const int64_t A = experts_with_rows(p);
		S2 = (uint32_t)skew_splits(gridDim.y, gridDim.z, A, p.K);
		const uint32_t L = blockIdx.z * gridDim.y + blockIdx.y;
		slot = L / S2;
		split = L % S2;
		if (slot >= A) return;
	}
	int64_t m0, m1;
	const int64_t e = block_expert(p, slot, &m0, &m1);
	if (e < 0) return;
	const glyd_expert ex = ((const glyd_expert *)p.experts)[e];
	const int64_t Ri = p.K, Co = p.N;
	const int64_t c = (int64_t)blockIdx.x * 256 + lane * 8;
	const bool cok = c < Co;
	const int64_t r_lo = Ri * split / S2, r_hi = Ri * (split + 1) / S2;
	const uint16_t *x = (const uint16_t *)p.x;
	float *ws = (float *)p.ws + (size_t)split * (size_t)p.rows * (size_t)Co;
	for (int64_t t0 = m0; t0 < m1; t0 += TT) {
		float acc[TT][8];
#pragma unroll
		for (int t = 0; t < TT; t++)
#pragma unroll
			for (int j = 0; j < 8; j++) acc[t][j] = 0.f;
		if (TT == 1 || m1 - t0 == 1)
			tpass_any<1, TT>(ex, x, Ri, Co, c, cok, r_lo, r_hi, t0, m1, acc);
		else
			tpass_any<TT, TT>(ex, x, Ri, Co, c, cok, r_lo, r_hi, t0, m1, acc);
		// the 8 warps' sums, added in warp order; warp 0 stores the split's partials
		if (warp > 0) {
#pragma unroll
			for (int t = 0; t < TT; t++)
#pragma unroll
				for (int j = 0; j < 8; j++) red[warp - 1][t][lane * 8 + j] = acc[t][j];
		}
		__syncthreads();
		if (warp == 0 && cok) {
#pragma unroll
			for (int w = 0; w < 7; w++)
#pragma unroll
				for (int t = 0; t < TT; t++)
#pragma unroll
					for (int j = 0; j < 8; j++) acc[t][j] += red[w][t][lane * 8 + j];
#pragma unroll
			for (int t = 0; t < TT; t++)
				if (t0 + t < m1) {
					float *o = ws + (t0 + t) * Co + c;
#pragma unroll
					for (int j = 0; j < 8; j++) o[j] = acc[t][j];
				}
		}
		__syncthreads(); // red is reused by the next pass
	}
}

extern "C" __global__ void __launch_bounds__(256) glyd_lin_f12t_experts(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	transposed_experts<4>(p);
}
extern "C" __global__ void __launch_bounds__(256, 4) glyd_lin_f12t1_experts(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	transposed_experts<1>(p);
}

// y[m][c] = bf16(the sum, in split order, of ws[s][m][c] over the splits the kernel used) for
// rows m below the clamped offs[E-1] (rows routed nowhere are not written).
extern "C" __global__ void __launch_bounds__(256) glyd_lin_f12t_reduce(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	// The splits the transposed kernel used (skew_splits of its grid's S and
	// Z = min(experts, rows); the one-token kernel, rows <= experts, keeps S).
	const int64_t S2 = p.rows > p.num_experts && p.num_experts > 1
	                       ? skew_splits(p.splits, p.num_experts, experts_with_rows(p), p.K)
	                       : p.splits;
	int64_t total = ((const int32_t *)p.offs)[p.num_experts - 1];
	total = total < 0 ? 0 : (total > p.rows ? p.rows : total);
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= total * p.N) return;
	const float *ws = (const float *)p.ws;
	const size_t plane = (size_t)p.rows * (size_t)p.N;
	float v = 0.f;
	for (int64_t s = 0; s < S2; s++) v += ws[(size_t)s * plane + i];
	((uint16_t *)p.y)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Bin of a routing id: the expert (routed or identity), or `total` (dropped).
__device__ __forceinline__ int32_t route_bin(int64_t id, int64_t total) {
	return id >= 0 && id < total ? (int32_t)id : (int32_t)total;
}

// Warps that count and place the pairs, each a contiguous range of them: as
// many as 32 while their per-bin counts fit in 96 KiB of shared memory beside
// the bin starts and the pairs' bins, and no more than the pairs need (one per
// 32), so that a decode step's routing is a small block that finds room beside
// a GEMV; the block has exactly these warps (core/gpu/route.go sizes the same).
__device__ __forceinline__ int route_warps(int64_t P, int32_t NB) {
	const int64_t room = 96 * 1024 - (int64_t)(NB + 1) * 4 - ((P * 2 + 15) & ~(int64_t)15);
	int64_t w = room / ((int64_t)NB * 4);
	if (w > (P + 31) / 32) w = (P + 31) / 32;
	return w < 1 ? 1 : (w > 32 ? 32 : (int)w);
}

extern "C" __global__ void __launch_bounds__(1024) glyd_moe_route(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	extern __shared__ int32_t rsm[];
	const int64_t P = p.rows, Z = p.experts_total, E = p.num_experts;
	const int32_t NB = (int32_t)Z + 1; // bins; start[NB] = P
	const int W = route_warps(P, NB);
	int32_t *start = rsm;                          // [NB + 1]: each bin's first row
	int32_t *cnt = rsm + NB + 1;                   // [W][NB]: each warp's counts, then its offset in the bin
	uint16_t *bins = (uint16_t *)(cnt + W * NB);   // [P] (host: total < 65535)
	const int64_t *ids = (const int64_t *)p.ids;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint32_t below = (1u << lane) - 1u;
	const int64_t per = (P + W - 1) / W, lo = warp * per, hi = lo + per < P ? lo + per : P;
	for (int32_t i = tid; i < W * NB; i += blockDim.x) cnt[i] = 0;
	__syncthreads();
	if (warp < W) { // count this warp's pairs per bin (the last of equal bins adds them)
		for (int64_t i0 = lo; i0 < hi; i0 += 32) {
			const int64_t i = i0 + lane;
			const int32_t b = i < hi ? route_bin(ids[i], Z) : -1;
			if (i < hi) bins[i] = (uint16_t)b;
			const uint32_t peers = __match_any_sync(0xffffffffu, b);
			if (i < hi && (peers >> lane) == 1u) cnt[warp * NB + b] += __popc(peers);
		}
	}
	__syncthreads();
	for (int32_t b = tid; b < NB; b += blockDim.x) { // per bin: the warps' offsets, the total
		int32_t run = 0;
		for (int w = 0; w < W; w++) {
			const int32_t c = cnt[w * NB + b];
			cnt[w * NB + b] = run;
			run += c;
		}
		start[b] = run;
	}
	__syncthreads();
	if (tid < 32) { // exclusive scan of the totals: lane l takes bins [l*C, l*C + C)
		const int32_t C = (NB + 31) / 32, b0 = lane * C;
		int32_t sum = 0;
		for (int32_t b = b0; b < b0 + C && b < NB; b++) sum += start[b];
		int32_t inc = sum;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			const int32_t v = __shfl_up_sync(0xffffffffu, inc, o);
			if (lane >= o) inc += v;
		}
		int32_t run = inc - sum;
		for (int32_t b = b0; b < b0 + C && b < NB; b++) {
			const int32_t c = start[b];
			start[b] = run;
			run += c;
		}
		if (lane == 31) start[NB] = inc;
	}
	__syncthreads();
	int32_t *offs = (int32_t *)p.offs;
	for (int64_t e = tid; e < E; e += blockDim.x) offs[e] = start[e + 1];
	if (warp >= W) return;
	// Each warp places its pairs in pair order: a stable sort by bin.
	int32_t *rowof = (int32_t *)p.rowof, *tok = (int32_t *)p.tok;
	for (int64_t i0 = lo; i0 < hi; i0 += 32) {
		const int64_t i = i0 + lane;
		const int32_t b = i < hi ? (int32_t)bins[i] : -1;
		const uint32_t peers = __match_any_sync(0xffffffffu, b);
		const int32_t row = i < hi ? start[b] + cnt[warp * NB + b] + __popc(peers & below) : 0;
		__syncwarp();
		if (i < hi && (peers >> lane) == 1u) cnt[warp * NB + b] += __popc(peers); // the last of its peers
		__syncwarp();
		if (i < hi) {
			rowof[i] = row;
			tok[row] = (int32_t)(i / p.topk);
		}
	}
}

// 8 bf16 features at src (n of them, n < 8 only at the end of a row): one
// 16-byte load when vec (the host aligns the tensors), else the n, zero-filled.
__device__ __forceinline__ void load8(const uint16_t *src, int n, bool vec, uint16_t (&v)[8]) {
	if (vec) *(uint4 *)v = *(const uint4 *)src;
	else
		for (int j = 0; j < 8; j++) v[j] = j < n ? src[j] : 0;
}
// The first n of 8 features to dst, as load8.
__device__ __forceinline__ void store8(uint16_t *dst, const uint16_t (&o)[8], int n, bool vec) {
	if (vec) *(uint4 *)dst = *(const uint4 *)o;
	else
		for (int j = 0; j < n; j++) dst[j] = o[j];
}

// out[r][j] = bf16(bf16(silu(g)) * u), g = x[r][j], u = x[r][I + j] for x
// [rows, 2I] (gate then up, as torch's chunk(2)), silu(v) = v / (1 + exp(-v))
// in fp32: the bits of torch's `silu(gate) * up` in bf16 (each op rounds), in
// one pass over contiguous memory instead of two over strided halves.
extern "C" __global__ void __launch_bounds__(256) glyd_moe_silu_mul(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	// item g = features [8j, 8j + 8) of row r, g = r * J + j: every thread busy
	// whatever I (one row per block left most threads idle at I = 768)
	const int64_t I = p.N, J = (I + 7) / 8, items = p.rows * J;
	const bool vec = (I & 7) == 0; // host: x and y 16-byte aligned
	for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < items; g += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = g / J, j0 = (g - r * J) * 8;
		const int n = I - j0 < 8 ? (int)(I - j0) : 8;
		const uint16_t *gp = (const uint16_t *)p.x + r * 2 * I + j0, *up = gp + I;
		uint16_t gv[8], uv[8], o[8];
		load8(gp, n, vec, gv);
		load8(up, n, vec, uv);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const float a = bf16_to_f32(gv[j]);
			const float s = bf16_to_f32(__bfloat16_as_ushort(__float2bfloat16_rn(__fdiv_rn(a, __fadd_rn(1.f, expf(-a))))));
			o[j] = __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(s, bf16_to_f32(uv[j]))));
		}
		store8((uint16_t *)p.y + r * I + j0, o, n, vec);
	}
}

extern "C" __global__ void __launch_bounds__(256) glyd_moe_combine(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	const int64_t H = p.N, t = blockIdx.y, k = p.topk;
	const int64_t h0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
	if (h0 >= H) return;
	const int n = H - h0 < 8 ? (int)(H - h0) : 8;
	const bool vec = n == 8 && (H & 7) == 0; // host: x, d, out 16-byte aligned
	const uint16_t *x = (const uint16_t *)p.x, *d = (const uint16_t *)p.dst;
	const int64_t *ids = (const int64_t *)p.ids;
	const int32_t *rowof = (const int32_t *)p.rowof;
	const float *rw = (const float *)p.rw;
	float acc[8];
#pragma unroll
	for (int j = 0; j < 8; j++) acc[j] = 0.f;
	for (int64_t s = 0; s < k; s++) {
		const int64_t pair = t * k + s, id = ids[pair];
		const uint16_t *src;
		if (id >= 0 && id < p.num_experts) src = d + (int64_t)rowof[pair] * H + h0;
		else if (id >= p.num_experts && id < p.experts_total) src = x + t * H + h0;
		else continue;
		const float w = rw[pair];
		uint16_t v[8];
		load8(src, n, vec, v);
#pragma unroll
		for (int j = 0; j < 8; j++) acc[j] = __fadd_rn(acc[j], __fmul_rn(bf16_to_f32(v[j]), w));
	}
	uint16_t o[8];
#pragma unroll
	for (int j = 0; j < 8; j++) o[j] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[j]));
	store8((uint16_t *)p.y + t * H + h0, o, n, vec);
}

// Llama 4's experts input: x [rows, K] holds each token once per expert,
// expert-major (p.topk rows per expert), scaled by its router score. ids[r] =
// r / p.topk where row r has a non-zero element (any bit but the sign), else
// -1: the routing glyd_moe_route sorts. A warp per row, 8 rows per block.
extern "C" __global__ void __launch_bounds__(256) glyd_moe_row_experts(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	const int64_t K = p.K, r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (r >= p.rows) return;
	const uint16_t *x = (const uint16_t *)p.x + r * K;
	uint32_t any = 0;
	if ((K & 7) == 0) { // host: x 16-byte aligned
		for (int64_t k = lane * 8; k < K; k += 256) {
			const uint4 v = *(const uint4 *)(x + k);
			any |= (v.x | v.y | v.z | v.w) & 0x7fff7fffu;
		}
	} else {
		for (int64_t k = lane; k < K; k += 32) any |= x[k] & 0x7fffu;
	}
	any = __any_sync(0xffffffffu, any != 0);
	if (lane == 0) ((int64_t *)p.ids)[r] = any ? r / p.topk : -1;
}

// torch.topk's order of a bf16 value as an unsigned key (its radix select):
// numbers by value with -0 below +0, every NaN above all numbers.
__device__ __forceinline__ uint32_t topk_key(uint16_t b) {
	if ((b & 0x7fffu) > 0x7f80u) return 0xffffu;
	return b & 0x8000u ? b ^ 0xffffu : b | 0x8000u;
}

// Top-1 routing of Llama 4 (glyd_moe_top1): logits bf16 [rows, E] at p.x;
// ids int64 [rows] at p.ids, score bf16 [rows] at p.y. A warp per token: the
// largest key, the lowest expert between equal keys.
extern "C" __global__ void __launch_bounds__(256) glyd_moe_top1(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	const int64_t E = p.num_experts, t = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (t >= p.rows) return;
	const uint16_t *l = (const uint16_t *)p.x + t * E;
	uint32_t key = 0;
	int32_t arg = 0x7fffffff; // none: loses to every expert
	for (int32_t e = lane; e < E; e += 32) {
		const uint32_t k = topk_key(l[e]) + 1; // 0 = none
		if (k > key) key = k, arg = e;
	}
#pragma unroll
	for (int o = 16; o >= 1; o >>= 1) {
		const uint32_t k = __shfl_down_sync(0xffffffffu, key, o);
		const int32_t a = __shfl_down_sync(0xffffffffu, arg, o);
		if (k > key || (k == key && a < arg)) key = k, arg = a;
	}
	if (lane == 0) {
		((int64_t *)p.ids)[t] = arg;
		// torch's sigmoid in fp32, 1 / (1 + exp(-v)), then bf16
		const float v = bf16_to_f32(l[arg]);
		const float s = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-v)));
		((uint16_t *)p.y)[t] = __bfloat16_as_ushort(__float2bfloat16_rn(s));
	}
}

// out[r] = bf16(x[tok[r]] * score[tok[r]]) for r < p.rows (glyd_moe_gather_scale):
// x bf16 [*, H] at p.x, tok int32 at p.tok, score bf16 at p.dst, out bf16
// [rows, H] at p.y; H = p.N.
extern "C" __global__ void __launch_bounds__(256) glyd_moe_gather_scale(const glyd_kparams p) {
	griddep_launch();
	griddep_wait();
	const int64_t H = p.N, J = (H + 7) / 8, items = p.rows * J;
	const bool vec = (H & 7) == 0; // host: x and out 16-byte aligned
	const int32_t *tok = (const int32_t *)p.tok;
	const uint16_t *score = (const uint16_t *)p.dst;
	for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < items; g += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = g / J, j0 = (g - r * J) * 8, t = tok[r];
		const int n = H - j0 < 8 ? (int)(H - j0) : 8;
		const float s = bf16_to_f32(score[t]);
		uint16_t v[8], o[8];
		load8((const uint16_t *)p.x + t * H + j0, n, vec, v);
#pragma unroll
		for (int j = 0; j < 8; j++) o[j] = __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(bf16_to_f32(v[j]), s)));
		store8((uint16_t *)p.y + r * H + j0, o, n, vec);
	}
}
