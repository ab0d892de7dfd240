"""Table 1's linears under sustained load: `python python/benchmarks/clock_probe.py
[TOKENS ...] [--seconds S] [--layers L] [--config NAME]` times, per token count
(default 128 512 2048), the CUDA graph of all linears of L (12) Qwen3-8B layers
for bf16 and Glyd (the automatic kernels, or configuration NAME forced) twice:
as the bench does (median of 20 replays) and replayed back to back for S (3)
seconds while nvidia-smi samples the SM clock, the power draw and the
temperature every 50 ms. Prints one markdown table: ms, ratios, and the median
MHz / W / °C of each sustained run."""

import argparse
import statistics
import subprocess
import time

import torch

from glyd import _gpu
from glyd.gpu import bench

ap = argparse.ArgumentParser()
ap.add_argument("tokens", nargs="*", type=int, default=[128, 512, 2048])
ap.add_argument("--seconds", type=float, default=3.0)
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--config", default=None)
args = ap.parse_args()
sets = bench.build("qwen3-8b", args.layers, 2)


def sustained(fn):
    """ms per replay over args.seconds of back-to-back replays, and the median
    SM MHz, W and °C nvidia-smi saw meanwhile."""
    g = bench.warm_graph(fn)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start, reps = time.perf_counter(), 0
    a.record()
    while time.perf_counter() - start < args.seconds:
        for _ in range(10):
            g.replay()
        reps += 10
        torch.cuda.synchronize()
    b.record()
    b.synchronize()
    smi.terminate()
    rows = [[float(v) for v in r.split(",")] for r in smi.communicate()[0].strip().splitlines() if "," in r]
    med = [statistics.median(col) for col in zip(*rows)] if rows else [float("nan")] * 3
    del g
    return a.elapsed_time(b) / reps, med


print(f"{args.layers} layers of Qwen3-8B's four linears, one CUDA graph; Glyd: {args.config or 'automatic'}; "
      f"sustained = {args.seconds:g} s of back-to-back replays\n")
print("| tokens | bf16 ms | Glyd ms | Glyd/bf16 | bf16 sustained ms (MHz, W, °C) | Glyd sustained ms (MHz, W, °C) "
      "| Glyd/bf16 sustained |")
print("|---:|---:|---:|---:|---:|---:|---:|")
_gpu.force_kernel(args.config)
try:
    for t in args.tokens:
        bf, gl = bench.step_fns(sets, t, None)
        short = [bench._time_graph(f) for f in (bf, gl)]
        long = [sustained(f) for f in (bf, gl)]
        cell = lambda r: f"{r[0]:.3f} ({r[1][0]:.0f}, {r[1][1]:.0f}, {r[1][2]:.0f})"
        print(f"| {t} | {short[0]:.3f} | {short[1]:.3f} | {short[1] / short[0]:.3f} | {cell(long[0])} | "
              f"{cell(long[1])} | {long[1][0] / long[0][0]:.3f} |", flush=True)
finally:
    _gpu.force_kernel(None)
