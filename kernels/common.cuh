/*
 * common.cuh — helpers shared by the Glyd kernels. Each PTX helper says why it
 * exists.
 */
#pragma once
#include <stdint.h>
#include "../core/gpu/glyd_kernel_params.h"

// Weights are read exactly once: load through the non-coherent path and do not
// allocate them in L1, so L1 keeps the activations that every warp re-reads.
// L2::256B asks L2 to fetch the whole 256-byte block around each request:
// a warp touches 64 bytes of each of 16 weight rows per load, and the
// neighbouring warps the next 64 bytes, so DRAM sees longer bursts.
__device__ __forceinline__ uint4 ld_stream16(const void *p) {
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}
__device__ __forceinline__ uint2 ld_stream8(const void *p) {
	uint2 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
	return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const void *p) {
	uint32_t v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
}
// Asynchronous copies of weights into shared memory (sm_80+): no register
// holds the bytes while they are in flight, so a thread can keep many k-blocks
// coming. src_bytes 0 fills the destination with zeros (reads nothing). The
// L2::256B hint as in ld_stream16. A thread waits for its own copies only
// (cp_async_wait), so a buffer that the same thread fills and reads needs no
// barrier.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, uint32_t src_bytes) {
	asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
	             : "memory");
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void *src, uint32_t src_bytes) {
	asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
	             : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most PENDING of this thread's committed groups are in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
	asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}
__device__ __forceinline__ uint4 lds16(uint32_t addr) {
	uint4 v;
	asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
	             : "memory");
	return v;
}
// The pointer as an opaque value: the compiler keeps it in a register instead
// of recomputing the arithmetic that made it (rematerialization) in a loop.
template <class T>
__device__ __forceinline__ T *pin(T *p) {
	asm volatile("" : "+l"(p));
	return p;
}
// Activations: re-read by every warp of the block and by neighbouring blocks;
// keep them in L1 (plain read-only path). Not volatile, so the compiler can
// hoist them above the tensor-core work of earlier tiles.
__device__ __forceinline__ uint4 ld_act16(const void *p) {
	uint4 v;
	asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}
// Decoded output is written once and not read back by this kernel: streaming
// store (evict-first) so it does not push the planes out of L2.
__device__ __forceinline__ void st_stream16(void *p, uint4 v) {
	asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
	             : "memory");
}
// Plain (write-back) 16-byte store: a row-range decode keeps its tile in L2
// for the GEMM that reads it right after (st_stream16 would mark it
// evict-first).
__device__ __forceinline__ void st_keep16(void *p, uint4 v) {
	asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
	             : "memory");
}
// A fused kernel and its _safe twin (for groups with base + 15 >= 255: the
// fast decode gives escapes exponent 0): NAME runs FN<ARGS..., false>(p,
// smem), NAME_safe FN<ARGS..., true>; BOUNDS = the __launch_bounds__
// arguments in parentheses.
#define GLYD_KERNEL_PAIR(NAME, BOUNDS, FN, ...)                                                      \
	extern "C" __global__ void __launch_bounds__ BOUNDS NAME(const glyd_kparams p) {                 \
		extern __shared__ float smem[];                                                            \
		FN<__VA_ARGS__, false>(p, smem);                                                           \
	}                                                                                                \
	extern "C" __global__ void __launch_bounds__ BOUNDS NAME##_safe(const glyd_kparams p) {          \
		extern __shared__ float smem[];                                                            \
		FN<__VA_ARGS__, true>(p, smem);                                                            \
	}

// Programmatic dependent launch (sm_90+; the host launches the fused linear
// kernels that way on sm_90 only): griddep_launch lets the stream's next
// kernel start its blocks in this one's tail; griddep_wait waits until the
// previous kernel has finished and its writes are visible. A kernel calls
// griddep_wait before it reads activations or partial sums, or writes
// anything: only the immutable weights and escape index may be read before.
// Both are no-ops in a plain launch and on older architectures.
__device__ __forceinline__ void griddep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// prmt in its default mode: a selector nibble with bit 3 set replicates the
// sign (msb) of the chosen byte into the whole byte. __byte_perm() does not
// expose that mode; it puts each weight's sign in bit 15 with no shift.
__device__ __forceinline__ uint32_t prmt_sr(uint32_t a, uint32_t b, uint32_t sel) {
	uint32_t d;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
	return d;
}
// Two bf16 from P (sign-replicated sm bytes, see prmt_sr) and E (exponents at
// bits 7..14 and 23..30): sign and mantissa from P, exponent from E. Written
// as one lop3 ((a & c) | (b & ~c): 0xE4): from the C expression the compiler
// emitted two LOP3 per pair (SASS, sm_90a, nvcc 13.0).
__device__ __forceinline__ uint32_t lop3_sel(uint32_t P, uint32_t E) {
	uint32_t d;
	asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(d) : "r"(P), "r"(E), "n"(0x807f807f));
	return d;
}
// One bf16 from its sign+mantissa byte and its exponent.
__device__ __forceinline__ uint16_t bf16_bits(uint32_t b, uint32_t e) {
	return (uint16_t)(((b & 0x80u) << 8) | ((e & 0xffu) << 7) | (b & 0x7fu));
}
__device__ __forceinline__ float bf16_to_f32(uint32_t bits16) {
	return __uint_as_float(bits16 << 16);
}


// The tiled arrangement of a fixed12 matrix [N, K]'s sm and code planes
// (glyd_kparams.tiled = K / 64; N % 16 == 0, K % 64 == 0; docs/FORMAT.md,
// "Planes on the GPU"): 16-row x 64-k tiles, [N/16][K/64][16][64] sm bytes,
// so the 16 rows of a warp's k-block are 1 KiB of sm bytes and 512 of codes
// in one piece (row-major: 16 pieces of 64 and 32 bytes, one per row). Both
// planes permute alike: element e's code is nibble plane_index(e) of the
// code plane.

// Where row n's k-block 0 starts in the sm plane (half of it in the code
// plane), and how far apart its k-blocks are.
__device__ __forceinline__ int64_t row_at(int64_t n, int64_t K, uint32_t tiled) {
	return tiled ? (n & ~(int64_t)15) * K + (n & 15) * 64 : n * K;
}
__device__ __forceinline__ uint32_t kblock_step(uint32_t tiled) { return tiled ? 1024u : 64u; }

// The place in the planes of element e (= n * K + k) of the matrix.
__device__ __forceinline__ uint64_t plane_index(uint64_t e, uint32_t tiled) {
	if (!tiled) return e;
	const uint64_t K = 64ull * tiled, n = e / K, k = e - n * K;
	return (n & ~15ull) * K + (n & 15) * 64 + (k & ~63ull) * 16 + (k & 63);
}

// The unit (8 elements) of the row-major matrix that unit u of tiled planes
// holds, u counted from the start of a 16-row group.
__device__ __forceinline__ uint64_t tiled_unit(uint64_t u, uint32_t tiled) {
	const uint32_t t = (uint32_t)(u >> 7), w = (uint32_t)u & 127u; // tile (< 2^32: < 2^42 elements), unit in it
	const uint32_t r16 = t / tiled, kb = t - r16 * tiled;
	return ((uint64_t)r16 * 16 + (w >> 3)) * tiled * 8 + kb * 8 + (w & 7);
}
