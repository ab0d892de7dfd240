"""Shared experts on a side stream (glyd.transformers.gpu_shared), the CPU side:
which blocks get the overlap, the switches, and that copies and CPU forwards
are unaffected. The overlap itself runs on CUDA: tests/gpu/test_shared_stream.py."""

from __future__ import annotations

import copy

import pytest
import torch

from glyd.transformers import gpu_experts, gpu_shared

from conftest import make_model, model_inputs

#: family -> the blocks whose shared expert sits beside packed experts
WITH_SHARED = {"llama4_text": "feed_forward", "qwen2_moe": "mlp", "deepseek_v3": "mlp", "qwen3_next": "mlp"}


def _packed(model_type):
    return gpu_experts.pack_module(make_model(model_type))


@pytest.mark.parametrize("model_type", sorted(WITH_SHARED))
def test_blocks_with_a_shared_expert_get_it(model_type):
    m = _packed(model_type)
    names = gpu_shared.overlapped_blocks(m)
    assert names and all(n.endswith("." + WITH_SHARED[model_type]) for n in names)
    assert gpu_shared.attach(m) == len(names)  # idempotent


@pytest.mark.parametrize("model_type", ["mixtral", "granitemoehybrid"])
def test_blocks_without_one_do_not(model_type):
    # granitemoehybrid's shared_mlp sits in the decoder layer, beside the attention, not the experts
    assert gpu_shared.overlapped_blocks(_packed(model_type)) == []


def test_switches(monkeypatch):
    m = _packed("qwen2_moe")
    n = len(gpu_shared.overlapped_blocks(m))
    assert gpu_shared.set_overlap(m, False) == n and gpu_shared.overlapped_blocks(m) == []
    gpu_shared.set_overlap(m, True)
    assert len(gpu_shared.overlapped_blocks(m)) == n
    monkeypatch.setenv("GLYD_SHARED_STREAM", "0")
    assert gpu_shared.overlapped_blocks(_packed("qwen2_moe")) == []


def test_cpu_forward_and_deepcopy():
    m = _packed("llama4_text")
    inputs = model_inputs("llama4_text")
    with torch.no_grad():
        a = m(**inputs).logits
    blocks = [b for n, b in m.named_modules() if n in gpu_shared.overlapped_blocks(m)]
    assert all(type(b.shared_expert).__name__ == "Llama4TextMLP" for b in blocks)  # no stand-in left
    c = copy.deepcopy(m)
    assert gpu_shared.overlapped_blocks(c) == gpu_shared.overlapped_blocks(m)
    with torch.no_grad():
        assert torch.equal(c(**inputs).logits, a)
