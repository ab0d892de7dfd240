#!/usr/bin/env bash
# One device call: GPU tests, then the benchmark tables (printed last, and in
# $OUT/tables.md). Run from the repo root on the GPU machine with build/
# carried (libglyd.so with the fatbin inside).
#   python/tests/gpu/run_h200.sh [bench args...]
# Without bench args: every table (1, 2, 4, 5, 6, and 3 for Llama-4-Scout),
# sized to fit about 6 minutes with the tests. SKIP_TESTS=1 / SKIP_BENCH=1 skip a part.
set -o pipefail
OUT=${OUT:-/tmp/glyd-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/python GLYD_LIBRARY=$PWD/build/libglyd.so PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -c "import torch, glyd._gpu as g; print('glyd:', g.describe()); print('torch', torch.__version__, torch.version.cuda)"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest ${TESTS:-python/tests/gpu/test_kernels.py python/tests/gpu/test_linear_module.py python/tests/gpu/test_pack_gpu.py} -q -p no:cacheprovider -rf ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  [ $# -eq 0 ] && set -- --per-shape 1 --moe --moe-blocks llama4-scout
  timeout ${BENCH_TIMEOUT:-330} python3 -m glyd.gpu bench --json "$OUT/bench.json" --markdown "$OUT/tables.md" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v -E "^  table [0-9]:|it/s\]|Loading weights" | tail -c 11000
fi
