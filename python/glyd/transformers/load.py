"""glyd.from_pretrained: load a Glyd checkpoint as its ordinary transformers model."""

from __future__ import annotations

import json
import logging
import os

from ..checkpoint import Reader
from ..errors import InvalidArgumentError, NotFoundError
from .config import QUANT_METHOD
from .quantizer import check_format, load_options

logger = logging.getLogger("glyd.transformers")


def read_config(path: str) -> dict:
    """config.json of a checkpoint folder, checked to be a Glyd checkpoint of a readable format."""
    if not os.path.isdir(path):
        raise NotFoundError(4, f"{path}: no such checkpoint folder")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise NotFoundError(4, f"{path}: no config.json; not a transformers checkpoint folder")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    q = cfg.get("quantization_config") or {}
    if q.get("quant_method") != QUANT_METHOD:
        raise InvalidArgumentError(
            1, f"{path} is not a Glyd checkpoint (quantization_config.quant_method is "
               f"{q.get('quant_method')!r}); load it with transformers directly")
    check_format(q.get("format", "glyd-v1"), path)
    return cfg


def model_class(cfg: dict):
    """The transformers class named in config.json's architectures (fallback: Auto classes)."""
    import transformers

    for arch in cfg.get("architectures") or ():
        cls = getattr(transformers, arch, None)
        if cls is not None:
            return cls
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM


def from_pretrained(path, device_map=None, verify: bool = False, exact: bool = False, dtype=None,
                    cache_decoded=None, model_class_=None, **kwargs):
    """Load a Glyd checkpoint folder as the ordinary transformers model class of
    its config (``architectures``), e.g. LlamaForCausalLM, MixtralForCausalLM,
    SwitchTransformersForConditionalGeneration, BertModel.

    Nothing is packed again. On the CPU the packed weights decode to their exact
    bf16 bits and the model computes exactly what the bf16 model computes.

    Args:
        path: the checkpoint folder.
        device_map: as in transformers ("auto", "cpu", "cuda", a dict); sizes are the packed sizes.
        verify: check every tensor against the checksum of its original bytes before loading;
            raises glyd.ChecksumError naming the tensor and the file.
        exact: on a GPU, decode to bf16 then run the torch op of the bf16 model (bit-identical
            to it), instead of the fused kernels. The CPU path is always exact.
        dtype: dtype of the unpacked tensors and of the computation (default: the checkpoint's).
        cache_decoded: keep decoded weights (True), decode at every call (False), or the default
            (None): linear weights cached, expert weights decoded per call, only the routed experts.
        model_class_: a transformers class to use instead of the one config.json names.
        **kwargs: passed to transformers' from_pretrained.
    """
    path = os.fspath(path)
    cfg = read_config(path)
    if verify:
        with Reader(path) as r:
            r.verify_all(progress=kwargs.pop("progress", True))
    cls = model_class_ or model_class(cfg)
    if dtype is not None:
        kwargs["dtype"] = dtype
    with load_options(exact=exact, cache_decoded=cache_decoded):
        model = cls.from_pretrained(path, device_map=device_map, **kwargs)
    return model
