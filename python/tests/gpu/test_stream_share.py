"""Stream shares (glyd._gpu.set_stream_share) on the GPU: Glyd's kernels on a
stream given a share of each SM give the same bits as on any other stream, eager
and replayed from a CUDA graph, for the fused linear's configurations (1 to 300
rows), several weights in one launch, and the decode; a bad share is refused.
Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")
if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

DEV = torch.device("cuda", 0)


def _weight(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)


@pytest.fixture
def stream():
    s = torch.cuda.Stream(DEV)
    yield s
    _gpu.set_stream_share(s, 100)


@pytest.mark.parametrize("rows", [1, 8, 31, 64, 128, 300])
@pytest.mark.parametrize("percent", [75, 25, 1])
def test_linear_same_bits(stream, rows, percent):
    w = _gpu.pack_device(_weight(3000, 1040, rows).to(DEV))
    x = torch.randn(rows, 1040, device=DEV, dtype=torch.bfloat16)
    want = w.linear(x)
    torch.cuda.synchronize()
    _gpu.set_stream_share(stream, percent)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = torch.full_like(want, float("nan"))
        w.linear(x, out=got)
    torch.cuda.synchronize()
    assert torch.equal(got, want)


def test_many_and_decode_same_bits(stream):
    ws = [_gpu.pack_device(_weight(n, 2048, n).to(DEV)) for n in (4096, 4096)]
    many = _gpu.MultiLinear(ws)
    x = torch.randn(1, 2048, device=DEV, dtype=torch.bfloat16)
    want = [t.clone() for t in many.linear(x)]
    dense = ws[0].decode()
    _gpu.set_stream_share(stream, 50)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = many.linear(x)
        decoded = ws[0].decode()
    torch.cuda.synchronize()
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert torch.equal(decoded, dense)


def test_graph_replay_same_bits(stream):
    w = _gpu.pack_device(_weight(8192, 2048, 7).to(DEV))
    x = torch.randn(1, 2048, device=DEV, dtype=torch.bfloat16)
    want = w.linear(x)
    _gpu.set_stream_share(stream, 50)
    y = torch.empty_like(want)
    g = torch.cuda.CUDAGraph()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        w.linear(x, out=y)  # warm: workspace bounds, kernels loaded
        with torch.cuda.graph(g, stream=stream):
            w.linear(x, out=y)
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)


@pytest.mark.parametrize("percent", [0, 101, -5, 50.0, True])
def test_bad_share(stream, percent):
    with pytest.raises((ValueError, TypeError)):
        _gpu.set_stream_share(stream, percent)


def test_not_a_stream():
    with pytest.raises(TypeError, match="torch.cuda.Stream"):
        _gpu.set_stream_share(0, 50)
