/*
 * decode_bw.cu — how fast can fixed12 planes be decoded to bf16 in HBM? Ways
 * of moving the bytes, each checked bit for bit against the production kernel
 * (glyd_decode_f12_vec) and timed on the same buffers, beside a device-to-device
 * copy (the read+write stream ceiling). Standalone (CUDA runtime, no Glyd
 * library): on the GPU machine, in the repository root,
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/decode_bw \
 *        python/benchmarks/decode_bw.cu && /tmp/decode_bw [MIB_OF_BF16]
 *
 * Prints one line per variant: ms per decode (median of 15), TB/s of bf16
 * written and TB/s moved (1.5 bytes read + 2 written per weight; the copy
 * reads 2), and the number of output words that differ from the production
 * vec kernel's (must be 0).
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>
#include "../../kernels/decode.cu"
#include "bench_util.cuh"

// The production loops with other parameters: the vec kernel's with V units
// per thread at MINB blocks per SM, the bulk kernel's with chunks of CH units
// in S stages.
template <int V, int MINB>
__global__ void __launch_bounds__(256, MINB) v_stride(const uint8_t *sm, const uint8_t *code, uint16_t *dst, uint64_t n,
                                                      uint32_t base) {
	decode_f12_span<false, V>(sm, code, dst, n, base);
}
template <int CH, int S>
__global__ void __launch_bounds__(256) v_bulk_regs(const uint8_t *sm, const uint8_t *code, uint16_t *dst, uint64_t n,
                                                   uint32_t base) {
	decode_f12_bulk_span<false, CH, S>(sm, code, dst, n, base);
}

// glyd_decode_f12_bulk's pipeline (chunks of CH units in S stages) with the
// bf16 also going through shared memory: written to one of two alternating
// buffers that one thread stores with a bulk copy. nu % CH == 0.
template <int CH, int S>
__global__ void __launch_bounds__(256) v_bulk_stores(const uint8_t *sm, const uint8_t *code, uint16_t *dst, uint64_t nu,
                                              uint32_t base) {
#ifdef GLYD_WGMMA
	extern __shared__ __align__(128) uint8_t sh[];
	const uint32_t B4 = base * 0x01010101u;
	const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(sh);
	const uint32_t bars = s0 + S * 12 * CH;
	const uint32_t outb = bars + 128;
	const uint64_t nch = nu / CH;
	const int tid = threadIdx.x;
	if (tid == 0)
		for (int s = 0; s < S; s++) mbar_init(bars + 8 * s, 1);
	__syncthreads();
	if (tid == 0)
		for (int s = 0; s < S; s++) {
			const uint64_t c = blockIdx.x + (uint64_t)s * gridDim.x;
			if (c < nch) {
				mbar_expect_bytes(bars + 8 * s, 12 * CH);
				bulk_copy(s0 + s * 12 * CH, sm + c * 8 * CH, 8 * CH, bars + 8 * s);
				bulk_copy(s0 + s * 12 * CH + 8 * CH, code + c * 4 * CH, 4 * CH, bars + 8 * s);
			}
		}
	for (uint64_t i = 0;; i++) {
		const uint64_t c = blockIdx.x + i * gridDim.x;
		if (c >= nch) break;
		const int s = i % S;
		const uint32_t st = s0 + s * 12 * CH;
		const uint32_t ob = outb + (i & 1) * 16 * CH;
		// the bulk store of chunk i - 2 has read this buffer
		if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
		__syncthreads();
		mbar_wait(bars + 8 * s, (i / S) & 1);
#pragma unroll
		for (int j = 0; j < CH / 256; j++) {
			const uint32_t u = j * 256 + tid;
			const uint4 v = decode_staged<CH>(st, u, B4);
			asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" ::"r"(ob + 16 * u), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
			             : "memory");
		}
		fence_proxy_async();
		__syncthreads(); // stage s read by all; the output buffer written
		if (tid == 0) {
			asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + c * CH * 8), "r"(ob),
			             "r"(16 * CH)
			             : "memory");
			asm volatile("cp.async.bulk.commit_group;" ::: "memory");
			const uint64_t c2 = c + (uint64_t)S * gridDim.x;
			if (c2 < nch) {
				mbar_expect_bytes(bars + 8 * s, 12 * CH);
				bulk_copy(st, sm + c2 * 8 * CH, 8 * CH, bars + 8 * s);
				bulk_copy(st + 8 * CH, code + c2 * 4 * CH, 4 * CH, bars + 8 * s);
			}
		}
	}
	if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

__global__ void count_diff(const uint32_t *a, const uint32_t *b, uint64_t n, unsigned long long *out) {
	unsigned long long d = 0;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		d += a[i] != b[i];
	if (d) atomicAdd(out, d);
}

struct Bufs {
	uint8_t *sm, *code;
	uint16_t *ref, *out;
	uint64_t n;
	uint32_t base;
	int sms;
};

// moved: bytes read and written per weight (3.5 for a decode, 4 for the copy).
template <class F>
static void timed(const char *name, const Bufs &b, F launch, double moved = 3.5) {
	CK(cudaMemset(b.out, 0xff, b.n * 2));
	launch();
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	unsigned long long *d, h = 0;
	CK(cudaMalloc(&d, 8));
	CK(cudaMemset(d, 0, 8));
	count_diff<<<b.sms * 8, 256>>>((const uint32_t *)b.ref, (const uint32_t *)b.out, b.n / 2, d);
	CK(cudaMemcpy(&h, d, 8, cudaMemcpyDeviceToHost));
	CK(cudaFree(d));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	std::vector<float> ms;
	for (int r = 0; r < 17; r++) {
		CK(cudaEventRecord(e0));
		launch();
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		float t;
		CK(cudaEventElapsedTime(&t, e0, e1));
		if (r >= 2) ms.push_back(t);
	}
	std::sort(ms.begin(), ms.end());
	const double t = ms[ms.size() / 2];
	printf("%-34s %8.3f ms  %5.3f TB/s written  %5.3f TB/s moved  diff %llu\n", name, t, 2.0 * b.n / t / 1e9,
	       moved * b.n / t / 1e9, h);
	fflush(stdout);
}

// A kernel with dynamic shared memory smem at min(its occupancy, per_sm) blocks per SM.
template <class K>
static void with_smem(const char *name, const Bufs &b, K kernel, int smem, int per_sm, uint64_t n_or_units) {
	CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	int occ = 0;
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 256, smem));
	char full[96];
	snprintf(full, sizeof full, "%s (%d KiB, %d/SM)", name, smem >> 10, std::min(occ, per_sm));
	const int grid = b.sms * std::min(occ, per_sm);
	timed(full, b, [&] { kernel<<<grid, 256, smem>>>(b.sm, b.code, b.out, n_or_units, b.base); });
}

int main(int argc, char **argv) {
	const double mib = argc > 1 ? atof(argv[1]) : 1536;
	Bufs b;
	b.n = (uint64_t)(mib * 1048576 / 2) / (8 * 4096) * (8 * 4096); // a multiple of every variant's chunk
	b.base = 113;
	CK(cudaDeviceGetAttribute(&b.sms, cudaDevAttrMultiProcessorCount, 0));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("%s, %d SMs, %llu weights (%.0f MiB of bf16)\n", prop.name, b.sms, (unsigned long long)b.n, b.n * 2.0 / 1048576);
	CK(cudaMalloc(&b.sm, b.n));
	CK(cudaMalloc(&b.code, b.n / 2));
	CK(cudaMalloc(&b.ref, b.n * 2));
	CK(cudaMalloc(&b.out, b.n * 2));
	fill<<<b.sms * 8, 256>>>(b.sm, b.n, 1);
	fill<<<b.sms * 8, 256>>>(b.code, b.n / 2, 2);
	glyd_kparams p;
	memset(&p, 0, sizeof p);
	p.sm = (uintptr_t)b.sm;
	p.code = (uintptr_t)b.code;
	p.dst = (uintptr_t)b.ref;
	p.n = b.n;
	p.base = b.base;
	glyd_decode_f12_vec<<<b.sms * 3, 256>>>(p);
	CK(cudaDeviceSynchronize());
	p.dst = (uintptr_t)b.out;
	const uint64_t nu = b.n / 8;
	timed("copy of the bf16 (device to device)", b, [&] { CK(cudaMemcpyAsync(b.out, b.ref, b.n * 2, cudaMemcpyDeviceToDevice)); }, 4.0);
	timed("production glyd_decode_f12_vec", b, [&] { glyd_decode_f12_vec<<<b.sms * 3, 256>>>(p); });
	CK(cudaFuncSetAttribute(glyd_decode_f12_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, BULK_SMEM));
	timed("production glyd_decode_f12_bulk", b, [&] { glyd_decode_f12_bulk<<<b.sms, 256, BULK_SMEM>>>(p); });
	timed("vec loop, 16 units, 2/SM", b, [&] { v_stride<16, 2><<<b.sms * 2, 256>>>(b.sm, b.code, b.out, b.n, b.base); });
	with_smem("bulk ch1024 s4 reg-stores", b, v_bulk_regs<1024, 4>, 4 * 12 * 1024, 4, b.n);
	with_smem("bulk ch1024 s4 bulk-stores", b, v_bulk_stores<1024, 4>, 4 * 12 * 1024 + 128 + 2 * 16 * 1024, 8, nu);
	with_smem("bulk ch512 s6 bulk-stores", b, v_bulk_stores<512, 6>, 6 * 12 * 512 + 128 + 2 * 16 * 512, 8, nu);
	return 0;
}
