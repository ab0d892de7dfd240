"""One grouped experts launch for a profiler, and its time: `python
python/benchmarks/profile_experts.py E IN OUT ROWS [transposed]` packs E random
experts on the GPU (stored [E, OUT, IN], or [E, IN, OUT] with `transposed`) and runs
the grouped kernel on ROWS rows, all routed to expert 0 (a decode step of Llama 4 when
transposed, ROWS = 1), a few times (under ncu: `--kernel-name regex:glyd_lin_f12[gt]`,
the profiler picks the launch), then prints the time of one call (kernel and, when
transposed, its reduce) from CUDA-graph replays of calls routed to each expert in
turn, and the bandwidth it gets on one expert's packed bytes."""

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
y = torch.empty(rows, fout, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    de.linear(x, offs, out=y)
torch.cuda.synchronize()

# back-to-back calls, as the layers of a model, call i routed to expert i % E
# (each reads other weights than the last: none come from L2)
calls = 2 * e
routed = [torch.tensor([0] * (i % e) + [rows] * (e - i % e), dtype=torch.int32, device="cuda") for i in range(calls)]
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for o in routed:
        de.linear(x, o, out=y)
times = []
for _ in range(15):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    times.append(a.elapsed_time(b) * 1e3 / calls)
us = sorted(times)[len(times) // 2]
mb = de.dt.nbytes / e / 1e6
print(f"[{e}, {fin}, {fout}]{' transposed' if transposed else ''}, {rows} rows on one expert: "
      f"{us:.1f} us per call, {mb:.1f} MB packed per expert, {mb / us:.2f} TB/s")
