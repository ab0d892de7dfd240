"""The experts C ABI (glyd_gpu_*experts*) without a GPU: sizes and argument
checks need only the metadata, and the device calls answer NoGPUError on a
machine without a driver (never a crash)."""

from __future__ import annotations

import ctypes

import pytest
import torch

import glyd
from glyd import _gpu, _lib
from glyd.errors import InvalidArgumentError, NoGPUError, UnsupportedError
from glyd.tensor import PLANE_NAMES

FAKE = 1 << 20  # a device address that is never dereferenced


def gpu_tensor(p, shape=None):
    """A glyd_gpu_tensor over p's metadata with fake, 256-aligned plane addresses."""
    c = _gpu.GpuTensor()
    c.layout = _gpu.LAYOUT_FIXED12 if p.layout == "fixed12" else _gpu.LAYOUT_SMALLEST
    c.dtype = _gpu.DTYPE_BF16
    shape = p.shape if shape is None else shape
    c.ndim = len(shape)
    for i, s in enumerate(shape):
        c.shape[i] = s
    garr = (_lib.Group * len(p.groups))(*[g._to_c() for g in p.groups])
    c.groups = ctypes.cast(garr, ctypes.POINTER(_lib.Group))
    c.num_groups = len(p.groups)
    for i, name in enumerate(PLANE_NAMES):
        c.planes[i] = FAKE * (i + 1) if p.planes[name].numel() else None
    return c, garr


def packed_experts(e=4, n=32, k=64, layout="fixed12"):
    w = (torch.randn(e, n, k) * 0.02).to(torch.bfloat16)
    w[0, 0] = 0.0  # a row of escapes
    return glyd.pack(w, layout=layout, groups=e)


def table_bytes(c):
    n = ctypes.c_size_t()
    _lib.check(_gpu._gpu().glyd_gpu_experts_table_bytes(ctypes.byref(c), ctypes.byref(n)))
    return n.value


def test_table_bytes():
    p = packed_experts()
    c, _keep = gpu_tensor(p)
    want = (64 * 4 + 15) // 16 * 16  # one 64-byte entry per expert
    for g in p.groups:
        if g.escapes:
            want += (4 * 33 + 7) // 8 * 8 + 8 * g.escapes  # row ranges of 32 rows + records
    assert p.groups[0].escapes >= 64
    assert table_bytes(c) == want
    c2, _keep2 = gpu_tensor(p, shape=(4 * 32, 64))  # [E*N, K] is the same tensor
    assert table_bytes(c2) == want


def test_table_bytes_errors():
    c, _keep = gpu_tensor(packed_experts(layout="smallest"))
    with pytest.raises(UnsupportedError, match="fixed12"):
        table_bytes(c)
    p = packed_experts(e=4, n=2, k=16)
    c, _keep = gpu_tensor(p, shape=(128,))
    with pytest.raises(InvalidArgumentError, match="dimensions"):
        table_bytes(c)
    c, _keep = gpu_tensor(p)
    with pytest.raises(InvalidArgumentError, match="NULL"):
        _lib.check(_gpu._gpu().glyd_gpu_experts_table_bytes(ctypes.byref(c), None))


def test_device_calls_without_gpu():
    if _gpu.available():
        pytest.skip("a GPU is present: tests/gpu/test_experts_kernels.py covers it")
    lib = _gpu._gpu()
    p = packed_experts()
    c, _keep = gpu_tensor(p)
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_build_experts_table(0, None, ctypes.byref(c), FAKE, 1 << 20))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_decode_experts(0, None, ctypes.byref(c), FAKE, FAKE, 1 << 20))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_linear_experts(0, None, FAKE, 8, ctypes.byref(c), 0, FAKE, FAKE, None, FAKE, None, 0))


def test_buffer_checks_come_first():
    lib = _gpu._gpu()
    p = packed_experts()
    c, _keep = gpu_tensor(p)
    with pytest.raises(InvalidArgumentError, match="dst_bytes"):  # GLYD_ERR_BUFFER_TOO_SMALL
        _lib.check(lib.glyd_gpu_build_experts_table(0, None, ctypes.byref(c), FAKE, 16))
    with pytest.raises(InvalidArgumentError, match="dst_bytes"):
        _lib.check(lib.glyd_gpu_decode_experts(0, None, ctypes.byref(c), FAKE, FAKE, 100))
    with pytest.raises(InvalidArgumentError, match="rows"):
        _lib.check(lib.glyd_gpu_linear_experts(0, None, FAKE, -1, ctypes.byref(c), 0, FAKE, FAKE, None, FAKE, None, 0))


def test_workspace_bound():
    lib = _gpu._gpu()
    c, _keep = gpu_tensor(packed_experts(e=4, n=32, k=64))
    n = ctypes.c_size_t()
    _lib.check(lib.glyd_gpu_experts_workspace_bound(ctypes.byref(c), 5, 0, ctypes.byref(n)))
    assert n.value == 0  # the linear layout needs none
    _lib.check(lib.glyd_gpu_experts_workspace_bound(ctypes.byref(c), 5, 1, ctypes.byref(n)))
    assert n.value > 0 and n.value % (5 * 64 * 4) == 0  # fp32 [splits][rows][out]
    with pytest.raises(InvalidArgumentError, match="rows"):
        _lib.check(lib.glyd_gpu_experts_workspace_bound(ctypes.byref(c), -2, 1, ctypes.byref(n)))


def test_moe_routing_abi_without_a_gpu():
    # argument checks come first; a device call on a machine without a driver
    # answers NoGPUError (this CI machine), never a crash
    lib = _gpu._gpu()
    with pytest.raises(InvalidArgumentError, match="out of range"):
        _lib.check(lib.glyd_gpu_moe_route(0, None, FAKE, 8, 0, 4, 4, FAKE, FAKE, FAKE))
    with pytest.raises(InvalidArgumentError, match="multiple"):
        _lib.check(lib.glyd_gpu_moe_route(0, None, FAKE, 8, 3, 4, 4, FAKE, FAKE, FAKE))
    with pytest.raises(UnsupportedError, match="at most"):
        _lib.check(lib.glyd_gpu_moe_route(0, None, FAKE, 8, 1, 4, 5000, FAKE, FAKE, FAKE))
    with pytest.raises(InvalidArgumentError, match="nil"):
        _lib.check(lib.glyd_gpu_moe_route(0, None, None, 8, 1, 4, 4, FAKE, FAKE, FAKE))
    with pytest.raises(InvalidArgumentError, match="aligned"):
        _lib.check(lib.glyd_gpu_moe_combine(0, None, FAKE + 2, FAKE, FAKE, FAKE, FAKE, 1, 8, 64, 4, 4, FAKE))
    with pytest.raises(InvalidArgumentError, match="out of range"):
        _lib.check(lib.glyd_gpu_moe_combine(0, None, FAKE, FAKE, FAKE, FAKE, FAKE, 1, 8, 0, 4, 4, FAKE))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_moe_route(0, None, FAKE, 8, 8, 4, 4, FAKE, FAKE, FAKE))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_moe_combine(0, None, FAKE, FAKE, FAKE, FAKE, FAKE, 1, 8, 64, 4, 4, FAKE))


def test_moe_activation_and_row_experts_abi_without_a_gpu():
    lib = _gpu._gpu()
    with pytest.raises(InvalidArgumentError, match="out of range"):
        _lib.check(lib.glyd_gpu_moe_silu_mul(0, None, FAKE, 4, 0, FAKE))
    with pytest.raises(InvalidArgumentError, match="aligned"):
        _lib.check(lib.glyd_gpu_moe_silu_mul(0, None, FAKE + 2, 4, 8, FAKE))
    with pytest.raises(InvalidArgumentError, match="nil"):
        _lib.check(lib.glyd_gpu_moe_silu_mul(0, None, FAKE, 4, 8, None))
    _lib.check(lib.glyd_gpu_moe_silu_mul(0, None, None, 0, 8, None))  # no rows: nothing to do
    with pytest.raises(InvalidArgumentError, match="rows per expert"):
        _lib.check(lib.glyd_gpu_moe_row_experts(0, None, FAKE, 16, 64, 0, FAKE))
    with pytest.raises(InvalidArgumentError, match="aligned"):
        _lib.check(lib.glyd_gpu_moe_row_experts(0, None, FAKE + 8, 16, 64, 1, FAKE))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_moe_silu_mul(0, None, FAKE, 4, 8, FAKE))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_moe_row_experts(0, None, FAKE, 16, 64, 1, FAKE))


def test_moe_top1_abi_without_a_gpu():
    lib = _gpu._gpu()
    with pytest.raises(InvalidArgumentError, match="out of range"):
        _lib.check(lib.glyd_gpu_moe_top1(0, None, FAKE, 4, 0, FAKE, FAKE))
    with pytest.raises(InvalidArgumentError, match="nil"):
        _lib.check(lib.glyd_gpu_moe_top1(0, None, FAKE, 4, 16, None, FAKE))
    _lib.check(lib.glyd_gpu_moe_top1(0, None, None, 0, 16, None, None))  # no tokens: nothing to do
    with pytest.raises(InvalidArgumentError, match="aligned"):
        _lib.check(lib.glyd_gpu_moe_gather_scale(0, None, FAKE + 2, FAKE, FAKE, 4, 64, FAKE))
    with pytest.raises(InvalidArgumentError, match="nil"):
        _lib.check(lib.glyd_gpu_moe_gather_scale(0, None, FAKE, None, FAKE, 4, 64, FAKE))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_moe_top1(0, None, FAKE, 4, 16, FAKE, FAKE))
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_moe_gather_scale(0, None, FAKE, FAKE, FAKE, 4, 64, FAKE))


def test_moe_routing_wrappers_check_their_arguments():
    with pytest.raises(InvalidArgumentError, match="ids must be a contiguous CUDA tensor"):
        _gpu.moe_route(torch.zeros(8, dtype=torch.int64), 8, 4)
    with pytest.raises(InvalidArgumentError, match="x must be"):
        _gpu.moe_combine(torch.zeros(1, 8, dtype=torch.bfloat16), None, None, None, None, 4)
    with pytest.raises(InvalidArgumentError, match="x must be a contiguous CUDA tensor"):
        _gpu.moe_silu_mul(torch.zeros(2, 8, dtype=torch.bfloat16))
    with pytest.raises(InvalidArgumentError, match="x must be a contiguous CUDA tensor"):
        _gpu.moe_row_experts(torch.zeros(2, 8, dtype=torch.bfloat16), 1)
    with pytest.raises(InvalidArgumentError, match="logits must be a contiguous CUDA tensor"):
        _gpu.moe_top1(torch.zeros(2, 8, dtype=torch.bfloat16))
    with pytest.raises(InvalidArgumentError, match="x must be a contiguous CUDA tensor"):
        _gpu.moe_gather_scale(torch.zeros(2, 8, dtype=torch.bfloat16), None, None)


def test_moe_route_limits_match_the_header():
    import pathlib
    import re

    h = (pathlib.Path(__file__).resolve().parents[2] / "include" / "glyd.h").read_text()
    assert int(re.search(r"#define GLYD_MOE_ROUTE_MAX_PAIRS (\d+)", h).group(1)) == _gpu.MOE_ROUTE_MAX_PAIRS
    assert int(re.search(r"#define GLYD_MOE_ROUTE_MAX_EXPERTS (\d+)", h).group(1)) == _gpu.MOE_ROUTE_MAX_EXPERTS
