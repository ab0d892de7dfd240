#!/usr/bin/env bash
# Leave-one-out builds of the prompt tiles (diagnostic; nothing here ships):
#   bash python/benchmarks/prompt_diag.sh        # here: build/diag1..4/libglyd.so (sm_90a only)
# then on the H200, for L in build build/diag1 ... build/diag4:
#   GLYD_LIBRARY=$PWD/$L/libglyd.so python3 -m glyd.gpu bench --tables 1 --tokens 1 \
#     --sweep-shapes 128,512,2048 --sweep-configs f12p --layers 12
# diag1: no decode (A = the raw packed words); diag2: no wgmma's (the fragments are summed
# instead: what the loads, decode, barriers and epilogue cost alone); diag3: no decode and no
# weight loads (the tensor cores, x staging and turns alone); diag4: no escape cursor.
# Results are wrong by design. The builds run one after another: they share core/gpu's fatbin.
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-$(find .tools/nvcc -path '*nvidia/cu13/bin/nvcc' -type f | head -1)}
export PATH="$(dirname "$NVCC"):$PATH"
git diff --quiet kernels/linear.cu core/gpu/kernels.fatbin || { echo "prompt_diag: commit or stash kernels/linear.cu and the fatbin first" >&2; exit 1; }
restore() { git checkout -q kernels/linear.cu core/gpu/kernels.fatbin; make -s lib >/dev/null; }
trap restore EXIT
git apply python/benchmarks/prompt_diag.patch
for d in 1 2 3 4; do
	"$NVCC" -fatbin -O3 -std=c++17 -Xfatbin=-compress-all -DGLYD_DIAG_PROMPT=$d -gencode=arch=compute_90a,code=sm_90a \
		-o core/gpu/kernels.fatbin kernels/glyd.cu
	make -s lib >/dev/null
	mkdir -p build/diag$d && cp build/libglyd.so build/diag$d/libglyd.so
	echo "prompt_diag: build/diag$d/libglyd.so"
done
