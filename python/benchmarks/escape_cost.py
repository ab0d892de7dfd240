"""What the escapes cost the fused linear (diagnostic, H200):

    python python/benchmarks/escape_cost.py [--shapes qkv,o,gate_up,down] [TOKENS ...]
    # default: all four shapes, 1 64 128 512 2048 tokens

The same kernels, the same shapes (Qwen3-8B's four linears, 12 copies each,
as table 1) on three sets of weights that differ only in their escapes:
randn * 0.02 (~1.5e-4 escapes per weight, like real checkpoints), `none`
(the tiny values below the window lifted into it: no escape at all) and `4x`
(a further 4.5e-4 of the weights scaled below the window). The kernel does
the same work apart from the escapes, so the time difference is what
finding and patching them costs. Rounds alternate the three sets (the
power state drifts); prints the median of each."""

import statistics
import sys

import torch

from glyd import _gpu
from glyd.gpu.bench import as_loaded
from glyd.gpu.bench import MODELS, SHAPE_NAMES, _time_graph

LAYERS, ROUNDS = 12, 3


def variants(n, k, gen):
    w = torch.randn(n, k, device="cuda", generator=gen) * 0.02
    floor = 2.0 ** -17  # above the window's lowest exponent for randn * 0.02 (max ~ 2^-3)
    lifted = torch.where(w.abs() < floor, torch.full_like(w, floor), w)
    tiny = torch.rand(n, k, device="cuda", generator=gen) < 4.5e-4
    return {"randn": w, "none": lifted, "4x": torch.where(tiny, w * 2.0 ** -12, w)}


def main(argv):
    names = SHAPE_NAMES
    if argv[:1] == ["--shapes"]:
        names, argv = argv[1].split(","), argv[2:]
    tokens = [int(a) for a in argv] or [1, 64, 128, 512, 2048]
    gen = torch.Generator(device="cuda").manual_seed(0)
    totals = {t: {"randn": 0.0, "none": 0.0, "4x": 0.0} for t in tokens}  # the shapes' ms added, per size
    print(f"{'shape':>16} {'tokens':>6} {'kernel':>28} | esc/weight randn none 4x | ms randn none 4x | none/randn 4x/randn")
    for name, (n, k) in zip(SHAPE_NAMES, MODELS["qwen3-8b"][1]):
        if name not in names:
            continue
        sets, esc = {}, {}
        for label, w in variants(n, k, gen).items():
            packed = _gpu.pack(w.to(torch.bfloat16))
            esc[label] = packed.escape_fraction
            sets[label] = [as_loaded(_gpu.DeviceTensor(packed, "cuda")) for _ in range(LAYERS)]
        for t in tokens:
            x = torch.randn(t, k, device="cuda").to(torch.bfloat16)
            y = torch.empty(t, n, device="cuda", dtype=torch.bfloat16)
            ws = torch.empty(sets["randn"][0].workspace_bound(t) or 1, dtype=torch.uint8, device="cuda")
            times = {label: [] for label in sets}
            for _ in range(ROUNDS):
                for label, dts in sets.items():
                    fn = lambda dts=dts: [d.linear(x, out=y, workspace=ws, checked=True) for d in dts]
                    times[label].append(_time_graph(fn))
            ms = {label: statistics.median(v) for label, v in times.items()}
            for label, v in ms.items():
                totals[t][label] += v
            print(f"{name + f' {n}x{k}':>16} {t:>6} {sets['randn'][0].linear_kernel(t):>28} | "
                  f"{esc['randn']:.2e} {esc['none']:.2e} {esc['4x']:.2e} | "
                  f"{ms['randn']:.3f} {ms['none']:.3f} {ms['4x']:.3f} | "
                  f"{ms['none'] / ms['randn']:.3f} {ms['4x'] / ms['randn']:.3f}", flush=True)
        del sets
        torch.cuda.empty_cache()
    for t, ms in totals.items():  # the step's linears (the shapes asked for) together
        print(f"{'all: ' + ','.join(names):>16} {t:>6} {'':>28} | {'':>26} | "
              f"{ms['randn']:.3f} {ms['none']:.3f} {ms['4x']:.3f} | "
              f"{ms['none'] / ms['randn']:.3f} {ms['4x'] / ms['randn']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
