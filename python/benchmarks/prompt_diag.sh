#!/usr/bin/env bash
# Leave-one-out builds of the prompt tiles (diagnostic; nothing here ships):
#   bash python/benchmarks/prompt_diag.sh        # here: build/diag1..5/libglyd.so (sm_90a only)
# then on the H200, for L in build build/diag1 ... build/diag5:
#   GLYD_LIBRARY=$PWD/$L/libglyd.so python3 -m glyd.gpu bench --tables 1 --tokens 1 \
#     --sweep-shapes 128,512,2048 --sweep-configs f12p --layers 12
# diag1: no decode (A = the raw packed words); diag2: no wgmma's (the fragments are summed
# instead: what the loads, decode, barriers and epilogue cost alone); diag3: no decode and no
# weight loads (the tensor cores, x staging and turns alone); diag4: no escape cursor;
# diag5: as diag3 and no epilogue (what the k loop alone costs). What the escape patches cost
# apart from the checks: python/benchmarks/escape_cost.py (the same kernels on weights without
# escapes; a diagnostic build that keeps the checks and finds no escape let the compiler fold
# the checks away, session 19).
# DIAGS="3 5" builds only those. Results are wrong by design. The builds run one after another:
# they share core/gpu's fatbin.
set -euo pipefail
cd "$(dirname "$0")/../.."
source python/benchmarks/diag_lib.sh
diag_setup prompt_diag python/benchmarks/prompt_diag.patch
for d in ${DIAGS:-1 2 3 4 5}; do diag_build build/diag$d -DGLYD_DIAG_PROMPT=$d; done
