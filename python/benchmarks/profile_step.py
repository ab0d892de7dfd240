"""Where table 2's decode step spends its time, kernel by kernel: `python
python/benchmarks/profile_step.py [LAYERS] [SEQUENCES]` (default 8 layers of the
Qwen3-8B configuration, 1 sequence) saves a random model packed, loads it with
glyd.from_pretrained and prints, for one CUDA-graph replay of the step (bench.StepRunner),
each kernel name's launches, mean and total µs, and the replay's span. Run it twice, with
two libraries (GLYD_LIBRARY) or an environment switch of one (GLYD_PDL=0), to see which
kernels move."""

import sys
import tempfile

import torch
from timeline import gpu_events, graph_replay_profile

import glyd
from glyd.gpu import bench

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1
with tempfile.TemporaryDirectory() as d:
    model = bench.random_model(bench.qwen3_8b_config(layers), "cuda")
    glyd.save_pretrained(model, f"{d}/glyd", progress=False)
    del model
    torch.cuda.empty_cache()
    gm = glyd.from_pretrained(f"{d}/glyd", device_map="cuda").eval()
runner = bench.StepRunner(gm, batch, 512, 1024)
ev = gpu_events(graph_replay_profile(runner.step))
names = {}
for _, start, dur, name in ev:
    r = names.setdefault(name[:70], [0, 0.0])
    r[0] += 1
    r[1] += dur
span = max(s + d for _, s, d, _ in ev) - min(s for _, s, _, _ in ev)
print(f"span {span:.1f} µs, {len(ev)} kernels")
print("| kernel | launches | mean µs | total µs |\n|---|---:|---:|---:|")
for n, (c, t) in sorted(names.items(), key=lambda kv: -kv[1][1]):
    print(f"| {n} | {c} | {t / c:.1f} | {t:.1f} |")
