// driver.c — see driver.h. Plain C99 + POSIX (dlopen, pthread).
#define _GNU_SOURCE
#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef int glyd_CUresult;
typedef int glyd_CUdevice;
typedef void *glyd_CUcontext;
typedef void *glyd_CUmodule;
typedef void *glyd_CUfunction;
typedef void *glyd_CUstream;

/* Attribute numbers from the CUDA driver API (CUdevice_attribute,
 * CUfunction_attribute); they are part of its ABI and never change. */
enum {
	A_CLOCK_RATE = 13,
	A_MULTIPROCESSOR_COUNT = 16,
	A_MEMORY_CLOCK_RATE = 36,
	A_GLOBAL_MEMORY_BUS_WIDTH = 37,
	A_L2_CACHE_SIZE = 38,
	A_CC_MAJOR = 75,
	A_CC_MINOR = 76,
	A_SMEM_PER_SM = 81,
	A_SMEM_OPTIN = 97,
	F_MAX_THREADS = 0,
	F_SHARED_SIZE_BYTES = 1,
	F_LOCAL_SIZE = 3,
	F_NUM_REGS = 4,
	F_MAX_DYNAMIC_SMEM = 8,
	F_PREFERRED_SMEM_CARVEOUT = 9,
};

static struct {
	glyd_CUresult (*Init)(unsigned);
	glyd_CUresult (*DriverGetVersion)(int *);
	glyd_CUresult (*DeviceGetCount)(int *);
	glyd_CUresult (*DeviceGet)(glyd_CUdevice *, int);
	glyd_CUresult (*DeviceGetName)(char *, int, glyd_CUdevice);
	glyd_CUresult (*DeviceGetAttribute)(int *, int, glyd_CUdevice);
	glyd_CUresult (*DeviceTotalMem)(size_t *, glyd_CUdevice);
	glyd_CUresult (*DevicePrimaryCtxRetain)(glyd_CUcontext *, glyd_CUdevice);
	glyd_CUresult (*CtxPushCurrent)(glyd_CUcontext);
	glyd_CUresult (*CtxPopCurrent)(glyd_CUcontext *);
	glyd_CUresult (*ModuleLoadData)(glyd_CUmodule *, const void *);
	glyd_CUresult (*ModuleGetFunction)(glyd_CUfunction *, glyd_CUmodule, const char *);
	glyd_CUresult (*FuncSetAttribute)(glyd_CUfunction, int, int);
	glyd_CUresult (*FuncGetAttribute)(int *, int, glyd_CUfunction);
	glyd_CUresult (*LaunchKernel)(glyd_CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
	                              unsigned, glyd_CUstream, void **, void **);
	glyd_CUresult (*GetErrorName)(glyd_CUresult, const char **);
	glyd_CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, glyd_CUfunction, int, size_t);
	glyd_CUresult (*MemcpyDtoHAsync)(void *, unsigned long long, size_t, glyd_CUstream);
	glyd_CUresult (*MemcpyHtoDAsync)(unsigned long long, const void *, size_t, glyd_CUstream);
	glyd_CUresult (*StreamSynchronize)(glyd_CUstream);
	glyd_CUresult (*LaunchKernelEx)(const void *, glyd_CUfunction, void **, void **);
	glyd_CUresult (*OccupancyMaxActiveClusters)(int *, glyd_CUfunction, const void *);
} cu;

/* cuLaunchKernelEx's config and one attribute (CUlaunchConfig,
 * CUlaunchAttribute of cuda.h: part of the driver's ABI). */
typedef struct {
	int id;
	char pad[4];
	union {
		int allowed; /* programmaticStreamSerializationAllowed */
		struct {
			unsigned x, y, z;
		} cluster; /* clusterDim */
		char bytes[64];
	} value;
} glyd_CUlaunchAttribute;
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, smem;
	glyd_CUstream stream;
	glyd_CUlaunchAttribute *attrs;
	unsigned nattrs;
} glyd_CUlaunchConfig;
enum { LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4, LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int init_done, init_rc, drv_version;
static char init_err[GLYD_ERRLEN];

typedef struct {
	int loaded, rc;
	char err[GLYD_ERRLEN];
	glyd_CUcontext ctx;
	glyd_CUmodule mod;
	glyd_CUfunction fn[GLYD_MAX_KERNELS];
	int nfn;
} devstate;
static devstate devs[GLYD_MAX_DEVICES];

static const char *errname(glyd_CUresult r) {
	const char *s = NULL;
	if (cu.GetErrorName && cu.GetErrorName(r, &s) == 0 && s) return s;
	return "CUDA_ERROR_UNKNOWN";
}

static int cuerr(char *err, const char *what, glyd_CUresult r) {
	if (err) snprintf(err, GLYD_ERRLEN, "%s: %s (%d)", what, errname(r), r);
	return GLYD_DRV_CUDA;
}

typedef glyd_CUresult (*getproc_v2_t)(const char *, void **, int, uint64_t, int *);
typedef glyd_CUresult (*getproc_v1_t)(const char *, void **, int, uint64_t);

static int do_init(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(init_err, GLYD_ERRLEN, "cannot load the CUDA driver libcuda.so.1: %s", e ? e : "not found");
		return GLYD_DRV_NO_GPU;
	}
	getproc_v2_t gp2 = (getproc_v2_t)dlsym(h, "cuGetProcAddress_v2");
	getproc_v1_t gp1 = gp2 ? NULL : (getproc_v1_t)dlsym(h, "cuGetProcAddress");
	if (!gp2 && !gp1) {
		snprintf(init_err, GLYD_ERRLEN, "the CUDA driver is too old (no cuGetProcAddress); Glyd needs r580 or newer");
		return GLYD_DRV_NO_GPU;
	}
	struct {
		const char *name;
		void **slot;
	} syms[] = {
	    {"cuInit", (void **)&cu.Init},
	    {"cuDriverGetVersion", (void **)&cu.DriverGetVersion},
	    {"cuDeviceGetCount", (void **)&cu.DeviceGetCount},
	    {"cuDeviceGet", (void **)&cu.DeviceGet},
	    {"cuDeviceGetName", (void **)&cu.DeviceGetName},
	    {"cuDeviceGetAttribute", (void **)&cu.DeviceGetAttribute},
	    {"cuDeviceTotalMem", (void **)&cu.DeviceTotalMem},
	    {"cuDevicePrimaryCtxRetain", (void **)&cu.DevicePrimaryCtxRetain},
	    {"cuCtxPushCurrent", (void **)&cu.CtxPushCurrent},
	    {"cuCtxPopCurrent", (void **)&cu.CtxPopCurrent},
	    {"cuModuleLoadData", (void **)&cu.ModuleLoadData},
	    {"cuModuleGetFunction", (void **)&cu.ModuleGetFunction},
	    {"cuFuncSetAttribute", (void **)&cu.FuncSetAttribute},
	    {"cuFuncGetAttribute", (void **)&cu.FuncGetAttribute},
	    {"cuLaunchKernel", (void **)&cu.LaunchKernel},
	    {"cuGetErrorName", (void **)&cu.GetErrorName},
	    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void **)&cu.OccupancyMaxActiveBlocksPerMultiprocessor},
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *fp = NULL;
		/* The ABI of CUDA 12.0 for every symbol (cuCtxPushCurrent -> _v2, ...),
		 * legacy default-stream semantics (stream 0 = the legacy stream). */
		glyd_CUresult r = gp2 ? gp2(syms[i].name, &fp, 12000, 1 /* CU_GET_PROC_ADDRESS_LEGACY_STREAM */, NULL)
		                      : gp1(syms[i].name, &fp, 12000, 1);
		if (r != 0 || !fp) {
			snprintf(init_err, GLYD_ERRLEN, "the CUDA driver lacks %s (error %d); Glyd needs r580 or newer",
			         syms[i].name, r);
			return GLYD_DRV_NO_GPU;
		}
		*syms[i].slot = fp;
	}
	/* Optional (pack; programmatic launches): a lookup failure leaves the
	 * slot NULL; pack reports it, launches fall back to cuLaunchKernel. */
	struct {
		const char *name;
		void **slot;
	} opt[] = {
	    {"cuMemcpyDtoHAsync", (void **)&cu.MemcpyDtoHAsync},
	    {"cuMemcpyHtoDAsync", (void **)&cu.MemcpyHtoDAsync},
	    {"cuStreamSynchronize", (void **)&cu.StreamSynchronize},
	    {"cuLaunchKernelEx", (void **)&cu.LaunchKernelEx},
	    {"cuOccupancyMaxActiveClusters", (void **)&cu.OccupancyMaxActiveClusters},
	};
	for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
		void *fp = NULL;
		glyd_CUresult r = gp2 ? gp2(opt[i].name, &fp, 12000, 1, NULL) : gp1(opt[i].name, &fp, 12000, 1);
		*opt[i].slot = r == 0 ? fp : NULL;
	}
	glyd_CUresult r = cu.Init(0);
	if (r != 0) {
		snprintf(init_err, GLYD_ERRLEN, "cuInit failed: %s (%d)", errname(r), r);
		return GLYD_DRV_NO_GPU;
	}
	cu.DriverGetVersion(&drv_version);
	return GLYD_DRV_OK;
}

int glyd_drv_init(char *err) {
	pthread_mutex_lock(&mu);
	if (!init_done) {
		init_rc = do_init();
		init_done = 1;
	}
	int rc = init_rc;
	if (rc && err) memcpy(err, init_err, GLYD_ERRLEN);
	pthread_mutex_unlock(&mu);
	return rc;
}

int glyd_drv_version(int *version) {
	*version = drv_version;
	return GLYD_DRV_OK;
}

int glyd_drv_device_count(int *count, char *err) {
	int rc = glyd_drv_init(err);
	if (rc) return rc;
	glyd_CUresult r = cu.DeviceGetCount(count);
	if (r) return cuerr(err, "cuDeviceGetCount", r);
	return GLYD_DRV_OK;
}

int glyd_drv_device_info(int dev, glyd_devinfo *info, char *err) {
	int rc = glyd_drv_init(err);
	if (rc) return rc;
	int n = 0;
	glyd_CUresult r = cu.DeviceGetCount(&n);
	if (r) return cuerr(err, "cuDeviceGetCount", r);
	if (dev < 0 || dev >= n) {
		if (err) snprintf(err, GLYD_ERRLEN, "device %d does not exist (%d devices)", dev, n);
		return GLYD_DRV_ARG;
	}
	glyd_CUdevice d;
	if ((r = cu.DeviceGet(&d, dev))) return cuerr(err, "cuDeviceGet", r);
	memset(info, 0, sizeof *info);
	if ((r = cu.DeviceGetName(info->name, sizeof info->name - 1, d))) return cuerr(err, "cuDeviceGetName", r);
	struct {
		int attr;
		int *dst;
	} a[] = {
	    {A_CC_MAJOR, &info->cc_major},       {A_CC_MINOR, &info->cc_minor},
	    {A_MULTIPROCESSOR_COUNT, &info->sms}, {A_SMEM_OPTIN, &info->smem_optin},
	    {A_SMEM_PER_SM, &info->smem_per_sm}, {A_L2_CACHE_SIZE, &info->l2_bytes},
	    {A_CLOCK_RATE, &info->clock_khz},    {A_MEMORY_CLOCK_RATE, &info->mem_clock_khz},
	    {A_GLOBAL_MEMORY_BUS_WIDTH, &info->bus_width},
	};
	for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
		if ((r = cu.DeviceGetAttribute(a[i].dst, a[i].attr, d))) return cuerr(err, "cuDeviceGetAttribute", r);
	size_t mem = 0;
	if ((r = cu.DeviceTotalMem(&mem, d))) return cuerr(err, "cuDeviceTotalMem", r);
	info->total_mem = mem;
	return GLYD_DRV_OK;
}

static int push(devstate *s, char *err) {
	glyd_CUresult r = cu.CtxPushCurrent(s->ctx);
	return r ? cuerr(err, "cuCtxPushCurrent", r) : GLYD_DRV_OK;
}
static void pop(void) {
	glyd_CUcontext c;
	cu.CtxPopCurrent(&c);
}

static int load_locked(int dev, devstate *s, const void *image, const char *names, int nk, int smem_max, char *err) {
	int n = 0;
	glyd_CUresult r = cu.DeviceGetCount(&n);
	if (r) return cuerr(err, "cuDeviceGetCount", r);
	if (dev >= n) {
		snprintf(err, GLYD_ERRLEN, "device %d does not exist (%d devices)", dev, n);
		return GLYD_DRV_ARG;
	}
	glyd_CUdevice d;
	if ((r = cu.DeviceGet(&d, dev))) return cuerr(err, "cuDeviceGet", r);
	/* The primary context is retained for the life of the process (never
	 * released: PyTorch shares it, and releasing would be a hazard at exit). */
	if ((r = cu.DevicePrimaryCtxRetain(&s->ctx, d))) return cuerr(err, "cuDevicePrimaryCtxRetain", r);
	int rc = push(s, err);
	if (rc) return rc;
	r = cu.ModuleLoadData(&s->mod, image);
	if (r) {
		rc = cuerr(err, "cuModuleLoadData (no kernel image for this GPU, or a driver older than r580)", r);
		if (r == 209 /* NO_BINARY_FOR_GPU */ || r == 222 /* UNSUPPORTED_PTX_VERSION */) rc = GLYD_DRV_UNSUPPORTED;
		pop();
		return rc;
	}
	const char *p = names;
	for (int i = 0; i < nk; i++) {
		if ((r = cu.ModuleGetFunction(&s->fn[i], s->mod, p))) {
			snprintf(err, GLYD_ERRLEN, "cuModuleGetFunction(%s): %s (%d)", p, errname(r), r);
			pop();
			return GLYD_DRV_CUDA;
		}
		if (smem_max > 48 * 1024) {
			/* Static and dynamic shared memory together stay within the
			 * device's limit (smem_max is at most its opt-in maximum). */
			int fixed = 0;
			if ((r = cu.FuncGetAttribute(&fixed, F_SHARED_SIZE_BYTES, s->fn[i]))) {
				snprintf(err, GLYD_ERRLEN, "cuFuncGetAttribute(%s): %s (%d)", p, errname(r), r);
				pop();
				return GLYD_DRV_CUDA;
			}
			r = cu.FuncSetAttribute(s->fn[i], F_MAX_DYNAMIC_SMEM, smem_max - fixed);
			if (r) {
				snprintf(err, GLYD_ERRLEN, "cuFuncSetAttribute(%s): %s (%d)", p, errname(r), r);
				pop();
				return GLYD_DRV_CUDA;
			}
		}
		/* No shared-memory carveout hint: asking for the largest one (100)
		 * made every register-pipelined kernel 15-35% slower on the H200
		 * (their activations live in L1). */
		p += strlen(p) + 1;
	}
	s->nfn = nk;
	pop();
	return GLYD_DRV_OK;
}

int glyd_drv_device_load(int dev, const void *image, const char *names, int nk, int smem_max, char *err) {
	int rc = glyd_drv_init(err);
	if (rc) return rc;
	if (dev < 0 || dev >= GLYD_MAX_DEVICES || nk > GLYD_MAX_KERNELS) {
		snprintf(err, GLYD_ERRLEN, "device %d out of range", dev);
		return GLYD_DRV_ARG;
	}
	devstate *s = &devs[dev];
	pthread_mutex_lock(&mu);
	if (!s->loaded) {
		s->rc = load_locked(dev, s, image, names, nk, smem_max, s->err);
		s->loaded = 1;
	}
	rc = s->rc;
	if (rc) memcpy(err, s->err, GLYD_ERRLEN);
	pthread_mutex_unlock(&mu);
	return rc;
}

/* a: clusters of (1, 1, cz) blocks (a zeroed attribute). */
static void cluster_attr(glyd_CUlaunchAttribute *a, unsigned cz) {
	a->id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	a->value.cluster.x = a->value.cluster.y = 1;
	a->value.cluster.z = cz;
}

int glyd_drv_launch(int dev, int k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem,
                    uintptr_t stream, const glyd_kparams *p, int programmatic, unsigned cluster_z, char *err) {
	/* Hot path: the caller (Go) has loaded the device already. */
	devstate *s = &devs[dev];
	if (k < 0 || k >= s->nfn) {
		snprintf(err, GLYD_ERRLEN, "kernel %d not loaded", k);
		return GLYD_DRV_ARG;
	}
	if (cluster_z > 1 && !cu.LaunchKernelEx) {
		snprintf(err, GLYD_ERRLEN, "a launch in clusters needs cuLaunchKernelEx (a CUDA 12 driver or newer)");
		return GLYD_DRV_UNSUPPORTED;
	}
	int rc = push(s, err);
	if (rc) return rc;
	void *args[1] = {(void *)p};
	glyd_CUresult r;
	const int ex = (programmatic || cluster_z > 1) && cu.LaunchKernelEx;
	if (ex) {
		glyd_CUlaunchAttribute a[2];
		unsigned na = 0;
		memset(a, 0, sizeof a);
		if (programmatic) {
			a[na].id = LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
			a[na++].value.allowed = 1;
		}
		if (cluster_z > 1) cluster_attr(&a[na++], cluster_z);
		glyd_CUlaunchConfig cfg = {gx, gy, gz, bx, 1, 1, smem, (glyd_CUstream)stream, a, na};
		r = cu.LaunchKernelEx(&cfg, s->fn[k], args, NULL);
	} else {
		r = cu.LaunchKernel(s->fn[k], gx, gy, gz, bx, 1, 1, smem, (glyd_CUstream)stream, args, NULL);
	}
	pop();
	if (r) return cuerr(err, ex ? "cuLaunchKernelEx" : "cuLaunchKernel", r);
	return GLYD_DRV_OK;
}

int glyd_drv_occupancy(int dev, int k, int block, int smem, int *blocks, char *err) {
	devstate *s = &devs[dev];
	if (k < 0 || k >= s->nfn) {
		snprintf(err, GLYD_ERRLEN, "kernel %d not loaded", k);
		return GLYD_DRV_ARG;
	}
	int rc = push(s, err);
	if (rc) return rc;
	glyd_CUresult r = cu.OccupancyMaxActiveBlocksPerMultiprocessor(blocks, s->fn[k], block, (size_t)smem);
	pop();
	if (r) return cuerr(err, "cuOccupancyMaxActiveBlocksPerMultiprocessor", r);
	return GLYD_DRV_OK;
}

int glyd_drv_max_clusters(int dev, int k, int block, int smem, int cz, int *clusters, char *err) {
	devstate *s = &devs[dev];
	*clusters = 0;
	if (k < 0 || k >= s->nfn) {
		snprintf(err, GLYD_ERRLEN, "kernel %d not loaded", k);
		return GLYD_DRV_ARG;
	}
	if (!cu.OccupancyMaxActiveClusters) return GLYD_DRV_OK;
	int rc = push(s, err);
	if (rc) return rc;
	glyd_CUlaunchAttribute a;
	memset(&a, 0, sizeof a);
	cluster_attr(&a, (unsigned)cz);
	/* The grid only has to be a whole number of clusters. */
	glyd_CUlaunchConfig cfg = {1, 1, (unsigned)cz, (unsigned)block, 1, 1, (unsigned)smem, NULL, &a, 1};
	glyd_CUresult r = cu.OccupancyMaxActiveClusters(clusters, s->fn[k], &cfg);
	pop();
	if (r) return cuerr(err, "cuOccupancyMaxActiveClusters", r);
	return GLYD_DRV_OK;
}

int glyd_drv_kernel_attrs(int dev, int k, int *regs, int *local_bytes, int *max_threads, char *err) {
	devstate *s = &devs[dev];
	if (k < 0 || k >= s->nfn) {
		snprintf(err, GLYD_ERRLEN, "kernel %d not loaded", k);
		return GLYD_DRV_ARG;
	}
	glyd_CUresult r;
	if ((r = cu.FuncGetAttribute(regs, F_NUM_REGS, s->fn[k]))) return cuerr(err, "cuFuncGetAttribute", r);
	if ((r = cu.FuncGetAttribute(local_bytes, F_LOCAL_SIZE, s->fn[k]))) return cuerr(err, "cuFuncGetAttribute", r);
	if ((r = cu.FuncGetAttribute(max_threads, F_MAX_THREADS, s->fn[k]))) return cuerr(err, "cuFuncGetAttribute", r);
	return GLYD_DRV_OK;
}

static int copy_sync(int dev, int to_host, void *host, uint64_t devptr, size_t bytes, uintptr_t stream, char *err) {
	if (dev < 0 || dev >= GLYD_MAX_DEVICES || !devs[dev].loaded || devs[dev].rc) {
		snprintf(err, GLYD_ERRLEN, "device %d not loaded", dev);
		return GLYD_DRV_ARG;
	}
	if (bytes == 0) return GLYD_DRV_OK;
	if (!cu.MemcpyDtoHAsync || !cu.MemcpyHtoDAsync || !cu.StreamSynchronize) {
		snprintf(err, GLYD_ERRLEN, "the CUDA driver lacks cuMemcpyDtoHAsync/cuMemcpyHtoDAsync/cuStreamSynchronize");
		return GLYD_DRV_UNSUPPORTED;
	}
	devstate *s = &devs[dev];
	int rc = push(s, err);
	if (rc) return rc;
	glyd_CUresult r = to_host ? cu.MemcpyDtoHAsync(host, devptr, bytes, (glyd_CUstream)stream)
	                          : cu.MemcpyHtoDAsync(devptr, host, bytes, (glyd_CUstream)stream);
	if (r) {
		pop();
		return cuerr(err, to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync", r);
	}
	r = cu.StreamSynchronize((glyd_CUstream)stream);
	pop();
	if (r) return cuerr(err, "cuStreamSynchronize", r);
	return GLYD_DRV_OK;
}

int glyd_drv_copy_dtoh(int dev, void *dst, uint64_t src, size_t bytes, uintptr_t stream, char *err) {
	return copy_sync(dev, 1, dst, src, bytes, stream, err);
}

int glyd_drv_copy_htod(int dev, uint64_t dst, const void *src, size_t bytes, uintptr_t stream, char *err) {
	return copy_sync(dev, 0, (void *)src, dst, bytes, stream, err);
}
