"""GPU pack (kernels/pack.cu through glyd._gpu.pack) against glyd.pack on the CPU:
the same planes byte for byte, the same groups and checksum. Skipped cleanly
without a GPU.
"""

from __future__ import annotations

import time

import pytest
import torch

import glyd

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")

if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

DEV = torch.device("cuda", 0)


def weights(shape, seed, scale=0.02, specials=True):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(shape, generator=g) * scale).to(torch.bfloat16)
    if specials and w.numel():
        flat = w.view(-1)
        n = flat.numel()
        idx = torch.randint(0, n, (max(1, n // 300),), generator=g)
        vals = torch.tensor([0.0, -0.0, 1e-39, -3e-40, 30.0, -1e5, 2e-9, 1e30, float("inf"), float("nan")],
                            dtype=torch.bfloat16)
        flat[idx] = vals[torch.randint(0, len(vals), (len(idx),), generator=g)]
    return w


def same_as_cpu(w_cpu, groups=1, layout="fixed12"):
    want = glyd.pack(w_cpu, layout=layout, groups=groups)
    got = _gpu.pack(w_cpu.to(DEV), layout=layout, groups=groups)
    assert got.shape == want.shape
    assert got.checksum == want.checksum, f"checksum {got.checksum:08x} != {want.checksum:08x}"
    assert got.groups == want.groups, f"groups differ: {got.groups[:2]} vs {want.groups[:2]}"
    for name, t in want.planes.items():
        g = got.planes[name]
        assert g.numel() == t.numel(), f"plane {name}: {g.numel()} bytes, want {t.numel()}"
        bad = (g != t).nonzero()
        assert bad.numel() == 0, f"plane {name}: {bad.numel()} bytes differ, first at {bad[:5].flatten().tolist()}"
    got.verify()
    assert torch.equal(glyd.unpack(got).view(torch.int16), w_cpu.contiguous().view(torch.int16))
    return got


@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 3000), (37, 129), (4097,), (1,), (), (3, 5, 7), (65536 + 3,)])
def test_random_shapes(shape):
    same_as_cpu(weights(shape, seed=sum(shape) + len(shape)))


def test_empty():
    for shape in [(0,), (4, 0), (0, 16)]:
        same_as_cpu(torch.empty(shape, dtype=torch.bfloat16))


def test_all_bit_patterns():
    w = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    same_as_cpu(w.clone())
    same_as_cpu(w.reshape(256, 256).clone(), groups=8)
    # A permutation: escapes spread over every tile.
    perm = torch.randperm(65536, generator=torch.Generator().manual_seed(5))
    same_as_cpu(w[perm].reshape(16, 4096).clone(), groups=4)


@pytest.mark.parametrize("groups,shape", [(2, (2, 4097)), (8, (64, 1000)), (4, (4, 1)), (3, (3, 70001)), (128, (128, 640))])
def test_groups(groups, shape):
    # Groups with different scales: different bases.
    w = weights(shape, seed=groups)
    scale = torch.logspace(-6, 2, shape[0]).to(torch.bfloat16).reshape(-1, *([1] * (len(shape) - 1)))
    same_as_cpu((w.float() * scale.float()).to(torch.bfloat16), groups=groups)


def test_many_escapes():
    # Half the elements outside any window of 15 exponents.
    g = torch.Generator().manual_seed(9)
    w = torch.randint(-32768, 32768, (300, 1001), generator=g, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    same_as_cpu(w.clone())


def test_unaligned_source():
    # A view starting at an odd element: 2-byte aligned only (scalar paths).
    base = weights((1, 8193), seed=3).reshape(-1)
    same_as_cpu(base[1:].clone())  # the clone is aligned; the next line is not
    w = base.to(DEV)[1:]
    got = _gpu.pack(w)
    want = glyd.pack(base[1:].contiguous())
    assert got.checksum == want.checksum
    for name, t in want.planes.items():
        assert torch.equal(got.planes[name], t), name


@pytest.mark.parametrize("groups,shape", [(1, (4096, 4096)), (1, (37, 129)), (1, (4097,)), (1, ()), (3, (3, 70001)),
                                          (8, (64, 1000))])
def test_smallest(groups, shape):
    same_as_cpu(weights(shape, seed=7 + groups), groups=groups, layout="smallest")


def test_smallest_all_bit_patterns():
    w = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    same_as_cpu(w.clone(), layout="smallest")
    perm = torch.randperm(65536, generator=torch.Generator().manual_seed(6))
    same_as_cpu(w[perm].reshape(16, 4096).clone(), groups=4, layout="smallest")
    same_as_cpu(torch.empty((4, 0), dtype=torch.bfloat16), groups=2, layout="smallest")


@pytest.mark.parametrize("layout", ["fixed12", "smallest"])
def test_throughput(capsys, layout):
    w = weights((8192, 8192), seed=11).to(DEV)  # 128 MiB of bf16
    grs, planes, crc = _gpu.pack_planes(w, layout)
    torch.cuda.synchronize()
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        grs, planes, crc = _gpu.pack_planes(w, layout)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    gbs = w.numel() * 2 / dt / 1e9
    with capsys.disabled():
        print(f"\nGPU pack {layout} [8192, 8192] bf16: {dt * 1e3:.2f} ms, {gbs:.1f} GB/s of bf16 in (planes on the GPU)")
    want = glyd.pack(w.cpu(), layout=layout)
    assert crc == want.checksum
    for name, t in want.planes.items():
        assert torch.equal(planes[name].cpu(), t), name


@pytest.mark.parametrize("layout", ["fixed12", "smallest"])
def test_pack_device_decodes(layout):
    # Planes packed on the GPU, decoded on the GPU: the original bits; the fused
    # linear agrees with the one on CPU-packed planes exactly.
    w = weights((512, 1024), seed=21)
    dt = _gpu.pack_device(w.to(DEV), layout=layout)
    out = dt.decode()
    assert torch.equal(out.cpu().view(torch.int16), w.view(torch.int16))
    grouped = _gpu.pack_device(weights((4, 64, 96), seed=22).to(DEV), layout=layout, groups=4)
    assert grouped.decode().shape == (4, 64, 96)
    if layout == "fixed12":
        x = torch.randn(3, 1024, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).to(DEV)
        ref = _gpu.DeviceTensor(glyd.pack(w), DEV).linear(x)
        # compare bits: the weights hold Inf/NaN, so the outputs do too (NaN != NaN)
        assert torch.equal(dt.linear(x).view(torch.int16), ref.view(torch.int16))


def test_glyd_pack_routes_cuda_tensors_to_the_gpu_packer():
    # glyd.pack of a bf16 CUDA tensor packs on the GPU and gives glyd.pack's CPU bytes
    w = weights((256, 520), seed=31)
    got, want = glyd.pack(w.to(DEV), layout="smallest"), glyd.pack(w, layout="smallest")
    assert got.checksum == want.checksum
    for name in glyd.PLANE_NAMES:
        assert torch.equal(got.planes[name], want.planes[name]), name
