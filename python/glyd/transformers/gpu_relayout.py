"""Packed planes re-laid on the GPU in the arrangement the kernels read best.

Two arrangements, both exact (a permutation of each group's elements, the
holder's groups and plane sizes unchanged), both undone whenever the planes
leave the GPU (``PackedWeight.relaid``: ``packed()`` for saving and
``verify``, ``state_dict``, pickling and copies, ``.to()``):

* the weight of a fused linear (a fixed12 matrix of one group, rows % 16 ==
  0, K % 64 == 0): its sm and code planes in 16-row x 64-column tiles
  (``glyd._gpu.DeviceTensor.tile``; docs/FORMAT.md, "Planes on the GPU"), so
  that the 16 rows a warp multiplies are one run of memory per k-block instead
  of 16. Set by gpu_linear the first time the weight runs on a GPU;
  ``GLYD_TILED=0`` keeps the planes row-major.
* experts stored transposed, below.

Transposed experts.

Llama 4, gpt-oss and Aria keep their experts transposed, ``[E, in, out]``
(y = x @ W[e]). Glyd's grouped tensor-core kernels read the linear layout
``[E, out, in]`` only; the transposed layout has a CUDA-core kernel, 1.1-3x
slower than bf16 from 32 tokens on. So at load (``prepare_experts``) the
planes of such a tensor are re-laid on its GPU: every group (expert)
transposed, i.e. decoded, transposed and packed again by the GPU packer, whose
bytes equal ``glyd.pack``'s.

Exact by construction: fixed12 codes a group by its exponent histogram
(docs/FORMAT.md I.2), which a transposition keeps, so every group keeps its
Base, its escape count and the size of its slice of every plane: the holder's
groups and plane offsets stay as they are, only the bytes inside each slice
move (checked here for every group). The holder (``PackedWeight.relaid``)
re-lays them back whenever they leave the GPU: ``packed()`` (saving,
``verify``), ``state_dict``, pickling and copies, ``.to()``.
"""

from __future__ import annotations

import torch

from .. import _gpu
from ..errors import InvalidArgumentError
from ..tensor import PLANE_NAMES

#: bf16 bytes of experts decoded and transposed at a time (one expert at least).
CHUNK_BYTES = 256 << 20


def relayable(holder) -> bool:
    """True if relayout() can run on the holder's experts: fixed12 bf16 planes
    on a GPU, a 3-D [E, a, b] tensor with one group per expert."""
    s = holder.shape
    return (holder.device.type == "cuda" and holder.layout == "fixed12" and holder.dtype == torch.bfloat16
            and len(s) == 3 and holder.num_groups == s[0] and s[0] > 0)


def relayout(holder, relaid: bool):
    """The holder's planes in the kernels' arrangement (relaid=True; the holder
    must hold the stored one) or the stored one (relaid=False; the holder must
    be relaid), as new device tensors, the holder untouched: a matrix's planes
    tiled (None if its shape has no tiled arrangement), experts' groups
    transposed (synchronizes the current stream once per chunk)."""
    # normal tensors even when the first forward runs under torch.inference_mode():
    # they become parameters that load_state_dict may later write into
    if bool(relaid) == bool(holder.relaid):
        raise InvalidArgumentError(2, f"the packed tensor {holder.attr!r} is already in "
                                      f"{'the kernels' if relaid else 'its stored'} arrangement")
    with torch.inference_mode(False), torch.no_grad():
        if len(holder.shape) == 2:
            return _tile(holder, relaid)
        return _relayout(holder, relaid)


def _tile(holder, tiled: bool):
    from ..errors import UnsupportedError

    if holder.device.type != "cuda" or holder.layout != "fixed12" or holder.dtype != torch.bfloat16:
        raise InvalidArgumentError(1, f"the packed tensor {holder.attr!r} {holder.shape} ({holder.layout}, "
                                      f"{holder.dtype}, on {holder.device}) cannot be tiled: that needs a fixed12 "
                                      f"bf16 matrix on a GPU")
    from .gpu_linear import device_tensor  # the holder's own (its escape index too)

    held = holder.planes()
    try:
        dst = device_tensor(holder).tile(tiled)
    except UnsupportedError:
        if tiled:
            return None  # rows % 16 or K % 64: stays row-major
        raise
    return {**held, "sm": dst.planes["sm"], "code": dst.planes["code"]}


def _relayout(holder, relaid: bool) -> dict:
    if not relayable(holder):
        raise InvalidArgumentError(1, f"the packed tensor {holder.attr!r} {holder.shape} ({holder.layout}, "
                                      f"{holder.dtype}, on {holder.device}) cannot be re-laid: that needs "
                                      f"fixed12 bf16 experts [E, a, b] on a GPU")
    src_shape = holder.device_shape
    E, a, b = src_shape
    held = holder.planes()
    src = _gpu.DeviceTensor(layout="fixed12", shape=src_shape, groups=holder.groups, planes=held,
                            device=holder.device)
    out = {name: torch.empty_like(p) for name, p in held.items()}
    per = max(1, CHUNK_BYTES // max(1, 2 * a * b))
    buf = torch.empty((min(per, E), a, b), dtype=torch.bfloat16, device=holder.device)
    groups = holder.groups
    for e0 in range(0, E, per):
        n = min(per, E - e0)
        for i in range(n):
            src.decode(out=buf[i], group=e0 + i)
        grs, planes, _ = _gpu.pack_planes(buf[:n].transpose(1, 2).contiguous(), "fixed12", groups=n)
        for i, g in enumerate(grs):
            old = groups[e0 + i]
            if (g.elements, g.escapes, g.base) != (old.elements, old.escapes, old.base):
                raise RuntimeError(f"glyd: re-laying expert {e0 + i} of {holder.attr!r} changed its coding "
                                   f"({old.elements}, {old.escapes}, {old.base}) -> ({g.elements}, {g.escapes}, "
                                   f"{g.base}): a bug, please report it")
        for k, name in enumerate(PLANE_NAMES):
            if name not in out:
                continue
            start = groups[e0].offsets[k]
            end = groups[e0 + n].offsets[k] if e0 + n < E else out[name].numel()
            if planes[name].numel() != end - start:
                raise RuntimeError(f"glyd: re-laid experts {e0}..{e0 + n - 1} of {holder.attr!r} take "
                                   f"{planes[name].numel()} bytes of plane {name!r}, not {end - start}: "
                                   f"a bug, please report it")
            if end > start:
                out[name][start:end].copy_(planes[name])
    return out
