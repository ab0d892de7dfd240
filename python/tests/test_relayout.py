"""Why re-laying transposed experts on the GPU (gpu_relayout) is exact and keeps
the holder's metadata: fixed12 codes a group by its exponent histogram, so
every expert transposed packs with the same Base, escape count and slice
sizes (checked here with the CPU packer; the GPU tests check the re-laid
bytes). And a holder off the GPU cannot be re-laid."""

from __future__ import annotations

import pytest
import torch

import glyd
from glyd.errors import InvalidArgumentError
from glyd.transformers.modules import PackedWeight


def _experts(E, a, b, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(E, a, b, generator=g) * 0.02
    far = torch.rand(E, a, b, generator=g) < 0.02
    w = torch.where(far, w * torch.exp2(torch.randint(-20, 21, (E, a, b), generator=g).float()), w)
    return w.to(torch.bfloat16)


@pytest.mark.parametrize("shape,seed", [((5, 48, 80), 0), ((3, 17, 31), 1), ((2, 1, 64), 2)])
def test_transposed_experts_pack_with_the_same_groups(shape, seed):
    w = _experts(*shape, seed)
    a = glyd.pack(w, layout="fixed12", groups=shape[0])
    b = glyd.pack(w.transpose(1, 2).contiguous(), layout="fixed12", groups=shape[0])
    assert sum(g.escapes for g in a.groups) > 0
    assert [(g.elements, g.escapes, g.base, g.offsets) for g in a.groups] == \
           [(g.elements, g.escapes, g.base, g.offsets) for g in b.groups]
    assert {k: v.numel() for k, v in a.planes.items()} == {k: v.numel() for k, v in b.planes.items()}


def test_a_cpu_holder_cannot_be_relaid():
    w = _experts(2, 32, 32, 3)
    h = PackedWeight.from_packed("gate_up_proj", glyd.pack(w, layout="fixed12", groups=2))
    h.relay(False)  # already stored: nothing to do
    with pytest.raises((InvalidArgumentError, RuntimeError), match="re-la"):
        h.relay(True)
    assert not h.relaid and h.device_shape == (2, 32, 32)
