/*
 * glyd_kernel_params.h — the one argument block every Glyd kernel takes.
 *
 * Shared by the CUDA kernels (the .cu files of kernels/, compiled by nvcc) and the host
 * driver layer (core/gpu, compiled by cgo), so both sides agree on the layout
 * byte for byte. Every kernel takes exactly one parameter of this
 * type, passed by value through cuLaunchKernel (the driver copies it at launch,
 * so a graph capture keeps its own copy).
 *
 * Addresses are device addresses stored as 64-bit integers (never host
 * pointers). Fields a kernel does not use are ignored; the host zeroes them.
 */
#ifndef GLYD_KERNEL_PARAMS_H
#define GLYD_KERNEL_PARAMS_H

/* Weights one dense fused-linear launch multiplies by the same x (kernels/linear.cu). */
#define GLYD_MAX_SEGMENTS 4

#ifdef __CUDACC__
typedef unsigned long long glyd_u64;
typedef long long glyd_i64;
typedef unsigned int glyd_u32;
#else
#include <stdint.h>
typedef uint64_t glyd_u64;
typedef int64_t glyd_i64;
typedef uint32_t glyd_u32;
#endif

/* One weight [N, K] of a dense fused-linear launch: its planes (fixed12, one
 * group), escape index, base and bias. */
typedef struct glyd_segment {
	glyd_u64 sm, code;         /* its sm and code planes */
	glyd_u64 escrows, escrecs; /* its escape row index, 0 if no escapes */
	glyd_u64 bias;             /* bf16 [N] or 0 */
	glyd_i64 N;                /* its rows (output features) */
	glyd_u32 base;             /* exponent of code 0 */
	glyd_u32 ebase;            /* exponent the kernel gives escaped weights (base+15, or 0) */
} glyd_segment;

typedef struct glyd_kparams {
	/* Planes of ONE group (group offsets already added by the host). */
	glyd_u64 sm;      /* PlaneSM: one sign+mantissa byte per weight (bf16) */
	glyd_u64 code;    /* PlaneCode: fixed12 4-bit codes / smallest 2-bit level-1 codes */
	glyd_u64 code2;   /* PlaneCode2 (smallest): 2-bit level-2 codes, per-chunk segments */
	glyd_u64 code3;   /* PlaneCode3 (smallest): 4-bit level-3 codes, per-chunk segments */
	glyd_u64 chunks;  /* PlaneChunks (smallest): 2 x uint64 per 4096-element chunk */
	glyd_u64 escidx;  /* PlaneEscIdx: uint32 element index within the group, ascending */
	glyd_u64 escexp;  /* PlaneEscExp: uint8 exponent of each escape */
	glyd_u64 escrows; /* escape index (BuildEscapeIndex): uint32 rows[N+1], then at
	                   * escrecs 8-byte records {uint32 k, uint16 true bf16, 0}; 0 if no escapes */
	glyd_u64 escrecs; /* address of the records of the escape index */
	/* Operands. */
	glyd_u64 x;    /* bf16 [rows, K] activations, row-major, contiguous */
	glyd_u64 bias; /* bf16 [N] or 0 */
	glyd_u64 y;    /* bf16 [rows, N] output, row-major, contiguous */
	glyd_u64 dst;  /* bf16 [n] decode output */
	glyd_u64 ws;   /* fp32 [splits][rows][N] split-K partial sums (splits > 1; 0: the
	                * sm_90 tiles launched in clusters of splits, which add them in
	                * shared memory) */
	/* Sizes. */
	glyd_u64 n;       /* elements in the group */
	glyd_u64 escapes; /* escape entries in the group */
	glyd_i64 rows;    /* rows of x and y (tokens) */
	glyd_i64 N;       /* output features (rows of the weight) */
	glyd_i64 K;       /* input features (columns of the weight) */
	/* Exponent tables. */
	glyd_u32 base;     /* exponent of code 0 of the 4-bit code */
	glyd_u32 table[6]; /* smallest: exponents of level-1 codes 0..2 and level-2 codes 0..2 */
	glyd_u32 tiled;    /* fixed12 matrices: 0 = row-major sm and code planes; else K / 64, the
	                    * planes in 16-row x 64-k tiles (kernels/common.cuh, plane_index) */
	glyd_u32 splits; /* linear: K is split over gridDim.z = splits blocks (1 = no split) */
	glyd_u32 ebase;  /* linear: exponent the kernel gave escaped weights (base+15, or 0) */
	/* Pack (kernels/pack.cu): x = the bf16 tensor, n = elements per group,
	 * N = groups; sm/code/escidx/escexp = the output planes (whole planes). */
	glyd_u64 total;    /* pack: elements of the whole tensor */
	glyd_u64 pk_hist;  /* pack: uint32 [groups][256] exponent counts */
	glyd_u64 pk_tiles; /* pack: uint32 per tile: CRC-32C (crc) or escape count (count) */
	glyd_u64 pk_off;   /* pack: uint64 per tile: its first entry in the escape planes */
	glyd_u64 pk_base;  /* pack: uint32 [groups]: Base of each group */
	glyd_u64 pk_sym;   /* pack (smallest): uint8 [groups][256]: symbol of each exponent */
	/* Row-range decode (glyd_escape_scatter_rows): rows [row0, row0 + N) of
	 * the matrix [*, K]; dst holds row row0 at its start. */
	glyd_i64 row0;
	/* Experts (kernels/moe.cu): E = num_experts groups described by the
	 * device table `experts` (glyd_expert [E]); offs = int32 [E], the
	 * cumulative end row of each expert in x and y (rows sorted by expert). */
	glyd_u64 experts;
	glyd_u64 offs;
	glyd_i64 num_experts;
	/* Routing (glyd_moe_route, glyd_moe_combine): ids = int64 [pairs] expert
	 * of each (token, slot) pair, pair = token * topk + slot; ids in
	 * [0, num_experts) are routed, in [num_experts, experts_total) identity experts,
	 * others dropped. tok/rowof = int32 [pairs]: token of each sorted row,
	 * sorted row of each pair; rw = fp32 [pairs] routing weights. */
	glyd_u64 ids, tok, rowof, rw;
	glyd_i64 topk, experts_total;
	/* Dense fused linears (glyd_lin_f12*, glyd_lin_reduce): nseg weights of
	 * the same K multiplied by x in one launch. blockIdx.y counts the weight
	 * tiles of seg[0], then those of seg[1], ...; output i is bf16 [rows,
	 * N_i] at y + 2*rows*(N_0 + ... + N_{i-1}), its split-K partial sums
	 * [splits][rows][N_i] at ws + 4*splits*rows*(the same sum). The kernels
	 * take the weight fields above from the segment of their tile. */
	glyd_u32 nseg;
	glyd_u32 pad2;
	glyd_segment seg[GLYD_MAX_SEGMENTS];
} glyd_kparams;

/* One expert (one group of a packed experts tensor) as the grouped kernels
 * read it: the device addresses of its planes and of its escape index. */
typedef struct glyd_expert {
	glyd_u64 sm, code;         /* its sm and code planes (fixed12) */
	glyd_u64 escidx, escexp;   /* its escape planes (decode), 0 if no escapes */
	glyd_u64 escrows, escrecs; /* its escape row index (fused linear), 0 if no escapes */
	glyd_u64 escapes;          /* escape entries of the group */
	glyd_u32 base;             /* exponent of code 0 */
	glyd_u32 ebase;            /* exponent the fused kernel gives escaped weights */
} glyd_expert;

#endif
