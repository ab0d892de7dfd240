"""What Glyd packs in a transformers model, decided by weight layout.

Packed (lossless, so packing never changes a result; the choice is about size):

* the weight of every ``nn.Linear`` (and subclass) and of GPT-2's ``Conv1D``
  in bf16/fp16 — one group;
* every expert weight, in any experts module (a module of the model's own code
  whose class name contains "Expert"): 3-D parameters ``[E, ...]`` are packed
  with one group per expert (E groups, format glyd-v2) whatever the order of
  the other axes. This covers, by layout:

  ============================  =====================================================
  layout                        families (transformers 5.17)
  ============================  =====================================================
  fused 3-D ``[E,2I,H]/[E,H,I]``  the ~55 ``@use_experts_implementation`` families
                                (mixtral, qwen*_moe, deepseek_v2/v3, olmoe, glm4_moe,
                                granitemoe*, jamba, minimax, phimoe, ...), Step 3.7
  no gate ``up_proj [E,I,H]``     nemotron_h
  transposed+interleaved+bias   gpt-oss (biases ``[E,2I]``/``[E,H]`` stay raw)
  transposed, all experts       llama4 (``[E,H,2I]``/``[E,I,H]``)
  ``E+Z`` rows                    longcat_flash (``gate_up_proj [E+Z,...]``)
  parallel experts              jetmoe (``input_linear/output_linear.weight``, also
                                the attention experts of ``JetMoeMoA``)
  grouped GEMM ``fc1/fc2``        aria (``weight [E,in,out]``)
  2-D stacked ``[E*I, H]``        dbrx (``w1, v1, w2``: E groups of I rows)
  per-expert nn.Linear          switch_transformers, nllb_moe (packed as Linears)
  ============================  =====================================================

Left unpacked (stored as they are):

* every tied weight: tied tensors must stay one tensor. The one exception is
  an output embedding (``lm_head``) tied to a plain ``nn.Embedding``: the table
  is packed once, as the embedding, and ``lm_head`` shares its planes at load.
  An untied ``lm_head`` is packed like any Linear;
* routers (modules whose path contains "router", ``...gate`` Linears of MoE
  blocks, ``shared_expert_gate``): tiny, and read directly by routing code;
* norms, biases, convolutions, scales, buffers, fp32 weights, and subclasses
  of nn.Embedding (Gemma's scaled word embeddings: their buffers are set by
  transformers' weight init, which packed modules skip). An untied
  ``nn.Embedding`` is packed: a lookup decodes only the rows it reads;
* anything in ``modules_to_not_convert``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

PACKABLE_DTYPES = (torch.bfloat16, torch.float16)

_ROUTER_LEAVES = {"gate", "router", "shared_expert_gate", "classifier", "wg"}


@dataclass(frozen=True)
class PackItem:
    module: str      # module path
    attr: str        # parameter name in that module
    groups: int      # 1, or the number of experts
    experts: bool    # the module is an experts module
    layout: str      # what kind of weight, for logs and docs ("linear", "experts-3d", ...)


def is_experts_module(m: nn.Module) -> bool:
    cls = type(m)
    return (not cls.__module__.startswith("torch.")) and "expert" in cls.__name__.lower() and not isinstance(m, nn.Linear)


def _num_experts(m: nn.Module, parent_cfg=None):
    for a in ("num_experts", "moe_num_experts", "num_local_experts", "n_routed_experts"):
        v = getattr(m, a, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def is_router(name: str, m: nn.Module) -> bool:
    parts = name.split(".")
    if any("router" in p for p in parts):
        return True
    if "Router" in type(m).__name__ or "Gate" in type(m).__name__:
        return True
    return parts[-1] in _ROUTER_LEAVES and parts[-2:-1] != ["self_attn"]


def tied_table(model: nn.Module):
    """The path of the input embedding when the model's only tie is its output
    embedding (an nn.Linear) to that input embedding (a plain nn.Embedding of
    the same shape): the table is packed once, as the embedding, and the
    output embedding shares its planes at load (glyd.transformers.quantizer).
    None otherwise (other ties stay raw, one tensor each)."""
    try:
        tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    except Exception:
        return None
    if len(tied) != 1 or type(out) is not nn.Linear or type(inp) is not nn.Embedding:
        return None
    (tgt, src), = tied.items()
    names = {id(m): n for n, m in model.named_modules()}
    o, i = names.get(id(out)), names.get(id(inp))
    if tgt != f"{o}.weight" or src != f"{i}.weight" or tuple(out.weight.shape) != tuple(inp.weight.shape):
        return None
    return i


def default_skips(model: nn.Module) -> set:
    """Modules never packed, as module paths: those of tied weights (tied
    tensors stay one tensor), except the input embedding of a tied output
    embedding (tied_table: the table is packed once and shared). An untied
    output embedding (lm_head) is an ordinary Linear and is packed: lossless,
    so nothing of transformers' reason for keeping it out of quantization
    applies, and at one token it is the largest matrix a step reads."""
    skips = set()
    try:
        tied = getattr(model, "all_tied_weights_keys", None) or {}
        for k, v in tied.items():
            skips.add(k.rsplit(".", 1)[0])
            skips.add(v.rsplit(".", 1)[0])
    except Exception:
        pass
    try:
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    except Exception:
        out = inp = None
    w_out, w_in = getattr(out, "weight", None), getattr(inp, "weight", None)
    if w_out is not None and w_in is not None and w_out is w_in:  # tied without saying so in the config
        for name, m in model.named_modules():
            if m is out:
                skips.add(name)
    table = tied_table(model)
    if table is not None:
        skips.discard(table)
    return skips


def _skipped(name: str, skips) -> bool:
    """True when a skip entry names this module or one of its parents, as whole
    dotted components anywhere in the path ("lm_head", "self_attn", "layers.0.mlp")."""
    dotted = f".{name}."
    return any(f".{s.strip('.')}." in dotted for s in skips if s)


def pack_plan(model: nn.Module, modules_to_not_convert=None) -> list:
    """The list of PackItem to pack, in module order."""
    from .modules import GlydModule

    try:
        from transformers.pytorch_utils import Conv1D  # GPT-2's linear layer, weight [in, out]
    except ImportError:  # pragma: no cover
        Conv1D = nn.Linear
    skips = default_skips(model) | set(modules_to_not_convert or ())
    items = []
    for name, m in model.named_modules():
        if not name or _skipped(name, skips) or isinstance(m, GlydModule):
            continue
        if isinstance(m, (nn.Linear, Conv1D)):
            w = m._parameters.get("weight")
            if w is None or w.dtype not in PACKABLE_DTYPES or w.ndim != 2 or w.numel() == 0:
                continue
            if is_router(name, m):
                continue
            items.append(PackItem(name, "weight", 1, False, "linear"))
        elif type(m) is nn.Embedding:  # subclasses (scaled word embeddings) keep buffers that
            # transformers' weight init sets, and packed modules skip that init
            w = m._parameters.get("weight")
            if w is None or w.dtype not in PACKABLE_DTYPES or w.ndim != 2 or w.numel() == 0:
                continue
            items.append(PackItem(name, "weight", 1, False, "embedding"))
        elif is_experts_module(m):
            e = _num_experts(m)
            for attr, p in m._parameters.items():
                if p is None or p.dtype not in PACKABLE_DTYPES or "bias" in attr or p.numel() == 0:
                    continue
                if p.ndim == 3 and p.shape[0] > 1:
                    items.append(PackItem(name, attr, int(p.shape[0]), True, "experts-3d"))
                elif p.ndim == 2 and e and p.shape[0] % e == 0 and p.shape[0] > e:
                    items.append(PackItem(name, attr, e, True, "experts-2d"))
    return items
