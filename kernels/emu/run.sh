#!/usr/bin/env bash
# kernels/emu/run.sh — build the fake libcuda.so.1 (kernels/emu/fakecuda.cc:
# kernels/pack.cu, tile.cu, decode.cu's fixed12 kernels, linear.cu's fused tiles, split-K reduce,
# generic kernel and x layout kernels, moe.cu's transposed experts, SwiGLU,
# combine, routing-id, top-1 and scaled-gather kernels on
# the CPU) and run core/gpu's emulated tests
# against it.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${TMPDIR:-/tmp}/glyd-fakecuda
mkdir -p "$OUT"
awk '/^__device__ __forceinline__ uint32_t block_exclusive_sum/,/^}/' kernels/decode.cu > "$OUT/block_scan.inc"
# decode.cu's fixed12 decode and escape kernels: from add_bytes to the smallest
# section, and the escape index kernels at the end.
awk '/^\/\/ Per-byte add/{on=1} /^\/\/ -----/{on=0} /^\/\/ Escape index for the fused kernels/{on=1} on' kernels/decode.cu > "$OUT/decode_f12.inc"
# linear.cu's code_bytes, add_escape and finish, its segment lookup, split-K
# reduce and generic kernel; moe.cu's expert lookup and its transposed
# experts kernels.
awk '/^\/\/ The exponents of 8 weights from their 4-bit codes/{on=1} /^\/\/ 16 weights of one row/{on=0} /^\/\/ The escape correction of one output/{on=1} /^__device__ __forceinline__ uint32_t ld_u32/{on=0} /^\/\/ A dense launch.s parameters for its segment/{on=1} /^\/\/ Hopper \(sm_90a\): the same decode/{on=0} /^extern "C" __global__ void __launch_bounds__\(128\) glyd_lin_f12_generic/{on=1} on' kernels/linear.cu > "$OUT/linear_helpers.inc"
awk '/^\/\/ The z-th expert \(0-based\)/{on=1} /^\/\/ The parameters of expert e for the tile code/{on=0} /^\/\/ Transposed experts:/{on=1} /^\/\/ Bin of a routing id/{on=0} on' kernels/moe.cu > "$OUT/moe_transposed.inc"
# linear.cu's x layout of the prompt tiles: stage_offset, permute_x16 and the glyd_lin_xperm kernels.
{ awk '/^\/\/ A 64-k block of activations in shared memory/,/^}/' kernels/linear.cu
  awk '/^\/\/ 16 activations \(a = elements 0..7/,/^}/' kernels/linear.cu
  awk '/^\/\/ x \[rows, K\] as the prompt tiles. stage images/,/glyd_lin_xperm_t256/' kernels/linear.cu; } > "$OUT/prompt_x.inc"
# linear.cu's mma.sync tiles: decode16, then WBatch to the end of linear_f12
# (block_epilogue and its helpers), then linear_f12_block and the GLYD_LIN
# kernels;
{ awk '/^\/\/ 16 weights of one row/{on=1} /^\/\/ 16 activations \(a = elements 0..7/{on=0} on' kernels/linear.cu
  awk '/^template <int MT, int U>$/{on=1} /^\/\/ A dense launch.s parameters for its segment/{on=0} on' kernels/linear.cu
  awk '/^\/\/ The dense kernels: one output tile per block/{on=1} /glyd_lin_f12_generic\(const/{on=0} on' kernels/linear.cu
# moe.cu's grouped experts kernels on those tiles (expert_params to
# linear_f12_experts, and the GLYD_LING kernels).
  awk '/^\/\/ The parameters of expert e for the tile code/{on=1} /^\/\/ The same over the Hopper \(sm_90a\) wgmma tiles/{on=0} on' kernels/moe.cu
  awk '/^#define GLYD_LING\(/{print; getline; print} /^GLYD_LING\(/' kernels/moe.cu; } > "$OUT/linear_regs.inc"
# linear.cu's Hopper tiles (wgmma_tile, prompt_tile and their kernels): from
# the wgmma section to the x layout kernels, without the PTX helpers the
# emulator has its own of (bar_sync, bar_arrive; stage_offset is in
# prompt_x.inc), the producers' shared stores as a call.
awk '/^\/\/ Hopper \(sm_90a\): the same decode feeding wgmma/{on=1}
     /^\/\/ x \[rows, K\] as the prompt tiles. stage images/{on=0}
     on && (/^__device__ __forceinline__ void bar_(sync|arrive)\(/ || /^\/\/ A 64-k block of activations in shared memory/){skip=1}
     on && !skip
     skip && /^}/{skip=0}' kernels/linear.cu |
	sed -e 's/asm volatile("st.shared.b32 \[%0\], %1;" ::"r"(\(.*\)), "r"(\(.*\)) : "memory");/emu_st_shared32(\1, \2);/' \
	    -e 's/asm volatile("" : "+f"(\(.*\))::"memory");/(void)\1;/' > "$OUT/linear_wgmma.inc"
# decode.cu's bulk-copy decode (its shared stages and barriers in the
# emulator's shared memory; decode_staged is the emulator's).
awk '/^constexpr int BULK_CH/{on=1} /^\/\/ Escape index for the fused kernels/{on=0}
     on && /^\/\/ Unit u of a chunk of CH units staged/{skip=1}
     on && !skip
     skip && /^}/{skip=0}' kernels/decode.cu |
	sed -e 's/extern __shared__ __align__(128) uint8_t stages\[\];/uint8_t *stages = (uint8_t *)emu_smem;/' \
	    -e 's/__shared__ __align__(8) uint64_t full\[S\];/uint64_t *full = (uint64_t *)((char *)emu_smem + BULK_SMEM);/' >> "$OUT/linear_wgmma.inc"
# moe.cu's grouped experts kernels on the wgmma tiles (linear_f12w_experts, GLYD_LINGW's).
{ awk '/^\/\/ The same over the Hopper \(sm_90a\) wgmma tiles/{on=1} /^#define GLYD_LING\(/{on=0} on' kernels/moe.cu
  awk '/^#define GLYD_LINGW\(/{print; getline; print} /^GLYD_LINGW\(/' kernels/moe.cu; } >> "$OUT/linear_wgmma.inc"
if grep -n 'asm' "$OUT/linear_wgmma.inc"; then echo "run.sh: PTX left in linear_wgmma.inc" >&2; exit 1; fi
# moe.cu's 8-feature load/store helpers, SwiGLU, combine, routing-id, top-1 and scaled-gather kernels (from the helpers' comment to the end).
awk '/^\/\/ 8 bf16 features at src/{on=1} on' kernels/moe.cu > "$OUT/moe_tail.inc"
g++ -std=c++20 -O1 -g -fPIC -shared -Wno-unknown-pragmas -I"$OUT" -o "$OUT/libcuda.so.1" kernels/emu/fakecuda.cc -lpthread
LD_LIBRARY_PATH="$OUT" GLYD_FAKE_CUDA=1 go test -count=1 -timeout 40m -run 'Emulated' -v ./core/gpu "$@"
# The C example of the GPU calls end to end on the fake GPU (build/libglyd.so,
# make lib): a 64 x 256 weight at 4 rows runs an mma.sync tile.
if [ $# -eq 0 ]; then
	make -s -C examples/c ../../build/examples/gpu_linear
	out=$(LD_LIBRARY_PATH="$OUT" build/examples/gpu_linear 64 256 4)
	echo "$out"
	grep -q "tiled planes; decode exact" <<<"$out" || { echo "gpu_linear did not run on the fake GPU" >&2; exit 1; }
fi
