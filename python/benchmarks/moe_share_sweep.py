"""How the shared expert's share of each SM moves a MoE block with a shared expert:
`python python/benchmarks/moe_share_sweep.py [BLOCK] [TOKENS] [PERCENTS]` (default
llama4-scout, 1,32 tokens, shares 100,75,50,25) times the block as a CUDA graph, bf16 under
transformers' own code and Glyd with the side stream's share set to each percent
(glyd._gpu.set_stream_share; every share recaptured), interleaved over two rounds, and
prints ms and Glyd/own per share. Same output bits at every share (checked)."""

import copy
import sys

import torch

from glyd import _gpu
from glyd.gpu import bench_moe
from glyd.transformers import gpu_experts, gpu_shared

name = sys.argv[1] if len(sys.argv) > 1 else "llama4-scout"
tokens = [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "1,32").split(",")]
shares = [int(p) for p in (sys.argv[3] if len(sys.argv) > 3 else "100,75,50,25").split(",")]
ref = bench_moe.make_block(name)
glyd_block = gpu_experts.pack_module(copy.deepcopy(ref))
side = gpu_shared._side(torch.device("cuda", 0))
print(f"| tokens | bf16 own ms | " + " | ".join(f"Glyd {p}% ms" for p in shares) + " | best | Glyd/own at best |")
print("|---:|---:|" + "---:|" * len(shares) + "---:|---:|")
for t in tokens:
    x = torch.randn(1, t, bench_moe.BLOCKS[name][1], device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        own = min(bench_moe.time_graph(lambda: bench_moe.run(ref, x)) for _ in range(2))
        best, outs = {}, {}
        for _ in range(2):
            for p in shares:
                _gpu.set_stream_share(side, p)
                ms = bench_moe.time_graph(lambda: bench_moe.run(glyd_block, x))
                best[p] = min(best.get(p, ms), ms)
                outs[p] = bench_moe.run(glyd_block, x)
    same = all(torch.equal(outs[p], outs[shares[0]]) for p in shares)
    p = min(best, key=best.get)
    print(f"| {t} | {own:.3f} | " + " | ".join(f"{best[q]:.3f}" for q in shares) +
          f" | {p}% | {best[p] / own:.3f} (equal bits: {same}) |")
