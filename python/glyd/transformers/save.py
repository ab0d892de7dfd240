"""glyd.save_pretrained: pack a transformers model into a checkpoint folder."""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil

import torch

from .. import __version__
from ..checkpoint import Writer
from ..errors import InvalidArgumentError
from ..tensor import LAYOUTS, pack
from .config import GUARD, GlydConfig
from .families import default_skips, pack_plan
from .modules import GlydModule, packed_tensor_name, planes_as_held

logger = logging.getLogger("glyd.transformers")

#: Files of a source folder that save_pretrained does not copy (weights, configs it writes itself).
_NOT_COPIED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".index.json")
_NOT_COPIED_NAMES = {"config.json", "glyd.fb"}


def _copy_source_files(source: str, dest: str) -> None:
    """Tokenizer and other small files of the source folder (not its weights)."""
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(root, source)
        for f in files:
            if f.startswith(".") or f.endswith(_NOT_COPIED_SUFFIXES) or (rel == "." and f in _NOT_COPIED_NAMES):
                continue
            if rel == "." and f == "generation_config.json" and os.path.exists(os.path.join(dest, f)):
                continue
            os.makedirs(os.path.join(dest, rel), exist_ok=True)
            shutil.copy2(os.path.join(root, f), os.path.join(dest, rel, f))


def _state_dict_to_save(model) -> dict:
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    with planes_as_held():  # packed planes come from PackedWeight.packed()
        sd = model.state_dict()
    for k in getattr(model, "_keys_to_ignore_on_save", None) or ():
        sd.pop(k, None)
    # a loaded tied lm_head shares the packed table's planes (quantizer): saved once, as the table's
    for tgt, src in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if ".glyd_" in tgt and tgt in sd and src in sd:
            del sd[tgt]
    return remove_tied_weights_from_state_dict(sd, model)


def write_config(model, directory: str, fmt: str, layout: str, skips) -> None:
    """config.json with quantization_config and the no-glyd guard."""
    config = copy.deepcopy(model.config)
    config.quantization_config = GlydConfig(format=fmt, layout=layout,
                                            modules_to_not_convert=sorted(skips) or None,
                                            glyd_version=__version__)
    dtype = None
    for p in model.parameters():
        if p.is_floating_point():
            dtype = p.dtype
            break
    if dtype is not None:
        config.dtype = str(dtype).split(".")[1]
    config.architectures = [type(model).__name__]
    if hasattr(config, "transformers_weights"):
        delattr(config, "transformers_weights")
    d = json.loads(config.to_json_string(use_diff=True))
    d["transformers_weights"] = GUARD
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")


def save_pretrained(model, save_directory, layout: str = "fixed12", max_shard_size="5GB", tokenizer=None,
                    source=None, overwrite: bool = False, modules_to_not_convert=None, progress: bool = True,
                    workers: int = 0, pack_device=None) -> dict:
    """Pack a transformers model into a Glyd checkpoint folder.

    Packs the weight of every nn.Linear, every untied nn.Embedding and every
    expert weight (one group per expert) in bf16/fp16; everything else is
    stored as it is (see
    glyd.transformers.families for the exact rule). Tensors are packed and
    written one at a time, so memory stays bounded by the largest tensor. The
    folder appears at ``save_directory`` only when complete (written to a
    temporary sibling folder and renamed).

    Args:
        model: a transformers PreTrainedModel (CPU or GPU), or one loaded by glyd.
        save_directory: the checkpoint folder to create.
        layout: "fixed12" (≈12 bits/weight, fastest) or "smallest" (≈11 bits/weight).
        max_shard_size: bytes per safetensors shard, or a string like "5GB".
        tokenizer: saved into the folder when given.
        source: a folder whose tokenizer and other small files are copied (weights are not).
        overwrite: replace an existing folder (only once the new one is complete).
        modules_to_not_convert: more module paths (or suffixes) to keep unpacked.
        progress: show a tqdm progress bar.
        workers: threads for packing on the CPU (0 = all cores).
        pack_device: where to pack: None packs each weight where it is (bf16 weights on a
            GPU pack on that GPU), "cuda" moves each weight to the GPU to pack it there
            (one tensor at a time), "cpu" packs on the CPU. The bytes are the same.

    Returns a summary dict: format, layout, packed/raw tensor counts, bytes.
    """
    if layout not in LAYOUTS or layout == "raw":
        raise InvalidArgumentError(1, f"unknown layout {layout!r}; expected 'fixed12' or 'smallest'")
    q = getattr(model, "hf_quantizer", None)
    if q is not None and getattr(q.quantization_config, "quant_method", None) != "glyd":
        raise InvalidArgumentError(1, f"the model is quantized with {q.quantization_config.quant_method!r}; "
                                      f"Glyd packs bf16/fp16 models")
    save_directory = os.fspath(save_directory)
    if source is not None and not os.path.isdir(source):
        raise InvalidArgumentError(1, f"source {source!r} is not a folder")

    plan = {f"{it.module}.{it.attr}": it for it in pack_plan(model, modules_to_not_convert)}
    packed_holders = {}  # plane key -> (tensor name, holder) of modules already packed (a loaded glyd model)
    for mname, m in model.named_modules():
        if isinstance(m, GlydModule):
            for attr, h in m.glyd_weights().items():
                tname = packed_tensor_name(mname, attr)
                for pname in h._parameters:
                    packed_holders[f"{tname}.{pname}"] = (tname, mname, attr, h)
    if not plan and not packed_holders:
        dtypes = sorted({str(p.dtype).split(".")[1] for p in model.parameters()})
        if not any(d in ("bfloat16", "float16") for d in dtypes):
            hint = ("its parameters are " + ", ".join(dtypes) + "; convert the model first, e.g. "
                    "model.to(torch.bfloat16), if that is what you want (packing is exact for the converted weights)")
        else:
            hint = ("it has no bf16/fp16 weight of an nn.Linear, nn.Embedding or experts module outside the "
                    "modules kept unpacked (tied weights such as a tied lm_head, routers, modules_to_not_convert)")
        raise InvalidArgumentError(
            1, f"nothing to pack in {type(model).__name__}: Glyd packs the bf16/fp16 weights of nn.Linear, "
               f"nn.Embedding and experts modules, and {hint}.")

    skips = default_skips(model) | set(modules_to_not_convert or ())
    sd = _state_dict_to_save(model)
    fmt = "glyd-v2" if any(it.groups > 1 for it in plan.values()) or any(
        h.num_groups > 1 for (_, _, _, h) in packed_holders.values()) else "glyd-v1"

    total = sum(t.numel() * t.element_size() for t in sd.values() if isinstance(t, torch.Tensor))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"glyd pack ({layout})", leave=False)
    stats = {"format": fmt, "layout": layout, "packed_tensors": 0, "raw_tensors": 0,
             "original_bytes": 0, "packed_bytes": 0, "raw_bytes": 0}
    done_holders = set()
    try:
        with Writer(save_directory, max_shard_size=max_shard_size, overwrite=overwrite) as w:
            for key, t in sd.items():
                nbytes = t.numel() * t.element_size()
                item = plan.get(key)
                if item is not None:
                    src = t.detach() if pack_device is None else t.detach().to(pack_device)
                    p = pack(src, layout=layout, groups=item.groups, workers=workers)
                    w.add_packed(packed_tensor_name(item.module, item.attr), p)
                    stats["packed_tensors"] += 1
                    stats["original_bytes"] += p.original_bytes
                    stats["packed_bytes"] += p.packed_bytes
                    p.close()
                elif key in packed_holders:
                    tname, mname, attr, h = packed_holders[key]
                    if tname not in done_holders:
                        done_holders.add(tname)
                        if h.layout == layout:
                            p = h.packed()
                        else:
                            p = pack(h.decode().to(h.dtype).cpu(), layout=layout, groups=h.num_groups,
                                     workers=workers)
                        w.add_packed(tname, p)
                        stats["packed_tensors"] += 1
                        stats["original_bytes"] += p.original_bytes
                        stats["packed_bytes"] += p.packed_bytes
                        nbytes = p.original_bytes
                    else:
                        nbytes = 0
                else:
                    w.add_raw(key, t)
                    stats["raw_tensors"] += 1
                    stats["raw_bytes"] += nbytes
                if bar is not None:
                    bar.update(nbytes)
            write_config(model, w.temp_dir, fmt, layout, skips)
            gen = getattr(model, "generation_config", None)
            if gen is not None and model.can_generate():
                gen.save_pretrained(w.temp_dir)
            if source is not None:
                _copy_source_files(os.fspath(source), w.temp_dir)
            if tokenizer is not None:
                tokenizer.save_pretrained(w.temp_dir)
    finally:
        if bar is not None:
            bar.close()
    ratio = (stats["packed_bytes"] + stats["raw_bytes"]) / max(1, stats["original_bytes"] + stats["raw_bytes"])
    logger.info("glyd: saved %s (%s, %s): %d packed tensors, %d raw; %.1f%% of the original size",
                save_directory, fmt, layout, stats["packed_tensors"], stats["raw_tensors"], 100 * ratio)
    return stats
