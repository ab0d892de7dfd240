#!/usr/bin/env bash
# kernels/build.sh — build kernels/glyd.fatbin and copy it, with its manifest,
# into core/gpu (go:embed cannot reach outside a package's folder).
#
#   kernels/build.sh            build with the tools venv (.tools/nvcc), installing it if missing
#   NVCC=/path/to/nvcc kernels/build.sh   use another nvcc 13.0.x
#   kernels/build.sh --check    exit 1 if core/gpu/kernels.manifest is stale
#
# The manifest records the sha256 of every kernel source, the nvcc version and
# the flags; CI runs --check so the committed fatbin always matches its sources.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SRCS="kernels/glyd.cu kernels/decode.cu kernels/linear.cu kernels/pack.cu kernels/moe.cu kernels/tile.cu kernels/common.cuh kernels/wgmma.cuh core/gpu/glyd_kernel_params.h"
ARCHS="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86 -gencode=arch=compute_89,code=sm_89 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_100a,code=sm_100a -gencode=arch=compute_120,code=sm_120 -gencode=arch=compute_80,code=compute_80"
FLAGS="-O3 -std=c++17 -Xfatbin=-compress-all"

manifest() {
	echo "# kernels.manifest — what core/gpu/kernels.fatbin was built from (kernels/build.sh)"
	for f in $SRCS; do echo "source $(sha256sum "$f" | cut -d' ' -f1) $f"; done
	echo "nvcc $1"
	echo "flags $FLAGS $ARCHS"
}

srcsum() { for f in $SRCS; do sha256sum "$f"; done | sha256sum | cut -d' ' -f1; }

if [ "${1:-}" = "--check" ]; then
	want=$(grep '^source ' core/gpu/kernels.manifest | awk '{print $2"  "$3}')
	have=$(for f in $SRCS; do sha256sum "$f"; done)
	if [ "$want" != "$have" ]; then echo "kernels: core/gpu/kernels.fatbin is stale; run make kernels" >&2; exit 1; fi
	echo "kernels: fatbin matches its sources"; exit 0
fi

if [ -z "${NVCC:-}" ]; then
	VENV=$ROOT/.tools/nvcc
	if [ ! -x "$VENV/bin/python" ]; then
		python3 -m venv "$VENV"
		"$VENV/bin/pip" install -q "cuda-toolkit[nvcc,cccl]==13.0.*"
	fi
	NVCC=$(find "$VENV" -path '*nvidia/cu13/bin/nvcc' -type f | head -1)
	[ -n "$NVCC" ] || { echo "kernels: no nvcc in $VENV" >&2; exit 1; }
fi
export PATH="$(dirname "$NVCC"):$PATH"
VER=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
case "$VER" in 13.0.*) ;; *) echo "kernels: need nvcc 13.0.x, have $VER" >&2; exit 1 ;; esac

"$NVCC" -fatbin $FLAGS $ARCHS ${GLYD_PTXAS_V:+-Xptxas -v} -o kernels/glyd.fatbin kernels/glyd.cu
cp kernels/glyd.fatbin core/gpu/kernels.fatbin
manifest "$VER" > core/gpu/kernels.manifest
ls -l core/gpu/kernels.fatbin
