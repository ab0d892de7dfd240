/*
 * gpu_linear: the GPU half of include/glyd.h from C, as a C++ inference
 * runtime uses it. It packs a random bf16 weight on the CPU, places its
 * planes in device memory it allocates itself (Glyd never allocates device
 * memory), builds the escape index, tiles the planes for the fused kernels,
 * then checks on the default stream that
 *   - glyd_gpu_decode gives back every weight's exact bits, and
 *   - glyd_gpu_linear (y = x * W^T, W decoded inside the kernel) agrees with
 *     a double-precision product of the unpacked weight.
 *
 *   gpu_linear [N K ROWS]      (default 4096 4096 16)
 *
 * Links against -lglyd only: the CUDA driver calls it makes itself (memory,
 * copies, the primary context that Glyd's calls use too) are resolved from
 * libcuda.so.1 at run time, as libglyd does. Without a driver or a GPU it
 * prints why and exits 0. `make test-emu` runs it on the fake GPU of
 * kernels/emu (a small weight: the CPU runs the kernels).
 */
#include <dlfcn.h>
#include <glyd.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long dptr; /* CUdeviceptr */
typedef int curesult;            /* CUresult: 0 = CUDA_SUCCESS */

static struct {
    curesult (*init)(unsigned);
    curesult (*device_get)(int *, int);
    curesult (*ctx_retain)(void **, int);
    curesult (*ctx_release)(int);
    curesult (*ctx_set)(void *);
    curesult (*ctx_sync)(void);
    curesult (*alloc)(dptr *, size_t);
    curesult (*free)(dptr);
    curesult (*htod)(dptr, const void *, size_t);
    curesult (*dtoh)(void *, dptr, size_t);
} cu;

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != GLYD_OK) {                                                          \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, glyd_strerror(rc_),         \
                    glyd_last_error());                                                \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define CU(call)                                                                       \
    do {                                                                               \
        curesult r_ = (call);                                                          \
        if (r_ != 0) {                                                                 \
            fprintf(stderr, "%s failed: CUDA error %d\n", #call, r_);                  \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static int load_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&cu.init, "cuInit"},
        {(void **)&cu.device_get, "cuDeviceGet"},
        {(void **)&cu.ctx_retain, "cuDevicePrimaryCtxRetain"},
        {(void **)&cu.ctx_release, "cuDevicePrimaryCtxRelease_v2"},
        {(void **)&cu.ctx_set, "cuCtxSetCurrent"},
        {(void **)&cu.ctx_sync, "cuCtxSynchronize"},
        {(void **)&cu.alloc, "cuMemAlloc_v2"},
        {(void **)&cu.free, "cuMemFree_v2"},
        {(void **)&cu.htod, "cuMemcpyHtoD_v2"},
        {(void **)&cu.dtoh, "cuMemcpyDtoH_v2"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name))) return 0;
    return 1;
}

/* Device memory holding n bytes copied from src (src may be NULL: uninitialized). */
static dptr to_device(const void *src, size_t n) {
    dptr d = 0;
    CU(cu.alloc(&d, n > 0 ? n : 1));
    if (src && n) CU(cu.htod(d, src, n));
    return d;
}

static uint16_t bf16_of(float f) { /* round to nearest even (the values here are finite) */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double float_of(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A weight-like value: roughly normal, scale 0.02, with some exact zeros
 * (outside fixed12's exponent window: escapes). */
static float weight_value(unsigned *seed) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)rand_r(seed) / RAND_MAX - 0.5f;
    return rand_r(seed) % 97 == 0 ? 0.0f : 0.035f * s;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 4096, k = argc > 2 ? atoll(argv[2]) : 4096;
    const int64_t rows = argc > 3 ? atoll(argv[3]) : 16;
    if (n <= 0 || k <= 0 || rows <= 0) {
        fprintf(stderr, "usage: gpu_linear [N K ROWS] (positive)\n");
        return 2;
    }
    int count = 0;
    if (glyd_gpu_init() != GLYD_OK || glyd_gpu_device_count(&count) != GLYD_OK || count == 0) {
        printf("no GPU: skipped (%s)\n", glyd_last_error());
        return 0;
    }
    if (!load_driver()) {
        printf("no CUDA driver entry points: skipped\n");
        return 0;
    }
    glyd_gpu_info info;
    CHECK(glyd_gpu_device_info(0, &info));
    printf("%s (sm_%d%d), weight [%lld, %lld], %lld rows\n", info.name, info.cc_major, info.cc_minor,
           (long long)n, (long long)k, (long long)rows);
    /* The device's primary context: the one Glyd's calls push (and PyTorch uses). */
    int dev;
    void *ctx;
    CU(cu.init(0));
    CU(cu.device_get(&dev, 0));
    CU(cu.ctx_retain(&ctx, dev));
    CU(cu.ctx_set(ctx));

    unsigned seed = 7;
    uint16_t *w = malloc(sizeof *w * n * k), *x = malloc(sizeof *x * rows * k);
    uint16_t *back = malloc(sizeof *back * n * k), *y = malloc(sizeof *y * rows * n);
    if (!w || !x || !back || !y) return 1;
    for (int64_t i = 0; i < n * k; i++) w[i] = bf16_of(weight_value(&seed));
    for (int64_t i = 0; i < rows * k; i++) x[i] = bf16_of((float)rand_r(&seed) / RAND_MAX * 2 - 1);

    /* Pack on the CPU; its planes and group describe the tensor to the GPU calls. */
    const int64_t shape[2] = {n, k};
    glyd_packed *p;
    CHECK(glyd_pack(w, sizeof *w * n * k, GLYD_DTYPE_BF16, shape, 2, GLYD_LAYOUT_FIXED12, 1, 0, &p));
    glyd_group group;
    CHECK(glyd_packed_group(p, 0, &group));
    glyd_gpu_tensor t = {GLYD_LAYOUT_FIXED12, GLYD_DTYPE_BF16, 2, {n, k}, &group, 1, {NULL}, NULL};
    dptr planes[GLYD_NUM_PLANES] = {0};
    size_t lens[GLYD_NUM_PLANES] = {0};
    for (int pl = 0; pl < GLYD_NUM_PLANES; pl++) {
        const uint8_t *data;
        CHECK(glyd_packed_plane(p, pl, &data, &lens[pl]));
        if (lens[pl] == 0) continue;
        planes[pl] = to_device(data, lens[pl]);
        t.planes[pl] = (const void *)(uintptr_t)planes[pl];
    }
    /* The escape index the fused kernels read (once, when the planes are placed). */
    size_t idx_bytes = 0;
    dptr idx = 0;
    CHECK(glyd_gpu_escape_index_bytes(&t, &idx_bytes));
    if (idx_bytes > 0) {
        idx = to_device(NULL, idx_bytes);
        CHECK(glyd_gpu_build_escape_index(0, NULL, &t, (void *)(uintptr_t)idx, idx_bytes));
        t.esc_rows = (const void *)(uintptr_t)idx;
    }
    /* Tiled planes for the fused kernels (UNSUPPORTED for shapes without the
     * arrangement: the row-major planes serve then). The old planes are freed. */
    dptr sm2 = to_device(NULL, lens[GLYD_PLANE_SM]), code2 = to_device(NULL, lens[GLYD_PLANE_CODE]);
    int rc = glyd_gpu_tile(0, NULL, &t, (void *)(uintptr_t)sm2, (void *)(uintptr_t)code2);
    if (rc == GLYD_OK) {
        CU(cu.ctx_sync());
        CU(cu.free(planes[GLYD_PLANE_SM]));
        CU(cu.free(planes[GLYD_PLANE_CODE]));
        planes[GLYD_PLANE_SM] = sm2;
        planes[GLYD_PLANE_CODE] = code2;
        t.layout = GLYD_LAYOUT_FIXED12_TILED;
        t.planes[GLYD_PLANE_SM] = (const void *)(uintptr_t)sm2;
        t.planes[GLYD_PLANE_CODE] = (const void *)(uintptr_t)code2;
    } else if (rc == GLYD_ERR_UNSUPPORTED) {
        printf("planes stay row-major: %s\n", glyd_last_error());
        CU(cu.free(sm2));
        CU(cu.free(code2));
    } else {
        CHECK(rc);
    }

    /* Every weight back, bit for bit. */
    dptr dw = to_device(NULL, sizeof *w * n * k);
    CHECK(glyd_gpu_decode(0, NULL, &t, -1, (void *)(uintptr_t)dw, sizeof *w * n * k));
    CU(cu.ctx_sync());
    CU(cu.dtoh(back, dw, sizeof *w * n * k));
    if (memcmp(back, w, sizeof *w * n * k) != 0) {
        fprintf(stderr, "decode: the weights differ from the packed ones\n");
        return 1;
    }

    /* y = x * W^T with the weight decoded inside the kernel. */
    size_t ws_bytes = 0;
    CHECK(glyd_gpu_linear_workspace_bound(&t, rows, &ws_bytes));
    dptr dx = to_device(x, sizeof *x * rows * k), dy = to_device(NULL, sizeof *y * rows * n);
    dptr ws = ws_bytes ? to_device(NULL, ws_bytes) : 0;
    const char *kernel;
    CHECK(glyd_gpu_linear_kernel(0, &t, rows, &kernel));
    CHECK(glyd_gpu_linear(0, NULL, (void *)(uintptr_t)dx, rows, &t, NULL, (void *)(uintptr_t)dy,
                          (void *)(uintptr_t)ws, ws_bytes));
    CU(cu.ctx_sync());
    CU(cu.dtoh(y, dy, sizeof *y * rows * n));
    /* Within bf16 rounding of the exact product: |y - ref| <= 2^-7 (|ref| + rms(ref)). */
    double *ref = malloc(sizeof *ref * rows * n), ms = 0, worst = 0;
    if (!ref) return 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t c = 0; c < k; c++) s += float_of(x[r * k + c]) * float_of(w[j * k + c]);
            ref[r * n + j] = s;
            ms += s * s;
        }
    const double rms = sqrt(ms / (double)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) {
        const double e = fabs(float_of(y[i]) - ref[i]) / (ldexp(1.0, -7) * (fabs(ref[i]) + rms));
        worst = e > worst ? e : worst;
    }
    printf("%s planes; decode exact; linear (%s): worst error %.3f of the tolerance\n",
           t.layout == GLYD_LAYOUT_FIXED12_TILED ? "tiled" : "row-major", kernel, worst);

    for (int pl = 0; pl < GLYD_NUM_PLANES; pl++)
        if (planes[pl]) CU(cu.free(planes[pl]));
    if (idx) CU(cu.free(idx));
    if (ws) CU(cu.free(ws));
    CU(cu.free(dw));
    CU(cu.free(dx));
    CU(cu.free(dy));
    CU(cu.ctx_release(dev));
    glyd_packed_destroy(p);
    free(w);
    free(x);
    free(back);
    free(y);
    free(ref);
    return worst <= 1.0 ? 0 : 1;
}
