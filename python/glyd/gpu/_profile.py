"""A tiny workload for Nsight Compute: one decode and fused linears on a
gate_up-sized (24576 x 4096) fixed12 weight, each launched 3 times.

    ncu --clock-control none -k regex:glyd_ --launch-skip 3 --launch-count 6 \\
        python3 -m glyd.gpu._profile
"""

import torch

import glyd
from .. import _gpu


def main():
    dev = torch.device("cuda", 0)
    w = (torch.randn(24576, 4096) * 0.02).to(torch.bfloat16)
    dt = _gpu.DeviceTensor(glyd.pack(w), dev)
    out = torch.empty(24576, 4096, dtype=torch.bfloat16, device=dev)
    xs = {t: torch.randn(t, 4096, device=dev).to(torch.bfloat16) for t in (1, 64, 512)}
    for _ in range(3):
        dt.decode(out=out)
    for t, x in xs.items():
        for _ in range(3):
            dt.linear(x)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
