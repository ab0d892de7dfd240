"""GlydEmbedding on the GPU: the one implementation of ``GPU_HOOKS["embedding"]``.

A packed ``nn.Embedding`` (:class:`glyd.transformers.modules.GlydEmbedding`)
whose input ids are on a CUDA device calls :func:`embedding_forward`. A lookup
needs only the rows it reads, so a fixed12 bf16 table is never decoded whole:
``glyd._gpu.DeviceTensor.gather`` decodes the looked-up rows (one kernel,
bit-exact, escapes included). The result is bit-identical to ``F.embedding``
on the bf16 table, so the default and ``exact=True`` paths are the same.

Ids outside ``[0, num_embeddings)`` give rows of zeros: the ids are read on the
device only (no synchronization, so CUDA graph capture works), and torch's own
lookup would raise a device-side assert that ends the process's CUDA context.

Falls back to ``F.embedding`` on the table decoded just in time (bit-exact too,
but the whole table for one call) where the kernel does not apply: the
``smallest`` layout, fp16 tables, an embedding dimension that is not a multiple
of 8, ``max_norm`` (which renormalizes the table in place), a compute dtype
other than bf16. Under torch.compile the ctypes call is a graph break.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from . import gpu_linear


def gather_supported(module, holder) -> bool:
    """True if the gather kernel can run this lookup."""
    return (holder.layout == "fixed12" and holder.dtype == torch.bfloat16 and len(holder.shape) == 2
            and holder.num_groups == 1 and holder.shape[1] % 8 == 0 and module.max_norm is None
            and holder.compute_dtype in (None, torch.bfloat16))


@torch.compiler.disable  # a ctypes call: one clean graph break under torch.compile
def _gather(holder, ids: torch.Tensor) -> torch.Tensor:
    return gpu_linear.device_tensor(holder).gather(ids.long())


def embedding_forward(module, ids: torch.Tensor) -> torch.Tensor:
    """GPU_HOOKS["embedding"]: forward of a GlydEmbedding whose ids are on a CUDA device."""
    holder = gpu_linear.weight_holder(module)
    if "_glyd_keep_stored" not in holder.__dict__:
        gpu_linear.embedding_table(holder)
    if (gather_supported(module, holder) and ids.device == holder.device
            and ids.dtype in (torch.int64, torch.int32)):
        return _gather(holder, ids)
    return F.embedding(ids, gpu_linear.decoded_weight(holder, ids.device), module.padding_idx, module.max_norm,
                       module.norm_type, module.scale_grad_by_freq, module.sparse)
