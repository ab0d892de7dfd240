/*
 * glyd.h — the C interface of Glyd (libglyd.so).
 *
 * Glyd packs bf16 weights losslessly: every weight decodes to its exact bits.
 * This header is the whole contract: what it does not declare is not API.
 *
 * Conventions
 *   - Every fallible call returns an int status (enum glyd_status; 0 = GLYD_OK)
 *     and writes its results to out-parameters. glyd_strerror(status) gives a
 *     fixed text for any value; glyd_last_error() gives the detailed message of
 *     the last failed call on the calling thread (file and tensor names
 *     included); handles also keep their own (glyd_reader_errmsg, ...).
 *   - Handles are opaque. Every create/open has one destroy/close that accepts
 *     NULL. Memory the library gives out (strings, plane pointers) belongs to
 *     the handle it came from and stays valid until that handle is destroyed.
 *   - Thread safety: all functions may be called from any thread. A reader may
 *     be used from several threads at once; a writer or a packed handle must
 *     not be used by two threads at the same time.
 *   - Lengths are size_t, shapes int64_t, inputs const. Streams are void *.
 *   - A process that loaded libglyd.so must not fork() and then call into it
 *     from the child (use spawn, e.g. for PyTorch DataLoader workers).
 */
#ifndef GLYD_H
#define GLYD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions ------------------------------------------------------------ */

#define GLYD_VERSION_MAJOR 0
#define GLYD_VERSION_MINOR 1
#define GLYD_VERSION_PATCH 0
/* The ABI version equals the SONAME major (libglyd.so.0). */
#define GLYD_ABI_VERSION 0
/* The newest checkpoint format this library reads and writes: glyd-v2. */
#define GLYD_FORMAT_VERSION 2

/* "MAJOR.MINOR.PATCH" of the loaded library; static storage. */
const char *glyd_version_string(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH of the loaded library. */
uint32_t glyd_version_number(void);
/* ABI version of the loaded library; compare with GLYD_ABI_VERSION. */
int glyd_abi_version(void);
/* Newest checkpoint format version the loaded library reads (2 = glyd-v2). */
int glyd_format_version(void);

/* ---- Status -------------------------------------------------------------- */

/* Fixed values; the enum only grows. */
typedef enum glyd_status {
    GLYD_OK = 0,
    GLYD_ERR_INVALID_ARGUMENT = 1,  /* NULL pointer, bad enum value, bad option */
    GLYD_ERR_BUFFER_TOO_SMALL = 2,  /* caller-allocated output smaller than needed */
    GLYD_ERR_IO = 3,                /* the OS refused a read, write, rename or mmap */
    GLYD_ERR_NOT_FOUND = 4,         /* no such file, folder or tensor */
    GLYD_ERR_TRUNCATED = 5,         /* a file ends before the data it declares */
    GLYD_ERR_HEADER = 6,            /* malformed safetensors header, or past the end */
    GLYD_ERR_RANGE_OVERLAP = 7,     /* two tensors' byte ranges overlap */
    GLYD_ERR_RANGE_GAP = 8,         /* byte ranges leave gaps or trailing bytes */
    GLYD_ERR_RANGE_OUT_OF_BOUNDS = 9, /* a byte range ends past the data */
    GLYD_ERR_SIZE_MISMATCH = 10,    /* dtype x shape disagrees with a byte length */
    GLYD_ERR_OVERFLOW = 11,         /* dimensions whose product overflows */
    GLYD_ERR_DESCRIPTOR = 12,       /* descriptor fails verification or disagrees with shards */
    GLYD_ERR_ESCAPE_MISSING = 13,   /* an escape code without an escape entry */
    GLYD_ERR_ESCAPE_RANGE = 14,     /* an escape index out of range or order */
    GLYD_ERR_EXPONENT_TABLE = 15,   /* exponent base/table out of range */
    GLYD_ERR_VERSION = 16,          /* a format version this library does not read */
    GLYD_ERR_CHECKSUM = 17,         /* decoded bytes disagree with the stored checksum */
    GLYD_ERR_DTYPE = 18,            /* a dtype that is not allowed here */
    GLYD_ERR_CORRUPT = 19,          /* any other inconsistency in packed data */
    GLYD_ERR_NO_GPU = 20,           /* no usable GPU or CUDA driver */
    GLYD_ERR_OUT_OF_MEMORY = 21,    /* host or device memory could not be allocated */
    GLYD_ERR_INTERNAL = 22,         /* a bug in Glyd; please report it */
    GLYD_ERR_STATE = 23,            /* call out of order (writer used after commit) */
    GLYD_ERR_EXISTS = 24,           /* destination exists and may not be replaced */
    GLYD_ERR_CUDA = 25,             /* the CUDA driver returned an error */
    GLYD_ERR_UNSUPPORTED = 26       /* valid, but not supported by this build/device */
} glyd_status;

/* Fixed English text for any status value (unknown values too); static storage. */
const char *glyd_strerror(int status);
/* Detailed message of the last failed call on this thread ("" if none). Valid
 * until the next failing call on this thread. */
const char *glyd_last_error(void);

/* ---- Tensors and layouts ------------------------------------------------- */

typedef enum glyd_layout {
    GLYD_LAYOUT_RAW = 0,      /* stored as it is */
    GLYD_LAYOUT_FIXED12 = 1,  /* raw sign+mantissa byte + 4-bit exponent code */
    GLYD_LAYOUT_SMALLEST = 2, /* raw sign+mantissa byte + 3-level exponent code */
    /* Device planes only (glyd_gpu_tensor.layout): fixed12 whose sm and code
     * planes are in 16-row x 64-column tiles, the arrangement the fused
     * kernels read fastest (glyd_gpu_tile; docs/FORMAT.md, "Planes on the
     * GPU"). Never stored in a file. */
    GLYD_LAYOUT_FIXED12_TILED = 3
} glyd_layout;

typedef enum glyd_dtype {
    GLYD_DTYPE_BF16 = 1,
    GLYD_DTYPE_FP16 = 2
} glyd_dtype;

/* The byte planes of a packed tensor (docs/FORMAT.md specifies each). */
typedef enum glyd_plane {
    GLYD_PLANE_SM = 0,      /* sign+mantissa */
    GLYD_PLANE_CODE = 1,    /* exponent codes (level 1 for smallest) */
    GLYD_PLANE_CODE2 = 2,   /* smallest: level-2 codes */
    GLYD_PLANE_CODE3 = 3,   /* smallest: level-3 codes */
    GLYD_PLANE_CHUNKS = 4,  /* smallest: per-chunk offsets */
    GLYD_PLANE_ESCIDX = 5,  /* escape indices, uint32 LE */
    GLYD_PLANE_ESCEXP = 6   /* escape exponents, one byte each */
} glyd_plane;
#define GLYD_NUM_PLANES 7
#define GLYD_MAX_DIMS 8

/* One independently decodable slice of a packed tensor along axis 0 (the
 * whole tensor, or one expert). */
typedef struct glyd_group {
    uint64_t elements;                 /* elements in this group */
    uint64_t escapes;                  /* escaped elements in this group */
    uint64_t offsets[GLYD_NUM_PLANES]; /* byte offset of the group in each plane */
    uint8_t base;                      /* exponent of 4-bit code 0 */
    uint8_t table[6];                  /* smallest: exponents of level-1/2 codes */
    uint8_t reserved;                  /* 0 */
} glyd_group;

/* Summary of a tensor (packed or raw). */
typedef struct glyd_tensor_info {
    int layout;                 /* glyd_layout */
    int dtype;                  /* glyd_dtype for packed tensors, 0 for raw ones */
    char raw_dtype[8];          /* safetensors dtype of a raw tensor ("F32", ...), "" if packed */
    size_t ndim;                /* number of dimensions (0 for a scalar) */
    int64_t shape[GLYD_MAX_DIMS];
    uint64_t elements;          /* product of the shape */
    uint64_t original_bytes;    /* size of the unpacked tensor */
    uint64_t packed_bytes;      /* sum of the plane lengths (original_bytes if raw) */
    uint64_t num_groups;        /* 1 for dense, experts count for expert tensors */
    uint64_t escapes;           /* escaped elements, all groups */
    uint32_t checksum;          /* CRC-32C of the original bytes */
    double bits_per_weight;     /* 8 * packed_bytes / elements */
} glyd_tensor_info;

typedef struct glyd_packed glyd_packed;

/* Packs a tensor from host memory.
 *   src, src_bytes: the elements, row-major, little-endian; src_bytes must be
 *                   2 * product(shape).
 *   dtype:  GLYD_DTYPE_BF16 or GLYD_DTYPE_FP16.
 *   shape, ndim:   ndim <= GLYD_MAX_DIMS; shape may be NULL when ndim == 0.
 *   layout: GLYD_LAYOUT_FIXED12 or GLYD_LAYOUT_SMALLEST.
 *   groups: 0 or 1 for one group, else the number of independent slices along
 *           axis 0 (shape[0] % groups == 0), e.g. the experts.
 *   workers: threads to use; 0 = all cores.
 *   out:    receives a new handle; free it with glyd_packed_destroy.
 * Errors: INVALID_ARGUMENT, SIZE_MISMATCH, OVERFLOW, DTYPE, OUT_OF_MEMORY. */
int glyd_pack(const void *src, size_t src_bytes, int dtype, const int64_t *shape,
              size_t ndim, int layout, int64_t groups, int workers, glyd_packed **out);

/* Wraps planes that live in the caller's memory (no copy) as a packed handle,
 * e.g. planes loaded by another runtime. The caller keeps the memory alive and
 * unchanged until glyd_packed_destroy. The structure is validated here
 * (plane lengths, offsets, tables, escape lists); the checksum only by
 * glyd_packed_verify. */
int glyd_packed_import(int layout, int dtype, const int64_t *shape, size_t ndim,
                       const glyd_group *groups, size_t num_groups,
                       const uint8_t *const planes[GLYD_NUM_PLANES],
                       const size_t plane_lens[GLYD_NUM_PLANES], uint32_t checksum,
                       glyd_packed **out);

/* Fills *info. */
int glyd_packed_describe(const glyd_packed *p, glyd_tensor_info *info);
/* Fills *out with group g (0 <= g < info.num_groups). */
int glyd_packed_group(const glyd_packed *p, uint64_t g, glyd_group *out);
/* Zero-copy view of one plane: *data is valid until the handle is destroyed
 * (*data may be NULL when *len is 0). */
int glyd_packed_plane(const glyd_packed *p, int plane, const uint8_t **data, size_t *len);
/* Decodes all elements into dst (dst_bytes >= info.original_bytes, else
 * BUFFER_TOO_SMALL). Validates while decoding (ESCAPE_*, EXPONENT_TABLE, CORRUPT). */
int glyd_packed_unpack(const glyd_packed *p, void *dst, size_t dst_bytes, int workers);
/* Decodes group g only into dst (dst_bytes >= 2 * group elements). */
int glyd_packed_unpack_group(const glyd_packed *p, uint64_t g, void *dst, size_t dst_bytes);
/* Decodes and compares with the stored checksum (CHECKSUM on mismatch). */
int glyd_packed_verify(const glyd_packed *p, int workers);
/* Frees the handle (and its planes if the library made them). NULL is fine. */
void glyd_packed_destroy(glyd_packed *p);

/* ---- Checkpoint writer --------------------------------------------------- */

typedef struct glyd_writer glyd_writer;

/* glyd_writer_open flags */
#define GLYD_WRITER_OVERWRITE 1u  /* replace an existing dir once the new one is complete */

/* Starts a checkpoint that will appear at dir on commit. Everything is written
 * to a temporary sibling folder (glyd_writer_temp_dir) and renamed into place
 * by glyd_writer_commit, so a crash never leaves a half-written checkpoint
 * under dir. max_shard_size: bytes per safetensors shard (0 = 5 GB).
 * Errors: INVALID_ARGUMENT, EXISTS (dir exists and no OVERWRITE flag), IO. */
int glyd_writer_open(const char *dir, uint64_t max_shard_size, uint32_t flags,
                     glyd_writer **out);
/* The temporary folder; callers may add their own files there (config.json)
 * before commit. Owned by the writer. */
const char *glyd_writer_temp_dir(const glyd_writer *w);
/* Appends a packed tensor; its planes are stored as U8 tensors name + ".glyd_"
 * + plane name. The data is written before the call returns. */
int glyd_writer_add_packed(glyd_writer *w, const char *name, const glyd_packed *p);
/* Appends an unpacked tensor. dtype is a safetensors dtype ("BF16", "F32",
 * "I64", ...); nbytes must equal its size times product(shape). */
int glyd_writer_add_raw(glyd_writer *w, const char *name, const char *dtype,
                        const int64_t *shape, size_t ndim, const void *data, size_t nbytes);
/* Finishes shards, index and descriptor, syncs, and renames into place. */
int glyd_writer_commit(glyd_writer *w);
/* Removes the temporary folder. Safe to call twice, and after commit (no-op). */
int glyd_writer_abort(glyd_writer *w);
/* Aborts if not committed, then frees. NULL is fine. */
void glyd_writer_destroy(glyd_writer *w);
/* Message of the writer's last failed call ("" if none); owned by the writer. */
const char *glyd_writer_errmsg(const glyd_writer *w);

/* ---- Checkpoint reader --------------------------------------------------- */

typedef struct glyd_reader glyd_reader;

/* Opens a checkpoint folder: memory-maps its shards and validates headers,
 * byte ranges, the descriptor and every packed tensor's structure before
 * returning. max_format_version: newest format accepted (0 = the newest this
 * library reads). Errors: NOT_FOUND, IO, TRUNCATED, HEADER, RANGE_*,
 * SIZE_MISMATCH, OVERFLOW, DESCRIPTOR, VERSION, and the codec's. */
int glyd_reader_open(const char *dir, int max_format_version, glyd_reader **out);
/* "glyd-v1" or "glyd-v2"; owned by the reader. */
const char *glyd_reader_format(const glyd_reader *r);
/* Number of tensors (packed and raw). */
size_t glyd_reader_count(const glyd_reader *r);
/* Name of tensor i (sorted by name); owned by the reader. */
int glyd_reader_name(const glyd_reader *r, size_t i, const char **name);
/* Index of the tensor called name (NOT_FOUND if none). */
int glyd_reader_find(const glyd_reader *r, const char *name, size_t *i);
/* Summary of tensor i. */
int glyd_reader_describe(const glyd_reader *r, size_t i, glyd_tensor_info *info);
/* Group g of packed tensor i. */
int glyd_reader_group(const glyd_reader *r, size_t i, uint64_t g, glyd_group *out);
/* Zero-copy view of a plane of packed tensor i, inside the memory map. */
int glyd_reader_plane(const glyd_reader *r, size_t i, int plane, const uint8_t **data,
                      size_t *len);
/* Zero-copy view of raw tensor i's bytes. */
int glyd_reader_raw(const glyd_reader *r, size_t i, const void **data, size_t *len);
/* Decodes packed tensor i into dst (dst_bytes >= info.original_bytes), or
 * copies raw tensor i. */
int glyd_reader_unpack(const glyd_reader *r, size_t i, void *dst, size_t dst_bytes);
/* Decodes tensor i and checks its checksum (CHECKSUM names tensor and file). */
int glyd_reader_verify(const glyd_reader *r, size_t i);
/* Unmaps and frees. NULL is fine. Plane and raw views die with the reader. */
void glyd_reader_close(glyd_reader *r);
/* Message of the reader's last failed call ("" if none); owned by the reader. */
const char *glyd_reader_errmsg(const glyd_reader *r);

/* ---- GPU: begin ---- */

/* GPU runtime (CUDA; compute capability 8.0 or newer, driver r580 or newer).
 *
 * libglyd.so never links the CUDA driver: the first glyd_gpu_* call dlopen()s
 * libcuda.so.1. Where that fails, or no device exists, every GPU call returns
 * GLYD_ERR_NO_GPU and glyd_last_error() says why; CPU functions keep working.
 *
 * Rules of every GPU call:
 *   - Device memory belongs to the caller: Glyd never allocates or frees
 *     device memory. Pointers marked "device" are device addresses (what
 *     torch.Tensor.data_ptr() or cudaMalloc give).
 *   - Work is enqueued on `stream` (a cudaStream_t / CUstream; NULL = the
 *     legacy default stream) and the call returns without synchronizing, so
 *     calls can be captured in CUDA graphs. Errors detected while enqueuing
 *     are returned; a fault inside a kernel surfaces at the caller's next
 *     synchronization, as with any CUDA work.
 *   - The device's primary context (the one the CUDA runtime and PyTorch use)
 *     is pushed before and popped after the call; the calling thread's
 *     current context is left unchanged.
 *   - Thread-safe. The first call on a device loads Glyd's kernels on it
 *     (tens of milliseconds); do it before capturing a graph.
 * Errors common to all: NO_GPU, CUDA (the driver's error name in
 * glyd_last_error), UNSUPPORTED (e.g. no kernel for this GPU or layout),
 * INVALID_ARGUMENT. */

/* Properties of one device. */
typedef struct glyd_gpu_info {
    char name[256];           /* e.g. "NVIDIA H200" */
    int cc_major, cc_minor;   /* compute capability */
    int multiprocessors;
    int shared_optin;         /* max shared memory per block with opt-in, bytes */
    int shared_per_sm;        /* shared memory per multiprocessor, bytes */
    int l2_bytes;
    int clock_khz;            /* SM clock */
    int mem_clock_khz;        /* memory clock */
    int bus_width;            /* memory bus width, bits */
    int driver_version;       /* CUDA version of the driver, 1000*major + 10*minor */
    uint64_t total_mem;       /* bytes */
} glyd_gpu_info;

/* A packed tensor whose planes live in device memory. Metadata is host
 * memory, read during the call only. */
typedef struct glyd_gpu_tensor {
    int layout;                /* GLYD_LAYOUT_FIXED12, _FIXED12_TILED or _SMALLEST */
    int dtype;                 /* GLYD_DTYPE_BF16 (the only dtype the kernels take) */
    size_t ndim;               /* <= GLYD_MAX_DIMS */
    int64_t shape[GLYD_MAX_DIMS];
    const glyd_group *groups;  /* host array of num_groups groups (glyd_packed_group) */
    size_t num_groups;
    /* Device address of each plane's first byte (all groups), NULL for a plane
     * that is empty. Group g's slice of plane p is at planes[p] +
     * groups[g].offsets[p]. The fused kernels read the sm and code planes with
     * 16-byte loads: give them 16-byte aligned planes (torch allocations are
     * 256-byte aligned) or a slower path is taken. */
    const void *planes[GLYD_NUM_PLANES];
    /* Device address of the escape row index (glyd_gpu_build_escape_index);
     * glyd_gpu_linear needs it when the tensor has escapes. NULL otherwise. */
    const void *esc_rows;
} glyd_gpu_tensor;

/* Loads the CUDA driver (once per process). GLYD_OK if it is usable. */
int glyd_gpu_init(void);

/* Number of CUDA devices in *count. */
int glyd_gpu_device_count(int *count);

/* Fills *info for device `device` (0-based CUDA ordinal). */
int glyd_gpu_device_info(int device, glyd_gpu_info *info);

/* Decodes group `group` of t (or all groups, in order, when group == -1) to
 * bf16 at dst (device; dst_bytes >= 2 * elements decoded, else
 * BUFFER_TOO_SMALL). Bit-exact: dst holds the original bits of every element.
 * Enqueues one kernel per group, plus one per group that has escapes. */
int glyd_gpu_decode(int device, void *stream, const glyd_gpu_tensor *t, int64_t group,
                    void *dst, size_t dst_bytes);

/* Decodes rows [row0, row0 + rows) of t, seen as the matrix [product of all
 * but the last dimension, K], to bf16 at dst (device, row-major [rows, K];
 * dst_bytes >= 2 * rows * K, else BUFFER_TOO_SMALL). Bit-exact, like
 * glyd_gpu_decode. It lets a runtime multiply a prompt with its own GEMM
 * (cuBLAS) a tile of weight rows at a time, with a bounded workspace.
 *   t: fixed12, one group, >= 2 dimensions, with its escape index
 *      (t->esc_rows) when it has escapes (INVALID_ARGUMENT otherwise);
 *      smallest or several groups: UNSUPPORTED (use glyd_gpu_decode).
 *   row0 + rows <= the matrix rows (INVALID_ARGUMENT otherwise); rows may be 0.
 * Enqueues one decode kernel, plus one for the escapes when t has any. */
int glyd_gpu_decode_rows(int device, void *stream, const glyd_gpu_tensor *t, int64_t row0,
                         int64_t rows, void *dst, size_t dst_bytes);

/* Decodes rows ids[0], ..., ids[count - 1] of t, seen as the matrix [product
 * of all but the last dimension, K], to bf16 at dst (device, row-major
 * [count, K]; dst_bytes >= 2 * count * K, else BUFFER_TOO_SMALL): an embedding
 * lookup from a packed table. Bit-exact, like glyd_gpu_decode.
 *   ids: device int64 [count], 8-byte aligned; read on the device only, so an
 *      id outside [0, rows) is not refused: its row of dst is zeros.
 *   t: fixed12, one group, >= 2 dimensions, K a multiple of 8 with 8-byte
 *      aligned planes (else UNSUPPORTED: use glyd_gpu_decode), with its escape
 *      index (t->esc_rows) when it has escapes (INVALID_ARGUMENT otherwise).
 *   dst: 16-byte aligned. count may be 0.
 * Enqueues one kernel. */
int glyd_gpu_decode_gather(int device, void *stream, const glyd_gpu_tensor *t, const int64_t *ids,
                           int64_t count, void *dst, size_t dst_bytes);

/* Re-lays t's sm and code planes at sm_dst and code_dst (device, the planes'
 * sizes, 16-byte aligned, overlapping neither t's planes nor each other): a
 * GLYD_LAYOUT_FIXED12 t becomes GLYD_LAYOUT_FIXED12_TILED, and back. The new
 * planes with t's other planes, groups and escape index describe the same
 * tensor in the other layout: on the H200 the fused linears read tiled planes
 * faster, every other kernel reads both (glyd_gpu_decode_gather and the
 * experts kernels: row-major only). Do it once when the planes are placed on
 * the device; copy the planes back to row-major before they leave it (a file
 * stores row-major planes only).
 *   t: fixed12, one group, seen as the matrix [N, K] (>= 2 dimensions) with
 *      N % 16 == 0 and K % 64 == 0, 16-byte aligned planes (UNSUPPORTED
 *      otherwise).
 * Enqueues two kernels. */
int glyd_gpu_tile(int device, void *stream, const glyd_gpu_tensor *t, void *sm_dst, void *code_dst);

/* Size in bytes of t's escape row index (0 when t has no escapes). t must be a
 * single-group tensor of >= 2 dimensions (the index has one entry per row of
 * the matrix [product of all but the last dimension, last dimension], + 1). */
int glyd_gpu_escape_index_bytes(const glyd_gpu_tensor *t, size_t *bytes);

/* Builds t's escape row index at dst (device, dst_bytes >=
 * glyd_gpu_escape_index_bytes). Do it once when the planes are placed on the
 * device, then set t->esc_rows = dst. */
int glyd_gpu_build_escape_index(int device, void *stream, const glyd_gpu_tensor *t, void *dst,
                                size_t dst_bytes);

/* Workspace glyd_gpu_linear needs for w and `rows` rows, in bytes (may be 0). */
int glyd_gpu_linear_workspace_bound(const glyd_gpu_tensor *w, int64_t rows, size_t *bytes);

/* y = x · wᵀ (+ bias), decoding w inside the kernel (the bf16 weight is never
 * written to memory).
 *   x:    device, bf16 [rows, K], contiguous.
 *   w:    packed [N, K], GLYD_LAYOUT_FIXED12, one group (UNSUPPORTED otherwise:
 *         decode it with glyd_gpu_decode and multiply instead).
 *   bias: device, bf16 [N], or NULL.
 *   y:    device, bf16 [rows, N], contiguous; must not overlap x.
 *   workspace: device, 16-byte aligned, workspace_bytes >=
 *         glyd_gpu_linear_workspace_bound (NULL when that is 0).
 * Accumulates in fp32: y is within bf16 rounding of a bf16 matmul of x and
 * the decoded weight, and deterministic (the same inputs give the same bits). */
int glyd_gpu_linear(int device, void *stream, const void *x, int64_t rows,
                    const glyd_gpu_tensor *w, const void *bias, void *y, void *workspace,
                    size_t workspace_bytes);

/* Workspace glyd_gpu_linear_many needs for the count weights w[0..count) and
 * `rows` rows, in bytes (may be 0). */
int glyd_gpu_linear_many_workspace_bound(const glyd_gpu_tensor *w, size_t count, int64_t rows,
                                         size_t *bytes);

/* y_i = x · w[i]ᵀ (+ bias[i]) for count weights of the same K that multiply
 * the same input (q, k and v of a layer; gate and up): one kernel launch for
 * up to four of them instead of one each, which a decode step of a few
 * tokens feels (the small weights fill the GPU together).
 *   x:    as glyd_gpu_linear.
 *   w:    host array of count tensors, each as glyd_gpu_linear's w [N_i, K],
 *         all of one K (INVALID_ARGUMENT otherwise; several weights need
 *         K % 16 == 0, UNSUPPORTED otherwise).
 *   bias: host array of count device addresses (NULL entries: no bias), or
 *         NULL for no biases.
 *   y:    device; output i, bf16 [rows, N_i] contiguous, starts at byte
 *         2 * rows * (N_0 + ... + N_{i-1}): the outputs end to end.
 *   workspace: device, 16-byte aligned, workspace_bytes >=
 *         glyd_gpu_linear_many_workspace_bound.
 * Math as glyd_gpu_linear; the kernel configuration is chosen for the
 * weights of a launch together, so an output may differ from
 * glyd_gpu_linear of its weight alone within bf16 rounding (deterministic
 * either way). glyd_gpu_linear is this call with one weight. */
int glyd_gpu_linear_many(int device, void *stream, const void *x, int64_t rows,
                         const glyd_gpu_tensor *w, size_t count, const void *const *bias, void *y,
                         void *workspace, size_t workspace_bytes);

/* Name of the kernel glyd_gpu_linear runs on `device` for w and `rows`
 * (static storage), for diagnostics and benchmarks. The choice depends on the
 * GPU: sm_90 (H100, H200) runs wgmma kernels (glyd_lin_f12w_*) from 9 rows on
 * (up to 16 rows not on weights of 6144..16895 rows), and from 1 row on
 * weights of >= 16896 rows. */
int glyd_gpu_linear_kernel(int device, const glyd_gpu_tensor *w, int64_t rows, const char **name);

/* How glyd_gpu_linear splits K on `device` for w and `rows`, for diagnostics
 * and tests: *splits blocks per output tile (1: no split), *clusters = 1 when
 * they run as one thread-block cluster adding their partial sums in shared
 * memory (sm_90 prompt tiles, where all of the launch's clusters fit on the
 * GPU at once), 0 when they go through the workspace and a reduce launch. */
int glyd_gpu_linear_split(int device, const glyd_gpu_tensor *w, int64_t rows, int *splits, int *clusters);

/* Benchmarks only: make glyd_gpu_linear use kernel configuration `name` (as
 * returned by glyd_gpu_linear_kernel, or "generic") for every call of the
 * process, or glyd_gpu_linear_experts the grouped configuration `name`
 * (glyd_lin_f12g*: a kernel name of the library without _safe); NULL or ""
 * restores the automatic choice of both. NOT_FOUND if unknown. */
int glyd_gpu_force_kernel(const char *name);

/* Benchmarks only: the names glyd_gpu_force_kernel accepts, separated by
 * '\n' (static storage; "generic" is accepted too and not listed). */
int glyd_gpu_linear_configs(const char **names);

/* Packing on the GPU. The planes, groups and checksum are exactly those
 * glyd_pack writes for the same elements, layout and groups (kernels/pack.cu;
 * both layouts, bf16 only: fp16 gives UNSUPPORTED, pack it with glyd_pack).
 * Three calls:
 *   1. glyd_gpu_pack_workspace_bytes: device scratch the next two need
 *      (depends on the shape and groups only).
 *   2. glyd_gpu_pack_bound: runs the counting passes on the GPU (histograms,
 *      CRC-32C, escape counts; synchronizes `stream`) and writes the exact
 *      byte size of every plane to plane_bytes.
 *   3. glyd_gpu_pack: runs the counting passes again, then the encoder, into
 *      the caller's device buffers planes[p] of plane_bytes[p] bytes (at
 *      least the sizes from step 2; NULL where the size is 0; the escidx plane
 *      4-byte aligned), and fills groups_out (host memory, max(groups, 1)
 *      entries) and *checksum. The encoder is still queued on `stream` when
 *      it returns. The smallest layout's chunk table is copied from the host.
 * Errors: UNSUPPORTED (fp16), INVALID_ARGUMENT (layout, groups, a group of
 * 2^32 or more elements, NULL or misaligned pointers), BUFFER_TOO_SMALL
 * (workspace or a plane), NO_GPU, CUDA.
 * With the planes copied to the host, glyd_packed_import(layout, dtype, shape,
 * ndim, groups_out, groups, planes, sizes, checksum) makes the packed tensor;
 * left on the device, they form a glyd_gpu_tensor.
 *   src: device, the tensor's bf16 elements, row-major, contiguous, 2-byte
 *        aligned; groups: 0 or 1 for one group, else as glyd_pack (every group
 *        < 2^32 elements). workspace: device, 8-byte aligned. */
int glyd_gpu_pack_workspace_bytes(int dtype, int layout, const int64_t *shape, size_t ndim,
                                  int64_t groups, size_t *bytes);
int glyd_gpu_pack_bound(int device, void *stream, const void *src, int dtype, int layout,
                        const int64_t *shape, size_t ndim, int64_t groups, void *workspace,
                        size_t workspace_bytes, uint64_t plane_bytes[GLYD_NUM_PLANES]);
int glyd_gpu_pack(int device, void *stream, const void *src, int dtype, int layout,
                  const int64_t *shape, size_t ndim, int64_t groups, void *workspace,
                  size_t workspace_bytes, void *const planes[GLYD_NUM_PLANES],
                  const uint64_t plane_bytes[GLYD_NUM_PLANES], glyd_group *groups_out,
                  uint32_t *checksum);

/* Mixtures of experts. An experts tensor is a packed [E, N, K] (or [E*N, K])
 * tensor with one group per expert (glyd_pack with groups = E), fixed12.
 * Its experts table, built once where the planes are placed, holds every
 * expert's plane addresses and escape index in device memory, so the grouped
 * calls below read the routing on the device: one launch for all experts,
 * no host synchronization (CUDA graph capture works).
 *
 * glyd_gpu_experts_table_bytes: size of w's table (depends on w only).
 * glyd_gpu_build_experts_table: writes it at dst (device, 16-byte aligned,
 *   dst_bytes >= that size): launches the escape index kernels of every
 *   expert and copies the table entries from the host (so: not during a
 *   graph capture). The table stays valid while w's planes stay in place. */
int glyd_gpu_experts_table_bytes(const glyd_gpu_tensor *w, size_t *bytes);
int glyd_gpu_build_experts_table(int device, void *stream, const glyd_gpu_tensor *w, void *dst,
                                 size_t dst_bytes);

/* All groups of an experts tensor decoded to bf16 at dst (device, 16-byte
 * aligned, dst_bytes >= 2 * elements): the same bits as glyd_gpu_decode(w,
 * group = -1), in two launches whatever E is (every expert has the same
 * size). table: w's experts table. */
int glyd_gpu_decode_experts(int device, void *stream, const glyd_gpu_tensor *w, const void *table,
                            void *dst, size_t dst_bytes);

/* Grouped fused linear: for every expert e, y[r] = x[r] · W[e]ᵀ (+ bias[e])
 * for the rows r of x routed to e, decoding W[e] inside the kernel; with
 * `transposed` (experts stored [E, in, out], as Llama 4 and gpt-oss keep
 * them) y[r] = x[r] · W[e].
 *   x:       device, bf16 [rows, in], contiguous, rows sorted by expert;
 *            16-byte aligned (linear layout).
 *   offsets: device, int32 [E]: offsets[e] = end row of expert e (rows of
 *            expert e are [offsets[e-1], offsets[e]), offsets[-1] = 0; the
 *            convention of torch's grouped_mm). Rows from offsets[E-1] on are
 *            not written (e.g. pairs routed nowhere).
 *   bias:    device, bf16 [E, out], or NULL (must be NULL when transposed).
 *   y:       device, bf16 [rows, out], contiguous.
 *   workspace: device, 16-byte aligned, workspace_bytes >=
 *            glyd_gpu_experts_workspace_bound (0 and NULL for the linear layout).
 * Linear layout: tensor cores, one launch; one block per (16 weight rows,
 * expert with rows), min(E, rows) experts wide; each block finds its expert
 * from offsets and walks its rows 8 at a time, so an expert's weights are
 * read from memory once. Needs in % 16 == 0 and every expert's planes 16-byte
 * aligned (out * in % 32 == 0 with aligned planes). Transposed: CUDA cores,
 * for few rows per expert (decode steps); the input rows are split into
 * slices summed in an fp32 workspace, then added in order (two launches).
 * Needs out % 8 == 0 and 8-byte aligned expert planes. Otherwise UNSUPPORTED.
 * Math and determinism as glyd_gpu_linear. The kernels clamp offsets to
 * [0, rows]: offsets out of order give wrong rows, never a memory fault
 * (the Python layer validates routing under GLYD_VALIDATE=1). */
int glyd_gpu_experts_workspace_bound(const glyd_gpu_tensor *w, int64_t rows, int transposed,
                                     size_t *bytes);
int glyd_gpu_linear_experts(int device, void *stream, const void *x, int64_t rows,
                            const glyd_gpu_tensor *w, int transposed, const void *table,
                            const void *offsets, const void *bias, void *y, void *workspace,
                            size_t workspace_bytes);

/* Routing of a mixture of experts on the device (no host round trip; CUDA
 * graphs capture it). A routing is `pairs` = tokens * topk (token, slot)
 * pairs; ids: int64 [pairs], the expert of pair token * topk + slot: ids in
 * [0, experts) are routed experts, in [experts, total) identity ("zero")
 * experts, anything else is dropped.
 * glyd_gpu_moe_route sorts the pairs by expert, stably (identity experts
 * after the routed ones, dropped pairs last) and writes on `stream`:
 *   offsets int32 [experts]  cumulative end row of each routed expert
 *                            (torch grouped_mm's offs);
 *   tokens  int32 [pairs]    the token of each sorted row;
 *   rows    int32 [pairs]    the sorted row of each pair.
 * pairs <= GLYD_MOE_ROUTE_MAX_PAIRS and total <= GLYD_MOE_ROUTE_MAX_EXPERTS,
 * else GLYD_ERR_UNSUPPORTED. */
#define GLYD_MOE_ROUTE_MAX_PAIRS 16384
#define GLYD_MOE_ROUTE_MAX_EXPERTS 4000
int glyd_gpu_moe_route(int device, void *stream, const int64_t *ids, int64_t pairs, int64_t topk,
                       int64_t experts, int64_t total, int32_t *offsets, int32_t *tokens,
                       int32_t *rows);

/* out[t] = sum over slots s < topk, in order, of w[t*topk+s] * v in fp32 (a
 * rounded multiply and a rounded add per term), rounded to bf16: v = d[row]
 * (row = rows[pair] from glyd_gpu_moe_route) for a routed expert, x[t] for
 * an identity expert, nothing for a dropped pair. x, out: bf16 [tokens,
 * hidden]; d: bf16 [pairs, hidden], the expert outputs in sorted rows; w:
 * fp32 [pairs]. x, d and out 16-byte aligned. Written on `stream`. */
int glyd_gpu_moe_combine(int device, void *stream, const void *x, const void *d, const float *w,
                         const int64_t *ids, const int32_t *rows, int64_t tokens, int64_t topk,
                         int64_t hidden, int64_t experts, int64_t total, void *out);

/* The SwiGLU between an expert's two linears: out[r][j] = silu(x[r][j]) *
 * x[r][inter + j] for x bf16 [rows, 2 * inter] (gate, then up) and out bf16
 * [rows, inter], silu(v) = v / (1 + exp(-v)) in fp32 rounded to bf16, then
 * an fp32 multiply rounded to bf16: the bits of torch's `silu(gate) * up` in
 * bf16. x and out 16-byte aligned. Written on `stream`. */
int glyd_gpu_moe_silu_mul(int device, void *stream, const void *x, int64_t rows, int64_t inter,
                          void *out);

/* Routing ids of an expert-major input (Llama 4's experts get every token
 * once per expert, rows_per_expert rows each, scaled by the router score):
 * ids int64 [rows], ids[r] = r / rows_per_expert where row r of x bf16
 * [rows, hidden] has an element other than +0 and -0, else -1 (dropped), the
 * ids glyd_gpu_moe_route takes with topk 1. x 16-byte aligned. Written on
 * `stream`. */
int glyd_gpu_moe_row_experts(int device, void *stream, const void *x, int64_t rows, int64_t hidden,
                             int64_t rows_per_expert, int64_t *ids);

/* Top-1 routing from router logits (Llama 4): logits bf16 [tokens,
 * experts]; writes ids int64 [tokens], the expert of the largest logit in
 * torch.topk's order (every NaN above every number, -0 below +0, the lowest
 * expert between equals) — glyd_gpu_moe_route's ids with topk 1 — and score
 * bf16 [tokens], that logit's sigmoid 1 / (1 + exp(-v)) in fp32 rounded to
 * bf16 (torch's sigmoid of the logit as fp32). Written on `stream`. */
int glyd_gpu_moe_top1(int device, void *stream, const void *logits, int64_t tokens, int64_t experts,
                      int64_t *ids, void *score);

/* The experts' input rows of a routing that scales a token before its
 * expert (Llama 4): out[r] = x[tokens[r]] * score[tokens[r]] for r < rows, an
 * fp32 product rounded to bf16 (torch's bf16 product); x bf16 [*, hidden],
 * tokens int32 [rows] (glyd_gpu_moe_route's), score bf16 [*], out bf16
 * [rows, hidden]. x and out 16-byte aligned. Written on `stream`. */
int glyd_gpu_moe_gather_scale(int device, void *stream, const void *x, const int32_t *tokens,
                              const void *score, int64_t rows, int64_t hidden, void *out);

/* ---- GPU: end ---- */

#ifdef __cplusplus
}
#endif

#endif /* GLYD_H */
