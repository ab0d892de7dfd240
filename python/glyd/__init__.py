"""Glyd: lossless packing of bf16 LLM weights, packed checkpoints, and
inference straight from the packed weights.

    import glyd
    glyd.save_pretrained(model, "model-glyd")        # pack a transformers model
    model = glyd.from_pretrained("model-glyd")       # and load it back
    p = glyd.pack(weight, layout="fixed12")          # one tensor
    assert torch.equal(glyd.unpack(p), weight)

Importing glyd registers the "glyd" quantization method with transformers
(when transformers is installed), so AutoModel*.from_pretrained loads Glyd
checkpoints too.
"""

from __future__ import annotations

from ._version import __version__
from .checkpoint import Reader, TensorInfo, Writer
from .errors import *  # noqa: F401,F403  (the exception classes are API)
from .errors import GlydError
from .tensor import LAYOUTS, PLANE_NAMES, Group, PackedTensor, pack, unpack


def library_version() -> str:
    """Version of the loaded libglyd.so."""
    from . import _lib

    return _lib.load().glyd_version_string().decode()


def _register_with_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return
    from .transformers import register

    register()


def __getattr__(name):
    # save_pretrained / from_pretrained need transformers; import them on first use.
    if name in ("save_pretrained", "from_pretrained"):
        from . import transformers as _tf

        return getattr(_tf, name)
    raise AttributeError(f"module 'glyd' has no attribute {name!r}")


_register_with_transformers()
