// fakecuda.cc — a fake libcuda.so.1 that runs the pack kernels of
// kernels/pack.cu on the CPU, with "device memory" = host memory. Tests only:
// core/gpu's TestPackEmulated runs the real host code (driver.c, pack.go)
// against it when GLYD_FAKE_CUDA is set (kernels/emu/run.sh builds and runs).
#include "shim.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

thread_local emu_u3 threadIdx, blockIdx;
emu_u3 gridDim, blockDim;
std::barrier<> *emu_block_bar;
std::barrier<> *emu_warp_bar[32];
uint32_t emu_shfl[32][32];

#include "../../core/gpu/glyd_kernel_params.h"
#include "block_scan.inc" // block_exclusive_sum, extracted from kernels/decode.cu by run.sh
#include "../pack.cu"

typedef void (*kfn)(const glyd_kparams);
struct kern {
	const char *name;
	kfn fn;
};
static kern kernels[] = {
    {"glyd_pack_zero", glyd_pack_zero},   {"glyd_pack_hist", glyd_pack_hist},
    {"glyd_pack_crc", glyd_pack_crc},     {"glyd_pack_count", glyd_pack_count},
    {"glyd_pack_f12", glyd_pack_f12},     {"glyd_pack_small_count", glyd_pack_small_count},
    {"glyd_pack_small", glyd_pack_small},
};
static kern unknown = {"unknown", nullptr};

static int run(kfn fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, const glyd_kparams &p) {
	if (bx > 1024 || bx % 32) return 1;
	gridDim = {gx, gy, gz};
	blockDim = {bx, 1, 1};
	for (unsigned z = 0; z < gz; z++)
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
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

int cuGetProcAddress_v2(const char *name, void **fp, int, uint64_t, int *st) {
	if (st) *st = 0;
	for (auto &s : syms)
		if (!strcmp(s.name, name)) { *fp = s.fn; return 0; }
	*fp = nullptr;
	return 500;
}
}
