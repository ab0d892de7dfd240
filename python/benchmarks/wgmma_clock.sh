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
source python/benchmarks/diag_lib.sh
diag_setup wgmma_clock python/benchmarks/wgmma_clock.patch
diag_build build/diag -DGLYD_DIAG_CLOCK
