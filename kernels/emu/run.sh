#!/usr/bin/env bash
# kernels/emu/run.sh — build the fake libcuda.so.1 (kernels/emu/fakecuda.cc:
# kernels/pack.cu on the CPU) and run core/gpu's emulated pack test against it.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${TMPDIR:-/tmp}/glyd-fakecuda
mkdir -p "$OUT"
awk '/^__device__ __forceinline__ uint32_t block_exclusive_sum/,/^}/' kernels/decode.cu > "$OUT/block_scan.inc"
g++ -std=c++20 -O1 -g -fPIC -shared -Wno-unknown-pragmas -I"$OUT" -o "$OUT/libcuda.so.1" kernels/emu/fakecuda.cc -lpthread
LD_LIBRARY_PATH="$OUT" GLYD_FAKE_CUDA=1 go test -count=1 -run 'TestPackEmulated' -v ./core/gpu "$@"
