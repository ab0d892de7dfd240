/*
 * pack.cu — bf16 tensor in device memory -> fixed12 or smallest planes, byte
 * for byte what core/codec Pack writes (docs/FORMAT.md, version 1).
 *
 * Contract
 *   Input : p.x = the tensor's bf16 elements (row-major, contiguous, 2-byte
 *           aligned), p.total elements in all, split into p.N groups of p.n
 *           elements each (group g = elements [g*n, (g+1)*n); n < 2^32).
 *   The host (core/gpu/pack.go) runs, on one stream:
 *     glyd_pack_zero    p.dst[0 .. p.n) = 0 (uint32 words; clears the histograms)
 *     glyd_pack_hist    pk_hist[g][e] += count of exponent e in group g
 *                       grid (tiles of PK_HIST_TILE elements of a group, groups)
 *     glyd_pack_crc     pk_tiles[t] = CRC-32C of bytes [t*PK_CRC_TILE, (t+1)*PK_CRC_TILE)
 *                       of the whole tensor (2*total bytes; the last tile shorter);
 *                       the host combines the tile CRCs (codec.CRCCombineEqual)
 *     (host: Base of every group from its histogram, codec's rule; pk_base)
 *     glyd_pack_count   pk_tiles[g*T + t] = escapes of tile t of group g
 *                       (tiles of PK_TILE elements, T = ceil(n / PK_TILE))
 *     (host: exclusive scan of the tile counts -> pk_off, uint64)
 *     glyd_pack_f12     sm and code planes of every tile, and its escapes at
 *                       entries pk_off[g*T+t] .. of the escape planes, in element
 *                       order (per-thread counts, block exclusive scan)
 *   Output planes (fixed12, bf16): p.sm (n bytes per group, group g at g*n),
 *   p.code (ceil(n/2) bytes per group, at g*ceil(n/2); low nibble = even
 *   element; a last odd high nibble is 0), p.escidx (uint32 index within the
 *   group), p.escexp (exponent byte); escape entries of group g follow those
 *   of group g-1.
 *   Smallest: glyd_pack_small_count and glyd_pack_small replace the last two.
 *     The host gives every group's exponent symbols (pk_sym: table slot 0..5,
 *     6 = level 3 in the Base window, 7 = escape; codec.SmallestChoice). A tile
 *     is one 4096-element chunk. Counts: pk_tiles[3*(g*T+t) + {0,1,2}] = level-2
 *     codes, level-3 codes, escapes of the chunk; pk_off[3*(g*T+t) + {0,1,2}] =
 *     absolute byte offset of its level-2 segment in PlaneCode2, of its level-3
 *     segment in PlaneCode3, first escape entry. The chunk table plane is
 *     written by the host. The segments are assembled in shared memory (block
 *     exclusive scans give each thread its entries) and copied out.
 *   Every kernel is deterministic: the bytes do not depend on scheduling.
 */
#include "common.cuh"

constexpr int PK_THREADS = 256;
constexpr int PK_PER_THREAD = 16;                      // consecutive elements per thread
constexpr int PK_TILE = PK_THREADS * PK_PER_THREAD;    // 4096 elements: count / encode tile
constexpr int PK_HIST_TILE = 8 * PK_TILE;              // 32768 elements: histogram tile
constexpr int PK_CRC_SEG = 256;                        // bytes per thread
constexpr int PK_CRC_TILE = PK_THREADS * PK_CRC_SEG;   // 65536 bytes per block

// Fixed12 code of exponent e for Base b: e-b in 0..14, else 15 (escape).
__device__ __forceinline__ uint32_t f12_code(uint32_t e, uint32_t b) {
	const uint32_t c = e - b; // wraps for e < b: > 14
	return c <= 14u ? c : 15u;
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_zero(const glyd_kparams p) {
	uint32_t *w = (uint32_t *)p.dst;
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) w[i] = 0u;
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_hist(const glyd_kparams p) {
	__shared__ uint32_t h[256];
	const uint64_t g = blockIdx.y;
	const uint64_t lo = (uint64_t)blockIdx.x * PK_HIST_TILE;
	const uint64_t hi = lo + PK_HIST_TILE < p.n ? lo + PK_HIST_TILE : p.n;
	const uint16_t *x = (const uint16_t *)p.x + g * p.n;
	h[threadIdx.x] = 0u;
	__syncthreads();
	for (uint64_t i = lo + threadIdx.x; i < hi; i += PK_THREADS) atomicAdd(&h[(x[i] >> 7) & 0xffu], 1u);
	__syncthreads();
	const uint32_t c = h[threadIdx.x];
	if (c) atomicAdd((uint32_t *)p.pk_hist + g * 256 + threadIdx.x, c);
}

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as core/codec.
constexpr uint32_t CRC_POLY = 0x82F63B78u;

// a*b modulo the polynomial (bit 31 = x^0); codec's crcMulMod.
__device__ uint32_t crc_mulmod(uint32_t a, uint32_t b) {
	uint32_t r = 0;
	for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
		if (a & m) r ^= b;
		b = (b & 1u) ? (b >> 1) ^ CRC_POLY : b >> 1;
	}
	return r;
}

// x^(8n) modulo the polynomial: the operator that appends n zero bytes; codec's crcShift.
__device__ uint32_t crc_shift(uint64_t n) {
	uint32_t r = 1u << 31;        // x^0
	uint32_t sq = 1u << (31 - 8); // x^8
	while (n) {
		if (n & 1) r = crc_mulmod(sq, r);
		sq = crc_mulmod(sq, sq);
		n >>= 1;
	}
	return r;
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_crc(const glyd_kparams p) {
	__shared__ uint32_t table[256];
	__shared__ uint32_t crc[PK_THREADS];
	__shared__ uint64_t len[PK_THREADS];
	__shared__ uint32_t shift[8]; // shift[k]: PK_CRC_SEG << k bytes
	{
		uint32_t c = threadIdx.x;
		for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ CRC_POLY : c >> 1;
		table[threadIdx.x] = c;
		if (threadIdx.x < 8) shift[threadIdx.x] = crc_shift((uint64_t)PK_CRC_SEG << threadIdx.x);
	}
	__syncthreads();
	const uint64_t bytes = 2 * p.total;
	const uint64_t start = (uint64_t)blockIdx.x * PK_CRC_TILE + (uint64_t)threadIdx.x * PK_CRC_SEG;
	const uint64_t n = start >= bytes ? 0 : (bytes - start < PK_CRC_SEG ? bytes - start : PK_CRC_SEG);
	const uint8_t *src = (const uint8_t *)p.x + start;
	uint32_t c = 0xffffffffu;
	if (n == PK_CRC_SEG && ((uintptr_t)src & 15) == 0) {
		const uint4 *v = (const uint4 *)src;
		for (int j = 0; j < PK_CRC_SEG / 16; j++) {
			const uint4 w = v[j];
			const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
			for (int q = 0; q < 4; q++) {
#pragma unroll
				for (int b = 0; b < 4; b++) c = table[(c ^ (ws[q] >> (8 * b))) & 0xffu] ^ (c >> 8);
			}
		}
	} else {
		for (uint64_t j = 0; j < n; j++) c = table[(c ^ src[j]) & 0xffu] ^ (c >> 8);
	}
	crc[threadIdx.x] = n ? ~c : 0u; // CRC of no bytes is 0
	len[threadIdx.x] = n;
	__syncthreads();
	// Tree combine, in element order: crc(A||B) = shift(len B) * crc(A) ^ crc(B).
#pragma unroll 1
	for (int k = 0; k < 8; k++) {
		const int s = 1 << k;
		if ((threadIdx.x & (2 * s - 1)) == 0) {
			const uint64_t lb = len[threadIdx.x + s];
			const uint32_t sh = lb == ((uint64_t)PK_CRC_SEG << k) ? shift[k] : crc_shift(lb);
			crc[threadIdx.x] = crc_mulmod(sh, crc[threadIdx.x]) ^ crc[threadIdx.x + s];
			len[threadIdx.x] += lb;
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) ((uint32_t *)p.pk_tiles)[blockIdx.x] = crc[0];
}

// The 16 elements of this thread in tile blockIdx.x of group blockIdx.y:
// j0 = first element index within the group, cnt = how many exist (0..16).
struct PkSpan {
	uint64_t j0;
	int cnt;
};
__device__ __forceinline__ PkSpan pk_span(const glyd_kparams &p) {
	PkSpan s;
	s.j0 = (uint64_t)blockIdx.x * PK_TILE + (uint64_t)threadIdx.x * PK_PER_THREAD;
	s.cnt = s.j0 >= p.n ? 0 : (int)(p.n - s.j0 < PK_PER_THREAD ? p.n - s.j0 : PK_PER_THREAD);
	return s;
}

// Loads the thread's elements (zeros past cnt).
__device__ __forceinline__ void pk_load(const uint16_t *x, const PkSpan s, uint16_t v[PK_PER_THREAD]) {
	if (s.cnt == PK_PER_THREAD && ((uintptr_t)x & 15) == 0) {
		const uint4 a = ((const uint4 *)x)[0], b = ((const uint4 *)x)[1];
		const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
		for (int i = 0; i < 8; i++) {
			v[2 * i] = (uint16_t)(w[i] & 0xffffu);
			v[2 * i + 1] = (uint16_t)(w[i] >> 16);
		}
	} else {
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD; i++) v[i] = i < s.cnt ? x[i] : (uint16_t)0;
	}
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_count(const glyd_kparams p) {
	__shared__ uint32_t total;
	const uint64_t g = blockIdx.y;
	const uint32_t base = ((const uint32_t *)p.pk_base)[g];
	const PkSpan s = pk_span(p);
	if (threadIdx.x == 0) total = 0u;
	__syncthreads();
	uint16_t v[PK_PER_THREAD];
	pk_load((const uint16_t *)p.x + g * p.n + s.j0, s, v);
	uint32_t ne = 0;
#pragma unroll
	for (int i = 0; i < PK_PER_THREAD; i++)
		if (i < s.cnt && f12_code((v[i] >> 7) & 0xffu, base) == 15u) ne++;
	if (ne) atomicAdd(&total, ne);
	__syncthreads();
	if (threadIdx.x == 0) ((uint32_t *)p.pk_tiles)[g * gridDim.x + blockIdx.x] = total;
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_f12(const glyd_kparams p) {
	__shared__ uint32_t warp_tot[8];
	const uint64_t g = blockIdx.y;
	const uint32_t base = ((const uint32_t *)p.pk_base)[g];
	const PkSpan s = pk_span(p);
	uint16_t v[PK_PER_THREAD];
	pk_load((const uint16_t *)p.x + g * p.n + s.j0, s, v);
	uint8_t sm[PK_PER_THREAD], code[PK_PER_THREAD / 2];
	uint32_t ne = 0;
#pragma unroll
	for (int i = 0; i < PK_PER_THREAD; i += 2) {
		const uint32_t c0 = i < s.cnt ? f12_code((v[i] >> 7) & 0xffu, base) : 0u;
		const uint32_t c1 = i + 1 < s.cnt ? f12_code((v[i + 1] >> 7) & 0xffu, base) : 0u;
		ne += (c0 == 15u) + (c1 == 15u);
		code[i / 2] = (uint8_t)(c0 | (c1 << 4));
		sm[i] = (uint8_t)(((v[i] >> 8) & 0x80u) | (v[i] & 0x7fu));
		sm[i + 1] = (uint8_t)(((v[i + 1] >> 8) & 0x80u) | (v[i + 1] & 0x7fu));
	}
	// Every thread of the block takes part in the scan (also those with cnt 0).
	const uint32_t before = block_exclusive_sum(ne, warp_tot);
	if (s.cnt == 0) return;
	uint8_t *smo = (uint8_t *)p.sm + g * p.n + s.j0;
	uint8_t *codeo = (uint8_t *)p.code + g * ((p.n + 1) / 2) + s.j0 / 2;
	if (s.cnt == PK_PER_THREAD && ((uintptr_t)smo & 15) == 0 && ((uintptr_t)codeo & 7) == 0) {
		uint32_t w[4], c[2];
#pragma unroll
		for (int q = 0; q < 4; q++)
			w[q] = sm[4 * q] | (uint32_t)sm[4 * q + 1] << 8 | (uint32_t)sm[4 * q + 2] << 16 | (uint32_t)sm[4 * q + 3] << 24;
#pragma unroll
		for (int q = 0; q < 2; q++)
			c[q] = code[4 * q] | (uint32_t)code[4 * q + 1] << 8 | (uint32_t)code[4 * q + 2] << 16 | (uint32_t)code[4 * q + 3] << 24;
		*(uint4 *)smo = make_uint4(w[0], w[1], w[2], w[3]);
		*(uint2 *)codeo = make_uint2(c[0], c[1]);
	} else {
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD; i++)
			if (i < s.cnt) smo[i] = sm[i];
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD / 2; i++)
			if (2 * i < s.cnt) codeo[i] = code[i];
	}
	if (ne) {
		uint64_t k = ((const uint64_t *)p.pk_off)[g * gridDim.x + blockIdx.x] + before;
		uint32_t *escidx = (uint32_t *)p.escidx;
		uint8_t *escexp = (uint8_t *)p.escexp;
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD; i++) {
			const uint32_t e = (v[i] >> 7) & 0xffu;
			if (i < s.cnt && f12_code(e, base) == 15u) {
				escidx[k] = (uint32_t)(s.j0 + i);
				escexp[k] = (uint8_t)e;
				k++;
			}
		}
	}
}

// ---------------------------------------------------------------------------
// smallest

// Symbol of each of the thread's elements (0 past cnt: level-1 code 0, the
// zero padding).
__device__ __forceinline__ void pk_syms(const uint8_t *sym, const uint16_t v[PK_PER_THREAD], int cnt,
                                        uint32_t sy[PK_PER_THREAD]) {
#pragma unroll
	for (int i = 0; i < PK_PER_THREAD; i++) sy[i] = i < cnt ? (uint32_t)sym[(v[i] >> 7) & 0xffu] : 0u;
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_small_count(const glyd_kparams p) {
	__shared__ uint8_t sym[256];
	__shared__ uint32_t tot[3];
	const uint64_t g = blockIdx.y;
	sym[threadIdx.x] = ((const uint8_t *)p.pk_sym)[g * 256 + threadIdx.x];
	if (threadIdx.x < 3) tot[threadIdx.x] = 0u;
	__syncthreads();
	const PkSpan s = pk_span(p);
	uint16_t v[PK_PER_THREAD];
	pk_load((const uint16_t *)p.x + g * p.n + s.j0, s, v);
	uint32_t sy[PK_PER_THREAD];
	pk_syms(sym, v, s.cnt, sy);
	uint32_t n2 = 0, n3 = 0, ne = 0;
#pragma unroll
	for (int i = 0; i < PK_PER_THREAD; i++) {
		n2 += sy[i] >= 3u;
		n3 += sy[i] >= 6u;
		ne += sy[i] == 7u;
	}
	if (n2) atomicAdd(&tot[0], n2);
	if (n3) atomicAdd(&tot[1], n3);
	if (ne) atomicAdd(&tot[2], ne);
	__syncthreads();
	if (threadIdx.x < 3) ((uint32_t *)p.pk_tiles)[3 * (g * gridDim.x + blockIdx.x) + threadIdx.x] = tot[threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(PK_THREADS) glyd_pack_small(const glyd_kparams p) {
	__shared__ uint32_t warp_tot[8];
	__shared__ uint8_t sym[256];
	__shared__ uint32_t seg2[PK_TILE / 16]; // 2-bit level-2 codes of the chunk
	__shared__ uint32_t seg3[PK_TILE / 8];  // 4-bit level-3 codes of the chunk
	__shared__ uint32_t tot[2];
	const uint64_t g = blockIdx.y;
	const uint32_t base = ((const uint32_t *)p.pk_base)[g];
	sym[threadIdx.x] = ((const uint8_t *)p.pk_sym)[g * 256 + threadIdx.x];
	seg2[threadIdx.x] = 0u;
	seg3[threadIdx.x] = 0u;
	seg3[threadIdx.x + PK_THREADS] = 0u;
	__syncthreads();
	const PkSpan s = pk_span(p);
	uint16_t v[PK_PER_THREAD];
	pk_load((const uint16_t *)p.x + g * p.n + s.j0, s, v);
	uint32_t sy[PK_PER_THREAD];
	pk_syms(sym, v, s.cnt, sy);
	uint32_t n2 = 0, n3 = 0, ne = 0, c1w = 0;
#pragma unroll
	for (int i = 0; i < PK_PER_THREAD; i++) {
		c1w |= (sy[i] < 3u ? sy[i] : 3u) << (2 * i);
		n2 += sy[i] >= 3u;
		n3 += sy[i] >= 6u;
		ne += sy[i] == 7u;
	}
	const uint32_t r2 = block_exclusive_sum(n2, warp_tot);
	const uint32_t r3 = block_exclusive_sum(n3, warp_tot);
	const uint32_t re = block_exclusive_sum(ne, warp_tot);
	{
		uint32_t k2 = r2, k3 = r3;
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD; i++) {
			if (sy[i] >= 3u) {
				const uint32_t c2 = sy[i] < 6u ? sy[i] - 3u : 3u;
				if (c2) atomicOr(&seg2[k2 >> 4], c2 << (2 * (k2 & 15u)));
				k2++;
				if (sy[i] >= 6u) {
					const uint32_t c3 = sy[i] == 7u ? 15u : ((v[i] >> 7) & 0xffu) - base;
					if (c3) atomicOr(&seg3[k3 >> 3], c3 << (4 * (k3 & 7u)));
					k3++;
				}
			}
		}
	}
	if (threadIdx.x == PK_THREADS - 1) {
		tot[0] = r2 + n2;
		tot[1] = r3 + n3;
	}
	__syncthreads();
	const uint64_t *off = (const uint64_t *)p.pk_off + 3 * (g * gridDim.x + blockIdx.x);
	{
		const uint32_t nb2 = (tot[0] + 3) / 4, nb3 = (tot[1] + 1) / 2;
		uint8_t *o2 = (uint8_t *)p.code2 + off[0];
		uint8_t *o3 = (uint8_t *)p.code3 + off[1];
		const uint8_t *b2 = (const uint8_t *)seg2, *b3 = (const uint8_t *)seg3;
		for (uint32_t b = threadIdx.x; b < nb2; b += PK_THREADS) o2[b] = b2[b];
		for (uint32_t b = threadIdx.x; b < nb3; b += PK_THREADS) o3[b] = b3[b];
	}
	if (s.cnt == 0) return;
	uint8_t *smo = (uint8_t *)p.sm + g * p.n + s.j0;
	uint8_t *codeo = (uint8_t *)p.code + g * ((p.n + 3) / 4) + s.j0 / 4;
	uint32_t w[4];
#pragma unroll
	for (int q = 0; q < 4; q++) {
		w[q] = 0;
#pragma unroll
		for (int b = 0; b < 4; b++) {
			const uint16_t x = v[4 * q + b];
			w[q] |= (((uint32_t)(x >> 8) & 0x80u) | (x & 0x7fu)) << (8 * b);
		}
	}
	if (s.cnt == PK_PER_THREAD && ((uintptr_t)smo & 15) == 0 && ((uintptr_t)codeo & 3) == 0) {
		*(uint4 *)smo = make_uint4(w[0], w[1], w[2], w[3]);
		*(uint32_t *)codeo = c1w;
	} else {
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD; i++)
			if (i < s.cnt) smo[i] = (uint8_t)(w[i / 4] >> (8 * (i % 4)));
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD / 4; i++)
			if (4 * i < s.cnt) codeo[i] = (uint8_t)(c1w >> (8 * i));
	}
	if (ne) {
		uint64_t k = off[2] + re;
		uint32_t *escidx = (uint32_t *)p.escidx;
		uint8_t *escexp = (uint8_t *)p.escexp;
#pragma unroll
		for (int i = 0; i < PK_PER_THREAD; i++) {
			if (sy[i] == 7u) {
				escidx[k] = (uint32_t)(s.j0 + i);
				escexp[k] = (uint8_t)((v[i] >> 7) & 0xffu);
				k++;
			}
		}
	}
}
