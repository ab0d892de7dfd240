"""Table 3 of BENCHMARKS.md: mixture-of-experts blocks, bf16 vs Glyd, same run, same GPU.

    python -m glyd.gpu.bench_moe [--blocks llama4-scout,qwen3-30b-a3b] [--tokens 1,512] [--json F]

For each block (real sizes, random weights randn * 0.02 in bf16) and token count:
  bf16 under transformers' own implementation of the family, bf16 under the best
  experts implementation transformers offers for it (the fastest of batched_mm /
  grouped_mm for decorated families; Llama 4 offers only its own), Glyd default
  (grouped kernel, decode-all or per routed expert) and Glyd exact=True, plus the experts' GB.

Timing: CUDA events around CUDA graph replays (median of REPS) where the
implementation can be captured; implementations that synchronize with the host
to route (transformers' eager loops, Glyd's routed path: the per-expert
counts) are timed eagerly, CUDA events around each call, median of REPS, and
the table says so ("eager"). Their time then includes launch gaps. Glyd's
grouped-kernel and decode-all paths never wait for the host: graph replays.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import platform
import sys

REPS = 20
WARMUP = 3

BLOCKS = {
    # name: (family, hidden, expert intermediate, experts, top-k)
    "llama4-scout": ("llama4", 5120, 8192, 16, 1),
    "qwen3-30b-a3b": ("qwen3", 2048, 768, 128, 8),
    "mixtral-8x7b": ("mixtral", 4096, 14336, 8, 2),
    "gpt-oss-20b": ("gpt_oss", 2880, 2880, 32, 4),  # experts stored transposed, gate/up interleaved, biases
    # with shared experts beside the routed ones (glyd.transformers.gpu_shared):
    "qwen1.5-moe-a2.7b": ("qwen2_moe", 2048, 1408, 60, 4),  # a shared expert of 4 x 1408
    "moonlight-16b-a3b": ("deepseek_v3", 2048, 1408, 64, 6),  # 2 shared experts, one routing group
}


def make_block(name: str, seed: int = 0, device="cuda"):
    """A MoE block of `name` with random bf16 weights (randn * 0.02) on `device`."""
    import torch
    import transformers

    family, hidden, inter, experts, k = BLOCKS[name]
    if family == "llama4":
        from transformers.models.llama4.modeling_llama4 import Llama4TextMoe as cls

        cfg = transformers.Llama4TextConfig(hidden_size=hidden, intermediate_size=inter, intermediate_size_mlp=2 * inter,
                                            num_local_experts=experts, num_experts_per_tok=k)
    elif family == "qwen3":
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock as cls

        cfg = transformers.Qwen3MoeConfig(hidden_size=hidden, moe_intermediate_size=inter, num_experts=experts,
                                          num_experts_per_tok=k, norm_topk_prob=True)
    elif family == "qwen2_moe":
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock as cls

        cfg = transformers.Qwen2MoeConfig(hidden_size=hidden, moe_intermediate_size=inter,
                                          shared_expert_intermediate_size=4 * inter, num_experts=experts,
                                          num_experts_per_tok=k)
    elif family == "deepseek_v3":
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE as cls

        cfg = transformers.DeepseekV3Config(hidden_size=hidden, moe_intermediate_size=inter, n_routed_experts=experts,
                                            num_experts_per_tok=k, n_shared_experts=2, n_group=1, topk_group=1)
    elif family == "gpt_oss":
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP as cls

        cfg = transformers.GptOssConfig(hidden_size=hidden, intermediate_size=inter, num_local_experts=experts,
                                        num_experts_per_tok=k)
    else:
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock as cls

        cfg = transformers.MixtralConfig(hidden_size=hidden, intermediate_size=inter, num_local_experts=experts,
                                         num_experts_per_tok=k)
    with torch.device(device):
        block = cls(cfg)
    block = block.to(torch.bfloat16).eval()
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g, device=device, dtype=torch.bfloat16) * 0.02)
    block.glyd_family = family
    return block


def set_impl(block, impl) -> bool:
    """Select transformers' experts implementation of a block; False if it offers none."""
    cfg = getattr(block.experts, "config", None)
    if cfg is None or not hasattr(cfg, "_experts_implementation"):
        return impl in (None, "eager")
    cfg._experts_implementation = impl or "eager"
    return True


def impls(block):
    """(own, [other implementations]) transformers offers for this block."""
    if getattr(block.experts, "config", None) is None:  # not decorated (llama4): its own forward only
        return None, []
    return "eager", ["batched_mm", "grouped_mm"]


def run(block, x):
    out = block(x)
    return out[0] if isinstance(out, tuple) else out


def time_graph(fn):
    from .bench import _time_graph

    return _time_graph(fn, reps=REPS, warmup=WARMUP)


def time_eager(fn):
    from .bench import _time_eager

    return _time_eager(fn, reps=REPS, warmup=WARMUP)


def timed(fn, graph: bool):
    import torch

    if graph:
        try:
            return time_graph(fn), "graph"
        except Exception as e:  # not capturable after all: say so, time it eagerly
            torch.cuda.synchronize()
            print(f"  (graph capture failed: {type(e).__name__}: {str(e)[:120]}; timed eagerly)", file=sys.stderr)
    return time_eager(fn), "eager"


def bench_block(name, tokens, layout="fixed12", seed=0, device=None):
    import torch

    from ..transformers import gpu_experts
    from ..transformers.modules import set_exact

    dev = torch.device(device or "cuda:0")
    ref = make_block(name, seed, dev)
    own, others = impls(ref)
    glyd_block = gpu_experts.pack_module(copy.deepcopy(ref), layout=layout)
    ebf16, epacked = gpu_experts.packed_bytes(glyd_block)
    rows = []
    for t in tokens:
        gx = torch.Generator(device=dev).manual_seed(1000 + t)
        x = torch.randn(1, t, BLOCKS[name][1], generator=gx, device=dev, dtype=torch.bfloat16)
        res = {"block": name, "tokens": t, "layout": layout, "experts_gb_bf16": ebf16 / 1e9,
               "experts_gb_glyd": epacked / 1e9}
        with torch.no_grad():
            set_impl(ref, own)
            res["bf16_own_impl"] = own or "own"
            res["bf16_own_ms"], res["bf16_own_timing"] = timed(lambda: run(ref, x), graph=own is None)
            best = (res["bf16_own_ms"], own or "own", res["bf16_own_timing"])
            for impl in others:
                if impl == "batched_mm" and t > 64:
                    continue  # copies every routed expert per token: ~40 GB at 512 tokens, never the best
                set_impl(ref, impl)
                ms, how = timed(lambda: run(ref, x), graph=True)
                res[f"bf16_{impl}_ms"] = ms
                if ms < best[0]:
                    best = (ms, impl, how)
            res["bf16_best_ms"], res["bf16_best_impl"], res["bf16_best_timing"] = best
            best_impl = None if best[1] == "own" else best[1]
            set_impl(ref, best_impl)
            want = run(ref, x).clone()

            set_impl(glyd_block, best_impl)
            set_exact(glyd_block, False)
            # the path the experts call takes (gpu_experts.path_of, recorded on the call):
            # the no-sync ones (grouped kernel, decode all) can be captured; the routed
            # and all-experts paths wait for the host
            paths = []
            hook = glyd_block.experts.register_forward_hook(
                lambda m, a, kw, o: paths.append(gpu_experts.path_of(m, a, kw)), with_kwargs=True)
            try:
                got = run(glyd_block, x)
            finally:
                hook.remove()
            path = paths[0] if paths else "exact"
            free = path in ("nosync", "grouped-kernel")
            spec = gpu_experts.spec_of(glyd_block.experts)
            how = "decode + mm" if spec.transposed or layout != "fixed12" else "fused per expert"
            res["glyd_path"] = {"nosync": "no-sync: decode all + grouped_mm", "grouped-kernel": "no-sync: grouped kernel",
                                "all-experts": f"all-experts, {how}", "routed": f"routed, {how}"}.get(path, path)
            res["glyd_rel_err"] = ((got.float() - want.float()).norm() / want.float().norm()).item()
            res["glyd_ms"], res["glyd_timing"] = timed(lambda: run(glyd_block, x), graph=free)
            set_exact(glyd_block, True)
            got = run(glyd_block, x)
            res["glyd_exact_equal"] = bool(torch.equal(got, want))
            res["glyd_exact_ms"], res["glyd_exact_timing"] = timed(
                lambda: run(glyd_block, x), graph=free and best[2] == "graph")
            set_exact(glyd_block, False)
        res["ratio_own"] = res["glyd_ms"] / res["bf16_own_ms"]
        res["ratio_best"] = res["glyd_ms"] / res["bf16_best_ms"]
        res["speedup_vs_own"] = res["bf16_own_ms"] / res["glyd_ms"]
        rows.append(res)
        print(_row(res), flush=True)
    del ref, glyd_block
    gpu_experts.clear_scratch()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return rows


HEADER = ("| block | tokens | bf16 own ms | bf16 best ms (impl) | Glyd ms (path) | Glyd exact ms | Glyd/own | Glyd/best "
          "| exact equal | rel err | experts GB bf16 → Glyd |\n|---|---|---|---|---|---|---|---|---|---|---|")


def _row(r):
    def ms(key):
        return f"{r[key + '_ms']:.3f}" + (" (eager)" if r.get(key + "_timing") == "eager" else "")

    return (f"| {r['block']} | {r['tokens']} | {ms('bf16_own')} | {ms('bf16_best')} {r['bf16_best_impl']} | "
            f"{ms('glyd')} ({r['glyd_path']}) | {ms('glyd_exact')} | {r['ratio_own']:.2f} | {r['ratio_best']:.2f} | "
            f"{r['glyd_exact_equal']} | {r['glyd_rel_err']:.2e} | {r['experts_gb_bf16']:.2f} → {r['experts_gb_glyd']:.2f} |")


def environment() -> dict:
    import torch
    import transformers

    from .. import _gpu

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": _gpu.describe(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "command": " ".join(["python -m glyd.gpu.bench_moe"] + sys.argv[1:])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glyd.gpu.bench_moe", description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", default="llama4-scout,qwen3-30b-a3b")
    ap.add_argument("--tokens", default="1,512")
    ap.add_argument("--layout", default="fixed12")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    env = environment()
    print("# MoE blocks (table 3):", env["gpu"], f"torch {env['torch']} (CUDA {env['cuda']}), transformers "
          f"{env['transformers']}, {env['date']}, layout {a.layout}", flush=True)
    print(HEADER, flush=True)
    rows = []
    for name in a.blocks.split(","):
        rows += bench_block(name.strip(), [int(t) for t in a.tokens.split(",")], layout=a.layout)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
