"""Shared experts on a side stream (glyd.transformers.gpu_shared) on the GPU:
the block's output bit-identical with and without the overlap (same kernels,
another stream), inside a CUDA graph too; the block's own work on a stream
of higher priority; a block that calls its shared expert
with another input than its own gets the right output and runs it in line from
then on. Skipped without a GPU."""

from __future__ import annotations

import types

import pytest
import torch

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")
if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

from glyd.transformers import gpu_experts, gpu_shared  # noqa: E402
from glyd.transformers.modules import set_exact  # noqa: E402

from conftest import make_model, model_inputs  # noqa: E402

DEV = torch.device("cuda", 0)
FAMILIES = ["llama4_text", "qwen2_moe", "deepseek_v3", "qwen3_next"]


def _packed(model_type):
    return gpu_experts.pack_module(make_model(model_type).to(DEV)).eval()


def _logits(model, inputs):
    with torch.no_grad():
        out = model(**inputs).logits
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("model_type", FAMILIES)
def test_same_bits_with_and_without(model_type):
    m = _packed(model_type)
    inputs = {k: v.to(DEV) for k, v in model_inputs(model_type).items()}
    blocks = gpu_shared.overlapped_blocks(m)
    assert blocks
    on = _logits(m, inputs)
    assert gpu_shared.overlapped_blocks(m) == blocks  # every block took its shared expert's output
    gpu_shared.set_overlap(m, False)
    assert torch.equal(_logits(m, inputs), on)
    gpu_shared.set_overlap(m, True)
    set_exact(m, True)  # exact keeps the single stream; the overlap stays installed
    _logits(m, inputs)
    assert gpu_shared.overlapped_blocks(m) == blocks


def _block(m):
    name = gpu_shared.overlapped_blocks(m)[0]
    return m.get_submodule(name)


def _experts_stream(blk, tokens):
    """One call of blk on `tokens` random rows: its output and the stream its
    experts ran on."""
    seen = []
    hook = blk.experts.register_forward_pre_hook(lambda mod, args: seen.append(torch.cuda.current_stream(DEV)))
    x = torch.randn(1, tokens, blk.shared_expert.gate_proj.in_features, device=DEV, dtype=torch.bfloat16)
    try:
        with torch.no_grad():
            out = blk(x)[0]
    finally:
        hook.remove()
    assert seen
    return x, out, seen[0]


def test_block_body_on_a_high_priority_stream():
    """The block's own work (its experts here) runs on a stream of higher
    priority than the caller's; the caller's stream is current again after."""
    blk = _block(_packed("llama4_text"))
    caller = torch.cuda.current_stream(DEV)
    _, _, body = _experts_stream(blk, 3)
    assert body != caller and body.priority < caller.priority
    assert torch.cuda.current_stream(DEV) == caller


@pytest.mark.parametrize("tokens", [gpu_shared.OVERLAP_ROWS, gpu_shared.OVERLAP_ROWS + 1])
def test_overlap_up_to_its_rows(tokens):
    """Block calls of more than OVERLAP_ROWS rows run the shared expert in
    line, on the caller's stream, with the same output; the overlap stays on
    for smaller calls."""
    blk = _block(_packed("llama4_text"))
    caller = torch.cuda.current_stream(DEV)
    x, got, stream = _experts_stream(blk, tokens)
    with torch.no_grad():
        gpu_shared.set_overlap(blk, False)
        want = blk(x)[0]
        gpu_shared.set_overlap(blk, True)
    torch.cuda.synchronize()
    assert torch.equal(got, want)
    assert (stream == caller) == (tokens > gpu_shared.OVERLAP_ROWS)
    assert gpu_shared.overlapped_blocks(blk) == [""]  # still installed and on


@pytest.mark.parametrize("tokens", [1, 7])
def test_graph_replay(tokens):
    blk = _block(_packed("llama4_text"))
    hidden = blk.shared_expert.gate_proj.in_features
    x = torch.randn(1, tokens, hidden, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        blk(x)  # warm-up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = blk(x)[0]
        for seed in range(3):
            x.copy_(torch.randn(x.shape, generator=torch.Generator(device=DEV).manual_seed(seed), device=DEV))
            graph.replay()
            gpu_shared.set_overlap(blk, False)
            want = blk(x)[0]
            gpu_shared.set_overlap(blk, True)
            torch.cuda.synchronize()
            assert torch.equal(out, want), f"replay {seed} differs from an in-line call"


def test_called_with_another_input():
    m = _packed("llama4_text")
    blk = _block(m)
    x = torch.randn(1, 5, blk.shared_expert.gate_proj.in_features, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        gpu_shared.set_overlap(blk, False)
        want = blk(x)[0]
        gpu_shared.set_overlap(blk, True)
        own = type(blk).forward
        blk.forward = types.MethodType(lambda self, h: own(self, h.clone()), blk)  # the shared expert sees a copy
        got = blk(x)[0]
    torch.cuda.synchronize()
    assert torch.equal(got, want)
    assert type(blk.shared_expert).__name__ == "Llama4TextMLP"
    assert gpu_shared.overlapped_blocks(blk) == []  # in line from now on
