// fakecuda.cc — a fake libcuda.so.1 that runs the pack kernels of
// kernels/pack.cu, kernels/tile.cu, the fixed12 decode / escape index kernels of
// kernels/decode.cu, the fused linear tiles (mma.sync, wgmma, prompt), split-K
// reduce, generic kernel and x layout kernels of kernels/linear.cu and the
// grouped (mma.sync) and transposed experts, SwiGLU and routing-id kernels
// of kernels/moe.cu on the CPU, with "device memory" = host memory. The fake
// GPU is an sm_90 part: wgmma, the bulk copy engine, cp.async, mbarriers and
// named barriers are emulated (the bulk-copy decode runs too); thread-block
// clusters are not. Tests
// only: core/gpu's *Emulated tests run the real host code (driver.c, pack.go,
// decode.go, linear.go, moe.go, route.go) against it when GLYD_FAKE_CUDA is
// set (kernels/emu/run.sh builds and runs).
#include "shim.h"

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

thread_local emu_u3 threadIdx, blockIdx;
emu_u3 gridDim, blockDim;
std::barrier<> *emu_block_bar;
std::barrier<> *emu_warp_bar[32];
uint32_t emu_shfl[32][32];
// The running block's named barriers (bar.sync / bar.arrive: an id and a
// thread count) and mbarriers (by shared address), made at first use.
std::mutex emu_mu;
std::condition_variable emu_cv;
std::barrier<> *emu_named[16];
struct emu_mbar {
	uint32_t count = 1, arrived = 0, phase = 0;
	int64_t tx = 0;
};
std::map<uint32_t, emu_mbar> emu_mbars;

#include "../../core/gpu/glyd_kernel_params.h"
#include "block_scan.inc" // block_exclusive_sum, extracted from kernels/decode.cu by run.sh
#include "../pack.cu"
#include "../tile.cu"
#include "../wgmma.cuh" // cluster_map and friends for block_epilogue: no-ops here (the host never clusters on the fake GPU)

// decode.cu's fixed12 and escape kernels (extracted by run.sh), with CPU
// versions of the PTX helpers they use: in this namespace they hide the
// asm ones of common.cuh (unqualified lookup stops at the innermost scope;
// the vector types are redeclared here too, so argument-dependent lookup does
// not bring the global asm helpers back).
namespace emu_decode {
struct uint4 {
	uint32_t x, y, z, w;
};
struct uint2 {
	uint32_t x, y;
};
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return uint4{a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return uint2{a, b}; }
inline uint32_t __vadd4(uint32_t a, uint32_t b) {
	uint32_t r = 0;
	for (int i = 0; i < 32; i += 8) r |= ((((a >> i) & 0xffu) + ((b >> i) & 0xffu)) & 0xffu) << i;
	return r;
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
	const uint64_t v = (uint64_t)y << 32 | x;
	uint32_t r = 0;
	for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
	return r;
}
// prmt.b32 default mode: selector bit 3 replicates the sign of the chosen byte.
inline uint32_t prmt_sr(uint32_t a, uint32_t b, uint32_t sel) {
	const uint64_t v = (uint64_t)b << 32 | a;
	uint32_t r = 0;
	for (int i = 0; i < 4; i++) {
		const uint32_t n = (sel >> (4 * i)) & 15u;
		uint32_t byte = (uint32_t)(v >> (8 * (n & 7u))) & 0xffu;
		if (n & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
		r |= byte << (8 * i);
	}
	return r;
}
inline uint32_t lop3_sel(uint32_t P, uint32_t E) { return (P & 0x807f807fu) | (E & ~0x807f807fu); }
inline uint2 ld_stream8(const void *p) {
	uint2 v;
	memcpy(&v, p, 8);
	return v;
}
inline uint32_t ld_stream4(const void *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
inline void st_stream16(void *p, uint4 v) { memcpy(p, &v, 16); }
inline void st_keep16(void *p, uint4 v) { memcpy(p, &v, 16); }
#include "decode_f12.inc"

// For moe.cu's transposed experts kernels (and linear.cu's helpers they
// use): byte compares, warp shuffles and ballots through the warp's barrier,
// bf16 rounding.
inline uint32_t __vcmpne4(uint32_t a, uint32_t b) {
	uint32_t r = 0;
	for (int i = 0; i < 32; i += 8) r |= (((a >> i) & 0xffu) != ((b >> i) & 0xffu) ? 0xffu : 0u) << i;
	return r;
}
template <class T>
inline T *pin(T *p) { return p; }
inline uint64_t emu_xch[32][32];
// Every lane of the warp publishes v; each returns lane src's.
template <class T>
inline T emu_lane_get(T v, int src) {
	static_assert(sizeof(T) <= 8, "a register");
	const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
	uint64_t u = 0;
	memcpy(&u, &v, sizeof(T));
	emu_warp_bar[w]->arrive_and_wait(); // the last exchange's reads are done
	emu_xch[w][l] = u;
	emu_warp_bar[w]->arrive_and_wait();
	T r;
	memcpy(&r, &emu_xch[w][src & 31], sizeof(T));
	return r;
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) { return emu_lane_get(v, src); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int m) { return emu_lane_get(v, (threadIdx.x & 31) ^ m); }
template <class T>
inline T __shfl_down_sync(unsigned, T v, int o) {
	const int l = threadIdx.x & 31;
	return emu_lane_get(v, l + o < 32 ? l + o : l);
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, int o) {
	const int l = threadIdx.x & 31;
	return emu_lane_get(v, l >= o ? l - o : l);
}
inline uint32_t __ballot_sync(unsigned, int pred) {
	uint32_t m = 0;
	for (int i = 0; i < 32; i++) m |= (emu_lane_get<uint32_t>(pred != 0, i) & 1u) << i;
	return m;
}
inline int __popc(uint32_t v) { return __builtin_popcount(v); }
inline int __ffs(uint32_t v) { return __builtin_ffs((int)v); }
struct emu_bf16 {
	uint16_t b;
};
inline emu_bf16 __float2bfloat16_rn(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40u)}; // NaN stays NaN
	u += 0x7fffu + ((u >> 16) & 1u);                                                 // nearest, ties to even
	return {(uint16_t)(u >> 16)};
}
inline uint16_t __bfloat16_as_ushort(emu_bf16 h) { return h.b; }
using std::fmaf;
#include "linear_helpers.inc" // code_bytes, add_escape, finish, the reduce and generic kernels (kernels/linear.cu, run.sh)
#include "moe_transposed.inc" // nth_expert, block_expert and the transposed experts kernels (moe.cu)
// For moe.cu's SwiGLU and routing-id kernels: IEEE float ops (the host's are
// round-to-nearest), the host's expf, a warp vote.
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float expf(float v) { return std::exp(v); }
inline int __any_sync(unsigned, int pred) { return __ballot_sync(0xffffffffu, pred) != 0; }
#include "moe_tail.inc" // glyd_moe_silu_mul, glyd_moe_combine, glyd_moe_row_experts, glyd_moe_top1, glyd_moe_gather_scale (moe.cu)
// For the prompt tiles' x layout kernels (linear.cu): a plain 16-byte load.
inline uint4 ld_act16(const void *p) {
	uint4 v;
	memcpy(&v, p, 16);
	return v;
}
#include "prompt_x.inc" // stage_offset, permute_x16, glyd_lin_xperm_t* (linear.cu)
// For linear.cu's mma.sync tiles (linear_f12 and its epilogue): plain loads,
// mma.sync across the warp, and the block's dynamic shared memory (blocks
// run one at a time).
inline uint4 ld_stream16(const void *p) {
	uint4 v;
	memcpy(&v, p, 16);
	return v;
}
inline uint32_t ld_u32(const void *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
inline void ld_record(uint2 &r, const uint2 *p) { memcpy(&r, p, 8); }
inline uint32_t emu_frag[32][32][6]; // [warp][lane]: a0..a3, b0, b1
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: lane (g = lane/4, t =
// lane%4) holds A[g + 8i][2t + 8j .. +1] in a(i + 2j), B[2t + 8j .. +1][g] in
// b(j), and D[g + 8(i/2)][2t + i%2] in d[i]; every lane publishes its
// fragments, then adds its four outputs' products in k order.
inline void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
	const int l = threadIdx.x & 31, w = threadIdx.x >> 5, g = l >> 2, t = l & 3;
	emu_warp_bar[w]->arrive_and_wait(); // the last call's reads are done
	const uint32_t mine[6] = {a0, a1, a2, a3, b0, b1};
	memcpy(emu_frag[w][l], mine, sizeof mine);
	emu_warp_bar[w]->arrive_and_wait();
	auto half = [](uint32_t v, int hi) { return bf16_to_f32(hi ? v >> 16 : v & 0xffffu); };
	for (int i = 0; i < 4; i++) {
		const int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
		float s = d[i];
		for (int k = 0; k < 16; k++) {
			const float a = half(emu_frag[w][4 * (r & 7) + ((k & 7) >> 1)][(r >> 3) + 2 * (k >> 3)], k & 1);
			const float b = half(emu_frag[w][4 * c + ((k & 7) >> 1)][4 + (k >> 3)], k & 1);
			s = fmaf(a, b, s);
		}
		d[i] = s;
	}
}
inline float emu_smem[256 * 1024 / 4]; // the running block's dynamic shared memory
// For the Hopper tiles (wgmma, prompt): shared addresses are offsets into
// emu_smem; copies into shared memory (cp.async, the bulk copy engine) happen
// at once; mbarriers count arrivals and bytes; wgmma runs at once too, its
// B operand read through the descriptor (K-major, no swizzle: start, LBO,
// SBO), so its commit and wait have nothing left to do.
inline uint32_t __cvta_generic_to_shared(const void *p) { return (uint32_t)((const char *)p - (const char *)emu_smem); }
inline char *emu_shared(uint32_t a) { return (char *)emu_smem + a; }
inline void emu_st_shared32(uint32_t a, uint32_t v) { memcpy(emu_shared(a), &v, 4); }
inline uint4 lds16(uint32_t a) {
	uint4 v;
	memcpy(&v, emu_shared(a), 16);
	return v;
}
inline void cp_async16(uint32_t dst, const void *src, uint32_t n) {
	memset(emu_shared(dst), 0, 16);
	if (n) memcpy(emu_shared(dst), src, n);
}
inline void cp_async8(uint32_t dst, const void *src, uint32_t n) {
	memset(emu_shared(dst), 0, 8);
	if (n) memcpy(emu_shared(dst), src, n);
}
inline void cp_async_commit() {}
template <int PENDING>
inline void cp_async_wait() {}
inline std::barrier<> &emu_named_bar(int id, int count) {
	std::lock_guard<std::mutex> l(emu_mu);
	if (!emu_named[id]) emu_named[id] = new std::barrier<>(count);
	return *emu_named[id];
}
inline void bar_sync(int id, int count) {
	auto &b = emu_named_bar(id, count);
	b.wait(b.arrive());
}
inline void bar_arrive(int id, int count) { (void)emu_named_bar(id, count).arrive(); }
inline void emu_mbar_complete(emu_mbar &m) { // under emu_mu
	if (m.arrived >= m.count && m.tx == 0) {
		m.arrived = 0;
		m.phase++;
		emu_cv.notify_all();
	}
}
inline void mbar_init(uint32_t bar, uint32_t count) {
	std::lock_guard<std::mutex> l(emu_mu);
	emu_mbars[bar] = emu_mbar{count, 0, 0, 0};
}
inline void mbar_expect_bytes(uint32_t bar, uint32_t bytes) {
	std::lock_guard<std::mutex> l(emu_mu);
	emu_mbar &m = emu_mbars[bar];
	m.tx += bytes;
	m.arrived++;
	emu_mbar_complete(m);
}
inline void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
	memcpy(emu_shared(dst), src, bytes);
	std::lock_guard<std::mutex> l(emu_mu);
	emu_mbar &m = emu_mbars[bar];
	m.tx -= bytes;
	emu_mbar_complete(m);
}
inline void mbar_wait(uint32_t bar, uint32_t parity) { // until the phase of that parity has completed
	std::unique_lock<std::mutex> l(emu_mu);
	emu_cv.wait(l, [&] { return (emu_mbars[bar].phase & 1u) != parity; });
}
// decode.cu's bulk-copy decode: unit u of a staged chunk of CH units.
template <int CH>
inline uint4 decode_staged(uint32_t st, uint32_t u, uint32_t B4) {
	uint32_t ab[2], cw;
	memcpy(ab, emu_shared(st + 8 * u), 8);
	memcpy(&cw, emu_shared(st + 8 * CH + 4 * u), 4);
	return decode8(ab[0], ab[1], cw, B4);
}
inline uint32_t emu_afrag[32][32][4]; // [warp][lane]: a0..a3
// wgmma.mma_async m64nNk16, A from registers (each warp of the warpgroup its
// 16 rows in mma.sync's A layout), B [16 k][N] from shared memory.
template <int N>
inline void wgmma_rs(float (&d)[N / 8][4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
	const int l = threadIdx.x & 31, w = threadIdx.x >> 5, g = l >> 2, t = l & 3;
	emu_warp_bar[w]->arrive_and_wait();
	const uint32_t mine[4] = {a0, a1, a2, a3};
	memcpy(emu_afrag[w][l], mine, sizeof mine);
	emu_warp_bar[w]->arrive_and_wait();
	const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4,
	               sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
	auto half = [](uint32_t v, int hi) { return bf16_to_f32(hi ? v >> 16 : v & 0xffffu); };
	for (int j = 0; j < N / 8; j++)
		for (int i = 0; i < 4; i++) {
			const int r = g + 8 * (i >> 1), c = 8 * j + 2 * t + (i & 1);
			float s = d[j][i];
			for (int k = 0; k < 16; k++) {
				const float a = half(emu_afrag[w][4 * (r & 7) + ((k & 7) >> 1)][(r >> 3) + 2 * (k >> 3)], k & 1);
				uint16_t b;
				memcpy(&b, emu_shared(start + (c >> 3) * sbo + (k >> 3) * lbo + (c & 7) * 16 + (k & 7) * 2), 2);
				s = fmaf(a, bf16_to_f32(b), s);
			}
			d[j][i] = s;
		}
	// The warp's reads of the stage are over before any of its lanes goes on
	// (a wgmma is collective: the prompt tiles refill a stage once one lane
	// per warp says its warp is done with it).
	emu_warp_bar[w]->arrive_and_wait();
}
#undef GLYD_KERNEL_PAIR
#define GLYD_KERNEL_PAIR(NAME, BOUNDS, FN, ...)                                                                 \
	inline void NAME(const glyd_kparams p) { FN<__VA_ARGS__, false>(p, emu_smem); }                         \
	inline void NAME##_safe(const glyd_kparams p) { FN<__VA_ARGS__, true>(p, emu_smem); }
#include "linear_regs.inc" // decode16, block_epilogue, linear_f12, the GLYD_LIN kernels (linear.cu) and GLYD_LING's (moe.cu)
#define GLYD_WGMMA 1 // the Hopper tiles' code (wgmma.cuh's own helpers stay the no-ops compiled above)
#include "linear_wgmma.inc" // WarpRows to the prompt tiles and their kernels (linear.cu), the bulk-copy decode (decode.cu), the grouped wgmma kernels (moe.cu)
} // namespace emu_decode

typedef void (*kfn)(const glyd_kparams);
struct kern {
	const char *name;
	kfn fn;
};
static kern kernels[] = {
    {"glyd_pack_zero", glyd_pack_zero},   {"glyd_pack_hist", glyd_pack_hist},
    {"glyd_pack_crc", glyd_pack_crc},     {"glyd_pack_count", glyd_pack_count},
    {"glyd_pack_f12", glyd_pack_f12},     {"glyd_pack_small_count", glyd_pack_small_count},
    {"glyd_pack_small", glyd_pack_small},     {"glyd_tile_bytes", glyd_tile_bytes},
    {"glyd_decode_f12_vec", emu_decode::glyd_decode_f12_vec},
    {"glyd_decode_f12_scalar", emu_decode::glyd_decode_f12_scalar},
    {"glyd_decode_f12_bulk", emu_decode::glyd_decode_f12_bulk},
    {"glyd_escape_scatter", emu_decode::glyd_escape_scatter},
    {"glyd_escape_scatter_rows", emu_decode::glyd_escape_scatter_rows},
    {"glyd_decode_f12_gather", emu_decode::glyd_decode_f12_gather},
    {"glyd_escape_rows", emu_decode::glyd_escape_rows},
    {"glyd_escape_records", emu_decode::glyd_escape_records},
    {"glyd_lin_f12t_experts", emu_decode::glyd_lin_f12t_experts},
    {"glyd_lin_f12t1_experts", emu_decode::glyd_lin_f12t1_experts},
    {"glyd_lin_f12t_reduce", emu_decode::glyd_lin_f12t_reduce},
    {"glyd_lin_reduce", emu_decode::glyd_lin_reduce},
    {"glyd_lin_reduce_many", emu_decode::glyd_lin_reduce_many},
    {"glyd_lin_f12_generic", emu_decode::glyd_lin_f12_generic},
#define EMU_LIN(N)                                                                                                 \
	{#N, emu_decode::N}, {#N "_safe", emu_decode::N##_safe}, {#N "_many", emu_decode::N##_many},                   \
	    {#N "_many_safe", emu_decode::N##_many_safe}
    EMU_LIN(glyd_lin_f12_m1n1w1k8u1),
    EMU_LIN(glyd_lin_f12_m1n1w1k16u1),
    EMU_LIN(glyd_lin_f12_m1n2w1k8u1),
    EMU_LIN(glyd_lin_f12_m2n4w1k8u1),
    EMU_LIN(glyd_lin_f12_m1n8w2k4u1),
    EMU_LIN(glyd_lin_f12_m1n8w4k2u1),
    EMU_LIN(glyd_lin_f12w_t16k1s4u2p2),
    EMU_LIN(glyd_lin_f12w_t16k1s4u4p2),
    EMU_LIN(glyd_lin_f12w_t16k2s4u2p2),
    EMU_LIN(glyd_lin_f12w_t32k1s4u2p2),
    EMU_LIN(glyd_lin_f12w_t32k2s4u2p2),
    EMU_LIN(glyd_lin_f12w_t32k1s4u4p2),
    EMU_LIN(glyd_lin_f12w_t64k1s4u4p4),
    EMU_LIN(glyd_lin_f12p_t64s4u2),
    EMU_LIN(glyd_lin_f12p_t128s4w4),
    EMU_LIN(glyd_lin_f12p_t256s4u2),
    EMU_LIN(glyd_lin_f12p_t128s4w4g3),
    EMU_LIN(glyd_lin_f12p_t64s4w2),
#define EMU_LING(N) {#N, emu_decode::N}, {#N "_safe", emu_decode::N##_safe}
    EMU_LING(glyd_lin_f12g_m1n1w1k8u1),
    EMU_LING(glyd_lin_f12g_m1n2w1k8u1),
    EMU_LING(glyd_lin_f12g_m2n4w1k8u1),
    EMU_LING(glyd_lin_f12g_m1n8w2k4u1),
    EMU_LING(glyd_lin_f12gw_t16k1s4u4p2),
    EMU_LING(glyd_lin_f12gw_t32k1s4u4p2),
    EMU_LING(glyd_lin_f12gw_t48k1s4u4p4),
    EMU_LING(glyd_lin_f12gw_t64k1s4u4p4),
    EMU_LING(glyd_lin_f12gw_t96k1s4u2p2),
    EMU_LING(glyd_lin_f12gw_t128k1s4u2p2),
    {"glyd_moe_silu_mul", emu_decode::glyd_moe_silu_mul},
    {"glyd_moe_row_experts", emu_decode::glyd_moe_row_experts},
    {"glyd_moe_top1", emu_decode::glyd_moe_top1},
    {"glyd_moe_gather_scale", emu_decode::glyd_moe_gather_scale},
    {"glyd_lin_xperm_t64", emu_decode::glyd_lin_xperm_t64},
    {"glyd_lin_xperm_t128", emu_decode::glyd_lin_xperm_t128},
    {"glyd_lin_xperm_t256", emu_decode::glyd_lin_xperm_t256},
};
static kern unknown = {"unknown", nullptr};

static int run(kfn fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, const glyd_kparams &p) {
	if (bx > 1024 || bx % 32) return 1;
	gridDim = {gx, gy, gz};
	blockDim = {bx, 1, 1};
	for (unsigned z = 0; z < gz; z++)
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
				for (auto *&b : emu_named) {
					delete b;
					b = nullptr;
				}
				emu_mbars.clear();
				std::barrier<> bar((std::ptrdiff_t)bx);
				std::vector<std::barrier<> *> wb;
				for (unsigned w = 0; w < bx / 32; w++) wb.push_back(new std::barrier<>(32));
				emu_block_bar = &bar;
				for (unsigned w = 0; w < bx / 32; w++) emu_warp_bar[w] = wb[w];
				std::vector<std::thread> th;
				for (unsigned t = 0; t < bx; t++)
					th.emplace_back([=, &p] {
						threadIdx = {t, 0, 0};
						blockIdx = {x, y, z};
						fn(p);
					});
				for (auto &t : th) t.join();
				for (auto *b : wb) delete b;
			}
	return 0;
}

extern "C" {
static int Init(unsigned) { return 0; }
static int DriverGetVersion(int *v) { *v = 13000; return 0; }
static int DeviceGetCount(int *n) { *n = 1; return 0; }
static int DeviceGet(int *d, int i) { *d = i; return i == 0 ? 0 : 101; }
static int DeviceGetName(char *s, int n, int) { snprintf(s, n, "fake CUDA (CPU emulation)"); return 0; }
static int DeviceGetAttribute(int *v, int attr, int) {
	switch (attr) {
	case 75: *v = 9; break;          // cc major
	case 76: *v = 0; break;          // cc minor
	case 16: *v = 4; break;          // SMs
	default: *v = 100 * 1024; break; // smem and the rest
	}
	return 0;
}
static int DeviceTotalMem(size_t *m, int) { *m = (size_t)1 << 34; return 0; }
static int PrimaryCtxRetain(void **c, int) { *c = (void *)0x1; return 0; }
static int CtxPush(void *) { return 0; }
static int CtxPop(void **c) { if (c) *c = (void *)0x1; return 0; }
static int ModuleLoadData(void **m, const void *) { *m = (void *)0x2; return 0; }
static int ModuleGetFunction(void **f, void *, const char *name) {
	for (auto &k : kernels)
		if (!strcmp(k.name, name)) { *f = &k; return 0; }
	*f = &unknown;
	return 0;
}
static int FuncSetAttribute(void *, int, int) { return 0; }
static int FuncGetAttribute(int *v, int, void *) { *v = 0; return 0; }
static int LaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned,
                        void *, void **args, void **) {
	kern *k = (kern *)f;
	if (!k->fn || by != 1 || bz != 1 || gx == 0 || gy == 0 || gz == 0 || gy > 65535) return 1;
	return run(k->fn, gx, gy, gz, bx, *(const glyd_kparams *)args[0]);
}
static int GetErrorName(int, const char **s) { *s = "CUDA_ERROR_FAKE"; return 0; }
static int Occupancy(int *n, void *, int, size_t) { *n = 1; return 0; }
static int DtoH(void *dst, unsigned long long src, size_t n, void *) { memcpy(dst, (const void *)src, n); return 0; }
static int HtoD(unsigned long long dst, const void *src, size_t n, void *) { memcpy((void *)dst, src, n); return 0; }
static int Sync(void *) { return 0; }

struct sym {
	const char *name;
	void *fn;
};
static sym syms[] = {
    {"cuInit", (void *)Init}, {"cuDriverGetVersion", (void *)DriverGetVersion},
    {"cuDeviceGetCount", (void *)DeviceGetCount}, {"cuDeviceGet", (void *)DeviceGet},
    {"cuDeviceGetName", (void *)DeviceGetName}, {"cuDeviceGetAttribute", (void *)DeviceGetAttribute},
    {"cuDeviceTotalMem", (void *)DeviceTotalMem}, {"cuDevicePrimaryCtxRetain", (void *)PrimaryCtxRetain},
    {"cuCtxPushCurrent", (void *)CtxPush}, {"cuCtxPopCurrent", (void *)CtxPop},
    {"cuModuleLoadData", (void *)ModuleLoadData}, {"cuModuleGetFunction", (void *)ModuleGetFunction},
    {"cuFuncSetAttribute", (void *)FuncSetAttribute}, {"cuFuncGetAttribute", (void *)FuncGetAttribute},
    {"cuLaunchKernel", (void *)LaunchKernel}, {"cuGetErrorName", (void *)GetErrorName},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void *)Occupancy},
    {"cuMemcpyDtoHAsync", (void *)DtoH}, {"cuMemcpyHtoDAsync", (void *)HtoD},
    {"cuStreamSynchronize", (void *)Sync},
};

// What a program that calls the driver itself resolves by name
// (examples/c/gpu_linear.c): memory is host memory, copies memcpy.
int cuInit(unsigned f) { return Init(f); }
int cuDeviceGet(int *d, int i) { return DeviceGet(d, i); }
int cuDevicePrimaryCtxRetain(void **c, int d) { return PrimaryCtxRetain(c, d); }
int cuDevicePrimaryCtxRelease_v2(int) { return 0; }
int cuCtxSetCurrent(void *) { return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuMemAlloc_v2(unsigned long long *p, size_t n) {
	void *m = aligned_alloc(256, (n + 255) / 256 * 256);
	*p = (unsigned long long)m;
	return m ? 0 : 2; // CUDA_ERROR_OUT_OF_MEMORY
}
int cuMemFree_v2(unsigned long long p) {
	free((void *)p);
	return 0;
}
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n) { return HtoD(dst, src, n, nullptr); }
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n) { return DtoH(dst, src, n, nullptr); }

int cuGetProcAddress_v2(const char *name, void **fp, int, uint64_t, int *st) {
	if (st) *st = 0;
	for (auto &s : syms)
		if (!strcmp(s.name, name)) { *fp = s.fn; return 0; }
	*fp = nullptr;
	return 500;
}
}
