// What the standalone CUDA benchmarks of this folder share (decode_bw.cu,
// stream_bw.cu): error checks on the CUDA runtime's calls and pseudo-random
// bytes for planes.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                                  \
	do {                                                                                                       \
		cudaError_t e_ = (x);                                                                                  \
		if (e_ != cudaSuccess) {                                                                               \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                 \
			exit(1);                                                                                           \
		}                                                                                                      \
	} while (0)

// n pseudo-random bytes at p (a hash of the index and seed).
__global__ void fill(uint8_t *p, uint64_t n, uint32_t seed) {
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
		uint32_t x = (uint32_t)i * 2654435761u ^ seed;
		x ^= x >> 15;
		x *= 2246822519u;
		x ^= x >> 13;
		p[i] = (uint8_t)x;
	}
}
