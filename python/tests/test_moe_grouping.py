"""The grouping logic of the GPU experts path, checked on the CPU.

glyd.transformers.gpu_experts sorts (token, expert) pairs by expert, runs each
routed expert on its rows, applies the family's gating, routing weights and
sums. On a GPU each expert's matmul is Glyd's fused packed linear; here the
same code runs with experts decoded by libglyd (unpack_group) and torch
matmuls, and must agree with the family's own forward on the same inputs
within MOE_TOL, for every MoE family of the tiny-model recipes.
"""

from __future__ import annotations

import pytest
import torch

import glyd
from glyd.errors import CorruptError, InvalidArgumentError
from glyd.transformers import gpu_experts
from glyd.transformers.modules import GlydExperts, iter_packed_modules

from conftest import RECIPES, model_inputs

MOE_TYPES = sorted(t for t, r in RECIPES.items() if r[3] == "moe")

#: |got - ref| <= MOE_TOL * (|ref| + rms(ref)) elementwise: bf16 rounding of
#: intermediate results in a different order (fp32 sums of the k outputs).
MOE_TOL = 2.0 ** -5


def close(got, ref, tol=MOE_TOL):
    got, ref = got.float(), ref.float()
    rms = ref.pow(2).mean().sqrt()
    err = (got - ref).abs()
    bound = tol * (ref.abs() + rms)
    assert torch.isfinite(got).all() == torch.isfinite(ref).all()
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} of {ref.numel()} differ; max err {err.max():.3g}, rms {rms:.3g}"


def _capture(model, inputs):
    """(module, args, kwargs, output) of every call of a packed experts module (and of
    the patched blocks: DBRX's DbrxExperts, whose routing lives outside the packed
    module, and Llama 4's MoE blocks)."""
    calls, handles = [], []
    targets = [m for _, m in iter_packed_modules(model) if isinstance(m, GlydExperts)]
    targets += [m for _, m in model.named_modules() if "forward" in m.__dict__]
    for m in targets:
        def hook(mod, args, kwargs, out):
            calls.append((mod, args, dict(kwargs), out))
        handles.append(m.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return calls


@pytest.mark.parametrize("nosync", [False, True], ids=["routed", "nosync"])
@pytest.mark.parametrize("model_type", MOE_TYPES)
def test_grouped_path_matches_family_forward(model_type, nosync, packed_dir, monkeypatch):
    model = glyd.from_pretrained(packed_dir(model_type, "fixed12"))
    calls = _capture(model, model_inputs(model_type))
    assert calls, "no experts module ran"
    monkeypatch.setattr(gpu_experts, "_FORCE", True)
    # routed: one host synchronization, then one matmul per routed expert;
    # nosync: every expert decoded, one grouped matmul, no synchronization
    monkeypatch.setenv("GLYD_MOE_NOSYNC_PAIRS", "1" if nosync else "0")
    n = 0
    for mod, args, kwargs, ref in calls:
        if isinstance(mod, GlydExperts) and gpu_experts.spec_of(mod).kind == "glu2d":
            continue  # DBRX's GLU gets decoded weights; its parent is checked instead
        if "forward" not in mod.__dict__:
            assert gpu_experts.path_of(mod, args, kwargs) != "exact", "the fused path does not cover this call"
        with torch.no_grad():
            got = mod.forward(*args, **kwargs) if "forward" in mod.__dict__ else \
                gpu_experts.experts_forward(mod, *args, **kwargs)
        if isinstance(got, tuple):  # Llama 4's block: (output, router logits)
            got, ref = got[0], ref[0]
        assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
        close(got, ref)
        n += 1
    assert n


class _ReferenceExperts:
    """What glyd._gpu.DeviceExperts.linear computes, in torch on the CPU: rows of
    expert e are [offsets[e-1], offsets[e]) (clamped to the rows), each multiplied
    by the decoded expert; rows from offsets[-1] on are NOT written (NaN here, so
    the caller's masking is checked too)."""

    def __init__(self, ew):
        self.ew = ew

    def linear(self, x, offsets, bias=None, out=None):
        ew = self.ew
        assert offsets.dtype == torch.int32 and offsets.numel() == ew.num
        y = torch.full((x.shape[0], ew.out_features), float("nan"), dtype=x.dtype)
        start = 0
        for e, end in enumerate(offsets.tolist()):
            end = min(max(end, 0), x.shape[0])
            if end > start:
                w = ew.decode(e, torch.empty(ew.expert_shape, dtype=ew.holder.dtype)).float()
                y[start:end] = (x[start:end].float() @ (w if ew.transposed else w.T)).to(x.dtype)
            start = max(start, end)
        if out is None:
            return y
        out[:start] = y[:start]  # the rows the kernel writes; the others are left as they were
        return out


@pytest.mark.parametrize("routing", ["torch", "kernels"])
@pytest.mark.parametrize("model_type", MOE_TYPES)
def test_grouped_kernel_path_logic(model_type, routing, packed_dir, monkeypatch):
    """The grouped-kernel path (no host synchronization: Llama 4's rows gathered on
    the device, LongCat's zero experts padded out of the offsets, gpt-oss's expert
    biases per sorted row), run with a torch reference in place of the grouped
    kernel, against the family's own forward. Pairs sorted and summed by torch
    (`routing="torch"`) or by the routing kernels (moe_route / moe_combine, here their
    torch references)."""
    import moe_reference

    from glyd import _gpu

    model = glyd.from_pretrained(packed_dir(model_type, "fixed12"))
    calls = _capture(model, model_inputs(model_type))
    monkeypatch.setattr(gpu_experts, "_FORCE", True)
    monkeypatch.setenv("GLYD_MOE_NOSYNC_PAIRS", "0")
    monkeypatch.setattr(gpu_experts, "grouped_kernel",
                        lambda module, spec, device: spec.kind == "fused" and bool(spec.num_experts))
    monkeypatch.setattr(gpu_experts.ExpertWeights, "grouped", lambda self: _ReferenceExperts(self))
    monkeypatch.setattr(gpu_experts, "_route_on_device", lambda spec, x, pairs: routing == "kernels")
    monkeypatch.setattr(_gpu, "moe_route", moe_reference.moe_route)
    monkeypatch.setattr(_gpu, "moe_combine", moe_reference.moe_combine)
    monkeypatch.setattr(_gpu, "moe_row_experts", moe_reference.moe_row_experts)
    n = 0
    for mod, args, kwargs, ref in calls:
        if not isinstance(mod, GlydExperts) or gpu_experts.spec_of(mod).kind != "fused":
            continue
        assert gpu_experts.path_of(mod, args, kwargs) == "grouped-kernel"
        with torch.no_grad():
            got = gpu_experts.experts_forward(mod, *args, **kwargs)
        assert got.shape == ref.shape and got.dtype == ref.dtype
        close(got, ref)
        n += 1
    if not any(gpu_experts.spec_of(m).kind == "fused" for m, *_ in calls if isinstance(m, GlydExperts)):
        pytest.skip(f"{model_type} has no fused-kind experts")
    assert n


def test_routing_out_of_range_is_an_error(packed_dir, monkeypatch):
    model = glyd.from_pretrained(packed_dir("qwen3_moe", "fixed12"))
    calls = _capture(model, model_inputs("qwen3_moe"))
    mod, args, kwargs, _ = calls[0]
    x, idx, w = args[:3]
    bad = idx.clone()
    bad[0, 0] = 8  # 8 experts: 0..7
    monkeypatch.setattr(gpu_experts, "_FORCE", True)
    monkeypatch.setenv("GLYD_VALIDATE", "1")
    with pytest.raises(InvalidArgumentError, match="outside"):
        gpu_experts.experts_forward(mod, x, bad, w)
    with pytest.raises(InvalidArgumentError, match="outside"):
        gpu_experts.routed_groups(mod, (x, bad, w), {})
    bad[0, 0] = -1
    with pytest.raises(InvalidArgumentError, match="outside"):
        gpu_experts.experts_forward(mod, x, bad, w)
    monkeypatch.delenv("GLYD_VALIDATE")
    mod.glyd_validate = True
    with pytest.raises(InvalidArgumentError):
        gpu_experts.experts_forward(mod, x, bad, w)
    mod.glyd_validate = False
    # without validation an out-of-range index is dropped (an expert-parallel sentinel)
    bad[0, 0] = 8
    out = gpu_experts.experts_forward(mod, x, bad, w)
    assert torch.isfinite(out).all()


def test_exact_routing_under_graph_capture_reads_nothing_on_the_host(packed_dir, monkeypatch):
    # exact=True on a GPU decodes the experts a call reads; during a CUDA graph
    # capture the routing cannot be read on the host, so every expert is named
    # (AllGroups: decoded on the device) instead of a .tolist() of the routing
    model = glyd.from_pretrained(packed_dir("qwen3_moe", "fixed12"))
    mod, args, kwargs, _ = _capture(model, model_inputs("qwen3_moe"))[0]
    assert isinstance(gpu_experts.routed_groups(mod, args, kwargs), list)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: pytest.fail("a host read of the routing"))
    assert isinstance(gpu_experts.routed_groups(mod, args, kwargs), gpu_experts.AllGroups)


def test_expert_shapes_disagreeing_with_config_fail_at_load(packed_dir, tmp_path):
    import json
    import shutil

    src = packed_dir("qwen3_moe", "fixed12")
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["moe_intermediate_size"] = 48  # the packed experts have 32
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CorruptError, match="expects"):
        glyd.from_pretrained(dst)


def test_default_path_outside_no_grad(packed_dir, monkeypatch):
    # gpt-oss adds raw bias parameters (requires_grad) inside the experts: the packed
    # path is inference-only and must not trip autograd (torch.mm(out=...) refuses grads)
    model = glyd.from_pretrained(packed_dir("gpt_oss", "fixed12"))
    calls = [c for c in _capture(model, model_inputs("gpt_oss")) if isinstance(c[0], GlydExperts)]
    mod, args, kwargs, ref = calls[0]
    monkeypatch.setattr(gpu_experts, "_FORCE", True)
    for nosync in ("0", "1"):
        monkeypatch.setenv("GLYD_MOE_NOSYNC_PAIRS", nosync)
        out = gpu_experts.experts_forward(mod, *args, **kwargs)  # no torch.no_grad() here
        close(out, ref)


@pytest.mark.parametrize("layout", ["fixed12", "smallest"])
def test_expert_planes_are_one_group_tensors(layout):
    # the GPU path runs the fused linear on group e as a one-group tensor over
    # slices of the planes: each slice must decode to exactly that expert
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(6, 40, 96, generator=g) * 0.02).to(torch.bfloat16)
    w.view(-1)[::53] = 30.0   # escapes in every expert
    w.view(-1)[7::101] = 1e-39
    p = glyd.pack(w, layout=layout, groups=6)
    for e in range(6):
        g0, sl = gpu_experts.expert_planes(p.groups, p.planes, e)
        q = glyd.PackedTensor.from_planes(layout, torch.bfloat16, (40, 96), [g0],
                                          {k: v.clone() for k, v in sl.items()}, 0)
        assert torch.equal(q.unpack().view(torch.int16), w[e].view(torch.int16))


def test_glyd_experts_implementation_registered(tiny_model):
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    assert "glyd" in ALL_EXPERTS_FUNCTIONS
    import copy

    model = copy.deepcopy(tiny_model("qwen3_moe"))
    inputs = model_inputs("qwen3_moe")
    model.set_experts_implementation("grouped_mm")
    with torch.no_grad():
        a = model(**inputs).logits
    model.set_experts_implementation("glyd")  # unpacked / CPU: transformers' grouped_mm
    with torch.no_grad():
        b = model(**inputs).logits
    assert torch.equal(a, b)


def test_nosync_threshold_by_architecture(monkeypatch):
    # decode-all from 64 pairs per expert, 192 on sm_90 (its grouped kernel has the
    # 128-row wgmma tile); GLYD_MOE_NOSYNC_PAIRS overrides, 0 never
    import types

    spec = types.SimpleNamespace(kind="fused", all_experts=False, num_experts=8)
    dev = torch.device("cuda", 0)
    monkeypatch.delenv("GLYD_MOE_NOSYNC_PAIRS", raising=False)
    for cap, per in (((9, 0), gpu_experts.NOSYNC_PAIRS_PER_EXPERT_SM90), ((8, 0), gpu_experts.NOSYNC_PAIRS_PER_EXPERT),
                     ((10, 0), gpu_experts.NOSYNC_PAIRS_PER_EXPERT)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None, c=cap: c)
        assert not gpu_experts.nosync(spec, per * 8 - 1, dev), cap
        assert gpu_experts.nosync(spec, per * 8, dev), cap
    monkeypatch.setenv("GLYD_MOE_NOSYNC_PAIRS", "0")
    assert not gpu_experts.nosync(spec, 10 ** 6, dev)
    monkeypatch.setenv("GLYD_MOE_NOSYNC_PAIRS", "2")
    assert gpu_experts.nosync(spec, 16, dev)


def test_default_gate_is_act_times_up():
    """transformers' experts decorator gives every decorated family _default_apply_gate
    (act(gate) * up: the Glyd SwiGLU kernel's on a GPU); gpt-oss's clamped gate is its own."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    assert not gpu_experts._own_gate(Qwen3MoeExperts.__new__(Qwen3MoeExperts))
    assert gpu_experts._own_gate(GptOssExperts.__new__(GptOssExperts))


def test_llama4_blocks_get_the_top1_forward():
    """Llama 4's MoE blocks take gpu_experts._top1_block_forward (top-1 routing,
    GPU only); elsewhere it runs the family's forward: on the CPU, and at top-2."""
    from glyd.transformers import modules as _m

    from conftest import make_model

    m = gpu_experts.pack_module(make_model("llama4_text"))
    blocks = [b for b in m.modules() if type(b).__name__ == "Llama4TextMoe"]
    assert blocks and all(b.forward.fn is gpu_experts._top1_block_forward for b in blocks)
    b = blocks[0]
    x = torch.randn(3, b.hidden_dim, dtype=torch.bfloat16)
    assert not gpu_experts._top1_block_ok(b, x)  # CPU, and top-2 in the tiny config
    with torch.no_grad():
        got = b(x)
        want = type(b).forward(b, x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    gpu_experts.attach(m)  # idempotent
    assert isinstance(b.experts, _m.GlydExperts)
