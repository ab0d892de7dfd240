"""`python -m glyd.gpu bench`: Glyd kernels against bf16 (cuBLAS via F.linear),
in the same run, on the same GPU, under CUDA graphs (docs/BENCHMARKS.md).

Tables printed:
  1. all linears of a decode step / prompt (q/k/v merged, gate/up merged),
     every layer with its own weights (far more than L2), bf16 ms, Glyd ms, ratio;
  2. the same per shape (at the token counts asked);
  3. (--sweep) every fused-kernel configuration per token count;
  4. decode throughput, packed -> bf16 in HBM, TB/s of bf16 written.

Weights are random (randn * 0.02 in bf16, whose exponent statistics are close
to trained weights); a few distinct matrices per shape are packed on the CPU
and their planes copied on the GPU so that every layer has its own memory.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys

MODELS = {
    # name: (layers, [(N, K) of qkv, o, gate_up, down])
    "qwen3-8b": (36, [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]),
    "qwen3-32b": (64, [(10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600)]),
}
SHAPE_NAMES = ["qkv", "o", "gate_up", "down"]


def _time_graph(fn, reps=20, warmup=3):
    """Median ms of replaying a CUDA graph of fn()."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del g
    return statistics.median(times)


def build(model, layers, distinct, layout="fixed12"):
    """Per shape: `layers` bf16 weights and DeviceTensors, each in its own memory."""
    import torch

    import glyd
    from .. import _gpu

    dev = torch.device("cuda", 0)
    nl, shapes = MODELS[model]
    layers = layers or nl
    out = []
    for si, (n, k) in enumerate(shapes):
        bases = []
        for d in range(distinct):
            g = torch.Generator().manual_seed(1000 * si + d)
            w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
            bases.append(glyd.pack(w, layout=layout))
        ws, dts = [], []
        gpu_planes = [{name: t.to(dev) for name, t in p.planes.items()} for p in bases]
        for li in range(layers):
            p = bases[li % distinct]
            planes = {name: t.clone() for name, t in gpu_planes[li % distinct].items()}
            dt = _gpu.DeviceTensor(None, dev, layout=p.layout, shape=p.shape, groups=p.groups, planes=planes)
            dts.append(dt)
            ws.append(dt.decode())
        bits = 8 * sum(pp.packed_bytes for pp in bases) / sum(pp.numel for pp in bases)
        out.append(dict(name=SHAPE_NAMES[si], n=n, k=k, w=ws, dt=dts, bits=bits))
    torch.cuda.synchronize()
    return out


def step_fns(sets, tokens, which):
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    xs = {}
    for s in sets:
        if s["k"] not in xs:
            xs[s["k"]] = torch.randn(tokens, s["k"], device=dev).to(torch.bfloat16)
        s["y"] = torch.empty(tokens, s["n"], dtype=torch.bfloat16, device=dev)

    def bf16():
        for li in range(len(sets[0]["w"])):
            for s in sets:
                if which is None or s["name"] == which:
                    torch.matmul(xs[s["k"]], s["w"][li].t(), out=s["y"])

    def glyd_():
        for li in range(len(sets[0]["dt"])):
            for s in sets:
                if which is None or s["name"] == which:
                    s["dt"][li].linear(xs[s["k"]], out=s["y"])

    return bf16, glyd_


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glyd.gpu bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(MODELS))
    ap.add_argument("--tokens", default="1,8,32,64,128,512,2048")
    ap.add_argument("--layers", type=int, default=0, help="layers (default: the model's)")
    ap.add_argument("--distinct", type=int, default=2, help="distinct random matrices per shape")
    ap.add_argument("--per-shape", default="1,64", help="token counts for the per-shape table")
    ap.add_argument("--sweep", default="", help="token counts for the configuration sweep")
    ap.add_argument("--sweep-shapes", default="", help="token counts for a per-shape configuration sweep")
    ap.add_argument("--decode", action="store_true", help="decode throughput table")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args(argv)

    import torch

    from .. import _gpu

    if not torch.cuda.is_available() or not _gpu.available():
        print("no GPU: " + _gpu.describe(), file=sys.stderr)
        return 2
    info = _gpu.device_info(0)
    head = (f"# {info['name']}, driver CUDA {info['driver_version'] // 1000}.{info['driver_version'] % 1000 // 10}, "
            f"torch {torch.__version__} (CUDA {torch.version.cuda}), {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{platform.node()}\n# python -m glyd.gpu bench {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(head)
    results = dict(header=head, step=[], per_shape=[], sweep=[], decode=[])

    sets = build(args.model, args.layers, args.distinct)
    nl = len(sets[0]["w"])
    print(f"# {args.model}: {nl} layers, shapes " + ", ".join(f"{s['name']} {s['n']}x{s['k']}" for s in sets)
          + f"; fixed12 {statistics.mean(s['bits'] for s in sets):.3f} bits/weight on randn*0.02")

    print(f"\n## Linears of a step ({nl} layers x 4), CUDA graphs, median of {args.reps}")
    print(f"| tokens | bf16 ms | glyd ms | glyd/bf16 | kernel (gate_up) |")
    print(f"|---:|---:|---:|---:|---|")
    for t in [int(v) for v in args.tokens.split(",") if v]:
        bf, gl = step_fns(sets, t, None)
        tb, tg = _time_graph(bf, args.reps), _time_graph(gl, args.reps)
        kname = sets[2]["dt"][0].linear_kernel(t)
        results["step"].append(dict(tokens=t, bf16_ms=tb, glyd_ms=tg, ratio=tg / tb, kernel=kname))
        print(f"| {t} | {tb:.3f} | {tg:.3f} | {tg / tb:.3f} | {kname} |", flush=True)

    if args.per_shape:
        print(f"\n## Per shape ({nl} copies each)")
        print("| tokens | shape | bf16 ms | glyd ms | glyd/bf16 | bf16 TB/s | glyd TB/s (packed bytes) |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for t in [int(v) for v in args.per_shape.split(",") if v]:
            for s in sets:
                bf, gl = step_fns(sets, t, s["name"])
                tb, tg = _time_graph(bf, args.reps), _time_graph(gl, args.reps)
                wb = nl * s["n"] * s["k"] * 2
                pb = nl * sum(v.numel() for v in s["dt"][0].planes.values())
                results["per_shape"].append(dict(tokens=t, shape=s["name"], bf16_ms=tb, glyd_ms=tg))
                print(f"| {t} | {s['name']} {s['n']}x{s['k']} | {tb:.3f} | {tg:.3f} | {tg / tb:.3f} | "
                      f"{wb / tb / 1e9:.2f} | {pb / tg / 1e9:.2f} |", flush=True)

    if args.sweep:
        from .._gpu import force_kernel

        names = [n for n in _kernel_names()]
        print("\n## Configuration sweep (all linears of a step, glyd ms)")
        print("| tokens | " + " | ".join(n.replace("glyd_lin_f12_", "").replace("glyd_lin_f12a_", "a:") for n in names) + " |")
        print("|---:|" + "---:|" * len(names))
        for t in [int(v) for v in args.sweep.split(",") if v]:
            row = []
            for n in names:
                force_kernel(n)
                _, gl = step_fns(sets, t, None)
                try:
                    row.append(_time_graph(gl, max(5, args.reps // 2)))
                except Exception as e:  # a configuration may not fit (shared memory)
                    row.append(float("nan"))
                    print(f"# {n}: {e}", file=sys.stderr)
                finally:
                    force_kernel(None)
            results["sweep"].append(dict(tokens=t, ms=dict(zip(names, row))))
            print(f"| {t} | " + " | ".join(f"{v:.3f}" for v in row) + " |", flush=True)

    if args.sweep_shapes:
        from .._gpu import force_kernel

        names = _kernel_names()
        print("\n## Per-shape configuration sweep (glyd ms for all layers of one shape; best marked *)")
        print("| tokens | shape | bf16 ms | " + " | ".join(n.replace("glyd_lin_f12_", "").replace("glyd_lin_f12a_", "a:") for n in names) + " |")
        print("|---:|---|---:|" + "---:|" * len(names))
        for t in [int(v) for v in args.sweep_shapes.split(",") if v]:
            for sh in sets:
                bf, _ = step_fns(sets, t, sh["name"])
                tb = _time_graph(bf, max(5, args.reps // 2))
                row = []
                for n in names:
                    force_kernel(n)
                    try:
                        _, gl = step_fns(sets, t, sh["name"])
                        row.append(_time_graph(gl, max(5, args.reps // 2)))
                    except Exception as e:
                        row.append(float("nan"))
                        print(f"# {n}: {e}", file=sys.stderr)
                    finally:
                        force_kernel(None)
                best = min(range(len(row)), key=lambda i: row[i] if row[i] == row[i] else 1e9)
                results.setdefault("sweep_shapes", []).append(dict(tokens=t, shape=sh["name"], bf16_ms=tb, ms=dict(zip(names, row))))
                print(f"| {t} | {sh['name']} | {tb:.3f} | " + " | ".join(f"{v:.3f}{'*' if i == best else ''}" for i, v in enumerate(row)) + " |", flush=True)

    if args.decode:
        print("\n## Decode packed -> bf16 in HBM (all layers of a shape, CUDA graph)")
        print("| layout | shape | bits/weight | ms | TB/s bf16 written | TB/s read+written |")
        print("|---|---|---:|---:|---:|---:|")
        for layout in ("fixed12", "smallest"):
            dsets = sets if layout == "fixed12" else build(args.model, min(nl, 8), 1, layout="smallest")
            for s in dsets:
                if s["name"] not in ("gate_up", "o"):
                    continue
                outs = [torch.empty(s["n"], s["k"], dtype=torch.bfloat16, device="cuda") for _ in range(2)]

                def dec(s=s, outs=outs):
                    for li, dt in enumerate(s["dt"]):
                        dt.decode(out=outs[li % 2])

                ms = _time_graph(dec, args.reps)
                nw = len(s["dt"]) * s["n"] * s["k"]
                rb = len(s["dt"]) * sum(v.numel() for v in s["dt"][0].planes.values())
                results["decode"].append(dict(layout=layout, shape=s["name"], ms=ms, tbs=2 * nw / ms / 1e9))
                print(f"| {layout} | {s['name']} {s['n']}x{s['k']} x{len(s['dt'])} | {s['bits']:.3f} | {ms:.3f} | "
                      f"{2 * nw / ms / 1e9:.3f} | {(2 * nw + rb) / ms / 1e9:.3f} |", flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def _kernel_names():
    """The fused configurations compiled into this build (plus the generic kernel)."""
    names = ["m1n1w1k8u2", "m1n1w1k8u1", "m1n2w1k8u2", "m1n4w2k4u1", "m1n8w4k2u1", "m1n8w8k1u1",
             "m1n16w8k1u1", "m2n8w8k1u1", "m2n16w4k1u1", "m1n2w1k8u1", "m1n2w2k4u1", "m1n8w2k4u1",
             "m2n4w1k8u1", "m2n8w2k4u1", "m1n16w2k4u1"]
    anames = ["m1n1k8s4", "m1n1k8s8", "m1n2k8s4", "m2n1k8s4", "m1n1k4s8"]
    return ["glyd_lin_f12_" + n for n in names] + ["glyd_lin_f12a_" + n for n in anames]


if __name__ == "__main__":
    sys.exit(main())
