"""The C ABI: versions agree everywhere, only glyd_* symbols are exported."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import glyd
from glyd import _lib

ROOT = Path(__file__).resolve().parents[2]
HEADER = (ROOT / "include" / "glyd.h").read_text()


def _macro(name):
    return int(re.search(rf"#define {name} (\d+)", HEADER).group(1))


def test_versions_agree():
    lib = _lib.load()
    v = f"{_macro('GLYD_VERSION_MAJOR')}.{_macro('GLYD_VERSION_MINOR')}.{_macro('GLYD_VERSION_PATCH')}"
    assert lib.glyd_version_string().decode() == v == glyd.__version__
    assert lib.glyd_abi_version() == _macro("GLYD_ABI_VERSION")
    assert lib.glyd_format_version() == _macro("GLYD_FORMAT_VERSION")


def test_strerror_covers_every_status():
    lib = _lib.load()
    codes = [int(c) for c in re.findall(r"GLYD_(?:OK|ERR_\w+) = (\d+)", HEADER)]
    texts = {lib.glyd_strerror(c).decode() for c in codes}
    assert len(texts) == len(codes)  # one distinct text per status
    assert lib.glyd_strerror(9999).decode() == "unknown status"


def test_every_declared_function_is_bound_and_only_those_exported():
    declared = set(re.findall(r"\b(glyd_[a-z0-9_]+)\(", HEADER))
    cpu = {n for n in declared if not n.startswith("glyd_gpu_")}
    assert cpu <= set(_lib._SIGNATURES), f"not bound in _lib.py: {sorted(cpu - set(_lib._SIGNATURES))}"
    missing = {n for n in declared if not hasattr(_lib.load(), n)}
    assert not missing
    if shutil.which("nm") is None:
        pytest.skip("nm not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(_lib.library_path())], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert exported <= declared, f"unexpected exports: {sorted(exported - declared)}"


def test_null_and_too_small_buffers_give_statuses_not_crashes(tmp_path):
    """Every entry point checks its pointers; the host process survives."""
    import ctypes

    import torch

    lib = _lib.load()
    INVALID, TOO_SMALL = 1, 2
    out = ctypes.c_void_p()
    shape = (ctypes.c_int64 * 1)(4)
    data = torch.zeros(4, dtype=torch.bfloat16)
    assert lib.glyd_pack(None, 8, 1, shape, 1, 1, 1, 0, ctypes.byref(out)) == INVALID
    assert "src" in lib.glyd_last_error().decode()
    assert lib.glyd_pack(data.data_ptr(), 8, 1, shape, 1, 1, 1, 0, None) == INVALID
    assert lib.glyd_pack(data.data_ptr(), 8, 1, None, 1, 1, 1, 0, ctypes.byref(out)) == INVALID
    assert lib.glyd_pack(data.data_ptr(), 8, 7, shape, 1, 1, 1, 0, ctypes.byref(out)) == 18  # DTYPE
    assert lib.glyd_pack(data.data_ptr(), 6, 1, shape, 1, 1, 1, 0, ctypes.byref(out)) == 10  # SIZE_MISMATCH
    assert lib.glyd_pack(data.data_ptr(), 8, 1, shape, 1, 9, 1, 0, ctypes.byref(out)) == INVALID  # layout
    info = _lib.TensorInfo()
    assert lib.glyd_packed_describe(None, ctypes.byref(info)) == INVALID
    assert lib.glyd_packed_unpack(None, data.data_ptr(), 8, 0) == INVALID
    lib.glyd_packed_destroy(None)
    lib.glyd_writer_destroy(None)
    lib.glyd_reader_close(None)

    assert lib.glyd_pack(data.data_ptr(), 8, 1, shape, 1, 1, 1, 0, ctypes.byref(out)) == 0
    small = torch.empty(3, dtype=torch.bfloat16)
    assert lib.glyd_packed_unpack(out, small.data_ptr(), 6, 0) == TOO_SMALL
    assert "buffer too small" in lib.glyd_last_error().decode()
    assert lib.glyd_packed_unpack(out, None, 8, 0) == INVALID
    assert lib.glyd_packed_plane(out, 99, ctypes.byref(ctypes.c_void_p()), ctypes.byref(ctypes.c_size_t())) == INVALID
    assert lib.glyd_packed_group(out, 5, ctypes.byref(_lib.Group())) == INVALID

    w = ctypes.c_void_p()
    assert lib.glyd_writer_open(None, 0, 0, ctypes.byref(w)) == INVALID
    assert lib.glyd_writer_open(str(tmp_path / "ck").encode(), 0, 0xF0, ctypes.byref(w)) == INVALID  # unknown flag
    assert lib.glyd_writer_open(str(tmp_path / "ck").encode(), 0, 0, ctypes.byref(w)) == 0
    assert lib.glyd_writer_add_packed(w, None, out) == INVALID
    assert lib.glyd_writer_add_packed(w, b"t", None) == INVALID
    assert lib.glyd_writer_add_raw(w, b"r", b"F32", shape, 1, None, 16) == INVALID
    assert lib.glyd_writer_add_raw(w, b"r", b"F32", shape, 1, data.data_ptr(), 8) == 10  # 4 x F32 != 8 bytes
    assert lib.glyd_writer_add_packed(w, b"t", out) == 0
    assert lib.glyd_writer_commit(w) == 0
    assert lib.glyd_writer_add_packed(w, b"u", out) == 23  # STATE: after commit
    assert lib.glyd_writer_errmsg(w).decode()
    lib.glyd_writer_destroy(w)
    lib.glyd_packed_destroy(out)

    r = ctypes.c_void_p()
    assert lib.glyd_reader_open(None, 0, ctypes.byref(r)) == INVALID
    assert lib.glyd_reader_open(str(tmp_path / "ck").encode(), 0, None) == INVALID
    assert lib.glyd_reader_open(str(tmp_path / "ck").encode(), 0, ctypes.byref(r)) == 0
    assert lib.glyd_reader_count(r) == 1
    assert lib.glyd_reader_unpack(r, 0, small.data_ptr(), 6) == TOO_SMALL
    assert lib.glyd_reader_unpack(r, 5, small.data_ptr(), 6) == INVALID  # index out of range
    assert lib.glyd_reader_name(r, 0, None) == INVALID
    assert lib.glyd_reader_find(r, b"nope", ctypes.byref(ctypes.c_size_t())) == 4  # NOT_FOUND
    assert "nope" in lib.glyd_reader_errmsg(r).decode()
    lib.glyd_reader_close(r)
