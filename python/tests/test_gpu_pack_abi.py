"""The C ABI of GPU pack without a GPU: the ctypes signatures of glyd._gpu
match libglyd, arguments are checked before any device work, and a machine
without a driver gets NoGPUError (never a crash)."""

from __future__ import annotations

import ctypes

import pytest

from glyd import _gpu, _lib
from glyd.errors import InvalidArgumentError, NoGPUError, UnsupportedError


def _shape(*dims):
    return (ctypes.c_int64 * max(len(dims), 1))(*dims), len(dims)


def _ws_bytes(dtype, layout, dims, groups):
    lib = _gpu._gpu()
    n = ctypes.c_size_t()
    sarr, nd = _shape(*dims)
    _lib.check(lib.glyd_gpu_pack_workspace_bytes(dtype, layout, sarr, nd, groups, ctypes.byref(n)))
    return n.value


def test_workspace_bytes():
    assert _ws_bytes(1, 2, (64, 64), 1) > 0  # smallest
    small = _ws_bytes(1, 1, (64, 64), 1)
    big = _ws_bytes(1, 1, (4096, 4096), 1)
    assert 0 < small < big
    assert _ws_bytes(1, 1, (0, 16), 1) >= 0
    assert _ws_bytes(1, 1, (8, 1000), 8) > _ws_bytes(1, 1, (8, 1000), 1)


@pytest.mark.parametrize("dtype,layout,dims,groups,err", [
    (2, 1, (64, 64), 1, UnsupportedError),        # fp16
    (1, 1, (64, 64), 3, InvalidArgumentError),    # groups do not split axis 0
    (1, 1, (1 << 16, 1 << 16), 1, InvalidArgumentError),  # a group of 2^32 elements
    (1, 7, (4,), 1, InvalidArgumentError),
])
def test_workspace_errors(dtype, layout, dims, groups, err):
    with pytest.raises(err):
        _ws_bytes(dtype, layout, dims, groups)


def test_bound_and_pack_without_device():
    if _gpu.available():
        pytest.skip("a GPU is present: tests/gpu/test_pack_gpu.py covers it")
    lib = _gpu._gpu()
    sarr, nd = _shape(64, 64)
    sizes = (ctypes.c_uint64 * _lib.NUM_PLANES)()
    fake = 1 << 20  # never dereferenced: the driver is missing
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_pack_bound(0, None, fake, 1, 1, sarr, nd, 1, fake, 1 << 20, sizes))
    ptrs = (ctypes.c_void_p * _lib.NUM_PLANES)()
    groups = (_lib.Group * 1)()
    crc = ctypes.c_uint32()
    with pytest.raises(NoGPUError):
        _lib.check(lib.glyd_gpu_pack(0, None, fake, 1, 1, sarr, nd, 1, fake, 1 << 20, ptrs, sizes, groups,
                                     ctypes.byref(crc)))
    # NULL outputs are argument errors, checked first.
    with pytest.raises(InvalidArgumentError):
        _lib.check(lib.glyd_gpu_pack(0, None, fake, 1, 1, sarr, nd, 1, fake, 1 << 20, ptrs, sizes, None, None))
    # A workspace that is too small: BUFFER_TOO_SMALL before any device work.
    with pytest.raises(InvalidArgumentError):  # BUFFER_TOO_SMALL maps to it
        _lib.check(lib.glyd_gpu_pack_bound(0, None, fake, 1, 1, sarr, nd, 1, fake, 8, sizes))
