"""transformers integration of Glyd.

    import glyd
    glyd.save_pretrained(model, "model-glyd")            # pack a transformers model
    model = glyd.from_pretrained("model-glyd")           # its ordinary class, weights exact
    model = AutoModelForCausalLM.from_pretrained("model-glyd")   # works too, after `import glyd`

``import glyd`` registers the "glyd" quantization config and quantizer with
transformers (register()). See docs/TRANSFORMERS.md.
"""

from __future__ import annotations

_registered = False


def register() -> None:
    """Register GlydConfig and GlydHfQuantizer under quant_method "glyd" (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers.quantizers import auto as _auto

    from .config import QUANT_METHOD, GlydConfig
    from .quantizer import GlydHfQuantizer

    if _auto.AUTO_QUANTIZATION_CONFIG_MAPPING.get(QUANT_METHOD) not in (None, GlydConfig):
        raise RuntimeError(f"quantization method {QUANT_METHOD!r} is already registered by another package")
    _auto.AUTO_QUANTIZATION_CONFIG_MAPPING.pop(QUANT_METHOD, None)
    _auto.AUTO_QUANTIZER_MAPPING.pop(QUANT_METHOD, None)
    _auto.register_quantization_config(QUANT_METHOD)(GlydConfig)
    _auto.register_quantizer(QUANT_METHOD)(GlydHfQuantizer)
    _registered = True


from .load import from_pretrained  # noqa: E402
from .save import save_pretrained  # noqa: E402

__all__ = ["register", "save_pretrained", "from_pretrained"]
