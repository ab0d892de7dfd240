#!/usr/bin/env bash
# kernels/emu/run.sh — build the fake libcuda.so.1 (kernels/emu/fakecuda.cc:
# kernels/pack.cu and decode.cu's fixed12 kernels on the CPU) and run
# core/gpu's emulated tests against it.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${TMPDIR:-/tmp}/glyd-fakecuda
mkdir -p "$OUT"
awk '/^__device__ __forceinline__ uint32_t block_exclusive_sum/,/^}/' kernels/decode.cu > "$OUT/block_scan.inc"
# decode.cu's fixed12 decode and escape kernels: from add_bytes to the smallest
# section, and the escape index kernels at the end.
awk '/^\/\/ Per-byte add/{on=1} /^\/\/ -----/{on=0} /^\/\/ Escape index for the fused kernels/{on=1} on' kernels/decode.cu > "$OUT/decode_f12.inc"
g++ -std=c++20 -O1 -g -fPIC -shared -Wno-unknown-pragmas -I"$OUT" -o "$OUT/libcuda.so.1" kernels/emu/fakecuda.cc -lpthread
LD_LIBRARY_PATH="$OUT" GLYD_FAKE_CUDA=1 go test -count=1 -run 'Emulated' -v ./core/gpu "$@"
