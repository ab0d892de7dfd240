"""How the fused linear's time grows with the number of weight tiles, against
bf16, at fixed K and tokens: `python python/benchmarks/wave_sweep.py TOKENS K
TILES[,TILES...] [ROWS_PER_TILE]`. Each size is N = tiles x rows-per-tile
(default 128, the prompt tiles' rows), 12 layers with their own weights (two
distinct packs, glyd.gpu.bench.build), one CUDA graph per side, median of 20
replays. Prints one row per size: µs per layer for bf16 and Glyd, the ratio
and the kernel. A ratio that jumps between sizes that differ only in how the blocks
fall on the SMs is the scheduler's, not the tile's."""

import sys

import torch

from glyd.gpu.bench import _time_graph, build

LAYERS = 12


def main():
    tokens, k = int(sys.argv[1]), int(sys.argv[2])
    tiles = [int(t) for t in sys.argv[3].split(",")]
    per = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    dev = torch.device("cuda", 0)
    x = torch.randn(tokens, k, device=dev).to(torch.bfloat16)
    print("| tokens | tiles | N x K | bf16 µs/layer | Glyd µs/layer | Glyd/bf16 | kernel |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for t in tiles:
        n = t * per
        s = build("qwen3-8b", LAYERS, 2, shapes=[(n, k)])[0]
        ws, dts = s["w"], s["dt"]
        y = torch.empty(tokens, n, dtype=torch.bfloat16, device=dev)

        def bf16():
            for w in ws:
                torch.matmul(x, w.t(), out=y)

        def glyd_():
            for dt in dts:
                dt.linear(x, out=y)

        tb = _time_graph(bf16) * 1000 / LAYERS
        tg = _time_graph(glyd_) * 1000 / LAYERS
        print(f"| {tokens} | {t} | {n}x{k} | {tb:.1f} | {tg:.1f} | {tg / tb:.3f} | {dts[0].linear_kernel(tokens)} |",
              flush=True)
        del s, dts, ws, y
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
