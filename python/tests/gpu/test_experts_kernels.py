"""The experts kernels (kernels/moe.cu) against the Go reference.

glyd._gpu.DeviceExperts: every expert decoded in one launch must give the bits
of glyd.unpack; the grouped fused linear must match, per expert, the fp32
product of its rows and the reference-decoded expert within LINEAR_TOL, write
no row outside the routed ones, and survive bad offsets without a fault.
Outputs are poisoned with NaN before each call. Skipped cleanly without a GPU.
"""

from __future__ import annotations

import pytest
import torch

import glyd

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")

if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

from test_kernels import LINEAR_TOL, bits, weights  # noqa: E402  (same folder: pytest puts it on sys.path)

DEV = torch.device("cuda", 0)


def experts(e, n, k, seed, zero_expert_rows=True, transposed=False):
    """e experts of [n, k] (transposed: stored [in=n, out=k]) with escapes."""
    w = weights((e, n, k), seed=seed)
    if zero_expert_rows:
        w[0, :2] = 0.0  # whole rows of escapes
        w[e - 1, n - 1, ::3] = 0.0
        w[e - 1, :, 1] = 0.0  # a column of escapes
    p = glyd.pack(w, groups=e)
    return w, p, _gpu.DeviceExperts(_gpu.DeviceTensor(p, DEV), transposed=transposed)


@pytest.mark.parametrize("shape", [(4, 48, 64), (8, 16, 40), (3, 5, 7), (1, 32, 128), (16, 96, 256)])
def test_decode_experts_bit_exact(shape):
    w, p, de = experts(*shape, seed=sum(shape))
    ref = glyd.unpack(p)
    assert torch.equal(bits(ref), bits(w))
    out = torch.full(w.shape, float("nan"), dtype=torch.bfloat16, device=DEV)
    de.decode(out=out)
    torch.cuda.synchronize()
    bad = (bits(out.cpu()) != bits(ref)).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} elements differ, first at {bad[:5].tolist()}"


def route(counts, tail=0):
    """offsets (int32, device) for rows grouped by expert with `counts`, plus
    `tail` trailing rows routed nowhere."""
    offs = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32).to(DEV)
    return offs, sum(counts) + tail


def check(w, de, counts, tail=0, bias=False, seed=0, xscale=1.0):
    e, n, k = w.shape
    if de.transposed:  # stored [in, out]
        n, k = k, n
    offs, rows = route(counts, tail)
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (torch.randn(rows, k, generator=g, device=DEV) * xscale).to(torch.bfloat16)
    b = (torch.randn(e, n, generator=g, device=DEV) * 0.1).to(torch.bfloat16) if bias else None
    y = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    de.linear(x, offs, bias=b, out=y)
    wd = w.to(DEV)
    torch.cuda.synchronize()
    s = 0
    for ex, c in enumerate(counts):
        if c:
            ref = x[s:s + c].float() @ (wd[ex].float() if de.transposed else wd[ex].float().T)
            if b is not None:
                ref += b[ex].float()
            got = y[s:s + c].float()
            assert not torch.isnan(got).any(), f"expert {ex}: rows not written"
            lim = LINEAR_TOL * (ref.abs() + ref.pow(2).mean().sqrt())
            worst = ((got - ref).abs() / lim).max().item()
            assert worst <= 1.0, f"expert {ex} ({c} rows): error {worst:.2f} x tolerance"
        s += c
    if tail:
        assert torch.isnan(y[s:]).all(), "rows routed nowhere were written"
    y2 = torch.full_like(y, float("nan"))
    de.linear(x, offs, bias=b, out=y2)
    torch.cuda.synchronize()
    assert torch.equal(bits(y[:s]), bits(y2[:s])), "not deterministic"
    return y


@pytest.mark.parametrize("counts", [
    [1, 0, 0, 0, 0, 0, 0, 0],             # one token, top-1
    [0, 1, 1, 0, 1, 0, 0, 1],             # top-4 of one token
    [3, 0, 9, 1, 0, 17, 0, 8],            # several 8-row tiles per expert
    [0, 0, 0, 0, 0, 0, 0, 0],             # nothing routed
    [12, 0, 15, 16, 9, 20, 0, 30],        # mean <= 16 rows: the 16-row tile (sm_90, k 192: the 32-row one)
    [33, 20, 1, 40, 31, 25, 30, 26],      # mean <= 32 rows: the 32-row tile (sm_90: the 48-row one)
    [40, 40, 40, 40, 40, 40, 40, 40],     # a prompt: the 64-row tile
    [60, 70, 0, 100, 64, 65, 1, 128],     # mean 61 rows: sm_90's 96-row tile (partial, several)
    [70, 130, 0, 300, 64, 65, 1, 128],    # mean > 80 rows: sm_90's 128-row tile (partial, several)
])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_experts(counts, bias):
    w, _, de = experts(8, 80, 192, seed=len(counts) + sum(counts))
    check(w, de, counts, tail=3, bias=bias)


#: core/gpu/moe.go, groupedConfigs: the mma.sync tiles, then the wgmma ones (sm_90 only)
GROUPED = ["glyd_lin_f12g_m1n1w1k8u1", "glyd_lin_f12g_m1n2w1k8u1", "glyd_lin_f12g_m2n4w1k8u1", "glyd_lin_f12g_m1n8w2k4u1"]
GROUPED_SM90 = ["glyd_lin_f12gw_t16k1s4u4p2", "glyd_lin_f12gw_t32k1s4u4p2", "glyd_lin_f12gw_t48k1s4u4p4",
                "glyd_lin_f12gw_t64k1s4u4p4", "glyd_lin_f12gw_t96k1s4u2p2", "glyd_lin_f12gw_t128k1s4u2p2"]


@pytest.mark.parametrize("bias", [False, True])
def test_linear_experts_every_config(bias):
    # every tile forced over experts with 0, 1, partial and several tiles of rows
    names = GROUPED + (GROUPED_SM90 if torch.cuda.get_device_capability(DEV) == (9, 0) else [])
    w, _, de = experts(8, 80, 192, seed=31)
    try:
        for name in names:
            _gpu.force_kernel(name)
            check(w, de, [33, 20, 1, 50, 31, 0, 97, 130], tail=3, bias=bias)
    finally:
        _gpu.force_kernel(None)


def test_linear_experts_shapes_not_tile_multiples():
    w, _, de = experts(5, 37, 64, seed=3)        # 37 rows: a partial 16-row tile
    check(w, de, [2, 0, 11, 1, 5])
    w, _, de = experts(5, 37, 48, seed=3)        # experts of 37 x 48: planes not 16-byte aligned
    with pytest.raises(glyd.UnsupportedError, match="aligned"):
        check(w, de, [2, 0, 11, 1, 5])
    w, _, de = experts(130, 32, 64, seed=4)      # several 32-expert ballots in one scan pass
    counts = [0] * 130
    for e_ in (0, 31, 32, 63, 64, 100, 128, 129):
        counts[e_] = 1 + e_ % 3
    check(w, de, counts)
    w, _, de = experts(300, 16, 32, seed=5)      # > 256 experts: several scan passes
    counts = [0] * 300
    for e_ in (3, 255, 256, 257, 299):
        counts[e_] = 2
    check(w, de, counts)


def safe_experts(n, k, seed, transposed=False):
    """Three experts of [n, k]: expert 1 with exponents 241-254 (base >= 240, so
    the kernels take the safe decode for all: escapes with exponent 0), the
    others random weights times 2^-110."""
    g = torch.Generator().manual_seed(seed)
    e_ = torch.randint(241, 255, (n, k), generator=g)
    sm = torch.randint(0, 256, (n, k), generator=g)
    big = (((sm & 0x80) << 8) | (e_ << 7) | (sm & 0x7F)).to(torch.int32).to(torch.int16).view(torch.bfloat16)
    big.view(-1)[::53] = 0.0
    w = weights((3, n, k), seed=seed + 1) * 2.0**-110
    w[1] = big
    p = glyd.pack(w.contiguous(), groups=3)
    assert max(gr.base for gr in p.groups) >= 240
    return w, _gpu.DeviceExperts(_gpu.DeviceTensor(p, DEV), transposed=transposed)


def test_linear_experts_safe_variant():
    # one expert with base >= 240: every expert runs the _safe kernel (escapes decoded as 0)
    w, de = safe_experts(32, 64, seed=14)
    check(w, de, [0, 5, 0], xscale=2.0**-120)
    check(w, de, [2, 0, 3])
    for counts in ([0, 40, 0], [0, 90, 0], [0, 150, 0]):  # the 16-, 32- and 64-row tiles (sm_90: 16, 64, 64)
        check(w, de, counts, xscale=2.0**-120)  # (only expert 1: x * the others would underflow to 0)


def test_bad_offsets_do_not_fault():
    w, _, de = experts(4, 32, 64, seed=6)
    x = torch.randn(10, 64, device=DEV).to(torch.bfloat16)
    y = torch.zeros(10, 32, dtype=torch.bfloat16, device=DEV)
    for offs in ([5, 3, 20, -7], [2**31 - 1, -2**31, 4, 4], [10, 10, 10, 10]):
        de.linear(x, torch.tensor(offs, dtype=torch.int32, device=DEV), out=y)
    torch.cuda.synchronize()  # no illegal address


def test_argument_errors():
    w, _, de = experts(4, 32, 64, seed=7)
    x = torch.randn(6, 64, device=DEV).to(torch.bfloat16)
    offs = torch.tensor([1, 2, 3, 6], dtype=torch.int32, device=DEV)
    with pytest.raises(glyd.InvalidArgumentError, match="x must be"):
        de.linear(x.float(), offs)
    with pytest.raises(glyd.InvalidArgumentError, match="offsets"):
        de.linear(x, offs.long())
    with pytest.raises(glyd.InvalidArgumentError, match="offsets"):
        de.linear(x, offs[:3])
    with pytest.raises(glyd.InvalidArgumentError, match="bias"):
        de.linear(x, offs, bias=torch.zeros(4, 31, dtype=torch.bfloat16, device=DEV))
    with pytest.raises(glyd.InvalidArgumentError, match="out"):
        de.linear(x, offs, out=torch.empty(6, 31, dtype=torch.bfloat16, device=DEV))
    p = glyd.pack(weights((4, 32, 64), seed=8), layout="smallest", groups=4)
    with pytest.raises(glyd.InvalidArgumentError, match="fixed12"):
        _gpu.DeviceExperts(_gpu.DeviceTensor(p, DEV))


def test_graph_capture_new_routing():
    w, _, de = experts(8, 64, 128, seed=9)
    rows = 8
    x = torch.empty(rows, 128, dtype=torch.bfloat16, device=DEV)
    offs = torch.empty(8, dtype=torch.int32, device=DEV)
    y = torch.empty(rows, 64, dtype=torch.bfloat16, device=DEV)
    x.copy_(torch.randn(rows, 128, device=DEV))
    offs.copy_(torch.tensor([1, 1, 3, 3, 3, 6, 7, 8], dtype=torch.int32))
    de.linear(x, offs, out=y)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        de.linear(x, offs, out=y)
    for trial, counts in enumerate(([0, 0, 8, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1], [0, 3, 0, 0, 2, 0, 0, 3])):
        x.copy_(torch.randn(rows, 128, device=DEV))
        offs.copy_(torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32))
        y.fill_(float("nan"))
        graph.replay()
        want = torch.empty_like(y)
        de.linear(x, offs, out=want)
        torch.cuda.synchronize()
        assert torch.equal(bits(y), bits(want)), f"replay {trial} differs from an eager call"


@pytest.mark.parametrize("counts", [
    [1, 0, 0, 0],                  # one token, top-1 (Llama 4 decode)
    [0, 2, 1, 0],                  # a 2-row expert: the 4-token pass with padding
    [5, 0, 9, 3],                  # several 4-token passes and a 1-token remainder
    [0, 0, 0, 0],
])
def test_linear_experts_transposed(counts):
    w, _, de = experts(4, 320, 264, seed=sum(counts) + 20, transposed=True)  # [in=320, out=264]
    check(w, de, counts, tail=2)


def test_linear_experts_transposed_wide():
    # Llama-4-like proportions (in 640, out 2048): many column tiles and input-row splits
    w, _, de = experts(3, 640, 2048, seed=21, transposed=True)
    check(w, de, [0, 1, 0])
    check(w, de, [2, 3, 4])


def test_linear_experts_transposed_one_token_passes():
    # at most one row per expert on average: the one-token kernel, which loops over an
    # expert's rows one at a time (expert 1 has three)
    w, _, de = experts(8, 320, 264, seed=24, transposed=True)
    check(w, de, [0, 3, 0, 0, 0, 0, 1, 0], tail=1)


def test_linear_experts_transposed_tall():
    # 8,320 input rows: 32 splits of 260 rows, so a warp's 32-row escape chunks wrap
    # (rows 0 and 1 of expert 0 are all escapes: 64 records each); both kernels
    w, _, de = experts(2, 8320, 64, seed=25, transposed=True)
    check(w, de, [1, 0])
    check(w, de, [2, 3], tail=1)


def test_linear_experts_transposed_safe_variant():
    # one expert with base >= 240: the transposed kernels decode escapes with exponent 0
    # for every expert (else base + 15, corrected by the escape records alike)
    w, de = safe_experts(64, 32, seed=26, transposed=True)  # stored [in=64, out=32]
    check(w, de, [0, 1, 0], xscale=2.0**-120)     # the one-token kernel
    check(w, de, [0, 6, 0], xscale=2.0**-120)     # the 4-token passes
    check(w, de, [2, 0, 3])


def test_linear_experts_transposed_errors():
    w, _, de = experts(2, 64, 32, seed=22, transposed=True)
    x = torch.randn(3, 64, device=DEV).to(torch.bfloat16)
    offs = torch.tensor([1, 3], dtype=torch.int32, device=DEV)
    with pytest.raises(glyd.InvalidArgumentError, match="bias"):
        de.linear(x, offs, bias=torch.zeros(2, 32, dtype=torch.bfloat16, device=DEV))
    w, _, de = experts(2, 64, 36, seed=23, transposed=True)  # out % 8 != 0
    with pytest.raises(glyd.UnsupportedError, match="out % 8"):
        de.linear(x, offs)


# ---- routing kernels (glyd_moe_route, glyd_moe_combine) -------------------------------------------

import moe_reference  # noqa: E402  (python/tests: on sys.path through its conftest)
from glyd.errors import InvalidArgumentError, UnsupportedError  # noqa: E402


def routing(tokens, k, experts, total, seed, bad=0.0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    ids = torch.randint(0, total, (tokens * k,), generator=g, device=DEV)
    if bad:
        drop = torch.rand(tokens * k, generator=g, device=DEV) < bad
        junk = torch.randint(-3, 3, (tokens * k,), generator=g, device=DEV)
        ids = torch.where(drop, torch.where(junk < 0, junk, total + junk), ids)
    return ids


@pytest.mark.parametrize("tokens,k,experts,total,bad", [
    (1, 8, 128, 128, 0.0), (1, 1, 16, 16, 0.0), (7, 2, 8, 8, 0.0), (64, 8, 128, 128, 0.1),
    (300, 6, 64, 96, 0.05), (2048, 8, 256, 256, 0.0), (1, 4, 3000, 4000, 0.5), (0, 8, 128, 128, 0.0)])
def test_moe_route_equals_a_stable_sort(tokens, k, experts, total, bad):
    ids = routing(tokens, k, experts, total, seed=tokens * 31 + k, bad=bad)
    offs, tok, rows = _gpu.moe_route(ids, k, experts, total)
    want = moe_reference.moe_route(ids, k, experts, total)
    for got, ref, name in zip((offs, tok, rows), want, ("offsets", "tokens", "rows")):
        assert torch.equal(got, ref), name


def test_moe_route_largest():
    k, experts = 8, 2000
    ids = routing(_gpu.MOE_ROUTE_MAX_PAIRS // k, k, experts, 4000, seed=5, bad=0.01)
    for got, ref in zip(_gpu.moe_route(ids, k, experts, 4000), moe_reference.moe_route(ids, k, experts, 4000)):
        assert torch.equal(got, ref)
    with pytest.raises(UnsupportedError, match="at most"):
        _gpu.moe_route(torch.zeros(_gpu.MOE_ROUTE_MAX_PAIRS + k, dtype=torch.int64, device=DEV), k, experts)


@pytest.mark.parametrize("tokens,k,hidden,experts,total,bad", [
    (1, 8, 2048, 128, 128, 0.0), (5, 2, 4096, 8, 8, 0.2), (33, 6, 1000, 64, 96, 0.1), (3, 1, 13, 4, 6, 0.3)])
def test_moe_combine_bits(tokens, k, hidden, experts, total, bad):
    ids = routing(tokens, k, experts, total, seed=hidden + k, bad=bad)
    _, _, rows = _gpu.moe_route(ids, k, experts, total)
    g = torch.Generator(device=DEV).manual_seed(hidden)
    x = torch.randn(tokens, hidden, generator=g, device=DEV).to(torch.bfloat16)
    d = torch.randn(tokens * k, hidden, generator=g, device=DEV).to(torch.bfloat16)
    w = torch.rand(tokens, k, generator=g, device=DEV)
    got = _gpu.moe_combine(x, d, w, ids, rows, experts, total)
    assert torch.equal(got, moe_reference.moe_combine(x, d, w, ids, rows, experts, total))


def test_moe_routing_graph_capture():
    k, experts = 8, 128
    ids = routing(4, k, experts, experts, seed=1)
    x = torch.randn(4, 256, device=DEV).to(torch.bfloat16)
    d = torch.randn(4 * k, 256, device=DEV).to(torch.bfloat16)
    w = torch.rand(4, k, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _gpu.moe_route(ids, k, experts)  # warm-up (module load) outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            offs, tok, rows = _gpu.moe_route(ids, k, experts)
            out = _gpu.moe_combine(x, d, w, ids, rows, experts)
    torch.cuda.current_stream().wait_stream(s)
    ids.copy_(routing(4, k, experts, experts, seed=2))  # new routing, same buffers
    g.replay()
    torch.cuda.synchronize()
    ref = moe_reference.moe_route(ids, k, experts)
    assert torch.equal(offs, ref[0]) and torch.equal(tok, ref[1]) and torch.equal(rows, ref[2])
    assert torch.equal(out, moe_reference.moe_combine(x, d, w, ids, rows, experts))


def test_moe_routing_bad_arguments():
    ids = torch.zeros(8, dtype=torch.int64, device=DEV)
    with pytest.raises(InvalidArgumentError, match="ids"):
        _gpu.moe_route(ids.int(), 8, 4)
    with pytest.raises(InvalidArgumentError, match="multiple"):
        _gpu.moe_route(ids, 3, 4)
    x = torch.zeros(1, 16, dtype=torch.bfloat16, device=DEV)
    with pytest.raises(InvalidArgumentError, match="d must be"):
        _gpu.moe_combine(x, torch.zeros(7, 16, dtype=torch.bfloat16, device=DEV), torch.ones(1, 8, device=DEV),
                         ids, ids.int(), 4)


# ---- the SwiGLU and Llama 4's routing ids (glyd_moe_silu_mul, glyd_moe_row_experts) -------------

def _special_bf16(g, shape):
    """randn bf16 with every kind of value sprinkled in: ±0, ±inf, NaN, huge, subnormal."""
    x = torch.randn(shape, generator=g, device=DEV).mul_(4).to(torch.bfloat16)
    flat = x.view(-1)
    picks = torch.randint(0, flat.numel(), (64,), generator=g, device=DEV)
    vals = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3e38, -3e38, 1e-40, -1e-40, 88.7,
                         -88.7, 100.0, -100.0, 1e-3, -1e-3, 2.0], device=DEV).to(torch.bfloat16)
    flat[picks] = vals.repeat(4)
    return x


def _same_values(got, ref):
    """Equal bits, NaN anywhere the reference has NaN (a NaN's payload aside)."""
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got.view(torch.int16)[~nan], ref.view(torch.int16)[~nan])


@pytest.mark.parametrize("rows,inter", [(1, 768), (3, 13), (64, 1536), (300, 8), (70000, 8), (0, 16)])
def test_moe_silu_mul_is_torchs_bits(rows, inter):
    g = torch.Generator(device=DEV).manual_seed(rows * 7 + inter)
    proj = _special_bf16(g, (rows, 2 * inter)) if rows else torch.empty(0, 2 * inter, dtype=torch.bfloat16,
                                                                        device=DEV)
    got = _gpu.moe_silu_mul(proj)
    gate, up = proj.chunk(2, dim=-1)
    _same_values(got, torch.nn.functional.silu(gate) * up)


def test_moe_silu_mul_bad_arguments():
    with pytest.raises(InvalidArgumentError, match="2 \\* inter"):
        _gpu.moe_silu_mul(torch.zeros(2, 7, dtype=torch.bfloat16, device=DEV))
    with pytest.raises(InvalidArgumentError, match="x must be"):
        _gpu.moe_silu_mul(torch.zeros(2, 8, dtype=torch.float16, device=DEV))


@pytest.mark.parametrize("experts,per,hidden", [(16, 1, 5120), (16, 16, 5120), (4, 3, 13), (128, 5, 64)])
def test_moe_row_experts_marks_the_nonzero_rows(experts, per, hidden):
    g = torch.Generator(device=DEV).manual_seed(experts * per + hidden)
    rows = experts * per
    x = torch.randn(rows, hidden, generator=g, device=DEV).to(torch.bfloat16)
    keep = torch.rand(rows, generator=g, device=DEV) < 0.3
    x[~keep] = 0
    x[1::7] = -0.0                                    # negative zeros are zero
    x[2::11] = 0
    x[2::11, -1] = 1e-40                              # one subnormal at the row's end
    x[3::13] = 0
    x[3::13, hidden // 2] = float("nan")              # a NaN is not zero
    assert torch.equal(_gpu.moe_row_experts(x, per), moe_reference.moe_row_experts(x, per))


# ---- Llama 4's top-1 routing (glyd_moe_top1, glyd_moe_gather_scale) ------------------------------

@pytest.mark.parametrize("tokens,experts", [(1, 16), (7, 16), (300, 128), (5, 40), (64, 1), (0, 16)])
@pytest.mark.parametrize("values", ["randn", "ties", "special"])
def test_moe_top1_is_topk_and_sigmoid(tokens, experts, values):
    g = torch.Generator(device=DEV).manual_seed(tokens * 131 + experts)
    if values == "randn":
        logits = torch.randn(tokens, experts, generator=g, device=DEV).to(torch.bfloat16)
    elif values == "ties":  # few distinct values: many equal maxima, ±0 among them
        logits = torch.randint(-2, 2, (tokens, experts), generator=g, device=DEV).to(torch.bfloat16)
        logits[logits == 0] = torch.where(torch.rand(int((logits == 0).sum()), generator=g, device=DEV) < 0.5,
                                          -0.0, 0.0).to(torch.bfloat16)
    else:
        logits = _special_bf16(g, (tokens, experts)) if tokens else torch.empty(0, experts, dtype=torch.bfloat16,
                                                                                device=DEV)
    ids, score = _gpu.moe_top1(logits)
    top, want = torch.topk(logits, 1, dim=1)
    assert torch.equal(ids, want.reshape(-1))
    _same_values(score, torch.sigmoid(top.float()).to(torch.bfloat16))


@pytest.mark.parametrize("tokens,hidden", [(1, 5120), (9, 13), (300, 64), (0, 8)])
def test_moe_gather_scale_is_torchs_bits(tokens, hidden):
    g = torch.Generator(device=DEV).manual_seed(tokens + hidden)
    x = _special_bf16(g, (tokens, hidden)) if tokens else torch.empty(0, hidden, dtype=torch.bfloat16, device=DEV)
    score = torch.rand(tokens, 1, generator=g, device=DEV).to(torch.bfloat16)
    tok = torch.randperm(tokens, generator=g, device=DEV).to(torch.int32)
    _same_values(_gpu.moe_gather_scale(x, tok, score), (x * score).index_select(0, tok))


def test_moe_top1_gather_bad_arguments():
    with pytest.raises(InvalidArgumentError, match="logits must be"):
        _gpu.moe_top1(torch.zeros(2, 8, dtype=torch.float32, device=DEV))
    x = torch.zeros(2, 16, dtype=torch.bfloat16, device=DEV)
    tok = torch.zeros(2, dtype=torch.int32, device=DEV)
    with pytest.raises(InvalidArgumentError, match="tokens"):
        _gpu.moe_gather_scale(x, tok.long(), torch.zeros(2, 1, dtype=torch.bfloat16, device=DEV))
    with pytest.raises(InvalidArgumentError, match="score"):
        _gpu.moe_gather_scale(x, tok, torch.zeros(3, dtype=torch.bfloat16, device=DEV))
