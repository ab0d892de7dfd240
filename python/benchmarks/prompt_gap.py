"""Where the prompt path's time goes beside its two kernels: `python
python/benchmarks/prompt_gap.py [TOKENS]` (default 2048) replays, for 4
Qwen3-8B gate_up weights (24576 x 4096, fixed12), CUDA graphs of the GEMMs
alone (bf16 weights), the decodes alone, and decode-then-GEMM per weight, each
under torch.profiler, and prints per graph the span of its kernels, the time
each kind of kernel ran (GEMM, decode, escapes) and the idle time between
kernels. Session 24 found decode-then-GEMM 0.04-0.06 ms per weight slower than
the GEMM and the decode alone (docs/PERFORMANCE.md, item 8): this says whether
the kernels themselves run slower there or the GPU waits between them."""

import sys

import torch

import glyd
from glyd import _gpu
from timeline import gpu_events, graph_replay_profile

LAYERS = 4
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
dev = torch.device("cuda", 0)
n, k = 24576, 4096
ws = [(torch.randn(n, k) * 0.02).to(torch.bfloat16) for _ in range(LAYERS)]
dts = [_gpu.DeviceTensor(glyd.pack(w), dev) for w in ws]
wb = [w.to(dev) for w in ws]
buf = torch.empty(n, k, dtype=torch.bfloat16, device=dev)
x = torch.randn(tokens, k, device=dev).to(torch.bfloat16)
y = torch.empty(tokens, n, dtype=torch.bfloat16, device=dev)


def gemms():
    for i in range(LAYERS):
        torch.mm(x, wb[i].t(), out=y)


def decodes():
    for i in range(LAYERS):
        dts[i].decode_rows(0, n, out=buf)


def serial():
    for i in range(LAYERS):
        dts[i].decode_rows(0, n, out=buf)
        torch.mm(x, buf.t(), out=y)


def kind(name: str) -> str:
    if "escape" in name:
        return "escapes"
    if "glyd_decode" in name:
        return "decode"
    return "gemm"


print(f"| {tokens} tokens, µs per weight | span | gemm | decode | escapes | idle between kernels |")
print("|---|---:|---:|---:|---:|---:|")
for label, fn in (("GEMMs alone", gemms), ("decodes alone", decodes), ("decode then GEMM", serial)):
    ev = gpu_events(graph_replay_profile(fn))
    busy = {"gemm": 0.0, "decode": 0.0, "escapes": 0.0}
    idle, end = 0.0, 0.0
    for _, start, dur, name in ev:
        busy[kind(name)] += dur
        idle += max(0.0, start - end)
        end = max(end, start + dur)
    print(f"| {label} | {end / LAYERS:.1f} | {busy['gemm'] / LAYERS:.1f} | {busy['decode'] / LAYERS:.1f} | "
          f"{busy['escapes'] / LAYERS:.1f} | {idle / LAYERS:.1f} |", flush=True)
