"""Tiled planes (glyd._gpu.DeviceTensor.tile; glyd.transformers.gpu_relayout):

* tiling permutes the sm and code planes into 16-row x 64-column tiles (a
  torch reshape of the row-major planes here), and tiling back undoes it,
  byte for byte; shapes without the arrangement raise UnsupportedError;
* tiled planes decode, whole and by rows (whole 16-row groups and not), to
  the exact bits;
* every fused kernel configuration multiplies tiled planes to the same bits
  as row-major ones (the same sums in the same order), alone and in sibling
  launches, with escapes and in the _safe variants; a launch mixing tiled and
  row-major weights runs each run of them alone;
* a GlydLinear's weight is tiled at its first use on the GPU (not with
  glyd._gpu.TILED off, not a table an embedding reads, not a K % 64 != 0
  weight), the model's logits are bit for bit those of the row-major model,
  and the holder shows the stored planes wherever they go, an offload hook
  added after tiling included.
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

from glyd.errors import UnsupportedError  # noqa: E402
from glyd.transformers.modules import GlydEmbedding, GlydLinear, PackedWeight, iter_packed_modules  # noqa: E402

from conftest import make_model, model_inputs  # noqa: E402
from test_kernels import ROWS, bits, safe_weights, weights  # noqa: E402
from test_relayout import _assert_planes  # noqa: E402

DEV = torch.device("cuda", 0)


def _pair(w):
    """(row-major, tiled) DeviceTensors of w packed as fixed12."""
    dt = _gpu.DeviceTensor(glyd.pack(w), DEV)
    return dt, dt.tile()


def _tiled_reference(plane: torch.Tensor, n: int, width: int) -> torch.Tensor:
    """A row-major plane of n rows in tiles of 16 rows x width bytes."""
    return plane.view(n // 16, 16, -1, width).permute(0, 2, 1, 3).reshape(-1)


@pytest.mark.parametrize("shape", [(16, 64), (320, 1024), (4096, 4096), (48, 4160)])
def test_tile_round_trip(shape):
    n, k = shape
    dt, tdt = _pair(weights(shape, seed=n + k))
    assert tdt.tiled and not dt.tiled and dt.tile(False) is dt and tdt.tile() is tdt
    assert torch.equal(tdt.planes["sm"], _tiled_reference(dt.planes["sm"], n, 64))
    assert torch.equal(tdt.planes["code"], _tiled_reference(dt.planes["code"], n, 32))
    for name in ("escidx", "escexp"):
        assert tdt.planes[name] is dt.planes[name]
    assert (tdt.esc_rows is None) == (dt.esc_rows is None)
    if dt.esc_rows is not None:
        assert torch.equal(tdt.esc_rows, dt.esc_rows)  # the escape index does not move
    back = tdt.tile(False)
    for name, p in dt.planes.items():
        assert torch.equal(back.planes[name], p), name


@pytest.mark.parametrize("shape", [(24, 64), (32, 96), (1000, 1040)])
def test_tile_unsupported_shapes(shape):
    dt = _gpu.DeviceTensor(glyd.pack(weights(shape, seed=1)), DEV)
    with pytest.raises(UnsupportedError):
        dt.tile()
    grouped = _gpu.DeviceTensor(glyd.pack(weights((64, 128), seed=2), groups=2), DEV)
    with pytest.raises(UnsupportedError):
        grouped.tile()
    small = _gpu.DeviceTensor(glyd.pack(weights((64, 128), seed=3), layout="smallest"), DEV)
    with pytest.raises(UnsupportedError):
        small.tile()


@pytest.mark.parametrize("shape", [(64, 4096), (320, 1024), (48, 4160)])
def test_tiled_decode_exact(shape):
    n, k = shape
    w = weights(shape, seed=5)
    w[3] = 0.0  # a row of escapes
    dt, tdt = _pair(w)
    assert tdt.escapes > 0
    out = torch.full(shape, float("nan"), dtype=torch.bfloat16, device=DEV)
    tdt.decode(out=out)
    assert torch.equal(bits(out.cpu()), bits(w))
    for row0, rows in ((0, n), (16, n - 16), (0, 16), (3, 5), (n - 1, 1), (5, n - 5)):
        got = tdt.decode_rows(row0, rows)
        assert torch.equal(bits(got.cpu()), bits(w[row0:row0 + rows])), (row0, rows)


def _same_bits(dt, tdt, rows, scale=1.0, what=""):
    x = (torch.randn(rows, dt.shape[1], device=DEV) * scale).to(torch.bfloat16)
    b = (torch.randn(dt.shape[0], device=DEV) * 0.1).to(torch.bfloat16)
    y = torch.full((rows, dt.shape[0]), float("nan"), dtype=torch.bfloat16, device=DEV)
    ty = torch.full_like(y, float("inf"))
    dt.linear(x, b, out=y)
    tdt.linear(x, b, out=ty)
    assert torch.equal(bits(y), bits(ty)), f"{what} rows={rows} ({tdt.linear_kernel(rows)})"


@pytest.mark.parametrize("rows", ROWS)
def test_tiled_linear_same_bits(rows):
    dt, tdt = _pair(weights((4096, 4096), seed=rows, specials=True))
    _same_bits(dt, tdt, rows)


@pytest.mark.parametrize("kind", ["specials", "safe"])
def test_tiled_linear_every_config(kind):
    # every configuration, forced: partial weight tiles (320 rows), split K, escapes, _safe
    if kind == "safe":
        w, scale = safe_weights(320, 1024), 2.0**-120
    else:
        w, scale = weights((320, 1024), seed=11, specials=True), 1.0
    dt, tdt = _pair(w)
    try:
        for name in _gpu.linear_configs() + ["generic"]:
            _gpu.force_kernel(name)
            for rows in (1, 13, 77, 130, 300):
                _same_bits(dt, tdt, rows, scale, name)
    finally:
        _gpu.force_kernel(None)


@pytest.mark.parametrize("rows", [1, 8, 16, 64, 128, 300])
def test_tiled_siblings_same_bits(rows):
    shapes = [(512, 1024), (128, 1024), (128, 1024)]
    pairs = [_pair(weights(s, seed=20 + i, specials=True)) for i, s in enumerate(shapes)]
    x = torch.randn(rows, 1024, device=DEV).to(torch.bfloat16)
    ys = _gpu.MultiLinear([p[0] for p in pairs]).linear(x)
    tys = _gpu.MultiLinear([p[1] for p in pairs]).linear(x)
    for i, (y, ty) in enumerate(zip(ys, tys)):
        assert torch.equal(bits(y), bits(ty)), f"weight {i}"
    # tiled and row-major weights in one call: one launch per run of either
    mixed = _gpu.MultiLinear([pairs[0][1], pairs[1][0], pairs[2][1]]).linear(x)
    for i, (y, dt) in enumerate(zip(mixed, [pairs[0][1], pairs[1][0], pairs[2][1]])):
        assert torch.equal(bits(y), bits(dt.linear(x))), f"mixed launch, weight {i}"


def _packed_model(tmp_path, name):
    model = make_model("qwen3")
    glyd.save_pretrained(model, tmp_path / name, progress=False)
    return glyd.from_pretrained(tmp_path / name).to(DEV).eval()


def _logits(model):
    inputs = {k: v.to(DEV) for k, v in model_inputs("qwen3").items()}
    with torch.no_grad():
        return model(**inputs).logits


def test_module_weights_tiled_at_first_use(tmp_path, monkeypatch):
    model = _packed_model(tmp_path, "a")
    holders = {n: m.packed_weight for n, m in iter_packed_modules(model) if isinstance(m, (GlydLinear, GlydEmbedding))}
    assert not any(h.relaid for h in holders.values())  # loaded on the CPU, then moved: not used yet
    stored = {n: {k: v.clone() for k, v in h.planes().items()} for n, h in holders.items()}
    got = _logits(model)
    for n, h in holders.items():
        # tables stay row-major; down_proj (K = 96) and lm_head (99 rows) have no tiled arrangement
        want = "embed_tokens" not in n and h.shape[0] % 16 == 0 and h.shape[1] % 64 == 0
        assert h.relaid == h.tiled == want, (n, h.shape)
        # the stored planes wherever they go
        _assert_planes(h.packed().planes, stored[n])
        _assert_planes({key[len("glyd_"):]: v for key, v in h.state_dict().items()}, stored[n])
        h.verify()
    layer = model.model.layers[0]
    assert layer.self_attn.q_proj.packed_weight.tiled and layer.mlp.gate_proj.packed_weight.tiled
    # the same logits, bit for bit, as the row-major model's
    monkeypatch.setattr(_gpu, "TILED", False)
    plain = _packed_model(tmp_path, "b")
    assert torch.equal(_logits(plain), got)
    assert not any(m.packed_weight.relaid for _, m in iter_packed_modules(plain) if isinstance(m, GlydLinear))
    monkeypatch.setattr(_gpu, "TILED", True)
    # copies and moves see the stored planes, and tile again where they run
    dup = copy.deepcopy(model)
    assert torch.equal(_logits(dup), got)
    q = dup.model.layers[0].self_attn.q_proj.packed_weight
    assert q.tiled
    model.cpu()
    assert not model.model.layers[0].self_attn.q_proj.packed_weight.relaid
    model.to(DEV)
    assert torch.equal(_logits(model), got)


def test_offload_hook_added_after_tiling(tmp_path):
    """accelerate.cpu_offload on a layer whose weights are already tiled: its
    hook copies the stored planes in at every call, which the holders take as
    stored (not as tiled): the same logits, bit for bit."""
    accelerate = pytest.importorskip("accelerate")
    model = _packed_model(tmp_path, "a")
    got = _logits(model)
    layer = model.model.layers[0]
    holders = [m.packed_weight for _, m in iter_packed_modules(layer) if isinstance(m, GlydLinear)]
    tiled = [h for h in holders if h.tiled]
    assert tiled
    accelerate.cpu_offload(layer, execution_device=DEV, preload_module_classes=[type(layer).__name__])
    for _ in range(2):
        assert torch.equal(_logits(model), got)
    assert not any(h.relaid for h in holders)
    assert all(h.__dict__.get("_glyd_keep_stored") for h in tiled)  # the hook's planes: kept as stored


def test_a_tiled_holder_leaves_with_its_stored_planes():
    """PackedWeight of a matrix, tiled in place (relay): the same bits decoded,
    the stored planes in packed(), state_dict(), copies, pickles,
    load_state_dict() and .cpu(); tiling under inference_mode leaves normal
    tensors; a shape without the arrangement stays as it is."""
    w = weights((320, 1024), seed=30, specials=True)
    p = glyd.pack(w)
    h = PackedWeight.from_packed("weight", p, scratch_key="tiled-test")
    h.to(DEV)
    h.materialize_empty_planes()
    stored = {k: v.detach().cpu().clone() for k, v in h.planes().items()}

    with torch.inference_mode():
        h.relay(True)
    assert h.relaid and h.tiled and h.device_shape == h.shape and not h.glyd_sm.is_inference()
    assert not torch.equal(h.glyd_sm.cpu(), stored["sm"])
    assert torch.equal(bits(h.decode().cpu()), bits(w))
    _assert_planes(h.packed().planes, stored)
    h.verify()
    sd = h.state_dict()
    _assert_planes({k[len("glyd_"):]: v for k, v in sd.items()}, stored)
    for c in (copy.deepcopy(h), pickle.loads(pickle.dumps(h))):
        assert not c.relaid and "_glyd_relay_checked" not in c.__dict__
        _assert_planes(c.planes(), stored)
    assert h.relaid
    h.load_state_dict(sd)
    assert not h.relaid
    _assert_planes(h.planes(), stored)
    h.relay(True)
    h.cpu()
    assert not h.relaid and h.device.type == "cpu"
    _assert_planes(h.planes(), stored)
    odd = PackedWeight.from_packed("weight", glyd.pack(weights((40, 1024), seed=31)), scratch_key="tiled-test-odd")
    odd.to(DEV)
    odd.relay(True)  # 40 rows: no tiled arrangement
    assert not odd.relaid
