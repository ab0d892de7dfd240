"""Torch references of Glyd's routing kernels (glyd._gpu.moe_route / moe_combine /
moe_row_experts),
shared by the GPU tests (bit-for-bit comparisons) and the CPU test of the Python
path that calls them."""

from __future__ import annotations

import torch


def moe_route(ids: torch.Tensor, topk: int, experts: int, total: int | None = None):
    total = experts if total is None else total
    b = torch.where((ids >= 0) & (ids < total), ids, torch.full_like(ids, total))
    _, perm = torch.sort(b, stable=True)
    rows = torch.empty_like(perm)
    rows[perm] = torch.arange(perm.numel(), device=ids.device)
    counts = torch.zeros(total + 1, dtype=torch.int64, device=ids.device).scatter_add_(0, b, torch.ones_like(b))
    offs = torch.cumsum(counts[:experts], 0).to(torch.int32)
    return offs, (perm // topk).to(torch.int32), rows.to(torch.int32)


def moe_combine(x, d, w, ids, rows, experts: int, total: int | None = None) -> torch.Tensor:
    total = experts if total is None else total
    t, _ = x.shape
    k = w.shape[1]
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    ids, rows = ids.view(t, k), rows.view(t, k).long()
    for s in range(k):
        i = ids[:, s].unsqueeze(1)
        routed = d[rows[:, s].clamp(0, d.shape[0] - 1)].float()
        v = torch.where((i >= 0) & (i < experts), routed, torch.where((i >= experts) & (i < total), x.float(), 0.0))
        acc = acc + v * w[:, s:s + 1]  # one rounded multiply, one rounded add: the kernel's order
    return acc.to(torch.bfloat16)


def moe_row_experts(x: torch.Tensor, rows_per_expert: int) -> torch.Tensor:
    nz = (x != 0).any(dim=-1)
    return torch.where(nz, torch.arange(x.shape[0], device=x.device) // rows_per_expert, -1)
