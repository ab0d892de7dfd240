"""Llama 4's MoE block with top-1 routing on the GPU (gpu_experts._top1_block_forward):
the same bits as the family's own forward over Glyd's experts, eager and replayed
from a CUDA graph, at decode and prompt sizes; the family's forward where the fast
path does not apply (exact=True, hooks on the router, top-2). Skipped without a GPU."""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")
if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

from conftest import graph_replays_match  # noqa: E402
from glyd.gpu import bench_moe  # noqa: E402
from glyd.transformers import gpu_experts  # noqa: E402
from glyd.transformers.modules import set_exact  # noqa: E402

DEV = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def blocks():
    bench_moe.BLOCKS["llama4-test"] = ("llama4", 512, 1024, 16, 1)
    try:
        ref = bench_moe.make_block("llama4-test", seed=3)
    finally:
        del bench_moe.BLOCKS["llama4-test"]
    return ref, gpu_experts.pack_module(copy.deepcopy(ref))


def _x(tokens, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(1, tokens, 512, generator=g, device=DEV, dtype=torch.bfloat16)


def _family(blk, x):
    return type(blk).forward(blk, x)


@pytest.mark.parametrize("tokens", [1, 3, 64, 300])
def test_same_bits_as_the_family_forward(blocks, tokens):
    ref, blk = blocks
    assert blk.forward.fn is gpu_experts._top1_block_forward
    x = _x(tokens)
    assert gpu_experts._top1_block_ok(blk, x.reshape(-1, 512))
    with torch.no_grad():
        out, logits = blk(x)
        want_out, want_logits = _family(blk, x)
        bf16_out, _ = ref(x)
    torch.cuda.synchronize()
    assert torch.equal(logits, want_logits)
    assert torch.equal(out, want_out)
    assert torch.allclose(out.float(), bf16_out.float(), atol=2e-2, rtol=2e-2)


def test_graph_replay(blocks):
    _, blk = blocks
    x = _x(2)
    with torch.no_grad():
        blk(x)
        graph_replays_match(lambda x: blk(x)[0], x, lambda i: _x(2, i + 1), lambda x: _family(blk, x)[0],
                            "against the family's forward")


def test_exact_graph_replay(blocks):
    """exact=True runs the family's own forward; under capture every expert is
    decoded on the device (the routing cannot be read on the host), so a graph
    of the exact block replays new tokens with the bf16 block's bits."""
    ref, blk = blocks
    exact = copy.deepcopy(blk)
    set_exact(exact, True)
    x = _x(2)
    with torch.no_grad():
        exact(x)  # warm-up outside the capture
        graph_replays_match(lambda x: exact(x)[0], x, lambda i: _x(2, i + 1), lambda x: ref(x)[0],
                            "exact, against the bf16 block")


def test_family_forward_where_it_does_not_apply(blocks):
    ref, blk = blocks
    x = _x(3).reshape(-1, 512)
    seen = []
    h = blk.router.register_forward_hook(lambda mod, args, out: seen.append(1))
    try:
        assert not gpu_experts._top1_block_ok(blk, x)
        with torch.no_grad():
            blk(x)
        assert seen  # the family's forward ran the router module
    finally:
        h.remove()
    two = copy.deepcopy(blk)
    two.top_k = 2
    assert not gpu_experts._top1_block_ok(two, x)
    fp32_router = copy.deepcopy(blk)
    fp32_router.router.float()  # logits in fp32: the top-1 kernel reads bf16 only
    assert not gpu_experts._top1_block_ok(fp32_router, x)
    exact = copy.deepcopy(blk)
    set_exact(exact, True)
    assert not gpu_experts._top1_block_ok(exact, x)
    with torch.no_grad():
        assert torch.equal(exact(x)[0], ref(x)[0])  # exact: the bf16 block's bits
