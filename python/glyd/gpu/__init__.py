"""Glyd on the GPU: device discovery and the command line (`python -m glyd.gpu`)."""

from __future__ import annotations


def describe() -> str:
    """One line saying which GPU Glyd would use, or why none."""
    try:
        from .. import _gpu
    except ImportError:
        return "this build has no GPU layer"
    return _gpu.describe()
