"""GPU timelines for the profiling scripts beside this one: the kernels of one CUDA-graph
replay (torch.profiler) in start order, with stream, start, end and duration."""

import json
import os
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

from glyd.gpu.bench import warm_graph


def graph_replay_profile(fn, warm=3):
    """The profiler around one replay of fn's CUDA graph (bench.warm_graph)."""
    with torch.no_grad():
        graph = warm_graph(fn, warm)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
    return prof


def gpu_events(prof):
    """The profile's kernels, copies and memsets as (stream, start µs, duration µs, name),
    in start order, times from the first."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    t0 = gpu[0]["ts"] if gpu else 0
    return [(e.get("args", {}).get("stream", "?"), e["ts"] - t0, e.get("dur", 0), e["name"]) for e in gpu]


def print_timeline(prof, what="Glyd timeline"):
    """The GPU events of prof in start order: stream, start, end, duration."""
    ev = gpu_events(prof)
    if not ev:
        print("\n(no GPU events in the trace)")
        return
    print(f"\n## {what} (µs from the first kernel)\n\n| stream | start | end | µs | kernel |\n|---:|---:|---:|---:|---|")
    for stream, start, dur, name in ev:
        print(f"| {stream} | {start:.1f} | {start + dur:.1f} | {dur:.1f} | {name[:70]} |")
