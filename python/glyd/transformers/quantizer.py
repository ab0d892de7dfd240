"""GlydHfQuantizer: transformers' hook into loading Glyd checkpoints.

Modelled on transformers' fine-grained FP8 quantizer. Only pre-packed
checkpoints load (``requires_calibration``); nothing is packed at load time.

* ``update_tp_plan`` (the first hook transformers calls with the config) removes
  the ``transformers_weights`` guard, so transformers finds the shards.
* ``validate_environment`` refuses a format newer than this glyd reads.
* ``_process_model_before_weight_loading`` (model on the meta device) opens the
  checkpoint's descriptor and turns every module that has packed tensors into a
  packed module (modules.install) with uint8 placeholder planes of their exact
  sizes, so device_map="auto" plans with the packed sizes and transformers loads
  the planes like any parameter.
  A tied output embedding whose table is packed (saved once, as the input
  embedding: families.tied_table) becomes a packed Linear too, its planes tied
  to the table's (per-plane entries in the model's tied-weights mapping in
  place of the weight's, so transformers ties them and reports nothing
  missing).
* ``_process_model_after_weight_loading`` applies the load options
  (exact, cache_decoded, compute dtype), makes such a tied pair share one
  PackedWeight (one decode cache, one device state) and checks every tensor's
  structure.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import types

import torch
from transformers.quantizers.base import HfQuantizer

from .. import _lib
from ..checkpoint import Reader
from ..errors import CorruptError, VersionError
from .config import GUARD, format_version
from .modules import PackedWeight, attach, holder_name, install, iter_packed_modules, scratch_key
from .families import is_experts_module

logger = logging.getLogger("glyd.transformers")

#: Options of the current glyd.from_pretrained call (exact, cache_decoded).
_LOAD_OPTIONS: contextvars.ContextVar = contextvars.ContextVar("glyd_load_options", default={})


@contextlib.contextmanager
def load_options(**opts):
    token = _LOAD_OPTIONS.set(dict(opts))
    try:
        yield
    finally:
        _LOAD_OPTIONS.reset(token)


def newest_format() -> int:
    return int(_lib.load().glyd_format_version())


def check_format(fmt: str, where: str) -> None:
    v = format_version(fmt)
    newest = newest_format()
    if v < 1:
        raise CorruptError(19, f"{where}: unknown checkpoint format {fmt!r} in quantization_config")
    if v > newest:
        raise VersionError(
            16, f"{where}: checkpoint format {fmt} is newer than this glyd reads (glyd-v1 .. glyd-v{newest}); "
                f"upgrade glyd")


def _shard_plane_keys(checkpoint_files) -> set:
    """Every tensor name in the shards (read from the safetensors headers only)."""
    from safetensors import safe_open

    keys = set()
    for f in checkpoint_files:
        with safe_open(f, framework="pt") as sf:
            keys.update(sf.keys())
    return keys


def _tie_to_packed_tables(model) -> list:
    """Each tied weight of ``model`` whose source is now packed and whose target
    is an nn.Linear (a tied lm_head; families.tied_table): the target becomes a
    packed Linear with placeholder planes, and the model's tied-weights mapping
    ties those planes to the source's instead of the weight (transformers would
    look the packed source up as a parameter). Returns (target module, attr,
    source module, attr) of each."""
    tied = getattr(model, "all_tied_weights_keys", None)
    out = []
    for tgt, src in list((tied or {}).items()):
        smod, _, sattr = src.rpartition(".")
        tmod, _, tattr = tgt.rpartition(".")
        try:
            s, t = model.get_submodule(smod), model.get_submodule(tmod)
        except AttributeError:
            continue
        if sattr not in (s.__dict__.get("_glyd_attrs") or {}) or type(t) is not torch.nn.Linear:
            continue
        sh = s._modules[holder_name(sattr)]
        lengths = {k[len("glyd_"):]: p.numel() for k, p in sh._parameters.items() if p is not None}
        install(t, tmod, {tattr: PackedWeight(tattr, sh.layout, sh.dtype, sh.shape, sh.groups, sh.checksum, lengths,
                                              device="meta", scratch_key=scratch_key(tmod, tattr))},
                experts=False)
        del tied[tgt]
        for k in sh._parameters:
            tied[f"{tmod}.{holder_name(tattr)}.{k}"] = f"{smod}.{holder_name(sattr)}.{k}"
        out.append((tmod, tattr, smod, sattr))
    return out


def get_expanded_tied_weights_keys(self, *args, **kwargs):
    """transformers' tied-weights mapping of a loaded model without the pairs
    that already share one packed table (a tied lm_head, _tie_to_packed_tables):
    model.tie_weights() would look the packed table up as a parameter and
    raise; with this, it re-ties the other pairs and leaves those as they are.
    Bound to the model instance at load (named as the method it stands in for,
    so that a pickled model finds it again)."""
    keys = type(self).get_expanded_tied_weights_keys(self, *args, **kwargs)
    return {t: s for t, s in keys.items() if t not in self._glyd_packed_ties}


class GlydHfQuantizer(HfQuantizer):
    """Loads Glyd packed checkpoints into ordinary transformers models."""

    requires_calibration = True
    required_packages = []

    def __init__(self, quantization_config, **kwargs):
        super().__init__(quantization_config, **kwargs)
        self.dtype = None
        self.checkpoint_dir = None
        self.packed_names: list = []
        self.shared: list = []  # (output module, attr, table module, attr) tied to a packed table

    # -- environment and config ----------------------------------------------------------
    def validate_environment(self, *args, **kwargs):
        check_format(getattr(self.quantization_config, "format", "glyd-v1"), "quantization_config")

    def update_tp_plan(self, config):
        # First hook with the config: drop the guard so transformers finds the shards.
        for c in (config, *(getattr(config, k, None) for k in ("text_config",))):
            if c is not None and getattr(c, "transformers_weights", None) == GUARD:
                try:
                    delattr(c, "transformers_weights")
                except AttributeError:
                    c.transformers_weights = None
        return config

    def update_dtype(self, dtype):
        return dtype

    # -- model surgery ---------------------------------------------------------------------
    def preprocess_model(self, model, dtype=None, **kwargs):
        self.dtype = dtype
        return super().preprocess_model(model, dtype=dtype, **kwargs)

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, device_map=None, **kwargs):
        if not checkpoint_files:
            raise CorruptError(19, "a Glyd checkpoint needs its safetensors shards and glyd.fb descriptor")
        directory = os.path.dirname(os.path.abspath(checkpoint_files[0]))
        self.checkpoint_dir = directory
        keys = _shard_plane_keys(checkpoint_files)
        # transformers runs this hook under torch.device("meta"); the reader's tensors must be real.
        with torch.device("cpu"), Reader(directory) as reader:
            check_format(reader.format, directory)
            by_module: dict = {}
            for name in reader.names():
                info = reader.info(name)
                if info.layout == "raw":
                    continue
                module_name, _, hname = name.rpartition(".")
                by_module.setdefault(module_name, []).append((hname, name, info))
            self.packed_names = []
            for module_name, entries in by_module.items():
                try:
                    module = model.get_submodule(module_name)
                except AttributeError:
                    raise CorruptError(
                        12, f"{directory}: packed tensor {entries[0][1]!r} belongs to module {module_name!r}, "
                            f"which {type(model).__name__} does not have") from None
                params = {holder_name(a): a for a in list(module._parameters) + list(module._buffers)}
                holders = {}
                for hname, name, info in entries:
                    attr = params.get(hname)
                    if attr is None:
                        raise CorruptError(
                            12, f"{directory}: packed tensor {name!r} matches no parameter of "
                                f"{type(module).__name__} at {module_name!r}")
                    packed = reader.packed(name)
                    lengths = {p: t.numel() for p, t in packed.planes.items() if f"{name}.glyd_{p}" in keys}
                    holders[attr] = PackedWeight(attr, info.layout, info.dtype, info.shape, packed.groups,
                                                 info.checksum, lengths, device="meta",
                                                 scratch_key=scratch_key(module_name, attr))
                    self.packed_names.append(name)
                    packed.close()
                experts = is_experts_module(module) and not isinstance(module, torch.nn.Linear)
                install(module, module_name, holders, experts=experts)
        self.shared = _tie_to_packed_tables(model)
        logger.info("glyd: %d packed tensors in %s", len(self.packed_names), directory)
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        opts = _LOAD_OPTIONS.get()
        exact = bool(opts.get("exact", False))
        cache = opts.get("cache_decoded")  # None: linears cached, experts decoded per call
        compute = self.dtype if isinstance(self.dtype, torch.dtype) else None
        for tmod, tattr, smod, sattr in self.shared:  # one holder for the tied pair
            model.get_submodule(tmod)._modules[holder_name(tattr)] = model.get_submodule(smod)._modules[
                holder_name(sattr)]
        if self.shared:
            model._glyd_packed_ties = frozenset(f"{tmod}.{tattr}" for tmod, tattr, _, _ in self.shared)
            model.get_expanded_tied_weights_keys = types.MethodType(get_expanded_tied_weights_keys, model)
        for _, m in iter_packed_modules(model):
            m.exact = exact
            experts = hasattr(m, "_glyd_routing_arg")
            for holder in m.glyd_weights().values():
                holder.materialize_empty_planes()
                holder.cache_decoded = (not experts) if cache is None else bool(cache)
                holder.compute_dtype = compute if compute is not None and compute != holder.dtype else None
                holder.drop_cache()
                holder.cache_armed = True
                if holder.device.type == "cpu":
                    holder.packed()  # validates the structure of the loaded planes
        attach(model)  # routing that lives outside the packed module (DBRX): only routed experts
        return model

    # -- capabilities ------------------------------------------------------------------------
    def is_serializable(self):
        # model.save_pretrained cannot write the descriptor; glyd.save_pretrained(model, dir) can.
        return False

    @property
    def is_trainable(self) -> bool:
        return False

    @property
    def is_compileable(self) -> bool:
        return False

    def _dequantize(self, model, dtype=None):
        """Replace every packed parameter by its decoded tensor (model.dequantize())."""
        from torch import nn

        for name, m in list(iter_packed_modules(model)):
            holders = m.glyd_weights()
            for attr, h in holders.items():
                w = h.decode()
                del m._modules[holder_name(attr)]
                m.__dict__["_glyd_attrs"].pop(attr)
                m._parameters[attr] = nn.Parameter(w if dtype is None else w.to(dtype), requires_grad=False)
            base = [c for c in type(m).__mro__[1:] if not c.__name__.startswith("Glyd")
                    and c.__module__ != __name__.rsplit(".", 1)[0] + ".modules"]
            m.__class__ = base[0]
        return model
