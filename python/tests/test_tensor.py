"""glyd.pack / glyd.unpack / PackedTensor through the C ABI."""

import pytest
import torch

import glyd

LAYOUTS = ["fixed12", "smallest"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_bit_pattern_round_trips(layout, dtype):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    t = bits.view(dtype)
    p = glyd.pack(t, layout=layout)
    back = glyd.unpack(p)
    assert back.dtype == dtype
    assert torch.equal(back.view(torch.int16), bits)
    p.verify()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (1, 1), (1, 77), (77, 1), (13, 4099), (2, 3, 5)])
def test_awkward_shapes(layout, shape):
    t = (torch.randn(shape) * 0.02).to(torch.bfloat16)
    p = glyd.pack(t, layout=layout)
    assert p.shape == tuple(shape)
    assert torch.equal(glyd.unpack(p).view(torch.int16), t.view(torch.int16))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bits_per_weight_and_planes(layout):
    t = (torch.randn(512, 1024) * 0.02).to(torch.bfloat16)
    p = glyd.pack(t, layout=layout)
    # randn*0.02 has a few more escapes than trained weights (targets 12.01 / 11.0 are for those)
    limit = 12.02 if layout == "fixed12" else 11.0
    assert 10.0 < p.bits_per_weight <= limit
    assert set(p.planes) == set(glyd.PLANE_NAMES)
    assert sum(v.numel() for v in p.planes.values()) == p.packed_bytes
    assert p.num_groups == 1 and p.groups[0].elements == t.numel()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_groups_decode_alone(layout):
    t = (torch.randn(8, 24, 40) * 0.02).to(torch.bfloat16)
    p = glyd.pack(t, layout=layout, groups=8)
    assert p.num_groups == 8
    for g in range(8):
        assert torch.equal(p.unpack_group(g), t[g])


def test_pack_is_deterministic():
    t = (torch.randn(300, 301) * 0.02).to(torch.bfloat16)
    a, b = glyd.pack(t, workers=1), glyd.pack(t, workers=2)
    for name in glyd.PLANE_NAMES:
        assert torch.equal(a.planes[name], b.planes[name])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_from_planes_wraps_loaded_planes(layout):
    t = (torch.randn(64, 96) * 0.02).to(torch.bfloat16)
    p = glyd.pack(t, layout=layout)
    planes = {k: v.clone() for k, v in p.planes.items()}
    q = glyd.PackedTensor.from_planes(layout, torch.bfloat16, p.shape, p.groups, planes, p.checksum)
    assert torch.equal(q.unpack(), t)
    q.verify()
    planes["sm"][5] ^= 1  # one flipped bit: decodes, but not to the original
    with pytest.raises(glyd.ChecksumError):
        q.verify()


def test_bad_arguments_raise_named_errors():
    with pytest.raises(glyd.DTypeError, match="float32"):
        glyd.pack(torch.zeros(4, dtype=torch.float32))
    with pytest.raises(glyd.InvalidArgumentError, match="layout"):
        glyd.pack(torch.zeros(4, dtype=torch.bfloat16), layout="tiny")
    with pytest.raises(glyd.InvalidArgumentError):
        glyd.pack(torch.zeros(6, 4, dtype=torch.bfloat16), groups=4)  # 6 % 4 != 0
    p = glyd.pack(torch.zeros(4, dtype=torch.bfloat16))
    with pytest.raises(glyd.InvalidArgumentError, match="shape"):
        p.unpack(out=torch.empty(3, dtype=torch.bfloat16))
    with pytest.raises(glyd.InvalidArgumentError):
        glyd.unpack("not packed")


def test_corrupt_planes_are_refused_on_import():
    t = (torch.randn(64, 64) * 0.02).to(torch.bfloat16)
    p = glyd.pack(t)
    planes = {k: v.clone() for k, v in p.planes.items()}
    planes["sm"] = planes["sm"][:-1]  # truncated plane
    with pytest.raises(glyd.CorruptError):
        glyd.PackedTensor.from_planes("fixed12", torch.bfloat16, p.shape, p.groups, planes, p.checksum)


def test_cuda_tensor_without_a_gpu_is_a_clear_error():
    # a meta tensor stands in for a device the CPU build cannot pack on
    with pytest.raises(glyd.InvalidArgumentError, match="CPU or CUDA"):
        glyd.pack(torch.empty(4, dtype=torch.bfloat16, device="meta"))
