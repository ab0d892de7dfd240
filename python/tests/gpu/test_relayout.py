"""Transposed experts re-laid on the GPU (glyd.transformers.gpu_relayout).

* the re-laid planes are, byte for byte, glyd.pack of the transposed experts,
  and re-laying back gives the original planes, on random experts with escapes
  and on every bf16 bit pattern;
* a relaid holder shows the stored orientation wherever its planes go:
  packed() and verify(), state_dict(), load_state_dict(), deepcopy, pickling,
  .cpu(), and the decoded weight (cached or per call);
* Llama 4 and gpt-oss blocks: the re-laid experts run the linear-layout
  (tensor-core) kernels, close to the family's own forward, and exact=True on
  a relaid model stays torch.equal to bf16.
Skipped without a GPU.
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import glyd

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")
if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

from glyd.tensor import PLANE_NAMES  # noqa: E402
from glyd.transformers import gpu_experts  # noqa: E402
from glyd.transformers.modules import GlydExperts, PackedWeight, iter_packed_modules, set_exact  # noqa: E402

from conftest import make_model  # noqa: E402

DEV = torch.device("cuda", 0)


def _experts(E, a, b, seed=0):
    """Random bf16 experts [E, a, b] whose exponents spread beyond fixed12's
    window of 15 (escapes in every expert)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(E, a, b, generator=g) * 0.02
    far = torch.rand(E, a, b, generator=g) < 0.01
    w = torch.where(far, w * torch.exp2(torch.randint(-12, 13, (E, a, b), generator=g).float()), w)
    return w.to(torch.bfloat16)


def _all_patterns(E=4, a=128, b=128, seed=1):
    """Every bf16 bit pattern once (NaNs and infinities included), shuffled, as [E, a, b]."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    return bits[torch.randperm(65536, generator=g)].view(torch.bfloat16).reshape(E, a, b)


def _holder(w):
    p = glyd.pack(w, layout="fixed12", groups=w.shape[0])
    h = PackedWeight.from_packed("gate_up_proj", p, scratch_key=f"relayout-test/{tuple(w.shape)}")
    h.cache_decoded = False
    h.to(DEV)
    h.materialize_empty_planes()
    return h, p


def _planes(h):
    return {k: v.detach().cpu().clone() for k, v in h.planes().items()}


def _same_bits(a, b):
    return torch.equal(a.view(torch.int16).cpu(), b.view(torch.int16).cpu())


def _assert_planes(got: dict, want: dict):
    for name in PLANE_NAMES:
        g, w = got.get(name), want.get(name)
        g = g if g is not None else torch.empty(0, dtype=torch.uint8)
        w = w if w is not None else torch.empty(0, dtype=torch.uint8)
        assert torch.equal(g.cpu(), w.cpu()), f"plane {name} differs"


@pytest.mark.parametrize("make", [lambda: _experts(6, 96, 160), lambda: _experts(3, 64, 48, seed=5), _all_patterns],
                         ids=["random", "small", "all-bf16-patterns"])
def test_relaid_planes_are_the_pack_of_the_transposed_experts(make):
    w = make()
    h, p = _holder(w)
    stored = _planes(h)
    h.relay(True)
    assert h.relaid and h.device_shape == (w.shape[0], w.shape[2], w.shape[1])
    want = glyd.pack(w.transpose(1, 2).contiguous(), layout="fixed12", groups=w.shape[0])
    _assert_planes(h.planes(), want.planes)
    assert [(g.elements, g.escapes, g.base, g.offsets) for g in h.groups] == \
           [(g.elements, g.escapes, g.base, g.offsets) for g in want.groups]
    # decoded both ways, bit for bit
    assert _same_bits(h.decode(), w)
    assert _same_bits(gpu_experts.decoded_all(gpu_experts._weights_of(h, True)), w.transpose(1, 2))
    h.relay(False)
    assert not h.relaid
    _assert_planes(h.planes(), stored)
    assert _same_bits(h.decode(), w)


def test_a_relaid_holder_leaves_in_the_stored_orientation():
    w = _experts(4, 64, 96, seed=2)
    h, p = _holder(w)
    stored = _planes(h)
    h.relay(True)
    # packed(): what saving and verify read
    _assert_planes(h.packed().planes, p.planes)
    assert h.packed().checksum == p.checksum
    h.verify()
    # state_dict (and the same with the planes as held, for glyd.save_pretrained)
    sd = h.state_dict()
    _assert_planes({k[len("glyd_"):]: v for k, v in sd.items()}, stored)
    from glyd.transformers.modules import planes_as_held

    with planes_as_held():
        held = h.state_dict()
    assert torch.equal(held["glyd_sm"], h.glyd_sm)
    # copies and pickles: stored orientation, not relaid, the same weight
    for c in (copy.deepcopy(h), pickle.loads(pickle.dumps(h))):
        assert not c.relaid
        _assert_planes(c.planes(), stored)
        assert _same_bits(c.decode(), w)
    assert h.relaid  # the original is untouched
    # the decoded weight, per call and cached
    assert _same_bits(h.decode(), w)
    h.cache_decoded, h.cache_armed = True, True
    assert _same_bits(h.decode(), w) and _same_bits(h.decode(), w)
    h.cache_decoded = False
    # load_state_dict: the loaded planes are stored ones
    h.load_state_dict(sd)
    assert not h.relaid
    _assert_planes(h.planes(), stored)
    assert _same_bits(h.decode(), w)
    # .cpu(): back to the stored orientation before leaving
    h.relay(True)
    h.cpu()
    assert not h.relaid and h.device.type == "cpu"
    _assert_planes(h.planes(), stored)


def test_relaid_under_inference_mode_stays_writable():
    """A first forward under torch.inference_mode() re-lays the planes; they stay
    normal tensors, so load_state_dict can write into them later."""
    w = _experts(2, 32, 48, seed=4)
    h, _ = _holder(w)
    stored = _planes(h)
    with torch.inference_mode():
        h.relay(True)
    assert h.relaid and not h.glyd_sm.is_inference()
    h.load_state_dict({"glyd_" + k: v for k, v in stored.items() if h._parameters.get("glyd_" + k) is not None})
    _assert_planes(h.planes(), stored)
    assert _same_bits(h.decode(), w)


def test_relayout_refuses_what_it_cannot_do():
    from glyd.errors import InvalidArgumentError
    from glyd.transformers import gpu_relayout

    w = _experts(2, 32, 32, seed=3)
    h, _ = _holder(w)
    with pytest.raises(InvalidArgumentError, match="already"):
        gpu_relayout.relayout(h, False)
    h.cpu()
    with pytest.raises(InvalidArgumentError, match="cannot be re-laid"):
        gpu_relayout.relayout(h, True)


def _experts_modules(model):
    return [m for _, m in iter_packed_modules(model) if isinstance(m, GlydExperts)]


@pytest.mark.parametrize("model_type", ["llama4_text", "gpt_oss"])
def test_transposed_families_run_the_linear_layout_kernels(model_type, monkeypatch):
    from conftest import model_inputs

    ref = make_model(model_type).to(DEV).eval()
    model = gpu_experts.pack_module(make_model(model_type).to(DEV)).eval()
    inputs = {k: v.to(DEV) for k, v in model_inputs(model_type).items()}
    for m in _experts_modules(model):
        spec = gpu_experts.spec_of(m)
        assert spec.transposed
        for attr in (spec.w_in, "down_proj"):
            ew = gpu_experts.expert_weights(m, attr, True)
            assert ew.holder.relaid and not ew.transposed
    seen = []
    orig = _gpu.DeviceExperts.linear

    def spy(self, *a, **k):
        seen.append(self.transposed)
        return orig(self, *a, **k)

    monkeypatch.setattr(_gpu.DeviceExperts, "linear", spy)
    with torch.no_grad():
        a, b = ref(**inputs).logits, model(**inputs).logits
    assert seen and not any(seen), "the grouped kernel ran the transposed layout"
    cos = torch.nn.functional.cosine_similarity(a.float().reshape(1, -1), b.float().reshape(1, -1)).item()
    assert cos >= 0.995, f"logits cosine {cos:.5f}"
    # the same model, exact: torch.equal to bf16 from the relaid planes
    set_exact(model, True)
    with torch.no_grad():
        assert torch.equal(ref(**inputs).logits, model(**inputs).logits)


def test_relayout_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("GLYD_MOE_RELAYOUT", "0")
    model = gpu_experts.pack_module(make_model("llama4_text").to(DEV)).eval()
    for m in _experts_modules(model):
        for h in m.glyd_weights().values():
            assert not h.relaid
