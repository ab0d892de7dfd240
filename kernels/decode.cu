/*
 * decode.cu — packed planes -> bf16 in device memory, bit for bit.
 *
 * Contract
 *   Input : the planes of ONE group of a packed bf16 tensor (docs/FORMAT.md,
 *           part I, layouts version 1), group offsets already
 *           added by the host. Output: dst[i] = the original bf16 bits of
 *           element i of the group, i in [0, n).
 *   Every kernel takes one glyd_kparams (core/gpu/glyd_kernel_params.h).
 *
 * Kernels
 *   glyd_decode_f12_vec   fixed12, 12 units of 8 elements per thread per step: per
 *                         unit an 8-byte load of sign+mantissa, a 4-byte load of
 *                         codes and a 16-byte store, lane-consecutive (whole
 *                         sectors per warp instruction); all 24 loads issued first
 *                         (144 bytes per thread, 3 blocks per SM: ~110 KB in flight).
 *                         Grid-stride; grid = SMs x 8, 256 threads.
 *                         Preconditions: sm 8-, code 4-, dst 16-byte aligned
 *                         (sm and code at element f, below).
 *                         Elements past the last multiple of 8: the tail loop.
 *   glyd_decode_f12_bulk  fixed12 on sm_90a, the vec kernel's contract with
 *                         16-byte aligned sm and code: chunks of planes copied
 *                         into shared memory by the bulk copy engine (below).
 *   glyd_decode_f12_scalar fixed12, one element per thread (any alignment).
 *   Both fixed12 kernels decode elements [f, f + n) of the group, f = row0*K
 *                         (0 for a whole group: the host zeroes row0 and K), to
 *                         dst[0, n). Row-range decode (p.K > 0, DecodeRows: a
 *                         tile of weight rows that a GEMM reads right after)
 *                         stores with the default write-back policy so the tile
 *                         stays in L2; a whole-group decode streams (evict-first).
 *                         The vec kernel needs f % 8 == 0 (host checks).
 *   glyd_decode_small     smallest, one 256-thread block per 4096-element chunk,
 *                         16 consecutive elements per thread; level-2/3 entries
 *                         are found by block-wide prefix counts (no stored prefix).
 *   glyd_escape_scatter   both layouts: dst[escidx[e]] = sm byte + escexp[e]
 *                         (escidx: uint32 element indices within the group),
 *                         one thread per escape. Launched after the decode kernel
 *                         on the same stream: the decode kernels write some
 *                         value for escaped elements (code 15), this kernel
 *                         replaces it with the exact one.
 *   glyd_escape_scatter_rows  fixed12 row-range decode (DecodeRows; after the
 *                         decode kernel of rows [row0, row0 + N)): the exact bf16 of every
 *                         escape of those rows, from the escape index of the
 *                         fused kernels (escrows = uint32 [rows+1] ranges into
 *                         the 8-byte records at escrecs {uint32 k, bf16 bits});
 *                         dst row r - row0, column k. One warp per row (rows of
 *                         all-zero weights can have K escapes), its lanes
 *                         striding the row's records; grid-stride over rows,
 *                         256 threads. Records with k >= K are skipped (no
 *                         write outside the row).
 *   glyd_decode_f12_gather fixed12 rows picked by index (an embedding lookup,
 *                         DecodeGather): decode and escapes of one row per
 *                         block (at the end of this file).
 *
 * Decode of one bf16 from sign+mantissa byte b and exponent e:
 *   bits = (b & 0x80) << 8 | e << 7 | (b & 0x7f).
 * Vector form used here, two elements in one 32-bit word (lo = first):
 *   P = prmt(S, ., sel) puts byte b_i in bits 0..7 and its sign replicated in
 *       bits 8..15 (prmt's sign-replicate mode), same for b_j in bits 16..31;
 *   E = exponents e_i at bits 7..14 and e_j at bits 23..30 (garbage elsewhere
 *       only in bits that the mask below takes from P);
 *   bf16x2 = lop3(P, E, 0x807f807f) = (P & M) | (E & ~M).
 */
#include "common.cuh"
#include "wgmma.cuh"

// Per-byte add without carries between bytes (codes 0..15 plus base 0..255;
// code 15 of an escape may wrap, the scatter kernel rewrites it anyway).
__device__ __forceinline__ uint32_t add_bytes(uint32_t a, uint32_t b) {
	return __vadd4(a, b);
}

// 8 consecutive elements: 8 sm bytes (sa, sb) and one code word (8 nibbles)
// -> 4 bf16x2 words in element order.
__device__ __forceinline__ uint4 decode8(const uint32_t sa, const uint32_t sb, const uint32_t cw, const uint32_t B4) {
	const uint32_t ca = add_bytes(cw & 0x0f0f0f0fu, B4);        // e0 e2 e4 e6 (bytes 0..3)
	const uint32_t cb = add_bytes((cw >> 4) & 0x0f0f0f0fu, B4); // e1 e3 e5 e7
	// pair (0,1): e0 = ca.b0, e1 = cb.b0 -> bytes 0 and 2, then << 7
	const uint32_t e01 = __byte_perm(ca, cb, 0x0400) << 7;
	const uint32_t e23 = __byte_perm(ca, cb, 0x0501) << 7;
	const uint32_t e45 = __byte_perm(ca, cb, 0x0602) << 7;
	const uint32_t e67 = __byte_perm(ca, cb, 0x0703) << 7;
	return make_uint4(lop3_sel(prmt_sr(sa, sb, 0x9180), e01), lop3_sel(prmt_sr(sa, sb, 0xB3A2), e23),
	                  lop3_sel(prmt_sr(sa, sb, 0xD5C4), e45), lop3_sel(prmt_sr(sa, sb, 0xF7E6), e67));
}

// Each thread decodes VEC units of 8 elements per step, all loads issued
// before the first use. Unit u of a warp's step is lane-consecutive, so every
// load and store instruction of a warp covers whole sectors (256 B of sm,
// 128 B of codes, 512 B of bf16).
constexpr int VEC = 12;

// The loop of glyd_decode_f12_vec over n elements, grid-stride along x (the
// experts kernel of moe.cu runs it once per expert along y). KEEP: plain
// stores that leave the output in L2 (a row-range tile a GEMM reads next);
// otherwise streaming stores (evict-first). V: units per thread and step
// (python/benchmarks/decode_bw.cu measures others). tiled (glyd_kparams.tiled):
// the planes from sm, code on hold whole 16-row groups tiled, dst is
// row-major. ubeg: the first unit to decode (the bulk kernel's tail).
template <bool KEEP = false, int V = VEC>
__device__ __forceinline__ void decode_f12_span(const uint8_t *sm, const uint8_t *code, uint16_t *dst,
                                                const uint64_t n, const uint32_t base, const uint32_t tiled = 0,
                                                const uint64_t ubeg = 0) {
	const uint64_t nu = n / 8;
	const uint32_t B4 = base * 0x01010101u;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t u0 = ubeg + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; u0 < nu; u0 += stride * V) {
		uint2 s[V];
		uint32_t c[V];
#pragma unroll
		for (int j = 0; j < V; j++) {
			const uint64_t u = u0 + j * stride;
			if (u < nu) {
				s[j] = ld_stream8(sm + u * 8);
				c[j] = ld_stream4(code + u * 4);
			}
		}
#pragma unroll
		for (int j = 0; j < V; j++) {
			const uint64_t u = u0 + j * stride;
			if (u < nu) {
				const uint4 v = decode8(s[j].x, s[j].y, c[j], B4);
				uint16_t *d = dst + (tiled ? tiled_unit(u, tiled) : u) * 8;
				if (KEEP) st_keep16(d, v); else st_stream16(d, v);
			}
		}
	}
	// Tail: the last n % 8 elements, one per thread of the first block (none
	// when tiled: K % 64 == 0).
	if (blockIdx.x == 0) {
		for (uint64_t i = nu * 8 + threadIdx.x; i < n; i += blockDim.x) {
			const uint32_t c = (code[i >> 1] >> ((i & 1) * 4)) & 15u;
			dst[i] = bf16_bits(sm[i], (base + c) & 0xffu);
		}
	}
}

// Elements [f, f + n) of the group, f = row0*K (0 for a whole group; the host
// gives f % 8 == 0 here, and when tiled row0 and n / K multiples of 16, so
// that [f, f + n) of the planes is whole 16-row groups).
extern "C" __global__ void __launch_bounds__(256, 3) glyd_decode_f12_vec(const glyd_kparams p) {
	const uint64_t first = (uint64_t)p.row0 * (uint64_t)p.K;
	const uint8_t *sm = (const uint8_t *)p.sm + first;
	const uint8_t *code = (const uint8_t *)p.code + first / 2;
	if (p.K > 0)
		decode_f12_span<true>(sm, code, (uint16_t *)p.dst, p.n, p.base, p.tiled);
	else
		decode_f12_span<false>(sm, code, (uint16_t *)p.dst, p.n, p.base, p.tiled);
}

extern "C" __global__ void __launch_bounds__(256) glyd_decode_f12_scalar(const glyd_kparams p) {
	const uint64_t first = (uint64_t)p.row0 * (uint64_t)p.K; // any parity
	const uint8_t *sm = (const uint8_t *)p.sm;
	const uint8_t *code = (const uint8_t *)p.code;
	uint16_t *dst = (uint16_t *)p.dst;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
		const uint64_t e = plane_index(first + i, p.tiled);
		const uint32_t c = (code[e >> 1] >> ((e & 1) * 4)) & 15u;
		dst[i] = bf16_bits(sm[e], (p.base + c) & 0xffu);
	}
}

// The escapes of one group of n elements, grid-strided: dst[escidx[e]] gets
// its sm byte with exponent escexp[e] (indices past n are ignored; tiled as
// glyd_kparams.tiled).
__device__ __forceinline__ void escape_scatter(const uint8_t *sm, const uint32_t *escidx, const uint8_t *escexp,
                                               uint64_t escapes, uint64_t n, uint16_t *dst, uint32_t tiled = 0) {
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < escapes; e += stride) {
		const uint64_t i = escidx[e];
		if (i < n) dst[i] = bf16_bits(sm[plane_index(i, tiled)], escexp[e]);
	}
}

extern "C" __global__ void __launch_bounds__(256) glyd_escape_scatter(const glyd_kparams p) {
	escape_scatter((const uint8_t *)p.sm, (const uint32_t *)p.escidx, (const uint8_t *)p.escexp, p.escapes, p.n,
	               (uint16_t *)p.dst, p.tiled);
}

// The exact bits of one row's escapes into its decoded row d: records
// [e0, e1) of the fused kernels' escape index ({column k, bf16 bits}), this
// thread taking records e0 + first, e0 + first + step, ...; records with
// k >= K are skipped (no write outside the row).
__device__ __forceinline__ void put_row_escapes(uint16_t *d, const uint2 *rec, uint32_t e0, uint32_t e1, int64_t K,
                                                uint32_t first, uint32_t step) {
	for (uint32_t e = e0 + first; e < e1; e += step) {
		const uint2 q = rec[e];
		if ((int64_t)q.x < K) d[q.x] = (uint16_t)q.y;
	}
}

// Escapes of a row-range decode: p.N rows from p.row0, p.K columns, dst =
// row row0. One warp per row; escrows[r] .. escrows[r+1] are row r's records.
extern "C" __global__ void __launch_bounds__(256) glyd_escape_scatter_rows(const glyd_kparams p) {
	const uint32_t *rows = (const uint32_t *)p.escrows;
	const int64_t wpb = blockDim.x / 32;
	const int64_t warps = (int64_t)gridDim.x * wpb;
	for (int64_t r = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; r < p.N; r += warps)
		put_row_escapes((uint16_t *)p.dst + r * p.K, (const uint2 *)p.escrecs, rows[p.row0 + r], rows[p.row0 + r + 1],
		                p.K, threadIdx.x & 31u, 32);
}

// ---------------------------------------------------------------------------
// smallest

// Exclusive prefix sum over a 256-thread block; returns this thread's prefix.
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t v, uint32_t *warp_tot) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	uint32_t inc = v;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const uint32_t t = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o) inc += t;
	}
	if (lane == 31) warp_tot[warp] = inc;
	__syncthreads();
	uint32_t before = 0;
#pragma unroll
	for (int w = 0; w < 8; w++)
		if (w < warp) before += warp_tot[w];
	__syncthreads(); // warp_tot is reused by the next call
	return before + inc - v;
}

extern "C" __global__ void __launch_bounds__(256) glyd_decode_small(const glyd_kparams p) {
	__shared__ uint32_t warp_tot[8];
	const uint8_t *sm = (const uint8_t *)p.sm;
	const uint8_t *code1 = (const uint8_t *)p.code;
	const uint8_t *code2 = (const uint8_t *)p.code2;
	const uint8_t *code3 = (const uint8_t *)p.code3;
	const uint64_t *chunks = (const uint64_t *)p.chunks;
	uint16_t *dst = (uint16_t *)p.dst;
	const uint64_t nchunks = (p.n + 4095) / 4096;
	for (uint64_t ch = blockIdx.x; ch < nchunks; ch += gridDim.x) {
		const uint64_t e0 = ch * 4096 + (uint64_t)threadIdx.x * 16; // first element of this thread
		const int cnt = e0 >= p.n ? 0 : (int)(p.n - e0 < 16 ? p.n - e0 : 16);
		// Level-1 codes: 16 x 2 bits = 4 bytes at e0/4; elements past n count as code 0.
		uint32_t w1 = 0;
		for (int b = 0; b < 4; b++)
			if (4 * b < cnt) w1 |= (uint32_t)code1[e0 / 4 + b] << (8 * b);
		if (cnt < 16) w1 &= (1u << (2 * cnt)) - 1u;
		const uint32_t is3 = w1 & (w1 >> 1) & 0x55555555u;
		const uint32_t r2 = block_exclusive_sum(__popc(is3), warp_tot);
		const uint8_t *seg2 = code2 + chunks[2 * ch];
		const uint8_t *seg3 = code3 + chunks[2 * ch + 1];
		// Level-2 codes of this thread's escapes from level 1, in element order.
		uint32_t w2 = 0; // 2 bits per level-1 escape, in order (at most 16)
		{
			uint32_t m = is3, j = r2;
			int q = 0;
			while (m) {
				m &= m - 1;
				const uint32_t c2 = (seg2[j >> 2] >> (2 * (j & 3))) & 3u;
				w2 |= c2 << (2 * q);
				j++, q++;
			}
		}
		const int n2 = __popc(is3);
		uint32_t is3b = w2 & (w2 >> 1) & 0x55555555u;
		if (n2 < 16) is3b &= (1u << (2 * n2)) - 1u;
		const uint32_t r3 = block_exclusive_sum(__popc(is3b), warp_tot);
		uint32_t out[8];
		{
			uint32_t q2 = 0, j3 = r3;
#pragma unroll
			for (int i = 0; i < 16; i++) {
				const uint32_t c1 = (w1 >> (2 * i)) & 3u;
				uint32_t e;
				if (c1 < 3) {
					e = p.table[c1];
				} else {
					const uint32_t c2 = (w2 >> (2 * q2)) & 3u;
					q2++;
					if (c2 < 3) {
						e = p.table[3 + c2];
					} else {
						const uint32_t c3 = (seg3[j3 >> 1] >> (4 * (j3 & 1))) & 15u;
						j3++;
						e = (p.base + c3) & 0xffu; // c3 == 15: escape, patched by glyd_escape_scatter
					}
				}
				const uint32_t b = i < cnt ? sm[e0 + i] : 0u;
				const uint32_t v = bf16_bits(b, e);
				if (i & 1) out[i >> 1] |= v << 16; else out[i >> 1] = v;
			}
		}
		if (cnt == 16 && (((uintptr_t)(dst + e0)) & 15) == 0) {
			uint4 *d = (uint4 *)(dst + e0);
			d[0] = make_uint4(out[0], out[1], out[2], out[3]);
			d[1] = make_uint4(out[4], out[5], out[6], out[7]);
		} else {
			for (int i = 0; i < cnt; i++) dst[e0 + i] = (uint16_t)(out[i >> 1] >> (16 * (i & 1)));
		}
	}
}

// ---------------------------------------------------------------------------
// fixed12 through the bulk copy engine (sm_90a)
//
// glyd_decode_f12_bulk: the same contract and parameters as
// glyd_decode_f12_vec (elements [f, f + n), KEEP for a row range), 16-byte
// aligned sm and code at f (host checks). Chunks of BULK_CH units (8 elements
// each: 8 KiB of sm bytes and 4 KiB of codes) are copied into BULK_S
// shared-memory stages by one thread, each completing on its mbarrier, while
// every thread decodes BULK_CH / 256 units of the oldest stage and stores
// them as the vec kernel does. No register holds bytes in flight, so 48 KiB
// per block are always coming: 2.19 TB/s of bf16 written where the vec kernel
// writes 2.07 and a device-to-device copy 2.10 (python/benchmarks/decode_bw.cu,
// H200). Persistent: block b takes chunks b, b + grid, ...; the units after
// the last whole chunk (and the last n % 8 elements) go through the vec loop.
// CH, S: chunk units and stages (decode_bw.cu measures others).
constexpr int BULK_CH = 1024;
constexpr int BULK_S = 4;
constexpr int BULK_SMEM = BULK_S * 12 * BULK_CH; // dynamic shared memory of a block

// Unit u of a chunk of CH units staged at shared address st (8 * CH sm
// bytes, then 4 * CH code bytes), decoded.
template <int CH>
__device__ __forceinline__ uint4 decode_staged(uint32_t st, uint32_t u, uint32_t B4) {
	uint32_t a, b, cw;
	asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "r"(st + 8 * u));
	asm volatile("ld.shared.u32 %0, [%1];" : "=r"(cw) : "r"(st + 8 * CH + 4 * u));
	return decode8(a, b, cw, B4);
}

template <bool KEEP, int CH = BULK_CH, int S = BULK_S>
__device__ __forceinline__ void decode_f12_bulk_span(const uint8_t *sm, const uint8_t *code, uint16_t *dst,
                                                     const uint64_t n, const uint32_t base, const uint32_t tiled) {
#ifdef GLYD_WGMMA
	extern __shared__ __align__(128) uint8_t stages[];
	__shared__ __align__(8) uint64_t full[S];
	const uint32_t B4 = base * 0x01010101u;
	const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(stages);
	const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(full);
	const uint64_t nch = n / 8 / CH;
	const int tid = threadIdx.x;
	// Chunk c into stage s (one thread).
	auto fetch = [&](uint64_t c, int s) {
		mbar_expect_bytes(bar0 + 8 * s, 12 * CH);
		bulk_copy(s0 + s * 12 * CH, sm + c * 8 * CH, 8 * CH, bar0 + 8 * s);
		bulk_copy(s0 + s * 12 * CH + 8 * CH, code + c * 4 * CH, 4 * CH, bar0 + 8 * s);
	};
	if (tid == 0) {
		for (int s = 0; s < S; s++) mbar_init(bar0 + 8 * s, 1);
		for (int s = 0; s < S; s++)
			if (blockIdx.x + (uint64_t)s * gridDim.x < nch) fetch(blockIdx.x + (uint64_t)s * gridDim.x, s);
	}
	__syncthreads(); // the barriers are initialized before anyone waits
	// Tiled planes whose 16-row groups hold whole chunks (K % (8 * CH / 16)
	// == 0): a chunk is TC tiles along k of one group, written out row by row
	// (a warp stores 512 bytes of one row) instead of in the planes' order (a
	// warp's stores in 4 rows): decode to HBM 3-5% faster (session 27).
	constexpr uint32_t TC = CH / 128, RU = CH / 16; // tiles per chunk, units per row of a chunk
	const bool rows = tiled && tiled % TC == 0;
	for (uint64_t i = 0, c = blockIdx.x; c < nch; i++, c += gridDim.x) {
		const int s = i % S;
		const uint32_t st = s0 + s * 12 * CH;
		const uint32_t t0 = (uint32_t)(c * TC), r16 = rows ? t0 / tiled : 0, kb0 = t0 - r16 * tiled;
		mbar_wait(bar0 + 8 * s, (i / S) & 1);
#pragma unroll
		for (int j = 0; j < CH / 256; j++) {
			const uint32_t q = j * 256 + tid;
			uint32_t u = q; // the staged unit
			uint64_t du = c * CH + q; // where it goes
			if (rows) {
				const uint32_t r = q / RU, kb = (q % RU) >> 3, w = q & 7;
				u = kb * 128 + r * 8 + w;
				du = ((uint64_t)(r16 * 16 + r) * tiled + kb0 + kb) * 8 + w;
			} else if (tiled) {
				du = tiled_unit(du, tiled);
			}
			const uint4 v = decode_staged<CH>(st, u, B4);
			uint16_t *d = dst + du * 8;
			if (KEEP) st_keep16(d, v); else st_stream16(d, v);
		}
		__syncthreads(); // every thread has read stage s
		if (tid == 0 && c + (uint64_t)S * gridDim.x < nch) fetch(c + (uint64_t)S * gridDim.x, s);
	}
	decode_f12_span<KEEP>(sm, code, dst, n, base, tiled, nch * CH);
#endif
}

extern "C" __global__ void __launch_bounds__(256) glyd_decode_f12_bulk(const glyd_kparams p) {
	const uint64_t first = (uint64_t)p.row0 * (uint64_t)p.K;
	const uint8_t *sm = (const uint8_t *)p.sm + first;
	const uint8_t *code = (const uint8_t *)p.code + first / 2;
	if (p.K > 0)
		decode_f12_bulk_span<true>(sm, code, (uint16_t *)p.dst, p.n, p.base, p.tiled);
	else
		decode_f12_bulk_span<false>(sm, code, (uint16_t *)p.dst, p.n, p.base, p.tiled);
}

// Escape index for the fused kernels (built once when a tensor is placed on
// the GPU). p.dst = rows: rows[r] = first escape of weight row r (escapes whose
// element index is >= r*K), r in [0, N]; one thread per entry, binary search.
extern "C" __global__ void __launch_bounds__(256) glyd_escape_rows(const glyd_kparams p) {
	const uint32_t *escidx = (const uint32_t *)p.escidx;
	uint32_t *rows = (uint32_t *)p.dst;
	const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (r > p.N) return;
	const uint64_t key = (uint64_t)r * (uint64_t)p.K;
	uint64_t lo = 0, hi = p.escapes;
	while (lo < hi) {
		const uint64_t mid = (lo + hi) / 2;
		if ((uint64_t)escidx[mid] < key) lo = mid + 1; else hi = mid;
	}
	rows[r] = (uint32_t)lo;
}

// p.escrecs = records: rec[e] = {column k of escape e, its true bf16 bits}, so
// the fused kernels' epilogue needs one load per escape (no division, no
// access to the planes).
extern "C" __global__ void __launch_bounds__(256) glyd_escape_records(const glyd_kparams p) {
	const uint32_t *escidx = (const uint32_t *)p.escidx;
	const uint8_t *escexp = (const uint8_t *)p.escexp;
	const uint8_t *sm = (const uint8_t *)p.sm;
	uint2 *rec = (uint2 *)p.escrecs;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < p.escapes; e += stride) {
		const uint64_t i = escidx[e];
		rec[e] = make_uint2((uint32_t)(i % (uint64_t)p.K), bf16_bits(sm[plane_index(i, p.tiled)], escexp[e]));
	}
}

// Rows of a fixed12 matrix [p.N, p.K] picked by index (an embedding lookup,
// DecodeGather): row ids[t] (int64 at p.x, t < p.rows) to dst row t, bit for
// bit. One block per row t: its threads decode 8 elements at a time (p.K % 8
// == 0, so every row's planes are 8- and 4-byte aligned and every dst row
// 16-byte aligned: the host checks), then, after a barrier, write the exact
// bits of the row's escapes from the fused kernels' escape index (as
// glyd_escape_scatter_rows; p.escrows = 0: none). An id outside [0, N) gives
// a row of zeros: the host cannot check ids that live on the device, and a
// fault would end the process's CUDA context.
extern "C" __global__ void __launch_bounds__(256) glyd_decode_f12_gather(const glyd_kparams p) {
	const int64_t t = blockIdx.x, K = p.K;
	const int64_t id = ((const int64_t *)p.x)[t];
	uint16_t *dst = (uint16_t *)p.dst + t * K;
	if (id < 0 || id >= p.N) {
		for (int64_t u = threadIdx.x; u < K / 8; u += blockDim.x) *(uint4 *)(dst + u * 8) = make_uint4(0, 0, 0, 0);
		return;
	}
	const uint8_t *sm = (const uint8_t *)p.sm + id * K;
	const uint8_t *code = (const uint8_t *)p.code + id * K / 2;
	const uint32_t B4 = p.base * 0x01010101u;
	for (int64_t u = threadIdx.x; u < K / 8; u += blockDim.x) {
		const uint2 s = *(const uint2 *)(sm + u * 8);
		const uint32_t c = *(const uint32_t *)(code + u * 4);
		*(uint4 *)(dst + u * 8) = decode8(s.x, s.y, c, B4);
	}
	if (!p.escrows) return;
	__syncthreads(); // the escapes' decoded values are written before their exact ones
	const uint32_t *rows = (const uint32_t *)p.escrows;
	put_row_escapes(dst, (const uint2 *)p.escrecs, rows[id], rows[id + 1], K, threadIdx.x, blockDim.x);
}
