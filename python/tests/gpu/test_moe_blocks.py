"""MoE blocks at real sizes on the GPU (random weights randn * 0.02, one block each):
Llama-4-Scout (hidden 5120, experts of 8192, 16 experts, top-1 + shared expert),
Qwen3-30B-A3B (2048, 128 experts of 768, top-8), Mixtral-8x7B (4096, 8 experts of
14336, top-2), gpt-oss-20b, and two with shared experts: Qwen1.5-MoE-A2.7B (Qwen2-MoE)
and Moonlight-16B-A3B (DeepSeek V3) — glyd.gpu.bench_moe.BLOCKS. Default mode within
MOE_TOL of the bf16 block; exact=True
torch.equal to it under the same experts implementation. Skipped without a GPU.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")
if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

from conftest import graph_replays_match  # noqa: E402
from glyd.errors import InvalidArgumentError  # noqa: E402
from glyd.gpu.bench_moe import BLOCKS, impls, make_block, run, set_impl  # noqa: E402
from glyd.transformers import gpu_experts  # noqa: E402
from glyd.transformers.modules import set_exact  # noqa: E402

DEV = torch.device("cuda", 0)

#: Block output, elementwise: |got - ref| <= MOE_TOL * (|ref| + rms(ref)).
MOE_TOL = 2.0 ** -5


def new_x(x):
    """Inputs of x's shape for graph replays, one per index."""
    return lambda i: torch.randn(x.shape, generator=torch.Generator(device=DEV).manual_seed(i), device=DEV)


def close(got, ref, tol=MOE_TOL):
    got, ref = got.float(), ref.float()
    rms = ref.pow(2).mean().sqrt()
    err = (got - ref).abs()
    bad = err > tol * (ref.abs() + rms)
    assert not bad.any(), f"{int(bad.sum())} of {ref.numel()} differ; max err {err.max():.3g}, rms {rms:.3g}"


@pytest.fixture(scope="module", params=list(BLOCKS))
def blocks(request):
    name = request.param
    ref = make_block(name, seed=7, device=DEV)
    packed = gpu_experts.pack_module(copy.deepcopy(ref))
    yield name, ref, packed
    del ref, packed
    gpu_experts.clear_scratch()
    torch.cuda.empty_cache()


@pytest.mark.parametrize("tokens", [1, 3, 64, 300])
def test_block(blocks, tokens):
    name, ref, packed = blocks
    g = torch.Generator(device=DEV).manual_seed(tokens)
    x = torch.randn(2 if tokens == 300 else 1, tokens, BLOCKS[name][1], generator=g, device=DEV, dtype=torch.bfloat16)
    own, others = impls(ref)
    with torch.no_grad():
        for impl in [own] + [i for i in others if i != "batched_mm" or tokens <= 64]:  # batched_mm copies
            # every routed expert's weights per token: hundreds of GB at 600 tokens
            set_impl(ref, impl)
            set_impl(packed, impl)
            want = run(ref, x)
            set_exact(packed, False)
            got = run(packed, x)
            assert got.shape == want.shape and torch.isfinite(got).all()
            close(got, want)
            set_exact(packed, True)
            got = run(packed, x)
            assert torch.equal(got, want), f"{name} {impl}: exact differs, max {(got.float() - want.float()).abs().max()}"
            set_exact(packed, False)


@pytest.mark.parametrize("tokens", [1, 4])
def test_exact_graph(blocks, tokens):
    """exact=True under CUDA graph capture: every expert decoded on the device
    (the routing cannot be read on the host), the family's own forward under a
    capturable implementation; replays give the bf16 block's bits."""
    name, ref, packed = blocks
    impl = "grouped_mm" if impls(ref)[0] else None  # Llama 4: its own forward
    set_impl(ref, impl)
    set_impl(packed, impl)
    x = torch.randn(1, tokens, BLOCKS[name][1], device=DEV, dtype=torch.bfloat16)
    set_exact(packed, True)
    try:
        with torch.no_grad():
            run(ref, x)
            try:  # the bf16 block itself first: is this implementation capturable here?
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    run(ref, x)
            except RuntimeError as e:
                pytest.skip(f"transformers' {impl} forward of {name} is not capturable: {e}")
            run(packed, x)  # warm-up outside the capture
            graph_replays_match(lambda x: run(packed, x), x, new_x(x), lambda x: run(ref, x),
                                f"{name} exact, against the bf16 block")
    finally:
        set_exact(packed, False)


def test_validation_refused_under_capture(blocks, monkeypatch):
    """Routing validation reads the routing on the host: during a capture it
    raises a clear error instead of failing the capture; the block still works."""
    name, ref, packed = blocks
    if not impls(ref)[0]:
        pytest.skip("Llama 4's exact path reads no routing indices")
    set_impl(ref, "grouped_mm")
    set_impl(packed, "grouped_mm")
    set_exact(packed, True)
    x = torch.randn(1, 1, BLOCKS[name][1], device=DEV, dtype=torch.bfloat16)
    try:
        with torch.no_grad():
            monkeypatch.setenv("GLYD_VALIDATE", "1")
            run(packed, x)  # eager: validated
            torch.cuda.synchronize()
            with pytest.raises(InvalidArgumentError, match="capture"):
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    run(packed, x)
            torch.cuda.synchronize()
            monkeypatch.delenv("GLYD_VALIDATE")
            assert torch.equal(run(packed, x), run(ref, x))
    finally:
        set_exact(packed, False)


def test_block_sizes(blocks):
    name, ref, packed = blocks
    orig, small = gpu_experts.packed_bytes(packed)
    want = sum(p.numel() * 2 for n, p in ref.named_parameters()
               if n.startswith("experts.") and not n.endswith("_bias"))  # gpt-oss's biases stay raw
    assert orig == want
    assert small < 0.78 * orig  # fixed12: 12 bits + escapes + per-group metadata


@pytest.mark.parametrize("tokens", [1, 4, 64, 256])
def test_decode_step_graph(blocks, tokens, monkeypatch):
    """At decode sizes the default path is the grouped kernel (Llama 4's
    re-laid experts included), for a Llama 4 prompt past the switch (here
    moved to 128 tokens) decode-all + grouped_mm over the gathered rows: no
    host synchronization, so a CUDA graph of the block replays new tokens (new
    routing) with the bits of an eager call."""
    monkeypatch.setenv("GLYD_MOE_ALL_EXPERTS_GROUPED_TOKENS", "128")
    name, ref, packed = blocks
    set_impl(packed, impls(ref)[0])
    set_exact(packed, False)
    x = torch.randn(1, tokens, BLOCKS[name][1], device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        run(packed, x)  # warm-up: experts tables are built outside the capture
        calls = []
        hook = packed.experts.register_forward_hook(
            lambda m, a, kw, o: calls.append(gpu_experts.path_of(m, a, kw)), with_kwargs=True)
        run(packed, x)
        hook.remove()
        prompt = name == "llama4-scout" and tokens > 128
        assert calls == ["nosync" if prompt else "grouped-kernel"]

        def eager(x):
            got = run(packed, x)
            close(got, run(ref, x))
            return got

        graph_replays_match(lambda x: run(packed, x), x, new_x(x), eager, f"{name}, against an eager call")
