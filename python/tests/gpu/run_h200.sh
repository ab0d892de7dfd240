#!/usr/bin/env bash
# One device call: GPU tests, then the benchmark tables. Run from the repo root
# on the GPU machine with build/ carried (libglyd.so with the fatbin inside).
#   python/tests/gpu/run_h200.sh [bench args...]
set -o pipefail
OUT=${OUT:-/tmp/glyd-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/python GLYD_LIBRARY=$PWD/build/libglyd.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -c "import torch, glyd._gpu as g; print('glyd:', g.describe()); print('torch', torch.__version__, torch.version.cuda)"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest ${TESTS:-python/tests/gpu/test_kernels.py} -q -p no:cacheprovider -rf ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout ${BENCH_TIMEOUT:-300} python3 -m glyd.gpu bench --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log"
fi
