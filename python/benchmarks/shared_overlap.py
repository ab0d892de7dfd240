"""The shared-expert overlap (glyd.transformers.gpu_shared) against the shared expert in line:
`python python/benchmarks/shared_overlap.py [--blocks B,...] [--tokens 1,32,128] [--force CFG,...]`
(blocks of glyd.gpu.bench_moe.BLOCKS that have a shared expert).

For each block and token count, CUDA-graph replays (glyd.gpu.bench._time_graph, median of 20,
each replay synchronized) of the packed block three ways: as main runs it (the overlap up to
gpu_shared.OVERLAP_ROWS rows), the overlap always, in line; two rounds each, interleaved; and
the bf16 block (batched_mm up to 64 tokens, else grouped_mm; Llama 4 its own forward). The last
columns: the overlap against in line, and whether all three gave the same bits. `--force` adds,
at each token count, the overlap and in line with each named dense configuration forced
(glyd._gpu.force_kernel) on the shared expert's linears, each also timed as 20 replays back to
back (no synchronization between them). docs/PERFORMANCE.md, session 33, holds the H200 tables.
"""

import argparse
import copy
import statistics

import torch

from glyd import _gpu
from glyd.gpu import bench_moe
from glyd.gpu.bench import warm_graph
from glyd.transformers import gpu_experts, gpu_shared

MODES = ("main", "always", "inline")
MAIN_ROWS = gpu_shared.OVERLAP_ROWS


def set_mode(block, mode):
    gpu_shared.OVERLAP_ROWS = 1 << 30 if mode == "always" else MAIN_ROWS
    gpu_shared.set_overlap(block, mode != "inline")


def back_to_back_ms(fn, n=20):
    g = warm_graph(fn, 3)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", default="llama4-scout,qwen1.5-moe-a2.7b,moonlight-16b-a3b")
    ap.add_argument("--tokens", default="1,8,32,48,64,128,256,512")
    ap.add_argument("--force", default="", help="dense configurations to force, comma-separated")
    a = ap.parse_args()
    print(f"# {_gpu.describe()}; torch {torch.__version__}; OVERLAP_ROWS {MAIN_ROWS}")
    print("| block | tokens | bf16 ms | main ms | overlap ms | in line ms | overlap vs in line | same bits |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    forced = []
    for name in a.blocks.split(","):
        ref = bench_moe.make_block(name)
        block = gpu_experts.pack_module(copy.deepcopy(ref))
        if not gpu_shared.overlapped_blocks(block):
            raise SystemExit(f"{name}: no shared expert to overlap")
        hidden = bench_moe.BLOCKS[name][1]
        with torch.no_grad():
            for t in (int(t) for t in a.tokens.split(",")):
                x = torch.randn(1, t, hidden, device="cuda", dtype=torch.bfloat16)
                impl = "batched_mm" if t <= 64 else "grouped_mm"
                bench_moe.set_impl(ref, impl)
                bench_moe.set_impl(block, impl)
                bf16 = bench_moe.time_graph(lambda: bench_moe.run(ref, x))
                ms, out = {m: [] for m in MODES}, {}
                for _ in range(2):
                    for m in MODES:
                        set_mode(block, m)
                        out[m] = bench_moe.run(block, x).clone()
                        ms[m].append(bench_moe.time_graph(lambda: bench_moe.run(block, x)))
                same = all(torch.equal(out[m], out["inline"]) for m in MODES)
                cells = " | ".join(" / ".join(f"{v:.3f}" for v in ms[m]) for m in MODES)
                gain = statistics.mean(ms["always"]) / statistics.mean(ms["inline"]) - 1
                print(f"| {name} | {t} | {bf16:.3f} | {cells} | {gain:+.1%} | {same} |", flush=True)
                for cfg in filter(None, a.force.split(",")):
                    _gpu.force_kernel(cfg)
                    try:
                        r = []
                        for m in ("always", "inline"):
                            set_mode(block, m)
                            fn = lambda: bench_moe.run(block, x)  # noqa: E731
                            r += [bench_moe.time_graph(fn), back_to_back_ms(fn)]
                    finally:
                        _gpu.force_kernel(None)
                    forced.append(f"| {name} | {t} | {cfg} | " + " | ".join(f"{v:.3f}" for v in r) + " |")
        set_mode(block, "main")
        del ref, block
        gpu_experts.clear_scratch()
        torch.cuda.empty_cache()
    if forced:
        print("\n| block | tokens | forced | overlap ms | back to back | in line ms | back to back |")
        print("|---|---:|---|---:|---:|---:|---:|")
        print("\n".join(forced))


if __name__ == "__main__":
    main()
