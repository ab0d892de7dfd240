"""Can the prompt path's decode run under cuBLAS's GEMM? `python
python/benchmarks/overlap_probe.py [TOKENS ...]` times, for LAYERS (4) Qwen3-8B
gate_up weights (24576 x 4096, fixed12) at each token count, CUDA graphs of:
the GEMMs alone (bf16 weights), the decodes alone, both one after the other,
both on two streams (decode of weight i + 1 beside the GEMM of weight i: what
a pipelined prompt path would get), and the prompt path as it is (decode tiles
+ cuBLAS). Prints ms per weight.

GLYD_CARVEOUT=c0,c1,... repeats every timing with cuBLAS confined to all but
c SMs (torch._C._set_sm_carveout_experimental; applies to cuBLASLt GEMMs, so
GLYD_BLAS=cublaslt makes torch.mm use cuBLASLt), leaving those SMs to the
decode on the side stream.

--profile: instead of the timings, one replay of the GEMMs, the decodes and
decode-then-GEMM each under torch.profiler (timeline.py), per weight: the span
of its kernels, the time each kind ran (GEMM, decode, escapes) and the idle
time between kernels — whether decode-then-GEMM costs more than its kernels
(session 24 item 9: it does not, in one replay)."""

import os
import sys

import torch

import glyd
from glyd import _gpu
from glyd.gpu.bench import _time_graph
from timeline import gpu_events, graph_replay_profile

LAYERS = 4
PROFILE = "--profile" in sys.argv[1:]
tokens = [int(a) for a in sys.argv[1:] if a != "--profile"] or [512, 2048]
dev = torch.device("cuda", 0)
n, k = 24576, 4096
ws = [(torch.randn(n, k) * 0.02).to(torch.bfloat16) for _ in range(LAYERS)]
dts = [_gpu.DeviceTensor(glyd.pack(w), dev) for w in ws]
wb = [w.to(dev) for w in ws]
bufs = [torch.empty(n, k, dtype=torch.bfloat16, device=dev) for _ in range(2)]
side = torch.cuda.Stream(dev)
carveouts = [int(c) for c in os.environ.get("GLYD_CARVEOUT", "").split(",") if c] or [None]
if os.environ.get("GLYD_BLAS"):
    torch.backends.cuda.preferred_blas_library(os.environ["GLYD_BLAS"])


def decode(i, buf):
    dts[i].decode_rows(0, n, out=buf)


def kernel_kind(name: str) -> str:
    if "escape" in name:
        return "escapes"
    return "decode" if "glyd_decode" in name else "gemm"


def profile_rows(t, graphs):
    """--profile: one replay of each graph, its kernels summed by kind, µs per weight."""
    print(f"| {t} tokens, µs per weight | span | gemm | decode | escapes | idle between kernels |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, fn in graphs:
        busy = {"gemm": 0.0, "decode": 0.0, "escapes": 0.0}
        idle = end = 0.0
        for _, start, dur, name in gpu_events(graph_replay_profile(fn)):
            busy[kernel_kind(name)] += dur
            idle += max(0.0, start - end)
            end = max(end, start + dur)
        print(f"| {label} | {end / LAYERS:.1f} | " + " | ".join(f"{v / LAYERS:.1f}" for v in busy.values())
              + f" | {idle / LAYERS:.1f} |", flush=True)


for t in tokens:
    x = torch.randn(t, k, device=dev).to(torch.bfloat16)
    y = torch.empty(t, n, dtype=torch.bfloat16, device=dev)

    def gemms():
        for i in range(LAYERS):
            torch.mm(x, wb[i].t(), out=y)

    def decodes():
        for i in range(LAYERS):
            decode(i, bufs[i % 2])

    def serial():
        for i in range(LAYERS):
            decode(i, bufs[0])
            torch.mm(x, bufs[0].t(), out=y)

    def overlapped():
        # decode i + 1 on the side stream while the GEMM of i runs on the main one
        main = torch.cuda.current_stream(dev)
        decode(0, bufs[0])
        for i in range(LAYERS):
            ready = torch.cuda.Event()
            if i + 1 < LAYERS:
                side.wait_stream(main)  # (inside a capture: fork; the GEMM of i - 1 is done with the buffer)
                with torch.cuda.stream(side):
                    decode(i + 1, bufs[(i + 1) % 2])
                    ready.record(side)
            torch.mm(x, bufs[i % 2].t(), out=y)
            if i + 1 < LAYERS:
                main.wait_event(ready)

    def prompt_path():
        for i in range(LAYERS):
            dts[i].linear_tiles(x, None, y)

    if PROFILE:
        profile_rows(t, [("GEMMs alone", gemms), ("decodes alone", decodes), ("decode then GEMM", serial)])
        continue
    for c in carveouts:
        torch._C._set_sm_carveout_experimental(c)
        r = {name: _time_graph(fn, 10) / LAYERS for name, fn in
             [("gemm", gemms), ("decode", decodes), ("serial", serial), ("overlapped", overlapped),
              ("prompt path", prompt_path)]}
        torch._C._set_sm_carveout_experimental(None)
        print(f"{t} tokens, carveout {c}, ms per weight: " + ", ".join(f"{a} {b:.3f}" for a, b in r.items()),
              flush=True)
