// shim.h — just enough of CUDA to run kernels/pack.cu on the CPU, one block
// at a time, one std::thread per CUDA thread (tests only; see fakecuda.cc).
#pragma once
#include <barrier>
#include <cstdint>
#include <cstring>
struct emu_u3 {
	unsigned x, y, z;
};
extern thread_local emu_u3 threadIdx, blockIdx;
extern emu_u3 gridDim, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct uint4 {
	uint32_t x, y, z, w;
};
struct uint2 {
	uint32_t x, y;
};
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return uint4{a, b, c, d}; }
struct float4 {
	float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return uint2{a, b}; }
extern std::barrier<> *emu_block_bar;
extern std::barrier<> *emu_warp_bar[32];
extern uint32_t emu_shfl[32][32];
inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
inline uint32_t __shfl_up_sync(unsigned, uint32_t v, int o) {
	const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
	emu_warp_bar[w]->arrive_and_wait();
	emu_shfl[w][l] = v;
	emu_warp_bar[w]->arrive_and_wait();
	return l >= o ? emu_shfl[w][l - o] : v;
}
inline uint32_t atomicAdd(uint32_t *p, uint32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline uint32_t atomicOr(uint32_t *p, uint32_t v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline uint32_t __cvta_generic_to_shared(const void *) { return 0; }
inline float __uint_as_float(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}
