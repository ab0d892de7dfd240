"""One fused linear for a profiler: `ncu --kernel-name regex:glyd_lin ...
python python/benchmarks/profile_linear.py N K ROWS [CONFIG]` runs glyd_gpu_linear on
a random packed [N, K] weight (its planes arranged as a loaded model's: tiled unless
GLYD_TILED=0) a few times (the profiler picks the launch), with the
kernel configuration CONFIG (a name of glyd._gpu.linear_configs()) if given."""

import sys

import torch

import glyd
from glyd import _gpu
from glyd.gpu.bench import as_loaded

n, k, rows = (int(a) for a in sys.argv[1:4])
if len(sys.argv) > 4:
    _gpu.force_kernel(sys.argv[4])
w = (torch.randn(n, k) * 0.02).to(torch.bfloat16)
dt = as_loaded(_gpu.DeviceTensor(glyd.pack(w), "cuda"))
x = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
for _ in range(5):
    dt.linear(x)
torch.cuda.synchronize()
print("kernel:", dt.linear_kernel(rows))
