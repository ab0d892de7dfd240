/*
 * stream_bw.cu — how fast can the packed planes of ONE linear's weight be
 * streamed through the decode, with the data movement of the small-token
 * kernels against the one a persistent kernel could use? Each variant reads
 * every sm and code byte of a fixed12 weight [N, K], decodes every weight
 * (decode8 of kernels/decode.cu) and folds the bf16 words into a checksum; no
 * matrix product, no activations, no output: the data path alone. Timed as
 * table 1 runs a shape: a CUDA graph of 12 launches over 12 distinct copies
 * of the weight (none is in L2 when its launch starts). Standalone (CUDA
 * runtime, no Glyd library): on the GPU machine, in the repository root,
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/stream_bw \
 *        python/benchmarks/stream_bw.cu -lcuda && /tmp/stream_bw
 *
 * Variants (per shape: µs per weight, median of 15 graph replays / 12, and
 * TB/s of packed bytes, 1.5 per weight):
 *   regs        the 1-8-token kernels' pattern (m1n1w1k8u1): one block of 8
 *               warps per 16 weight rows, warp w taking the rows' 64-k blocks
 *               w, w + 8, ...; each lane loads its 16 sm bytes and 8 code
 *               bytes of two rows per k-block, the next k-block's loads issued
 *               before the current one is decoded.
 *   rows16 KC/S/B  a persistent grid of B blocks per SM, block b taking a
 *               contiguous range of 16-row groups (no split of K), each row's
 *               KC-byte run of sm and KC/2 of codes copied by the bulk copy
 *               engine (one copy per row and plane, issued by warp 0's lanes)
 *               into S shared-memory stages, rows 16 bytes apart; all threads
 *               decode the oldest stage.
 *   tiles16 KC/S/B  the same grid and stages with the planes as they would be
 *               if re-laid in contiguous tiles of 16 rows x KC (one copy per
 *               plane and stage, as the bulk decode copies).
 *   tma2d KC/S/B[ mma]  the same grid and stages on the planes as they are
 *               (row-major): one 2-D tensor copy (TMA, a CUtensorMap per
 *               plane) of 16 rows x KC per plane and stage; "mma" reads the
 *               stages as the fused kernels' lanes read weights (lane g, t:
 *               16 bytes of rows g and g + 8 at 16t of a 64-k block), the
 *               2-way bank conflicts included.
 * Link with -lcuda (the tensor maps).
 * The checksums of all variants must agree (printed: "ok").
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include "../../kernels/decode.cu"
#include "bench_util.cuh"

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x + v.y + v.z + v.w; }

// One warp's sum into *sum (wrapping: only equality between variants matters).
__device__ __forceinline__ void add_sum(uint32_t acc, unsigned int *sum) {
	for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}

__global__ void __launch_bounds__(256) regs(const uint8_t *sm, const uint8_t *code, int64_t K, uint32_t base,
                                            unsigned int *sum) {
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	const uint32_t B4 = base * 0x01010101u;
	const int64_t KB = K / 64;
	const uint8_t *s0 = sm + ((int64_t)blockIdx.x * 16 + g) * K + 16 * t, *s1 = s0 + 8 * K;
	const uint8_t *c0 = code + (((int64_t)blockIdx.x * 16 + g) * K + 16 * t) / 2, *c1 = c0 + 4 * K;
	uint32_t acc = 0;
	int64_t kb = w;
	uint4 a0, a1;
	uint2 b0, b1;
	auto load = [&](int64_t j) {
		a0 = *(const uint4 *)(s0 + j * 64);
		a1 = *(const uint4 *)(s1 + j * 64);
		b0 = *(const uint2 *)(c0 + j * 32);
		b1 = *(const uint2 *)(c1 + j * 32);
	};
	if (kb < KB) load(kb);
	for (; kb < KB; kb += 8) {
		const uint4 x0 = a0, x1 = a1;
		const uint2 y0 = b0, y1 = b1;
		if (kb + 8 < KB) load(kb + 8);
		acc += fold(decode8(x0.x, x0.y, y0.x, B4)) + fold(decode8(x0.z, x0.w, y0.y, B4));
		acc += fold(decode8(x1.x, x1.y, y1.x, B4)) + fold(decode8(x1.z, x1.w, y1.y, B4));
	}
	add_sum(acc, sum);
}

// A block of the persistent variants: its contiguous range of 16-row groups
// (from g0), the chunks of 16 rows x KC they make (cpg per group, total in
// all), and the shared addresses of its stages (s0) and their barriers.
struct Persistent {
	uint32_t s0, bar0, B4;
	int64_t g0, cpg, total;
	__device__ __forceinline__ Persistent(const void *stages, const void *bars, int64_t N, int64_t K, int KC,
	                                      uint32_t base)
	    : s0((uint32_t)__cvta_generic_to_shared(stages)), bar0((uint32_t)__cvta_generic_to_shared(bars)),
	      B4(base * 0x01010101u) {
		const int64_t groups = N / 16;
		g0 = groups * blockIdx.x / gridDim.x;
		cpg = K / KC;
		total = (groups * (blockIdx.x + 1) / gridDim.x - g0) * cpg;
	}
};

template <int KC, int S, int MINB, bool TILED>
__global__ void __launch_bounds__(256, MINB) rows16(const uint8_t *sm, const uint8_t *code, int64_t N, int64_t K,
                                                    uint32_t base, unsigned int *sum) {
#ifdef GLYD_WGMMA
	constexpr int SMROW = TILED ? KC : KC + 16, CROW = TILED ? KC / 2 : KC / 2 + 16, STAGE = 16 * (SMROW + CROW);
	extern __shared__ __align__(128) uint8_t sh[];
	__shared__ __align__(8) uint64_t full[S];
	const Persistent ps(sh, full, N, K, KC, base);
	const uint32_t s0 = ps.s0, bar0 = ps.bar0, B4 = ps.B4;
	const int64_t g0 = ps.g0, cpg = ps.cpg, total = ps.total;
	const int tid = threadIdx.x;
	// chunk c (16 rows x KC) into stage s: warp 0, lane r < 16 the sm run of row r, lane 16 + r its codes
	auto fetch = [&](int64_t c, int s) {
		const int64_t row = (g0 + c / cpg) * 16 + (tid & 15), k0 = (c % cpg) * KC;
		if (tid == 0) mbar_expect_bytes(bar0 + 8 * s, 16 * (KC + KC / 2));
		__syncwarp();
		if (TILED) { // chunk g0 * cpg + c of the re-laid planes: one copy each
			const int64_t at = (g0 * cpg + c) * 16 * KC;
			if (tid == 0) bulk_copy(s0 + s * STAGE, sm + at, 16 * KC, bar0 + 8 * s);
			if (tid == 1) bulk_copy(s0 + s * STAGE + 16 * SMROW, code + at / 2, 8 * KC, bar0 + 8 * s);
			return;
		}
		if (tid < 16)
			bulk_copy(s0 + s * STAGE + (tid & 15) * SMROW, sm + row * K + k0, KC, bar0 + 8 * s);
		else
			bulk_copy(s0 + s * STAGE + 16 * SMROW + (tid & 15) * CROW, code + (row * K + k0) / 2, KC / 2, bar0 + 8 * s);
	};
	if (tid == 0)
		for (int s = 0; s < S; s++) mbar_init(bar0 + 8 * s, 1);
	__syncthreads();
	if (tid < 32)
		for (int s = 0; s < S && s < total; s++) fetch(s, s);
	uint32_t acc = 0;
	for (int64_t i = 0; i < total; i++) {
		const int s = i % S;
		const uint32_t st = s0 + s * STAGE;
		mbar_wait(bar0 + 8 * s, (uint32_t)(i / S) & 1);
#pragma unroll
		for (int j = 0; j < KC / 128; j++) { // 16 rows x KC/8 units, 256 threads
			const int u = j * 256 + tid, row = u / (KC / 8), cu = u % (KC / 8);
			uint32_t a, b, cw;
			asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "r"(st + row * SMROW + 8 * cu));
			asm volatile("ld.shared.u32 %0, [%1];" : "=r"(cw) : "r"(st + 16 * SMROW + row * CROW + 4 * cu));
			acc += fold(decode8(a, b, cw, B4));
		}
		__syncthreads(); // every thread has read stage s
		if (tid < 32 && i + S < total) fetch(i + S, s);
	}
	add_sum(acc, sum);
#endif
}

// A 2-D tensor copy (TMA) of the box at element coordinates (c0, c1) of the
// tensor map at tmap (a __grid_constant__ parameter) into shared memory at
// dst, completing on bar.
__device__ __forceinline__ void tensor_copy_2d(uint32_t dst, const void *tmap, int32_t c0, int32_t c1, uint32_t bar) {
#ifdef GLYD_WGMMA
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
	             "[%4];" ::"r"(dst),
	             "l"(tmap), "r"(c0), "r"(c1), "r"(bar)
	             : "memory");
#endif
}

template <int KC, int S, int MINB, bool MMA>
__global__ void __launch_bounds__(256, MINB) tma2d(const __grid_constant__ CUtensorMap tsm,
                                                   const __grid_constant__ CUtensorMap tcode, int64_t N, int64_t K,
                                                   uint32_t base, unsigned int *sum) {
#ifdef GLYD_WGMMA
	constexpr int STAGE = 16 * KC * 3 / 2;
	extern __shared__ __align__(128) uint8_t sh[];
	__shared__ __align__(8) uint64_t full[S];
	const Persistent ps(sh, full, N, K, KC, base);
	const uint32_t s0 = ps.s0, bar0 = ps.bar0, B4 = ps.B4;
	const int64_t g0 = ps.g0, cpg = ps.cpg, total = ps.total;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
	auto fetch = [&](int64_t c, int s) { // chunk c of this block into stage s (thread 0)
		const int row = (int)((g0 + c / cpg) * 16), k0 = (int)((c % cpg) * KC);
		mbar_expect_bytes(bar0 + 8 * s, STAGE);
		tensor_copy_2d(s0 + s * STAGE, &tsm, k0 / 4, row, bar0 + 8 * s);
		tensor_copy_2d(s0 + s * STAGE + 16 * KC, &tcode, k0 / 8, row, bar0 + 8 * s);
	};
	if (tid == 0) {
		for (int s = 0; s < S; s++) mbar_init(bar0 + 8 * s, 1);
		for (int s = 0; s < S && s < total; s++) fetch(s, s);
	}
	__syncthreads();
	uint32_t acc = 0;
	for (int64_t i = 0; i < total; i++) {
		const int s = i % S;
		const uint32_t st = s0 + s * STAGE;
		mbar_wait(bar0 + 8 * s, (uint32_t)(i / S) & 1);
		if (MMA) {
#pragma unroll
			for (int j = w; j < KC / 64; j += 8)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int row = g + 8 * h;
					const uint4 a = lds16(st + row * KC + 64 * j + 16 * t);
					uint32_t c0, c1;
					asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(c0), "=r"(c1)
					             : "r"(st + 16 * KC + row * (KC / 2) + 32 * j + 8 * t));
					acc += fold(decode8(a.x, a.y, c0, B4)) + fold(decode8(a.z, a.w, c1, B4));
				}
		} else {
#pragma unroll
			for (int j = 0; j < KC / 128; j++) {
				const int u = j * 256 + tid, row = u / (KC / 8), cu = u % (KC / 8);
				uint32_t a, b, cw;
				asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "r"(st + row * KC + 8 * cu));
				asm volatile("ld.shared.u32 %0, [%1];" : "=r"(cw) : "r"(st + 16 * KC + row * (KC / 2) + 4 * cu));
				acc += fold(decode8(a, b, cw, B4));
			}
		}
		__syncthreads(); // every thread has read stage s
		if (tid == 0 && i + S < total) fetch(i + S, s);
	}
	add_sum(acc, sum);
#endif
}

// The tensor map of a row-major plane of rows x bytes bytes, as 4-byte
// elements, box = 16 rows x box_bytes.
static CUtensorMap plane_map(const void *p, int64_t rows, int64_t bytes, int box_bytes) {
	CUtensorMap m;
	const cuuint64_t dims[2] = {(cuuint64_t)bytes / 4, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)bytes};
	const cuuint32_t box[2] = {(cuuint32_t)box_bytes / 4, 16}, es[2] = {1, 1};
	const CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, (void *)p, dims, strides, box, es,
	                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
	                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "cuTensorMapEncodeTiled: error %d\n", (int)r);
		exit(1);
	}
	return m;
}

constexpr int COPIES = 12;

struct Weights {
	int64_t N, K;
	uint8_t *sm[COPIES], *code[COPIES];
};

// Median µs per weight of a graph of COPIES launches (launch(i) runs copy i),
// and the checksum of copy 0.
template <class F>
static double timed(F launch, unsigned int *dsum, unsigned int *hsum) {
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaMemset(dsum, 0, 4));
	launch(0, st);
	CK(cudaStreamSynchronize(st));
	CK(cudaGetLastError());
	CK(cudaMemcpy(hsum, dsum, 4, cudaMemcpyDeviceToHost));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	for (int i = 0; i < COPIES; i++) launch(i, st);
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	std::vector<float> ms;
	for (int r = 0; r < 17; r++) {
		CK(cudaEventRecord(e0, st));
		CK(cudaGraphLaunch(ge, st));
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		float t;
		CK(cudaEventElapsedTime(&t, e0, e1));
		if (r >= 2) ms.push_back(t);
	}
	std::sort(ms.begin(), ms.end());
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(st));
	return ms[ms.size() / 2] * 1000.0 / COPIES;
}

template <int KC, int S, int MINB, bool TILED = false>
static void run_rows16(const Weights &w, int sms, unsigned int *dsum, unsigned int want) {
	auto k = rows16<KC, S, MINB, TILED>;
	const int smem = S * 16 * (KC + 16 + KC / 2 + 16);
	CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	int occ = 0;
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, 256, smem));
	const int grid = sms * std::min(occ, MINB);
	unsigned int got;
	const double us = timed([&](int i, cudaStream_t st) { k<<<grid, 256, smem, st>>>(w.sm[i], w.code[i], w.N, w.K, 113, dsum); },
	                        dsum, &got);
	printf("  %s KC %4d S %d %d/SM (%3d KiB)  %8.2f us  %5.2f TB/s  %s\n", TILED ? "tiles16" : "rows16 ", KC, S,
	       std::min(occ, MINB), smem >> 10, us,
	       1.5 * w.N * w.K / us / 1e6, got == want ? "ok" : "CHECKSUM DIFFERS");
}

template <int KC, int S, int MINB, bool MMA>
static void run_tma2d(const Weights &w, int sms, unsigned int *dsum, unsigned int want) {
	auto k = tma2d<KC, S, MINB, MMA>;
	const int smem = S * 16 * KC * 3 / 2;
	CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	int occ = 0;
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, 256, smem));
	const int grid = sms * std::min(occ, MINB);
	CUtensorMap ms[COPIES], mc[COPIES];
	for (int i = 0; i < COPIES; i++) {
		ms[i] = plane_map(w.sm[i], w.N, w.K, KC);
		mc[i] = plane_map(w.code[i], w.N, w.K / 2, KC / 2);
	}
	unsigned int got;
	const double us = timed([&](int i, cudaStream_t st) { k<<<grid, 256, smem, st>>>(ms[i], mc[i], w.N, w.K, 113, dsum); },
	                        dsum, &got);
	printf("  tma2d   KC %4d S %d %d/SM (%3d KiB)%s  %8.2f us  %5.2f TB/s  %s\n", KC, S, std::min(occ, MINB), smem >> 10,
	       MMA ? " mma" : "    ", us, 1.5 * w.N * w.K / us / 1e6, got == want ? "ok" : "CHECKSUM DIFFERS");
}

int main() {
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("%s, %d SMs; packed fixed12 weights, %d copies per shape, data path only (decode + checksum)\n", prop.name,
	       sms, COPIES);
	unsigned int *dsum;
	CK(cudaMalloc(&dsum, 4));
	const int64_t shapes[][2] = {{4096, 4096}, {6144, 4096}, {4096, 12288}, {24576, 4096}};
	const char *names[] = {"o", "qkv", "down", "gate_up"};
	for (int sh = 0; sh < 4; sh++) {
		Weights w;
		w.N = shapes[sh][0];
		w.K = shapes[sh][1];
		const uint64_t n = (uint64_t)w.N * w.K;
		for (int i = 0; i < COPIES; i++) {
			CK(cudaMalloc(&w.sm[i], n));
			CK(cudaMalloc(&w.code[i], n / 2));
			fill<<<sms * 8, 256>>>(w.sm[i], n, 1);
			fill<<<sms * 8, 256>>>(w.code[i], n / 2, 2);
		}
		CK(cudaDeviceSynchronize());
		printf("%s %lld x %lld (%.1f MB packed)\n", names[sh], (long long)w.N, (long long)w.K, 1.5 * n / 1e6);
		unsigned int want;
		const double us = timed(
		    [&](int i, cudaStream_t st) { regs<<<w.N / 16, 256, 0, st>>>(w.sm[i], w.code[i], w.K, 113, dsum); }, dsum,
		    &want);
		printf("  regs (16 rows per block, 8 warps)        %8.2f us  %5.2f TB/s\n", us, 1.5 * n / us / 1e6);
		run_rows16<512, 4, 2>(w, sms, dsum, want);
		run_rows16<1024, 4, 1>(w, sms, dsum, want);
		run_rows16<512, 4, 1, true>(w, sms, dsum, want);
		run_rows16<512, 4, 2, true>(w, sms, dsum, want);
		run_rows16<1024, 4, 1, true>(w, sms, dsum, want);
		run_rows16<256, 8, 2, true>(w, sms, dsum, want);
		run_tma2d<512, 4, 2, false>(w, sms, dsum, want);
		run_tma2d<512, 4, 2, true>(w, sms, dsum, want);
		run_tma2d<512, 6, 2, true>(w, sms, dsum, want);
		run_tma2d<1024, 4, 1, true>(w, sms, dsum, want);
		run_tma2d<1024, 3, 2, true>(w, sms, dsum, want);
		run_tma2d<512, 8, 1, true>(w, sms, dsum, want);
		for (int i = 0; i < COPIES; i++) {
			CK(cudaFree(w.sm[i]));
			CK(cudaFree(w.code[i]));
		}
	}
	return 0;
}
