"""Where the shared expert starts and its share of each SM, for a MoE block with a shared
expert: `python python/benchmarks/moe_share_sweep.py [BLOCK] [TOKENS] [MODES]` (default
llama4-scout, 1,32 tokens, modes block@100,router@100,router@75,router@50: the shared expert
starts with the block or after its router, its side stream takes that percent of each SM)
times the block as a CUDA graph, bf16 under transformers' own code and Glyd in each mode
(glyd._gpu.set_stream_share; recaptured each time), interleaved over two rounds, and
prints ms per mode and Glyd/own at the best. Same output bits in every mode (checked)."""

import copy
import sys

import torch

from glyd import _gpu
from glyd.gpu import bench_moe
from glyd.transformers import gpu_experts, gpu_shared

name = sys.argv[1] if len(sys.argv) > 1 else "llama4-scout"
tokens = [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "1,32").split(",")]
shares = (sys.argv[3] if len(sys.argv) > 3 else "block@100,router@100,router@75,router@50").split(",")
ref = bench_moe.make_block(name)
glyd_block = gpu_experts.pack_module(copy.deepcopy(ref))
side = gpu_shared._side(torch.device("cuda", 0))
state = next(m.__dict__[gpu_shared._KEY] for m in glyd_block.modules() if gpu_shared._KEY in m.__dict__)
router = state.router
print(f"| tokens | bf16 own ms | " + " | ".join(f"Glyd {p}% ms" for p in shares) + " | best | Glyd/own at best |")
print("|---:|---:|" + "---:|" * len(shares) + "---:|---:|")
for t in tokens:
    x = torch.randn(1, t, bench_moe.BLOCKS[name][1], device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        own = min(bench_moe.time_graph(lambda: bench_moe.run(ref, x)) for _ in range(2))
        best, outs = {}, {}
        for _ in range(2):
            for p in shares:
                fork, pct = p.split("@")
                state.router = router if fork == "router" else None
                _gpu.set_stream_share(side, int(pct))
                ms = bench_moe.time_graph(lambda: bench_moe.run(glyd_block, x))
                best[p] = min(best.get(p, ms), ms)
                outs[p] = bench_moe.run(glyd_block, x)
    same = all(torch.equal(outs[p], outs[shares[0]]) for p in shares)
    p = min(best, key=best.get)
    print(f"| {t} | {own:.3f} | " + " | ".join(f"{best[q]:.3f}" for q in shares) +
          f" | {p} | {best[p] / own:.3f} (equal bits: {same}) |")
