"""The default Glyd path of a real-size MoE block (glyd.gpu.bench_moe's blocks,
random weights) timed with each grouped-kernel configuration forced, to place
the switches of core/gpu/moe.go (pickGrouped) and gpu_experts:

    python python/benchmarks/moe_grouped_sweep.py llama4-scout 32,128,512 [CONFIG,...]

CONFIG: glyd_lin_f12g* names (default: all of them); "auto" is the library's own
pick. Prints a markdown table: tokens, configuration, ms (CUDA-graph replays)."""

import sys

import torch

from glyd import _gpu
from glyd.gpu import bench_moe as bm
from glyd.transformers import gpu_experts

name = sys.argv[1]
tokens = [int(t) for t in sys.argv[2].split(",")]
#: core/gpu/moe.go, groupedConfigs (the wgmma ones run on sm_90 only)
GROUPED = ["glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n2w1k8u1", "glyd_lin_f12g_m2n4w1k8u1", "glyd_lin_f12g_m1n8w2k4u1",
           "glyd_lin_f12gw_t16k1s4u4p2", "glyd_lin_f12gw_t32k1s4u4p2", "glyd_lin_f12gw_t48k1s4u4p4",
           "glyd_lin_f12gw_t64k1s4u4p4", "glyd_lin_f12gw_t96k1s4u2p2", "glyd_lin_f12gw_t128k1s4u2p2"]
configs = sys.argv[3].split(",") if len(sys.argv) > 3 else ["auto"] + GROUPED
block = gpu_experts.pack_module(bm.make_block(name))
hidden = bm.BLOCKS[name][1]
print(f"{name} on {torch.cuda.get_device_name()}\n\n| tokens | config | ms |\n|---|---|---|")
with torch.no_grad():
    for t in tokens:
        x = torch.randn(1, t, hidden, device="cuda", dtype=torch.bfloat16)
        for c in configs:
            _gpu.force_kernel(None if c == "auto" else c)
            try:
                print(f"| {t} | {c} | {bm.time_graph(lambda: bm.run(block, x)):.3f} |", flush=True)
            except Exception as e:  # a configuration this GPU lacks
                print(f"| {t} | {c} | {type(e).__name__}: {str(e)[:60]} |", flush=True)
_gpu.force_kernel(None)
