"""Where the time of one MoE block goes: `python python/benchmarks/profile_moe.py
[BLOCK] [TOKENS] [timeline|graph]` (a name of glyd.gpu.bench_moe.BLOCKS, default
qwen3-30b-a3b, 1 token) prints the GPU kernels of one forward (torch.profiler: name,
launches, total µs) for bf16 under batched_mm and for Glyd, then the CUDA-graph time of
each. The difference between the graph time and the sum of kernel times is what the
graph's kernel launches cost beyond the kernels. `timeline` adds, for Glyd, every kernel
of the forward in start order with its stream, start and end (µs from the first kernel;
from the profiler's Chrome trace): where a side stream's kernels overlap the block's.
`graph` prints that timeline for one replay of the block's CUDA graph instead of an eager call
(no launch gaps from the host: how the kernels overlap as the benchmarks time them)."""

import copy
import sys

import torch
from torch.profiler import ProfilerActivity, profile
from timeline import graph_replay_profile, print_timeline

from glyd.gpu import bench_moe
from glyd.transformers import gpu_experts

name = sys.argv[1] if len(sys.argv) > 1 else "qwen3-30b-a3b"
tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 1
mode = sys.argv[3] if len(sys.argv) > 3 else ""
ref = bench_moe.make_block(name)
glyd_block = gpu_experts.pack_module(copy.deepcopy(ref))
x = torch.randn(1, tokens, bench_moe.BLOCKS[name][1], device="cuda", dtype=torch.bfloat16)
impl = "batched_mm" if tokens <= 64 else "grouped_mm"
bench_moe.set_impl(ref, impl)
bench_moe.set_impl(glyd_block, impl)


def kernels(label, block):
    with torch.no_grad():
        for _ in range(3):
            bench_moe.run(block, x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            bench_moe.run(block, x)
            torch.cuda.synchronize()
        ms = bench_moe.time_graph(lambda: bench_moe.run(block, x))
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name[:90], [0, 0.0])
            r[0] += 1
            r[1] += e.device_time
    total = sum(r[1] for r in rows.values())
    n = sum(r[0] for r in rows.values())
    print(f"\n## {label}: {n} GPU kernels/copies, {total:.1f} µs of kernel time; CUDA graph {ms * 1000:.1f} µs")
    for k, (c, us) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"{us:8.1f} µs  {c:3d}x  {k}")
    return prof


kernels(f"bf16 {impl}, {name}, {tokens} tokens", ref)
glyd_prof = kernels(f"Glyd, {name}, {tokens} tokens", glyd_block)
if mode == "timeline":
    print_timeline(glyd_prof)
elif mode == "graph":
    print_timeline(graph_replay_profile(lambda: bench_moe.run(glyd_block, x)), "Glyd timeline, one CUDA-graph replay")
