"""GlydConfig: the ``quantization_config`` of a Glyd checkpoint's config.json.

    "quantization_config": {"quant_method": "glyd", "format": "glyd-v1" | "glyd-v2",
                            "layout": "fixed12" | "smallest", "glyd_version": "0.1.0",
                            "modules_to_not_convert": [...]}

config.json also carries ``"transformers_weights": GUARD`` (see :data:`GUARD`):
stock transformers (>= 5) reads that field as the name of the weights file and
refuses it with an error that shows the text, so loading a Glyd checkpoint
without ``import glyd`` fails loudly instead of handing back random weights.
With glyd imported, the Glyd quantizer removes the field before transformers
looks for the weights.
"""

from __future__ import annotations

import re

from transformers.utils.quantization_config import QuantizationConfigMixin

QUANT_METHOD = "glyd"

#: Stored as config.json["transformers_weights"]. It is neither a
#: *.safetensors nor a *.safetensors.index.json name, so transformers raises
#: ValueError("The transformers file in the config seems to be incorrect ... <GUARD>").
GUARD = (
    "GLYD PACKED CHECKPOINT: run `import glyd` before loading it (pip install glyd), "
    "or use glyd.from_pretrained(path). Without glyd, transformers would fill the packed "
    "weights at random."
)

FORMAT_RE = re.compile(r"^glyd-v(\d+)$")


def format_version(fmt: str) -> int:
    """2 for "glyd-v2"; -1 when the string is not a Glyd format name."""
    m = FORMAT_RE.match(str(fmt))
    return int(m.group(1)) if m else -1


class GlydConfig(QuantizationConfigMixin):
    """Quantization config of a Glyd packed checkpoint.

    Args:
        format: "glyd-v1" (dense) or "glyd-v2" (packed experts, one group per expert).
        layout: "fixed12" or "smallest" (docs/FORMAT.md).
        modules_to_not_convert: module paths kept unpacked, for information.
        glyd_version: version of the glyd package that wrote the checkpoint.
    """

    def __init__(self, format: str = "glyd-v1", layout: str = "fixed12", modules_to_not_convert=None,
                 glyd_version: str | None = None, **kwargs):
        self.quant_method = QUANT_METHOD
        self.format = format
        self.layout = layout
        self.modules_to_not_convert = list(modules_to_not_convert) if modules_to_not_convert else None
        self.glyd_version = glyd_version
        # Keep unknown keys written by newer versions so a re-save does not lose them.
        for k, v in kwargs.items():
            if k != "quant_method":
                setattr(self, k, v)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if not k.startswith("_") and v is not None}
        d["quant_method"] = QUANT_METHOD
        return d

    def get_loading_attributes(self) -> dict:
        return {}
