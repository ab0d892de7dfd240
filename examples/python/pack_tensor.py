"""Pack one bf16 tensor, write a checkpoint, read it back, verify it.

    PYTHONPATH=python python examples/python/pack_tensor.py
"""

import tempfile
from pathlib import Path

import torch

import glyd

weight = (torch.randn(4096, 1024) * 0.02).to(torch.bfloat16)
for layout in ("fixed12", "smallest"):
    packed = glyd.pack(weight, layout=layout)
    assert torch.equal(glyd.unpack(packed), weight)  # every bit
    print(f"{layout:9s} {packed.bits_per_weight:.3f} bits/weight, {packed.escape_fraction:.2e} escaped")

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "checkpoint"
    with glyd.Writer(path) as w:
        w.add_packed("layer.weight", glyd.pack(weight))
        w.add_raw("layer.bias", torch.zeros(4096))
    with glyd.Reader(path) as r:
        r.verify_all(progress=False)
        assert torch.equal(r.unpack("layer.weight"), weight)
        print(f"{path.name}: {r.format}, {len(r.names())} tensors, verified")
