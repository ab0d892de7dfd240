"""What an embedding lookup costs from a packed table (DeviceTensor.gather)
against torch's F.embedding on the bf16 table: Qwen3-8B's table (151,936 x
4,096, randn x 0.02), 1 / 64 / 2,048 ids, a CUDA graph of 20 lookups, median of
20 replays (glyd.gpu.bench's timing); every lookup checked torch.equal to F.embedding first. On the GPU
machine, in the repository root:

    GLYD_LIBRARY=build/libglyd.so PYTHONPATH=python python3 python/benchmarks/embedding_lookup.py
"""

import torch
import torch.nn.functional as F

import glyd
from glyd import _gpu
from glyd.gpu.bench import _time_graph


def graph_us(fn, calls: int = 20) -> float:
    """Median µs per call of fn in a CUDA graph of `calls` calls (bench._time_graph)."""
    return _time_graph(lambda: [fn() for _ in range(calls)], reps=20) / calls * 1000


def main() -> None:
    torch.manual_seed(0)
    w = (torch.randn(151936, 4096) * 0.02).to(torch.bfloat16)
    dt = _gpu.DeviceTensor(glyd.pack(w), "cuda")
    wg = w.cuda()
    for t in (1, 64, 2048):
        ids = torch.randint(0, w.shape[0], (t,), device="cuda")
        assert torch.equal(dt.gather(ids), F.embedding(ids, wg))
        bf16 = graph_us(lambda: F.embedding(ids, wg))
        packed = graph_us(lambda: dt.gather(ids))
        print(f"lookup of {t} ids: bf16 {bf16:.2f} us, glyd {packed:.2f} us ({packed / bf16:.2f})")
    print(f"table: bf16 {w.numel() * 2 / 1e9:.3f} GB, packed {dt.nbytes / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
