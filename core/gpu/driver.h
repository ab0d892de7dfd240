/*
 * driver.h — Glyd's own minimal binding of the CUDA driver API.
 *
 * libcuda.so.1 is dlopen()ed at the first GPU call (never linked: the library
 * must load on machines without a driver). Entry points are resolved through
 * cuGetProcAddress_v2 with hand-written declarations; no NVIDIA header is
 * needed to build. Every helper is named glyd_* (a function named cu* would
 * interpose libcuda for the whole process).
 *
 * Every call that touches a device pushes the device's PRIMARY context (the
 * one PyTorch and the runtime API use) and pops it before returning, so the
 * caller's thread is left as it was.
 */
#ifndef GLYD_DRIVER_H
#define GLYD_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include "glyd_kernel_params.h"

/* Results of the glyd_drv_* calls. */
enum {
	GLYD_DRV_OK = 0,
	GLYD_DRV_NO_GPU = 1,      /* no driver library, or cuInit failed, or no device */
	GLYD_DRV_CUDA = 2,        /* the driver returned an error (err holds its name) */
	GLYD_DRV_UNSUPPORTED = 3, /* driver too old, or no kernel image for this device */
	GLYD_DRV_ARG = 4,         /* bad device index or kernel index */
};

#define GLYD_MAX_DEVICES 64
#define GLYD_MAX_KERNELS 128
#define GLYD_ERRLEN 256

typedef struct glyd_devinfo {
	char name[256];
	int cc_major, cc_minor;
	int sms;
	int smem_optin;   /* max shared memory per block with opt-in, bytes */
	int smem_per_sm;  /* shared memory per multiprocessor, bytes */
	int l2_bytes;
	int clock_khz;
	int mem_clock_khz;
	int bus_width;
	uint64_t total_mem;
} glyd_devinfo;

/* Loads the driver once per process; later calls return the first result. */
int glyd_drv_init(char *err);
int glyd_drv_version(int *version);
int glyd_drv_device_count(int *count, char *err);
int glyd_drv_device_info(int dev, glyd_devinfo *info, char *err);

/* Loads the module (fatbin image) on device dev once, resolves the nkernels
 * kernel names (names: NUL-separated list) and raises each kernel's dynamic
 * shared-memory limit to smem_max (bytes, 0 = leave). Thread-safe; later calls
 * return the first result. */
int glyd_drv_device_load(int dev, const void *image, const char *names, int nkernels, int smem_max, char *err);

/* Launches kernel k of device dev with one glyd_kparams argument on stream
 * (0 = legacy default stream). No allocation, no synchronization.
 * programmatic != 0: a programmatic dependent launch (sm_90+; the kernel
 * must wait with griddepcontrol.wait before it touches what earlier work on
 * the stream writes or reads), or a plain launch where the driver lacks
 * cuLaunchKernelEx. cluster_z > 1: blocks in clusters of (1, 1, cluster_z)
 * (sm_90+; gz a multiple of cluster_z), which needs cuLaunchKernelEx. */
int glyd_drv_launch(int dev, int k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem,
                    uintptr_t stream, const glyd_kparams *p, int programmatic, unsigned cluster_z, char *err);

/* Copies bytes between host and device memory on stream and waits for the
 * stream (cuMemcpy*Async + cuStreamSynchronize): everything queued on the
 * stream before has run when they return. Used by pack only (it needs the
 * histograms on the host). dev must be loaded. */
int glyd_drv_copy_dtoh(int dev, void *dst, uint64_t src, size_t bytes, uintptr_t stream, char *err);
int glyd_drv_copy_htod(int dev, uint64_t dst, const void *src, size_t bytes, uintptr_t stream, char *err);

/* Blocks of kernel k that fit on one multiprocessor at once. */
int glyd_drv_occupancy(int dev, int k, int block, int smem, int *blocks, char *err);

/* Clusters of (1, 1, cz) blocks of kernel k that fit on the device at once
 * (cuOccupancyMaxActiveClusters; 0 where the driver lacks it). */
int glyd_drv_max_clusters(int dev, int k, int block, int smem, int cz, int *clusters, char *err);

/* Registers and local memory of kernel k (for the report). */
int glyd_drv_kernel_attrs(int dev, int k, int *regs, int *local_bytes, int *max_threads, char *err);

#endif
