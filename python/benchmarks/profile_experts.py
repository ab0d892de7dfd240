"""One grouped experts launch for a profiler: `ncu --kernel-name regex:glyd_lin_f12[gt] ...
python python/benchmarks/profile_experts.py E IN OUT ROWS [transposed]` packs E random
experts on the GPU (stored [E, OUT, IN], or [E, IN, OUT] with `transposed`) and runs
the grouped kernel on ROWS rows, all routed to expert 0 (a decode step of Llama 4 when
transposed, ROWS = 1), a few times (the profiler picks the launch)."""

import sys

import torch

from glyd import _gpu

e, fin, fout, rows = (int(a) for a in sys.argv[1:5])
transposed = len(sys.argv) > 5 and sys.argv[5] == "transposed"
shape = (e, fin, fout) if transposed else (e, fout, fin)
w = (torch.randn(shape, device="cuda") * 0.02).to(torch.bfloat16)
de = _gpu.DeviceExperts(_gpu.pack_device(w, groups=e), transposed=transposed)
del w
x = torch.randn(rows, fin, device="cuda").to(torch.bfloat16)
offs = torch.full((e,), rows, dtype=torch.int32, device="cuda")
for _ in range(5):
    de.linear(x, offs)
torch.cuda.synchronize()
print("packed MB:", de.dt.nbytes / 1e6)
