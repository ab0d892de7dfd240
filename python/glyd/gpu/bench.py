"""`python -m glyd.gpu bench`: the tables of BENCHMARKS.md, Glyd against bf16
in the same run, on the same GPU, CUDA graphs + CUDA events, median of the replays.

Tables (--tables picks them; default 1,2,4,5,6; --moe adds 3):
  1. linears of a decode step / prompt (q/k/v merged, gate/up merged), every
     layer with its own weights (far more than L2): bf16 ms, Glyd ms, ratio,
     what runs (fused kernel, or from --prompt-rows tokens on the prompt path
     "decode tiles + cuBLAS", one row per --prompt-tile-mb value);
     plus the same per shape (--per-shape) and configuration sweeps (--sweep);
  2. whole decode step of a Qwen3-8B-config model (random weights, real sizes)
     with a static KV cache, one CUDA graph per step: bf16 vs Glyd (the same
     model packed: glyd.save_pretrained + glyd.from_pretrained(device_map="cuda")),
     beside the time of the model's linears alone, and the GPU memory of both;
  3. (--moe) MoE blocks, glyd.gpu.bench_moe;
  4. decode throughput, packed -> bf16 in HBM, TB/s of bf16 written;
  5. checkpoint: safetensors GB, save s, from_pretrained to the GPU s (with and
     without verify=True), bf16 load + packing in memory;
  6. pack throughput: glyd.pack on the CPU (1 worker and all cores), and on the GPU
     when this build has a GPU pack.

Weights are random (randn * 0.02 in bf16, whose exponent statistics are close
to trained weights). Table 1 packs a few distinct matrices per shape on the CPU
and copies their planes on the GPU so that every layer has its own memory.
Every table is printed as markdown under a header naming the GPU, driver,
CUDA, torch, transformers, date and command; all of them again at the end.
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
    # small models, whose shapes the picks were not swept on (o and down: 16-40 tiles of 64 rows)
    "qwen3-0.6b": (28, [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)]),
    "qwen3-1.7b": (28, [(4096, 2048), (2048, 2048), (12288, 2048), (2048, 6144)]),
    "qwen3-4b": (36, [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)]),
    # Llama 3 / 3.1 (the same shapes): shapes beyond those the picks were swept on
    "llama3-8b": (32, [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]),
    "llama3-70b": (80, [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]),
}
SHAPE_NAMES = ["qkv", "o", "gate_up", "down"]


def warm_graph(fn, warmup=3):
    """A CUDA graph of fn(), warmed up: fn() eagerly on a side stream, then
    replays (also the profiling scripts' in python/benchmarks)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    return g


def _time_graph(fn, reps=20, warmup=3):
    """Median ms of replaying a CUDA graph of fn() (warm_graph)."""
    import torch

    g = warm_graph(fn, warmup)
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


def as_loaded(dt):
    """dt with its planes arranged as a loaded model's fused weights are: tiled
    (glyd._gpu.DeviceTensor.tile), unless GLYD_TILED=0 or dt has no tiled
    arrangement (not fixed12, rows % 16, K % 64)."""
    from .. import _gpu
    from ..errors import UnsupportedError

    if not _gpu.TILED or dt.layout != "fixed12":
        return dt
    try:
        return dt.tile()
    except UnsupportedError:
        return dt


def build(model, layers, distinct, layout="fixed12", shapes=None):
    """Per shape: `layers` bf16 weights and DeviceTensors, each in its own memory,
    their planes tiled as a loaded model's are (glyd._gpu.TILED, GLYD_TILED).
    shapes: [(N, K), ...] instead of the model's (its layer count stays the default)."""
    import torch

    import glyd
    from .. import _gpu

    dev = torch.device("cuda", 0)
    nl, model_shapes = MODELS[model]
    shapes = shapes or model_shapes
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
            dt = as_loaded(_gpu.DeviceTensor(None, dev, layout=p.layout, shape=p.shape, groups=p.groups, planes=planes))
            dts.append(dt)
            ws.append(dt.decode())
        bits = 8 * sum(pp.packed_bytes for pp in bases) / sum(pp.numel for pp in bases)
        out.append(dict(name=SHAPE_NAMES[si], n=n, k=k, w=ws, dt=dts, bits=bits))
    torch.cuda.synchronize()
    return out


def step_fns(sets, tokens, which):
    import torch

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



TABLES = (1, 2, 4, 5, 6)
STEP_NOTE = ("transformers' Qwen3 calls q, k, v, gate and up as separate linears; bf16 runs each alone, Glyd "
             "computes q/k/v and gate/up with one launch each (siblings sharing their input, "
             "glyd.transformers.gpu_linear)")


def qwen3_8b_config(layers: int = 36):
    """Qwen3-8B's configuration (36 layers: hidden 4096, MLP 12288, 32 heads, 8 KV heads)."""
    from transformers import Qwen3Config

    return Qwen3Config(hidden_size=4096, intermediate_size=12288, num_hidden_layers=layers, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                       rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False)


def random_model(config, device="cuda", seed=0):
    """A bf16 model of `config` with random weights normal(0, 0.02), built on
    meta then placed on `device` (buffers such as rotary frequencies rebuilt)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    for name, m in list(model.named_modules()):  # to_empty left the non-persistent buffers empty
        if hasattr(m, "inv_freq") and hasattr(m, "config") and name:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, type(m)(config=m.config, device=device))
    model.tie_weights()
    return model.eval()


def model_bytes(model) -> int:
    """Bytes of a model's parameters and buffers (packed planes count as they are stored)."""
    seen, n = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen and t.numel():
            continue
        seen.add(t.data_ptr())
        n += t.numel() * t.element_size()
    return n


# ---- environment and output --------------------------------------------------------------------------

def driver_release() -> str:
    try:
        with open("/proc/driver/nvidia/version") as f:
            for w in f.read().split():
                if w.count(".") >= 1 and w.replace(".", "").isdigit():
                    return w
    except OSError:
        pass
    try:
        import subprocess

        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0]
    except Exception:
        return "?"


def environment(argv) -> dict:
    import torch

    try:
        import transformers

        tv = transformers.__version__
    except ImportError:
        tv = "none"
    from .. import _gpu

    info = _gpu.device_info(0)
    v = info["driver_version"]
    return dict(gpu=f"{info['name']} ({info['multiprocessors']} SMs, {info['total_mem'] / 2**30:.0f} GiB)",
                driver=f"{driver_release()} (CUDA {v // 1000}.{v % 1000 // 10})", cuda=torch.version.cuda,
                torch=torch.__version__, transformers=tv, planes="tiled" if _gpu.TILED else "row-major",
                date=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", host=platform.node(),
                command="python -m glyd.gpu bench " + " ".join(argv))


def header(env: dict) -> str:
    return (f"_{env['gpu']}, driver {env['driver']}, torch {env['torch']} (CUDA {env['cuda']}), transformers "
            f"{env['transformers']}, planes {env.get('planes', 'row-major')} (GLYD_TILED), {env['date']}, "
            f"{env['host']}; `{env['command']}`_")


class Report:
    """Collects the tables; each is printed when done and all again at the end."""

    def __init__(self, env, markdown: str = ""):
        self.env, self.tables, self.results, self.markdown = env, [], {"env": env}, markdown

    def table(self, title: str, columns, rows, notes=()):
        lines = [f"## {title}", header(self.env), ""]
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|")
        lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
        lines += [f"\n{n}" for n in notes]
        text = "\n".join(lines)
        self.tables.append(text)
        print("\n" + text + "\n", flush=True)
        self.save()
        return text

    def save(self):
        """Write the tables so far (a timeout later still leaves them)."""
        if self.markdown:
            with open(self.markdown, "w") as f:
                f.write(self.summary() + "\n")

    def summary(self) -> str:
        return "\n\n".join(["# glyd.gpu bench: all tables"] + self.tables)


def _ms(v):
    return "—" if v is None or v != v else f"{v:.3f}"


def _ratio(a, b):
    return "—" if a is None or b is None or b != b or a != a or b == 0 else f"{a / b:.3f}"


# ---- table 1 (and the per-shape table and sweeps) ------------------------------------------------------

def _kernel_label(dt, tokens):
    """What DeviceTensor.linear runs for `tokens` rows (with the tile rows of the prompt path)."""
    from .. import _gpu

    name = dt.linear_kernel(tokens)
    if name == _gpu.PROMPT_KERNEL:
        name += f" ({dt.tile_rows()}-row tiles)"
    return name


def table1(args, rep):
    from .. import _gpu

    sets = build(args.model, args.layers, args.distinct)
    nl = len(sets[0]["w"])
    bits = statistics.mean(s["bits"] for s in sets)
    tiles = args.prompt_tile_mb or [_gpu.PROMPT_TILE_MB]
    rows, res = [], []
    for t in _ints(args.tokens):
        bf, gl = step_fns(sets, t, None)
        tb = _time_graph(bf, args.reps)
        for i, mb in enumerate(tiles):
            _gpu.set_prompt_tile_mb(mb)
            if i and not sets[2]["dt"][0].prompt_path(t):
                break  # the tile size only matters on the prompt path
            tg = _time_graph(gl, args.reps)
            kname = _kernel_label(sets[2]["dt"][0], t)
            res.append(dict(tokens=t, bf16_ms=tb, glyd_ms=tg, ratio=tg / tb, kernel=kname,
                            prompt_rows=_gpu.prompt_rows(), prompt_tile_mb=mb))
            rows.append((t, _ms(tb), _ms(tg), _ratio(tg, tb), kname))
            print(f"  table 1: {t} tokens {tb:.3f} / {tg:.3f} ms ({kname})", flush=True)
    _gpu.set_prompt_tile_mb(tiles[0])
    rep.results["step"] = res
    shapes = ", ".join(f"{s['name']} {s['n']}x{s['k']}" for s in sets)
    tile = ", ".join(f"{mb:g} MiB" for mb in tiles)
    rep.table(f"Table 1. Linears of a step: {args.model}, {nl} layers x 4 ({shapes}), fixed12",
              ["tokens", "bf16 ms", "Glyd ms", "Glyd/bf16", "kernel (gate_up)"], rows,
              [f"CUDA graph of all {4 * nl} linears, median of {args.reps} replays; every layer its own weights; "
               f"fixed12 {bits:.3f} bits/weight on randn*0.02. Prompt path (decode tiles + cuBLAS) from "
               f"{_gpu.prompt_rows() or 'no'} tokens on, tiles of {tile}. Targets: <= 0.80 at 1-64 tokens, "
               f"<= 0.95 at 128, <= 1.03 at 512 and 2048."])

    if args.per_shape:
        rows, res = [], []
        for t in _ints(args.per_shape):
            for s in sets:
                bf, gl = step_fns(sets, t, s["name"])
                tb, tg = _time_graph(bf, args.reps), _time_graph(gl, args.reps)
                wb = nl * s["n"] * s["k"] * 2
                pb = nl * sum(v.numel() for v in s["dt"][0].planes.values())
                res.append(dict(tokens=t, shape=s["name"], bf16_ms=tb, glyd_ms=tg))
                rows.append((t, f"{s['name']} {s['n']}x{s['k']}", _ms(tb), _ms(tg), _ratio(tg, tb),
                             f"{wb / tb / 1e9:.2f}", f"{pb / tg / 1e9:.2f}"))
        rep.results["per_shape"] = res
        rep.table(f"Table 1b. Per shape ({nl} copies each)",
                  ["tokens", "shape", "bf16 ms", "Glyd ms", "Glyd/bf16", "bf16 TB/s", "Glyd TB/s (packed bytes)"], rows)

    if args.sweep:
        _sweep(args, rep, sets)
    if args.sweep_shapes:
        _sweep_shapes(args, rep, sets)
    return sets


def _sweep(args, rep, sets):
    from .._gpu import force_kernel

    names = _kernel_names(args)
    rows, res = [], []
    for t in _ints(args.sweep):
        row = []
        for n in names:
            force_kernel(n)
            try:
                _, gl = step_fns(sets, t, None)
                row.append(_time_graph(gl, max(5, args.reps // 2)))
            except Exception as e:  # a configuration may not fit (shared memory)
                row.append(float("nan"))
                print(f"# {n}: {e}", file=sys.stderr)
            finally:
                force_kernel(None)
        res.append(dict(tokens=t, ms=dict(zip(names, row))))
        rows.append([t] + [_ms(v) for v in row])
    rep.results["sweep"] = res
    rep.table("Configuration sweep (all linears of a step, Glyd ms)", ["tokens"] + [_short(n) for n in names], rows)


def _sweep_shapes(args, rep, sets):
    from .._gpu import force_kernel

    names = _kernel_names(args)
    rows, res = [], []
    for t in _ints(args.sweep_shapes):
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
            res.append(dict(tokens=t, shape=sh["name"], bf16_ms=tb, ms=dict(zip(names, row))))
            rows.append([t, sh["name"], _ms(tb)] + [_ms(v) + ("*" if i == best else "") for i, v in enumerate(row)])
    rep.results["sweep_shapes"] = res
    rep.table("Per-shape configuration sweep (Glyd ms, all layers of one shape; best *)",
              ["tokens", "shape", "bf16 ms"] + [_short(n) for n in names], rows)


def _short(n):
    return n.replace("glyd_lin_f12_", "").replace("glyd_lin_f12w_", "wg:").replace("glyd_lin_f12p_", "p:")


# ---- table 4 -----------------------------------------------------------------------------------------

def table4(args, rep, sets=None):
    import torch

    nl = args.layers or MODELS[args.model][0]
    rows, res = [], []
    for layout in _strs(args.layouts):
        if layout == "fixed12" and sets is not None:
            dsets = sets
        else:
            dsets = build(args.model, min(nl, args.decode_layers), 1, layout=layout)
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
            res.append(dict(layout=layout, shape=s["name"], ms=ms, tbs=2 * nw / ms / 1e9))
            rows.append((layout, f"{s['name']} {s['n']}x{s['k']} x{len(s['dt'])}", f"{s['bits']:.3f}", _ms(ms),
                         f"{2 * nw / ms / 1e9:.3f}", f"{(2 * nw + rb) / ms / 1e9:.3f}",
                         f"{2 * nw / ms / 1e9 / STREAM_TBS:.2f}"))
        del dsets
        torch.cuda.empty_cache()
    rep.results["decode"] = res
    rep.table("Table 4. Decode packed -> bf16 in HBM (all layers of a shape, one CUDA graph)",
              ["layout", "shape", "bits/weight", "ms", "TB/s bf16 written", "TB/s read+written",
               f"written / {STREAM_TBS} TB/s stream"], rows,
              [f"Target >= 2.5 TB/s of bf16 written. The stream (read+write copy) is {STREAM_TBS} TB/s; "
               f"fixed12 moves 3.5 bytes per weight, so its write-bound ceiling is {STREAM_TBS * 2 / 3.5:.2f} TB/s."])


STREAM_TBS = 4.27
#: Device of the table 2/5 models ("cpu" only in the CPU dry run of the tests).
MODEL_DEVICE = "cuda"


# ---- tables 2 and 5: a Qwen3-8B-config model, saved and loaded ----------------------------------------

def _sync_time(fn):
    import gc
    import time

    import torch

    gc.collect()
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def _dir_gb(path) -> float:
    import os

    n = 0
    for root, _, files in os.walk(path):
        n += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".safetensors"))
    return n / 1e9


class StepRunner:
    """One decode step of a causal LM with a static KV cache: `batch` sequences,
    one new token each at position `ctx`, written to slot `ctx` of the cache
    and attending to slots 0..ctx (random keys/values; the cache has
    `cache_len` slots). Every call is the same step (replays included)."""

    def __init__(self, model, batch, ctx, cache_len, seed=0):
        import torch
        from transformers import StaticCache

        self.model = model
        dev = next(model.parameters()).device
        cfg = model.config
        self.cache = StaticCache(config=cfg, max_cache_len=cache_len)
        g = torch.Generator(device=dev).manual_seed(seed)
        self.ids = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g, device=dev)
        self.pos = torch.full((batch, 1), ctx, dtype=torch.long, device=dev)
        self.cache_pos = torch.tensor([ctx], dtype=torch.long, device=dev)
        self.logits = torch.empty(batch, 1, cfg.vocab_size, dtype=torch.bfloat16, device=dev)
        self.ctx, self.lens = ctx, []
        with torch.no_grad():
            self.step()  # lazy cache allocation happens here, before any capture
        # transformers 5 StaticCache: each layer writes at its device counter `cumulative_length` and
        # advances it; queries attend to slots <= layer 0's counter. Reset them to ctx at every step
        # (two multi-tensor kernels, captured with the step) so that every step and replay is the same.
        self.lens = [c for c in (getattr(layer, "cumulative_length", None) for layer in self.cache.layers)
                     if torch.is_tensor(c) and c.device == dev]
        for i, layer in enumerate(self.cache.layers):  # random keys/values, the same for every model
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if torch.is_tensor(t):
                    gl = torch.Generator(device=dev).manual_seed(seed + 1 + i)
                    t.copy_(torch.randn(t.shape, generator=gl, device=dev, dtype=torch.float32).to(t.dtype))

    def step(self):
        import torch

        with torch.no_grad():
            if self.lens:
                torch._foreach_zero_(self.lens)
                torch._foreach_add_(self.lens, self.ctx)
            out = self.model(input_ids=self.ids, position_ids=self.pos, cache_position=self.cache_pos,
                             past_key_values=self.cache, use_cache=True)
            self.logits.copy_(out.logits[:, -1:, :])


def linears_fn(model, batch, seed=0):
    """A function running every linear module of `model` once (model order) on random
    [batch, 1, in] inputs: the linears' share of a decode step."""
    import torch
    from torch import nn

    dev = next(model.parameters()).device
    mods = [m for _, m in model.named_modules() if isinstance(m, nn.Linear)]
    g = torch.Generator(device=dev).manual_seed(seed)
    xs = []  # one input per module; packed siblings (q/k/v, gate/up) share theirs, as in the step
    by_group = {}
    for m in mods:
        sib = m.__dict__.get("_glyd_siblings")
        x = by_group.get(id(sib)) if sib is not None else None
        if x is None:
            x = torch.randn(batch, 1, m.in_features, generator=g, device=dev).to(torch.bfloat16)
            if sib is not None:
                by_group[id(sib)] = x
        xs.append(x)

    def run():
        with torch.no_grad():
            for m, x in zip(mods, xs):
                m(x)

    return run, len(mods)


def table2(args, rep, bf16, glyd_model):
    import torch

    from ..transformers import gpu_linear

    if bf16 is None or glyd_model is None:
        return
    rows, res = [], []
    for b in _ints(args.step_batches):
        r = dict(batch=b)
        try:
            sb = StepRunner(bf16, b, args.step_ctx, args.step_cache)
            sg = StepRunner(glyd_model, b, args.step_ctx, args.step_cache)
            r["bf16_ms"] = _time_graph(sb.step, args.reps)
            r["glyd_ms"] = _time_graph(sg.step, args.reps)
            ref, got = sb.logits.float(), sg.logits.float()
            r["logits_rel_err"] = ((got - ref).norm() / ref.norm()).item()
            del sb, sg
            # the linears alone with the siblings as the step left them (o_proj out of q/k/v's group)
            lb, nlin = linears_fn(bf16, b)
            lg, _ = linears_fn(glyd_model, b)
            r["bf16_linears_ms"] = _time_graph(lb, args.reps)
            r["glyd_linears_ms"] = _time_graph(lg, args.reps)
            r["linears"] = nlin
            gpu_linear.prepare(glyd_model, siblings=False)  # what one launch for q/k/v and gate/up buys
            try:
                r["glyd_alone_ms"] = _time_graph(StepRunner(glyd_model, b, args.step_ctx, args.step_cache).step,
                                                 args.reps)
            finally:
                gpu_linear.prepare(glyd_model)  # regrouped; the next StepRunner's warm-up settles them again
        except Exception as e:  # report and go on with the other tables
            r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(f"  table 2, batch {b}: {r['error']}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
        res.append(r)
        rows.append(_table2_row(r))
    rep.results["decode_step"] = res
    mb, mg = model_bytes(bf16), model_bytes(glyd_model)
    rep.results["model_gb"] = dict(bf16=mb / 1e9, glyd=mg / 1e9)
    nl = bf16.config.num_hidden_layers
    rep.table(f"Table 2. Whole decode step, Qwen3-8B config ({nl} layers, random weights), static KV cache",
              ["sequences", "bf16 ms", "Glyd ms", "Glyd/bf16", "Glyd ms, each linear alone", "bf16 linears ms (share)",
               "Glyd linears ms (share)", "linears Glyd/bf16", "logits rel. err"], rows,
              [f"One CUDA graph per step (model forward with StaticCache, {args.step_cache} slots, new token at "
               f"position {args.step_ctx}; random keys/values), median of {args.reps} replays. Linears: a graph of "
               f"the model's {res[0].get('linears', '?')} linear modules alone (lm_head included) on "
               f"inputs of the step's shape; share = linears / step. {STEP_NOTE}. Target: <= 0.87 at 1 sequence.",
               f"GPU memory of the models (parameters + buffers): bf16 {mb / 1e9:.2f} GB, Glyd fixed12 "
               f"{mg / 1e9:.2f} GB ({mg / mb:.3f}; norms stay bf16)."])


def _table2_row(r):
    if "error" in r and "bf16_ms" not in r:
        return (r["batch"], "error", r["error"][:120], "", "", "", "", "", "")
    sb = r.get("bf16_linears_ms")
    sg = r.get("glyd_linears_ms")
    share = lambda a, b: "—" if a is None else f"{a:.3f} ({a / b:.0%})"  # noqa: E731
    alone = r.get("glyd_alone_ms")
    alone = "—" if alone is None else f"{alone:.3f} ({alone / r['bf16_ms']:.3f})"
    return (r["batch"], _ms(r["bf16_ms"]), _ms(r["glyd_ms"]), _ratio(r["glyd_ms"], r["bf16_ms"]), alone,
            share(sb, r["bf16_ms"]), share(sg, r["glyd_ms"]), _ratio(sg, sb), f"{r['logits_rel_err']:.2e}")


def checkpoint_tables(args, rep):
    """Table 5 (checkpoint), then table 2 on the models it loaded. Returns nothing;
    frees every model before returning."""
    import shutil
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM

    import glyd
    from ..transformers import gpu_experts

    want5, want2 = 5 in args.tables, 2 in args.tables
    layers = args.ckpt_layers if not want2 else args.step_layers
    if want5 and want2 and args.ckpt_layers != args.step_layers:
        layers = args.step_layers  # one model serves both tables
    cfg = qwen3_8b_config(layers)
    tmp = tempfile.mkdtemp(prefix="glyd-bench-", dir=args.tmp or None)
    res = dict(layers=layers, layout=args.ckpt_layout)
    try:
        model = random_model(cfg, MODEL_DEVICE)
        nparams = sum(p.numel() for p in model.parameters())
        bdir, gdir = f"{tmp}/bf16", f"{tmp}/glyd"
        _, res["bf16_save_s"] = _sync_time(lambda: model.save_pretrained(bdir))
        _, res["glyd_save_s"] = _sync_time(
            lambda: glyd.save_pretrained(model, gdir, layout=args.ckpt_layout, progress=False))
        del model
        torch.cuda.empty_cache()
        res["bf16_gb"], res["glyd_gb"] = _dir_gb(bdir), _dir_gb(gdir)
        bf16, res["bf16_load_s"] = _sync_time(
            lambda: AutoModelForCausalLM.from_pretrained(bdir, dtype=torch.bfloat16, device_map=MODEL_DEVICE))
        gm, res["glyd_load_s"] = _sync_time(lambda: glyd.from_pretrained(gdir, device_map=MODEL_DEVICE))
        bf16.eval()
        gm.eval()
        if want2:
            table2(args, rep, bf16, gm)
        del gm
        torch.cuda.empty_cache()
        if want5:
            gm, res["glyd_load_verify_s"] = _sync_time(
                lambda: glyd.from_pretrained(gdir, device_map=MODEL_DEVICE, verify=True, progress=False))
            del gm
            torch.cuda.empty_cache()
            # the alternative: load bf16, then pack it in memory: on the GPU when this build can
            # (the packed planes of every weight glyd packs), and with the CPU packer (pack_module)
            gpack = gpu_pack_fn()
            if gpack is not None:
                from ..transformers.families import pack_plan

                ws = [bf16.get_submodule(it.module)._parameters[it.attr] for it in pack_plan(bf16)]

                def gpu_pack_all():
                    for w in ws:
                        gpack(w.detach(), layout=args.ckpt_layout)

                try:
                    _, res["gpu_pack_s"] = _sync_time(gpu_pack_all)
                except Exception as e:
                    res["gpu_pack_error"] = f"{type(e).__name__}: {str(e)[:120]}"
                del ws
            _, res["pack_s"] = _sync_time(lambda: gpu_experts.pack_module(bf16, layout=args.ckpt_layout))
        del bf16
        torch.cuda.empty_cache()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not want5:
        return
    rep.results["checkpoint"] = res
    rep.table(f"Table 5. Checkpoint: Qwen3-8B config, {layers} layers ({nparams / 1e9:.2f} B parameters, random "
              f"weights), to the GPU", ["checkpoint", "safetensors GB", "save s", "from_pretrained s",
                                        "from_pretrained(verify=True) s", "bf16 load + pack s", "/ Glyd load s"],
              _table5_rows(res),
              ["Save from the model on the GPU; loads read files just written (in the page cache), "
               "device_map=\"cuda\", synchronized. bf16 load + pack: transformers' from_pretrained of the bf16 "
               "checkpoint plus packing every weight Glyd packs, in memory: with the CPU packer (gpu_experts.pack_module, "
               "all cores, planes then on the GPU) and, when this build has one, with the GPU pack (planes left on "
               "the GPU). Last column: that time / the Glyd load time. Target: Glyd load >= 8x faster than bf16 load "
               "+ pack."])


def _table5_rows(r):
    both = r.get("bf16_load_s", 0) + r.get("pack_s", float("nan"))
    rows = [("bf16, + CPU pack", f"{r['bf16_gb']:.2f}", f"{r['bf16_save_s']:.1f}", f"{r['bf16_load_s']:.2f}", "—",
             f"{both:.2f}", f"{both / r['glyd_load_s']:.1f}x")]
    if "gpu_pack_s" in r:
        g = r["bf16_load_s"] + r["gpu_pack_s"]
        rows.append(("bf16, + GPU pack", "", "", "", "", f"{g:.2f}", f"{g / r['glyd_load_s']:.1f}x"))
    elif "gpu_pack_error" in r:
        rows.append(("bf16, + GPU pack", "", "", "", "", "error", r["gpu_pack_error"]))
    rows.append((f"Glyd {r['layout']}", f"{r['glyd_gb']:.2f}", f"{r['glyd_save_s']:.1f}", f"{r['glyd_load_s']:.2f}",
                 f"{r['glyd_load_verify_s']:.2f}" if "glyd_load_verify_s" in r else "—", "—", "1.0x"))
    return rows


# ---- table 6 -----------------------------------------------------------------------------------------

def gpu_pack_fn():
    """The GPU pack of this build, or None: glyd._gpu.pack_planes(w, layout=...) (planes stay on
    the GPU), else DeviceTensor.pack / glyd._gpu.pack (whatever this build has)."""
    from .. import _gpu

    for fn in (getattr(_gpu, "pack_planes", None), getattr(_gpu.DeviceTensor, "pack", None),
               getattr(_gpu, "pack", None)):
        if callable(fn):
            return fn
    return None


def table6(args, rep):
    import os
    import time

    import torch

    import glyd

    n, k = (4096, 4096) if args.quick else (4096, 12288)
    g = torch.Generator().manual_seed(6)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    reps = 3
    rows, res = [], []
    for layout in _strs(args.layouts):
        for workers in (1, 0):
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                glyd.pack(w, layout=layout, workers=workers)
                times.append(time.perf_counter() - t)
            s = statistics.median(times)
            gbs = w.numel() * 2 / s / 1e9
            used = 1 if workers == 1 else cores
            res.append(dict(where="cpu", layout=layout, workers=used, gbs=gbs, per_core=gbs / used))
            rows.append((f"CPU, {used} core{'s' if used > 1 else ''}", layout, f"{w.numel() * 2 / 1e6:.0f}",
                         f"{s * 1e3:.1f}", f"{gbs:.2f}", f"{gbs / used:.2f}"))
    fn = gpu_pack_fn()
    notes = [f"glyd.pack of one {n}x{k} bf16 tensor (randn*0.02), median of {reps}; workers=1 and workers=0 (all "
             f"{cores} cores). Targets: CPU >= 1 GB/s of bf16 per core, GPU >= 50 GB/s."]
    if fn is None:
        notes.append("GPU: no GPU pack yet (glyd._gpu has no DeviceTensor.pack / pack).")
    else:
        wg = w.to("cuda")
        for layout in _strs(args.layouts):
            try:
                ms = _time_eager(lambda: fn(wg, layout=layout), args.reps)
                gbs = wg.numel() * 2 / ms / 1e6
                res.append(dict(where="gpu", layout=layout, gbs=gbs))
                rows.append(("GPU", layout, f"{wg.numel() * 2 / 1e6:.0f}", f"{ms:.3f}", f"{gbs:.2f}", "—"))
            except Exception as e:
                rows.append(("GPU", layout, "", "error", f"{type(e).__name__}: {str(e)[:100]}", ""))
        notes.append(f"GPU: {getattr(fn, '__qualname__', fn)} timed with CUDA events around each call (eager: "
                     f"plane sizes are data-dependent, the call synchronizes), median of {args.reps}.")
    rep.results["pack"] = res
    rep.table("Table 6. Pack throughput (GB/s of bf16 in)", ["where", "layout", "MB in", "ms", "GB/s", "GB/s per core"],
              rows, notes)


def _time_eager(fn, reps=20, warmup=3):
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


# ---- table 3 -----------------------------------------------------------------------------------------

def table3(args, rep):
    from . import bench_moe

    rows, res = [], []
    for name in _strs(args.moe_blocks):
        try:
            got = bench_moe.bench_block(name, _ints(args.moe_tokens), layout="fixed12")
        except Exception as e:
            print(f"  table 3, {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            rows.append([name, "error", f"{type(e).__name__}: {str(e)[:100]}"] + [""] * 8)
            continue
        res += got
        rows += [bench_moe._row(r).strip("| ").split(" | ") for r in got]
    rep.results["moe"] = res
    cols = [c.strip() for c in bench_moe.HEADER.split("\n")[0].strip("| ").split(" | ")]
    rep.table("Table 3. MoE blocks (glyd.gpu.bench_moe)", cols, rows,
              ["Targets: Llama-4-Scout block at 1 token >= 8x faster than transformers' bf16; 512 tokens <= 1.0 "
               "of the best bf16 experts implementation."])


# ---- command line ------------------------------------------------------------------------------------

def _ints(s):
    return [int(v) for v in str(s).split(",") if v.strip()]


def _strs(s):
    return [v.strip() for v in str(s).split(",") if v.strip()]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m glyd.gpu bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", default=",".join(map(str, TABLES)), help="tables to print (1,2,4,5,6; 3 = --moe)")
    ap.add_argument("--moe", action="store_true", help="also table 3 (MoE blocks, glyd.gpu.bench_moe)")
    ap.add_argument("--quick", action="store_true",
                    help="short run: fewer token counts, layers and sequences, 15 replays")
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(MODELS), help="table 1 shapes")
    ap.add_argument("--tokens", default=None, help="table 1 token counts (default 1,8,32,64,128,512,2048)")
    ap.add_argument("--layers", type=int, default=0, help="table 1 layers (default: the model's)")
    ap.add_argument("--distinct", type=int, default=2, help="table 1: distinct random matrices per shape")
    ap.add_argument("--per-shape", default=None, help="table 1b token counts (default 1,64; '' for none)")
    ap.add_argument("--prompt-rows", type=int, default=None,
                    help="tokens from which linears take the prompt path, decode tiles + cuBLAS (0 = never; "
                         "default: glyd._gpu.prompt_rows(), i.e. GLYD_PROMPT_ROWS or the GPU's default)")
    ap.add_argument("--prompt-tile-mb", default="",
                    help="table 1: MiB of bf16 weight per prompt-path tile, several separated by commas to sweep "
                         "them (default: glyd._gpu.PROMPT_TILE_MB, i.e. GLYD_PROMPT_TILE_MB or 256)")
    ap.add_argument("--sweep", default="", help="token counts for the configuration sweep")
    ap.add_argument("--sweep-shapes", default="", help="token counts for a per-shape configuration sweep")
    ap.add_argument("--sweep-configs", default="",
                    help="sweeps: only configurations whose name contains one of these strings (comma-separated; "
                         "default all)")
    ap.add_argument("--decode", action="store_true", help="same as adding 4 to --tables (kept for old commands)")
    ap.add_argument("--decode-layers", type=int, default=8, help="table 4: layers per shape for the other layouts")
    ap.add_argument("--layouts", default="fixed12,smallest", help="tables 4 and 6")
    ap.add_argument("--step-batches", default=None, help="table 2 sequences (default 1,8,32,64)")
    ap.add_argument("--step-layers", type=int, default=None, help="table 2/5 model layers (default 36)")
    ap.add_argument("--step-ctx", type=int, default=512, help="table 2: position of the new token")
    ap.add_argument("--step-cache", type=int, default=1024, help="table 2: static cache length")
    ap.add_argument("--ckpt-layers", type=int, default=None, help="table 5 model layers when table 2 is not run")
    ap.add_argument("--ckpt-layout", default="fixed12", choices=["fixed12", "smallest"])
    ap.add_argument("--tmp", default="", help="folder for the table 5 checkpoints (default: the system's)")
    ap.add_argument("--moe-blocks", default="llama4-scout,qwen3-30b-a3b")
    ap.add_argument("--moe-tokens", default=None, help="table 3 token counts (default 1,512)")
    ap.add_argument("--reps", type=int, default=None, help="CUDA graph replays per timing (default 20; >= 15)")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--markdown", default="", help="also write all tables here")
    a = ap.parse_args(argv)
    q = a.quick
    a.tables = sorted(set(_ints(a.tables)) | ({4} if a.decode else set()) | ({3} if a.moe else set()))
    bad = [t for t in a.tables if t not in (1, 2, 3, 4, 5, 6)]
    if bad:
        ap.error(f"unknown table(s) {bad}; tables are 1-6")
    a.tokens = a.tokens if a.tokens is not None else ("1,8,64,512" if q else "1,8,32,64,128,512,2048")
    a.per_shape = a.per_shape if a.per_shape is not None else ("" if q else "1,64")
    a.step_batches = a.step_batches if a.step_batches is not None else ("1,64" if q else "1,8,32,64")
    a.step_layers = a.step_layers if a.step_layers is not None else (8 if q else 36)
    a.ckpt_layers = a.ckpt_layers if a.ckpt_layers is not None else a.step_layers
    a.moe_tokens = a.moe_tokens if a.moe_tokens is not None else ("1" if q else "1,512")
    a.reps = a.reps if a.reps is not None else (15 if q else 20)
    if a.reps < 15:
        ap.error("--reps must be >= 15 (BENCHMARKS.md: median of at least 15 replays)")
    if q and not a.layers:
        a.layers = 12
    if not 0 <= a.step_ctx < a.step_cache:
        ap.error("--step-ctx must be in [0, --step-cache)")
    for name in ("tokens", "per_shape", "step_batches", "moe_tokens"):
        try:
            _ints(getattr(a, name))
        except ValueError:
            ap.error(f"--{name.replace('_', '-')} takes integers separated by commas")
    if a.prompt_rows is not None and a.prompt_rows < 0:
        ap.error("--prompt-rows must be >= 0")
    try:
        a.prompt_tile_mb = [float(v) for v in _strs(a.prompt_tile_mb)]
    except ValueError:
        ap.error("--prompt-tile-mb takes numbers (MiB) separated by commas")
    if any(not v > 0 for v in a.prompt_tile_mb):
        ap.error("--prompt-tile-mb values must be > 0")
    return a


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)

    import torch

    from .. import _gpu

    if not torch.cuda.is_available() or not _gpu.available():
        d = _gpu.describe()
        print(d if d.startswith("no GPU") else "no GPU: torch sees no CUDA device; glyd: " + d, file=sys.stderr)
        return 2
    try:  # the tables are the output: no progress bars or warnings from transformers
        from transformers.utils import logging as tlog

        tlog.set_verbosity_error()
        tlog.disable_progress_bar()
    except ImportError:
        pass
    if args.prompt_rows is not None:
        _gpu.set_prompt_rows(args.prompt_rows)
    if args.prompt_tile_mb:
        _gpu.set_prompt_tile_mb(args.prompt_tile_mb[0])
    rep = Report(environment(argv), args.markdown)
    print("# " + header(rep.env), flush=True)
    sets = None
    # cheap tables first, so that a time limit cuts the optional MoE table, not the others
    steps = [(1, lambda: table1(args, rep)), (4, None), (6, lambda: table6(args, rep)), (2, None), (5, None),
             (3, lambda: table3(args, rep))]
    for t, fn in steps:
        if t not in args.tables:
            continue
        try:
            if t == 1:
                sets = fn()
            elif t == 4:
                table4(args, rep, sets)
                sets = None
                torch.cuda.empty_cache()
            elif t == 2 or (t == 5 and 2 not in args.tables):
                if sets is not None:
                    sets = None
                    torch.cuda.empty_cache()
                checkpoint_tables(args, rep)
            elif t == 5:
                continue  # done with table 2
            else:
                fn()
        except Exception as e:  # one table failing must not hide the others
            import traceback

            traceback.print_exc()
            rep.tables.append(f"## Table {t}: FAILED: {type(e).__name__}: {str(e)[:500]}")
            rep.save()
        sets = None if t != 1 else sets
        torch.cuda.empty_cache()
    summary = rep.summary()
    print("\n\n" + summary, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep.results, f, indent=1, default=str)
    rep.save()
    return 0


def _kernel_names(args):
    """The fused configurations compiled into this build (those --sweep-configs selects)."""
    from .._gpu import linear_configs

    want = _strs(args.sweep_configs)
    return [n for n in linear_configs() if not want or any(w in n for w in want)]


if __name__ == "__main__":
    sys.exit(main())
