#!/usr/bin/env bash
# Where a wgmma tile's consumer warp spends its cycles (diagnostic; nothing here ships).
#   bash python/benchmarks/wgmma_clock.sh          # here: builds build/diag/libglyd.so (sm_90a)
#   python3 python/benchmarks/wgmma_clock.py       # on the H200, with GLYD_LIBRARY=build/diag/libglyd.so
# The build applies wgmma_clock.patch (clock64 stamps around the consumer's weight wait, decode,
# FULL wait and wgmma's, and the producer's EMPTY wait, written over the start of y by tiles 0 and
# 100), compiles the kernels for sm_90a with -DGLYD_DIAG_CLOCK, links them into build/diag, and
# leaves the tree as it was. The stamps force the weight loads and the decode to complete where
# they are read, so totals run slightly above the real kernel's.
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-$(find .tools/nvcc -path '*nvidia/cu13/bin/nvcc' -type f | head -1)}
export PATH="$(dirname "$NVCC"):$PATH"
git diff --quiet kernels/linear.cu core/gpu/kernels.fatbin || { echo "wgmma_clock: commit or stash kernels/linear.cu and the fatbin first" >&2; exit 1; }
restore() { git checkout -q kernels/linear.cu core/gpu/kernels.fatbin; make -s lib >/dev/null; }
trap restore EXIT
git apply python/benchmarks/wgmma_clock.patch
"$NVCC" -fatbin -O3 -std=c++17 -Xfatbin=-compress-all -DGLYD_DIAG_CLOCK -gencode=arch=compute_90a,code=sm_90a \
  -o core/gpu/kernels.fatbin kernels/glyd.cu
make -s lib >/dev/null
mkdir -p build/diag && cp build/libglyd.so build/diag/libglyd.so
echo "wgmma_clock: build/diag/libglyd.so"
