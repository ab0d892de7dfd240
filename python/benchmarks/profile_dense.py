"""Where a dense linear's time goes: `python python/benchmarks/profile_dense.py TOKENS
[SHAPES] [LAYERS]` (shapes of glyd.gpu.bench's Qwen3-8B table 1, default all; 4 layers)
prints, per shape, the kernels of one CUDA-graph replay of LAYERS linears for bf16
(torch.matmul) and Glyd: per kernel name its launches and mean µs, the replay's span
and the gaps (span minus the kernels' union), then Glyd's last layer kernel by kernel
(start, end: how its launches overlap)."""

import sys

from timeline import gpu_events, graph_replay_profile

from glyd.gpu import bench

tokens = int(sys.argv[1])
which = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else None
layers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
sets = bench.build("qwen3-8b", layers, 1)


def summary(label, ev):
    names = {}
    for _, start, dur, name in ev:
        r = names.setdefault(name[:60], [0, 0.0])
        r[0] += 1
        r[1] += dur
    span = max(s + d for _, s, d, _ in ev)
    busy, end = 0.0, 0.0  # the union of the kernels' intervals
    for _, s, d, _ in sorted(ev, key=lambda e: e[1]):
        busy += max(0.0, s + d - max(s, end))
        end = max(end, s + d)
    print(f"  {label}: span {span:.1f} µs ({span / layers:.1f} per layer), gaps {span - busy:.1f} µs")
    for n, (c, us) in sorted(names.items(), key=lambda kv: -kv[1][1]):
        print(f"    {us / c:7.1f} µs x {c:2d}  {n}")


for s in sets:
    if which and s["name"] not in which:
        continue
    bf, gl = bench.step_fns(sets, tokens, s["name"])
    print(f"\n## {s['name']} [{s['n']} x {s['k']}], {tokens} tokens, {layers} layers; Glyd kernel "
          f"{s['dt'][0].linear_kernel(tokens)}")
    summary("bf16", gpu_events(graph_replay_profile(bf)))
    ev = gpu_events(graph_replay_profile(gl))
    summary("Glyd", ev)
    per = len(ev) // layers
    for _, start, dur, name in ev[-per:]:
        print(f"    {start:8.1f} {start + dur:8.1f}  {name[:60]}")
