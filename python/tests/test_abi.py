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
