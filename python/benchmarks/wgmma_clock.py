"""Cycle split of one consumer warp and one producer warp of tiles 0 and 100 of the
wgmma fused linear (gate_up of Qwen3-8B, 24576 x 4096) at 16-128 tokens. Needs the
diagnostic library of python/benchmarks/wgmma_clock.sh (GLYD_LIBRARY=build/diag/libglyd.so);
its products are wrong (the counts overwrite y)."""
import torch, glyd
from glyd import _gpu
from glyd.gpu.bench import as_loaded
w = (torch.randn(24576, 4096) * 0.02).to(torch.bfloat16)
dt = as_loaded(_gpu.DeviceTensor(glyd.pack(w), "cuda"))
for rows in (16, 32, 64, 128):
    x = torch.randn(rows, 4096, device="cuda").to(torch.bfloat16)
    for _ in range(3):
        y = dt.linear(x)
    torch.cuda.synchronize()
    v = y.view(torch.int64).view(-1)
    for t in (0, 100):  # each tile's counts: the first 32 outputs of its first row
        d = v[t * 16:t * 16 + 8].tolist()
        tot, ww, dec, full, mma, nkb, ptot, pempty = d
        print(f"rows {rows:3d} {dt.linear_kernel(rows)} tile {t:3d}: nkb {nkb} consumer total {tot} = weights-wait {ww} "
              f"({ww/tot:.0%}) decode {dec} ({dec/tot:.0%}) full-wait {full} ({full/tot:.0%}) mma {mma} ({mma/tot:.0%}); "
              f"per kb {tot/max(nkb,1):.0f}; producer total {ptot} empty-wait {pempty} ({pempty/max(ptot,1):.0%})")
