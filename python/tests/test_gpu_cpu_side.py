"""The CPU side of the GPU layer: the glyd::linear custom op (schema, fake
kernel, autograd, torch.compile), the GPU_HOOKS wiring, argument checking,
and the benchmark's command line and tables (no GPU needed)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import glyd
from glyd.errors import InvalidArgumentError
from glyd.transformers import gpu_experts, gpu_linear
from glyd.transformers import modules as M


class _Proj(nn.Module):
    def __init__(self, k=64, n=48, bias=True):
        super().__init__()
        self.proj = nn.Linear(k, n, bias=bias)


def packed_linear(k=64, n=48, bias=True, seed=0, layout="fixed12"):
    torch.manual_seed(seed)
    m = _Proj(k, n, bias).to(torch.bfloat16)
    ref = copy.deepcopy(m.proj)
    gpu_experts.pack_module(m, layout=layout)
    return m.proj, ref


class _Call(nn.Module):
    """Calls the GPU hook directly (GlydLinear.forward takes it only for CUDA inputs)."""

    def __init__(self, lin):
        super().__init__()
        self.lin = lin

    def forward(self, x):
        return gpu_linear.linear_forward(self.lin, x) * 2


def test_hooks_are_filled_by_gpu_linear():
    assert M.GPU_HOOKS["linear"] is gpu_linear.linear_forward
    assert M.GPU_HOOKS["decode"] is gpu_linear.decode_weight
    assert M.GPU_HOOKS["attach"] is gpu_linear._attach
    assert gpu_linear._PREV_ATTACH[0] is gpu_experts.attach
    assert not hasattr(gpu_experts, "linear_forward")  # one implementation of the linear path
    gpu_experts.register()  # idempotent: the chain is not wrapped twice
    assert M.GPU_HOOKS["attach"] is gpu_linear._attach and gpu_linear._PREV_ATTACH[0] is gpu_experts.attach
    assert hasattr(torch.ops.glyd, "linear") and hasattr(torch.ops.glyd, "decode")


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("layout", ["fixed12", "smallest"])
def test_hook_on_cpu_is_exact(exact, layout):
    lin, ref = packed_linear(layout=layout)
    lin.exact = exact
    x = torch.randn(3, 5, 64).to(torch.bfloat16)
    assert torch.equal(gpu_linear.linear_forward(lin, x), ref(x))
    assert torch.equal(lin(x), ref(x))  # GlydLinear.forward on the CPU: unchanged


def test_pack_module_prepares_handles():
    lin, _ = packed_linear()
    h = lin.packed_weight.__dict__.get("_glyd_handle")
    assert isinstance(h, int) and gpu_linear._holder_of(h) is lin.packed_weight


def test_op_direct_and_fake():
    lin, ref = packed_linear(bias=False)
    h = lin.packed_weight
    planes = [p for p in h._parameters.values()]
    x = torch.randn(4, 64).to(torch.bfloat16)
    y = torch.ops.glyd.linear(x, planes, None, h._glyd_handle, 48, False)
    assert torch.equal(y, ref(x))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fx = mode.from_tensor(torch.empty(2, 7, 64, dtype=torch.bfloat16))
        fy = torch.ops.glyd.linear(fx, [mode.from_tensor(p) for p in planes], None, h._glyd_handle, 48, True)
        assert fy.shape == (2, 7, 48) and fy.dtype == torch.bfloat16
        fw = torch.ops.glyd.decode([mode.from_tensor(p) for p in planes], h._glyd_handle, [48, 64], torch.bfloat16)
        assert fw.shape == (48, 64)


def test_opcheck():
    lin, _ = packed_linear()
    h = lin.packed_weight
    planes = [p for p in h._parameters.values()]
    x = torch.randn(3, 64).to(torch.bfloat16)
    torch.library.opcheck(torch.ops.glyd.linear.default, (x, planes, lin.bias.detach(), h._glyd_handle, 48, False))


def test_unknown_handle():
    x = torch.randn(1, 64).to(torch.bfloat16)
    with pytest.raises(InvalidArgumentError, match="handle"):
        torch.ops.glyd.linear(x, [], None, 10**9, 48, False)


def test_torch_compile_no_graph_break():
    lin, ref = packed_linear()
    mod = _Call(lin)
    x = torch.randn(2, 3, 64).to(torch.bfloat16)
    want = ref(x) * 2
    ex = torch._dynamo.explain(mod)(x)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
    assert "glyd.linear" in ex.graphs[0].code
    got = torch.compile(mod, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(got, want)


def test_torch_compile_unprepared_breaks_once():
    lin, ref = packed_linear(seed=3)
    del lin.packed_weight.__dict__["_glyd_handle"]
    mod = _Call(lin)
    x = torch.randn(2, 64).to(torch.bfloat16)
    torch._dynamo.reset()
    got = torch.compile(mod, backend="aot_eager")(x)
    assert torch.equal(got, ref(x) * 2)
    assert isinstance(lin.packed_weight.__dict__.get("_glyd_handle"), int)


def test_backward_through_input():
    lin, ref = packed_linear(seed=4)
    mod = torch.compile(_Call(lin), backend="aot_eager", fullgraph=True)
    x = torch.randn(3, 64).to(torch.bfloat16).requires_grad_()
    mod(x).float().sum().backward()
    x2 = x.detach().clone().requires_grad_()
    (ref(x2) * 2).float().sum().backward()
    assert torch.allclose(x.grad.float(), x2.grad.float(), rtol=2e-2, atol=1e-2)
    assert lin.bias.grad is not None and torch.allclose(lin.bias.grad.float(), ref.bias.grad.float())


# ---- bad input --------------------------------------------------------------------------------

def test_bad_input_dtype():
    lin, _ = packed_linear()
    with pytest.raises(InvalidArgumentError, match="input"):
        gpu_linear.linear_forward(lin, torch.randn(2, 64))  # float32


def test_bad_input_shape():
    lin, _ = packed_linear()
    with pytest.raises(InvalidArgumentError, match="input.*last dimension"):
        gpu_linear.linear_forward(lin, torch.randn(2, 63).to(torch.bfloat16))


def test_bad_input_device():
    lin, _ = packed_linear()
    with torch.no_grad(), pytest.raises(InvalidArgumentError, match="input is on meta"):
        gpu_linear.linear_forward(lin, torch.empty(2, 64, dtype=torch.bfloat16, device="meta"))


def test_bad_bias():
    lin, _ = packed_linear()
    lin.bias = nn.Parameter(torch.zeros(47, dtype=torch.bfloat16), requires_grad=False)
    with pytest.raises(InvalidArgumentError, match="bias"):
        gpu_linear.linear_forward(lin, torch.randn(2, 64).to(torch.bfloat16))
    lin.bias = nn.Parameter(torch.zeros(48, dtype=torch.float32), requires_grad=False)
    with pytest.raises(InvalidArgumentError, match="bias"):
        gpu_linear.linear_forward(lin, torch.randn(2, 64).to(torch.bfloat16))


def test_non_contiguous_input_is_accepted():
    lin, ref = packed_linear()
    x = torch.randn(64, 5).to(torch.bfloat16).t()
    assert not x.is_contiguous()
    assert torch.equal(gpu_linear.linear_forward(lin, x), ref(x))


def test_fused_supported():
    lin, _ = packed_linear()
    assert gpu_linear.fused_supported(lin.packed_weight)
    lin2, _ = packed_linear(layout="smallest")
    assert not gpu_linear.fused_supported(lin2.packed_weight)


# ---- the benchmark, without a GPU ----------------------------------------------------------------

def test_bench_args():
    from glyd.gpu import bench

    a = bench.parse_args([])
    assert a.tables == [1, 2, 4, 5, 6] and a.reps >= 15
    assert a.step_batches == "1,8,32,64" and a.step_layers == 36 and a.tokens.startswith("1,8,32,64,128")
    q = bench.parse_args(["--quick", "--moe", "--tables", "2,5"])
    assert q.tables == [2, 3, 5] and q.reps == 15 and q.step_layers < 36
    assert bench.parse_args(["--decode", "--tables", "1"]).tables == [1, 4]
    for bad in (["--tables", "7"], ["--reps", "5"], ["--tokens", "1,x"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_bench_no_gpu_exits_2(monkeypatch):
    from glyd import _gpu
    from glyd.gpu import bench

    monkeypatch.setattr(_gpu, "available", lambda: False)
    assert bench.main(["--quick"]) == 2


def test_bench_tables_format():
    from glyd.gpu import bench

    env = dict(gpu="G (1 SMs, 1 GiB)", driver="1 (CUDA 13.0)", cuda="13.0", torch="t", transformers="5",
               date="d", host="h", command="python -m glyd.gpu bench --quick")
    rep = bench.Report(env)
    r = dict(batch=1, bf16_ms=8.0, glyd_ms=7.0, logits_rel_err=1e-3, bf16_linears_ms=4.0, glyd_linears_ms=3.0,
             glyd_alone_ms=7.5)
    t = rep.table("Table 2", ["a", "b", "c", "d", "e", "f", "g", "h", "i"],
                  [bench._table2_row(r), bench._table2_row(dict(batch=8, error="E: x"))])
    assert "| 1 | 8.000 | 7.000 | 0.875 | 7.500 (0.938) | 4.000 (50%) | 3.000 (43%) | 0.750 | 1.00e-03 |" in t
    assert "GPU" not in t.split("\n")[0] and "G (1 SMs" in t and "--quick" in t
    rows = bench._table5_rows(dict(layout="fixed12", bf16_gb=16, glyd_gb=12, bf16_save_s=1, glyd_save_s=1,
                                   bf16_load_s=6, glyd_load_s=1, pack_s=2))
    assert rows[0][-1] == "8.0x" and rows[-1][0] == "Glyd fixed12" and len(rows) == 2
    assert rep.summary().count("## Table 2") == 1


def test_bench_qwen3_8b_on_meta():
    from transformers import AutoModelForCausalLM

    from glyd.gpu import bench

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(bench.qwen3_8b_config(36), dtype=torch.bfloat16)
    n = sum(p.numel() for p in m.parameters())
    assert 8.18e9 < n < 8.20e9  # Qwen3-8B: 8.19 B parameters
    lin = [x for x in m.modules() if isinstance(x, nn.Linear)]
    assert len(lin) == 36 * 7 + 1


def test_bench_step_runner_cpu():
    """Table 2's decode step (static cache) on a tiny Qwen3, bf16 and Glyd: equal logits on the CPU."""
    import tempfile

    from transformers import Qwen3Config

    from glyd.gpu import bench

    c = Qwen3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=99, tie_word_embeddings=False)
    model = bench.random_model(c, "cpu")
    assert torch.isfinite(model.model.rotary_emb.inv_freq).all()
    with tempfile.TemporaryDirectory() as d:
        glyd.save_pretrained(model, d + "/g", progress=False)
        gm = glyd.from_pretrained(d + "/g")
    sb, sg = bench.StepRunner(model, 2, 5, 16), bench.StepRunner(gm, 2, 5, 16)
    sb.step()
    sg.step()
    assert torch.equal(sb.logits, sg.logits) and torch.isfinite(sb.logits).all()
    fn, n = bench.linears_fn(gm, 3)
    fn()
    assert n == 2 * 7 + 1
    assert bench.model_bytes(gm) < bench.model_bytes(model)


def test_eager_backward_goes_through_the_op():
    lin, ref = packed_linear(seed=5)
    x = torch.randn(2, 64).to(torch.bfloat16).requires_grad_()
    y = gpu_linear.linear_forward(lin, x)
    assert y.grad_fn is not None
    y.float().sum().backward()
    x2 = x.detach().clone().requires_grad_()
    ref(x2).float().sum().backward()
    assert torch.allclose(x.grad.float(), x2.grad.float(), rtol=2e-2, atol=1e-2)
    with torch.no_grad():
        assert gpu_linear.linear_forward(lin, x).grad_fn is None


def test_bench_tables_2_and_5_dry_run(monkeypatch, tmp_path):
    """Tables 2 and 5 end to end on the CPU with a 2-layer tiny Qwen3 (timings eager, meaningless)."""
    import json
    import statistics
    import time

    from transformers import Qwen3Config

    from glyd.gpu import bench

    def eager(fn, reps=20, warmup=3):
        fn()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)

    monkeypatch.setattr(bench, "MODEL_DEVICE", "cpu")
    monkeypatch.setattr(bench, "_time_graph", eager)
    monkeypatch.setattr(bench, "qwen3_8b_config", lambda layers: Qwen3Config(
        hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=99, tie_word_embeddings=False))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    packed = []
    monkeypatch.setattr(bench, "gpu_pack_fn", lambda: lambda w, layout: packed.append((tuple(w.shape), layout)))
    a = bench.parse_args(["--tables", "2,5", "--step-layers", "2", "--step-batches", "1,3", "--step-ctx", "5",
                          "--step-cache", "16", "--reps", "15", "--tmp", str(tmp_path)])
    env = dict(gpu="G", driver="d", cuda="c", torch="t", transformers="5", date="d", host="h", command="c")
    md = tmp_path / "tables.md"
    rep = bench.Report(env, str(md))
    bench.checkpoint_tables(a, rep)
    steps = rep.results["decode_step"]
    assert [r["batch"] for r in steps] == [1, 3] and all("error" not in r for r in steps)
    assert all(r["logits_rel_err"] == 0.0 for r in steps)  # CPU: Glyd is exact
    ck = rep.results["checkpoint"]
    assert ck["glyd_gb"] < ck["bf16_gb"] and "glyd_load_verify_s" in ck and "pack_s" in ck and "gpu_pack_s" in ck
    assert len(packed) == 2 * 7 + 2 and packed[0][1] == "fixed12"  # every linear, the untied embedding and lm_head too
    text = md.read_text()
    assert "## Table 2." in text and "## Table 5." in text and "| bf16, + GPU pack |" in text
    json.dumps(rep.results, default=str)
    assert not any(p.name.startswith("glyd-bench-") for p in tmp_path.iterdir())  # checkpoints removed


# ---- the prompt path (decode tiles + cuBLAS), without a GPU -----------------------------------------

def _c_tensor(layout=1, shape=(4, 16), groups=1, escapes=0, esc_rows=None):
    """A glyd_gpu_tensor with fake device addresses (never dereferenced here)."""
    import ctypes

    from glyd import _gpu, _lib

    c = _gpu.GpuTensor()
    c.layout, c.dtype, c.ndim = layout, 1, len(shape)
    for i, s in enumerate(shape):
        c.shape[i] = s
    n = 1
    for s in shape:
        n *= s
    garr = (_lib.Group * groups)()
    for g in range(groups):
        garr[g].elements, garr[g].escapes, garr[g].base = n // groups, escapes, 100
    c.groups = ctypes.cast(garr, ctypes.POINTER(_lib.Group))
    c.num_groups = groups
    for i in range(_lib.NUM_PLANES):
        c.planes[i] = 1 << 20 | i << 12
    c.esc_rows = esc_rows
    return c, garr


def test_decode_rows_abi_without_device():
    """glyd_gpu_decode_rows: bound with the header's signature; arguments checked
    before any device work (the status names the problem); NO_GPU without a driver."""
    import ctypes

    from glyd import _gpu

    lib = _gpu._gpu()
    INVALID, TOO_SMALL, NO_GPU, UNSUPPORTED = 1, 2, 20, 26
    dst = 1 << 24
    c, keep = _c_tensor()

    def call(t, row0, rows, d=dst, nbytes=1 << 20):
        return lib.glyd_gpu_decode_rows(0, None, ctypes.byref(t) if t is not None else None, row0, rows, d, nbytes)

    assert call(None, 0, 1) == INVALID and "tensor" in lib.glyd_last_error().decode()
    assert call(c, 0, 5) == INVALID and "out of range" in lib.glyd_last_error().decode()
    assert call(c, -1, 1) == INVALID
    assert call(c, 0, -1) == INVALID
    assert call(c, 4, 1) == INVALID
    assert call(c, 0, 2, nbytes=63) == TOO_SMALL and "dst_bytes" in lib.glyd_last_error().decode()
    assert call(c, 0, 2, d=None) == INVALID
    assert call(c, 4, 0, d=None) == 0  # nothing to decode: no device work
    assert call(_c_tensor(layout=2)[0], 0, 1) == UNSUPPORTED  # smallest
    assert call(_c_tensor(shape=(2, 2, 16), groups=2)[0], 0, 1) == UNSUPPORTED  # experts: several groups
    assert call(_c_tensor(shape=(64,))[0], 0, 1) == UNSUPPORTED  # not a matrix
    assert call(_c_tensor(escapes=3)[0], 0, 1) == INVALID and "escape" in lib.glyd_last_error().decode()
    if not _gpu.available():
        assert call(c, 1, 2) == NO_GPU
        assert call(_c_tensor(escapes=3, esc_rows=1 << 22)[0], 0, 4) == NO_GPU
    del keep


def test_decode_gather_abi_without_device():
    """glyd_gpu_decode_gather: bound with the header's signature; arguments checked
    before any device work; NO_GPU without a driver."""
    import ctypes

    from glyd import _gpu

    lib = _gpu._gpu()
    INVALID, TOO_SMALL, NO_GPU, UNSUPPORTED = 1, 2, 20, 26
    ids, dst = 1 << 20, 1 << 24
    c, keep = _c_tensor()  # [4, 16]

    def call(t, count, i=ids, d=dst, nbytes=1 << 20):
        return lib.glyd_gpu_decode_gather(0, None, ctypes.byref(t) if t is not None else None, i, count, d, nbytes)

    assert call(None, 1) == INVALID and "tensor" in lib.glyd_last_error().decode()
    assert call(c, -1) == INVALID
    assert call(c, 2, nbytes=63) == TOO_SMALL and "dst_bytes" in lib.glyd_last_error().decode()
    assert call(c, 2, i=None) == INVALID and "ids" in lib.glyd_last_error().decode()
    assert call(c, 2, i=ids + 4) == INVALID  # ids not 8-byte aligned
    assert call(c, 2, d=None) == INVALID
    assert call(c, 0, i=None, d=None) == 0  # nothing to look up: no device work
    assert call(_c_tensor(layout=2)[0], 1) == UNSUPPORTED  # smallest
    assert call(_c_tensor(shape=(2, 2, 16), groups=2)[0], 1) == UNSUPPORTED  # several groups
    assert call(_c_tensor(shape=(4, 12))[0], 1) == UNSUPPORTED  # K % 8
    assert call(_c_tensor(escapes=3)[0], 1) == INVALID and "escape" in lib.glyd_last_error().decode()
    if not _gpu.available():
        assert call(c, 2) == NO_GPU
    del keep


def test_prompt_rows_default_by_gpu(monkeypatch):
    # without PROMPT_ROWS: 769 on sm_90 (the wgmma and prompt-tile kernels), 65 elsewhere,
    # asked once per device (linear() asks on every call)
    from glyd import _gpu

    asked = []

    def capability(index):
        asked.append(index)
        return {0: (9, 0), 1: (8, 9), 2: (10, 0)}[index]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(_gpu, "_DEFAULT_PROMPT_ROWS", {})
    old = _gpu.set_prompt_rows(None)
    try:
        devices = (0, 1, torch.device("cuda", 2), torch.device("cuda", 0), "cuda:1")
        assert [_gpu.prompt_rows(d) for d in devices] == [769, 65, 65, 769, 65]
        assert asked == [0, 1, 2]
        _gpu.set_prompt_rows(300)
        assert _gpu.prompt_rows(1) == 300
    finally:
        _gpu.set_prompt_rows(old)


def test_prompt_settings():
    from glyd import _gpu

    rows, mb = _gpu.PROMPT_ROWS, _gpu.PROMPT_TILE_MB
    try:
        assert _gpu.set_prompt_rows(512) == rows and _gpu.PROMPT_ROWS == 512
        assert _gpu.set_prompt_rows(0) == 512
        assert _gpu.prompt_rows() == 0  # an explicit value needs no GPU
        assert _gpu.set_prompt_rows(None) == 0 and _gpu.PROMPT_ROWS is None  # the GPU's default again
        for bad in (-1, 1.5, True, "256"):
            with pytest.raises(InvalidArgumentError, match="prompt rows"):
                _gpu.set_prompt_rows(bad)
        assert _gpu.set_prompt_tile_mb(4) == mb and _gpu.PROMPT_TILE_MB == 4.0
        # tile rows: MiB / (2 K), a multiple of 128, at least 128
        assert _gpu.tile_rows(4096) == 512
        assert _gpu.tile_rows(1040) == 1920  # 4 MiB / 2080 = 2016 -> 1920
        assert _gpu.tile_rows(10**7) == 128
        _gpu.set_prompt_tile_mb(12.5)
        assert _gpu.tile_rows(4096) == 1536 and _gpu.tile_rows(12288) == 512
        for bad in (0, -1, "4", True, None):
            with pytest.raises(InvalidArgumentError, match="tile"):
                _gpu.set_prompt_tile_mb(bad)
        assert _gpu.set_prompt_tile_mb(256) == 12.5
        assert _gpu.tile_rows(4096) == 32768  # the default: a Qwen3-8B weight is one tile
    finally:
        _gpu.set_prompt_rows(rows)
        _gpu.set_prompt_tile_mb(mb)


def test_prompt_env(monkeypatch):
    from glyd import _gpu

    monkeypatch.setenv("GLYD_PROMPT_ROWS", "0")
    assert _gpu._env_number("GLYD_PROMPT_ROWS", 256, int, 0) == 0
    monkeypatch.setenv("GLYD_PROMPT_ROWS", " 384 ")
    assert _gpu._env_number("GLYD_PROMPT_ROWS", 256, int, 0) == 384
    for bad in ("-1", "abc", "1.5"):
        monkeypatch.setenv("GLYD_PROMPT_ROWS", bad)
        with pytest.warns(UserWarning, match="GLYD_PROMPT_ROWS"):
            assert _gpu._env_number("GLYD_PROMPT_ROWS", 256, int, 0) == 256
    monkeypatch.setenv("GLYD_PROMPT_TILE_MB", "6.25")
    assert _gpu._env_number("GLYD_PROMPT_TILE_MB", None, float, 1e-9) == 6.25
    monkeypatch.delenv("GLYD_PROMPT_TILE_MB")
    assert _gpu._env_number("GLYD_PROMPT_TILE_MB", None, float, 1e-9) is None


def test_bench_prompt_args():
    from glyd.gpu import bench

    a = bench.parse_args(["--prompt-rows", "512", "--prompt-tile-mb", "4,256,12.5"])
    assert a.prompt_rows == 512 and a.prompt_tile_mb == [4.0, 256.0, 12.5]
    d = bench.parse_args([])
    assert d.prompt_rows is None and d.prompt_tile_mb == []
    for bad in (["--prompt-rows", "-1"], ["--prompt-tile-mb", "x"], ["--prompt-tile-mb", "0"],
                ["--prompt-tile-mb", "auto"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("n,tile_mb,tiles", [(1000, 0.3, 8), (1000, 0.6, 4), (1000, 64, 1), (128, 0.3, 1)])
def test_linear_tiles_cpu(monkeypatch, n, tile_mb, tiles, bias):
    """The tiling of DeviceTensor.linear's prompt path, run on the CPU: decode_rows
    replaced by a copy of the weight's rows, torch.mm / addmm into column slices."""
    import ctypes

    from glyd import _gpu

    k = 1040
    g = torch.Generator().manual_seed(n)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
    calls = []

    class FakeLib:
        @staticmethod
        def glyd_gpu_decode_rows(dev, stream, t, row0, rows, dst, nbytes):
            assert nbytes == rows * k * 2
            calls.append((row0, rows))
            ctypes.memmove(dst, w[row0:row0 + rows].contiguous().data_ptr(), nbytes)
            return 0

    monkeypatch.setattr(_gpu, "_gpu", lambda: FakeLib)
    monkeypatch.setattr(_gpu, "_stream", lambda device: 0)
    dt = object.__new__(_gpu.DeviceTensor)
    dt.device, dt.layout, dt.shape, dt.groups, dt._c = torch.device("cpu"), "fixed12", (n, k), [None], _gpu.GpuTensor()
    dt._matrix = True
    rows0, mb0 = _gpu.PROMPT_ROWS, _gpu.PROMPT_TILE_MB
    try:
        _gpu.set_prompt_rows(256)
        _gpu.set_prompt_tile_mb(tile_mb)
        assert dt.prompt_path(300) and not dt.prompt_path(255)
        assert dt.linear_kernel(300) == _gpu.PROMPT_KERNEL
        x = torch.randn(2, 150, k, generator=g).to(torch.bfloat16)
        b = (torch.randn(n, generator=g) * 0.1).to(torch.bfloat16) if bias else None
        out = torch.full((2, 150, n), float("nan"), dtype=torch.bfloat16)
        assert dt.linear(x, b, out=out) is out
    finally:
        _gpu.set_prompt_rows(rows0)
        _gpu.set_prompt_tile_mb(mb0)
    assert len(calls) == tiles and calls[0][0] == 0 and sum(r for _, r in calls) == n
    assert all(calls[i][0] + calls[i][1] == calls[i + 1][0] for i in range(len(calls) - 1))
    ref = x.float() @ w.float().t() + (b.float() if bias else 0)
    assert not torch.isnan(out).any()
    assert ((out.float() - ref).abs() <= 2.0**-6 * (ref.abs() + ref.pow(2).mean().sqrt())).all()


def test_linear_configs_are_forceable():
    # the benchmark sweeps and the every-config GPU test take this list: each
    # name must be one force_kernel accepts (no GPU needed to choose one)
    from glyd import _gpu
    from glyd.errors import NotFoundError

    names = _gpu.linear_configs()
    assert len(names) == len(set(names)) >= 10
    assert {n[:13] for n in names} == {"glyd_lin_f12_", "glyd_lin_f12w", "glyd_lin_f12p"}
    try:
        for n in names + ["generic"]:
            _gpu.force_kernel(n)
        with pytest.raises(NotFoundError, match="no configuration"):
            _gpu.force_kernel("glyd_lin_f12_m9n9w9k9u9")
    finally:
        _gpu.force_kernel(None)


def test_siblings_grouped_at_prepare_and_copied_without_device_state():
    """prepare groups the packed linears of one parent with the same input width
    (q/k/v-like; another width stays alone), and a deep copy keeps the grouping of its
    own modules but neither the launch state (ctypes pointers to the original's planes)
    nor outputs waiting for a member, nor a weight's device state."""
    from glyd import _gpu

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(64, 64), nn.Linear(64, 16), nn.Linear(64, 16)
            self.wide = nn.Linear(32, 64)

    m = Attn().to(torch.bfloat16)
    gpu_experts.pack_module(m)
    sib = m.q_proj.__dict__["_glyd_siblings"]
    assert sib.members == [m.q_proj, m.k_proj, m.v_proj] and "_glyd_siblings" not in m.wide.__dict__
    sib._multi = ((), (_gpu.GpuTensor * 3)())  # as after a GPU launch
    sib.pending[m.k_proj] = (torch.zeros(1), 0, torch.zeros(1))
    h = gpu_linear.weight_holder(m.q_proj)
    h.__dict__["_glyd_state"] = gpu_linear._State(h._planes_key(), _gpu.GpuTensor())
    c = copy.deepcopy(m)
    cs = c.q_proj.__dict__["_glyd_siblings"]
    assert cs is not sib and cs.members == [c.q_proj, c.k_proj, c.v_proj]
    assert cs._multi is None and cs.pending == {}
    assert gpu_linear.weight_holder(c.q_proj).__dict__.get("_glyd_state") is None
    x = torch.randn(2, 64).to(torch.bfloat16)
    assert torch.equal(c.k_proj(x), m.k_proj(x))
    gpu_linear.prepare(c, siblings=False)  # ungrouped
    assert all("_glyd_siblings" not in mod.__dict__ for mod in (c.q_proj, c.k_proj, c.v_proj))


class _FakeHolder:
    """What gpu_linear's tiling policy reads of a PackedWeight on a GPU."""

    def __init__(self, fail=None):
        self.device = torch.device("cuda", 0)
        self.relaid, self.calls, self.fail = False, [], fail
        self.attr, self.shape = "weight", (64, 128)

    def relay(self, relaid):
        self.calls.append(relaid)
        if self.fail is not None and relaid:
            raise self.fail
        self.relaid = relaid


@pytest.fixture
def tiling(monkeypatch):
    """gpu_linear._fused_state with the device state stubbed out, outside any capture."""
    from glyd import _gpu

    monkeypatch.setattr(gpu_linear, "_state", lambda h: "state")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(_gpu, "TILED", True)
    return monkeypatch


def test_fused_weights_are_tiled_once(tiling):
    h = _FakeHolder()
    assert gpu_linear._fused_state(h) == "state" and gpu_linear._fused_state(h) == "state"
    assert h.calls == [True] and h.relaid
    # an embedding's table (a tied lm_head) goes back to row-major and stays so
    gpu_linear.embedding_table(h)
    assert h.calls == [True, False] and not h.relaid
    t = _FakeHolder()
    gpu_linear.embedding_table(t)
    gpu_linear._fused_state(t)
    assert t.calls == []


def test_tiling_off_in_a_capture_and_with_glyd_tiled_0(tiling):
    from glyd import _gpu

    h = _FakeHolder()
    tiling.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    gpu_linear._fused_state(h)
    assert h.calls == [] and "_glyd_relay_checked" not in h.__dict__  # tiled at the next eager call
    tiling.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    tiling.setattr(_gpu, "TILED", False)
    gpu_linear._fused_state(h)
    assert h.calls == []


def test_out_of_memory_while_tiling_keeps_row_major(tiling, caplog):
    h = _FakeHolder(fail=torch.cuda.OutOfMemoryError("CUDA out of memory"))
    with caplog.at_level("WARNING"):
        assert gpu_linear._fused_state(h) == "state"
    assert h.calls == [True] and not h.relaid
    assert "out of GPU memory tiling" in caplog.text


def test_glyd_tiled_environment():
    import os
    import subprocess
    import sys

    code = "import glyd._gpu as g; print(g.TILED)"
    for value, want in (("0", "False"), ("false", "False"), ("1", "True"), ("", "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "GLYD_TILED": value})
        assert out.stdout.strip() == want, value


def test_planes_an_offload_hook_swaps_in_are_taken_as_stored(monkeypatch):
    """A holder re-laid before an accelerate offload hook was added (by hand,
    after loading): the hook puts the state dict's stored planes in at every
    call, and the holder reads them as stored, not as re-laid. The re-lay is a
    stand-in here (the planes reversed), the hook accelerate's own."""
    accelerate = pytest.importorskip("accelerate")
    lin, ref = packed_linear()
    h = lin.packed_weight
    monkeypatch.setitem(M.GPU_HOOKS, "relayout",
                        lambda holder, relaid: {k: v.flip(0).clone() for k, v in holder.planes().items()})
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    want = ref(x)
    h.relay(True)
    assert h.relaid and not torch.equal(h.glyd_sm, h.stored_planes()["sm"])
    assert torch.equal(lin(x), want)
    accelerate.cpu_offload(lin, execution_device="cpu", preload_module_classes=[type(lin).__name__])
    for _ in range(2):
        assert torch.equal(lin(x), want)
    assert not h.relaid and h.__dict__.get("_glyd_keep_stored") is True
    # relay()'s own planes stay re-laid; assigning new storage ends it too
    h2 = packed_linear(seed=2)[0].packed_weight
    h2.relay(True)
    assert h2.relaid
    h2.glyd_sm.data = h2.glyd_sm.data.clone()
    assert not h2.relaid


def test_offloaded_planes_keep_their_stored_arrangement(tiling):
    """An accelerate offload hook (CPU or disk) copies the stored planes in at
    every call: modules.keep_stored marks those holders at load, and neither
    the tiling nor the experts' re-lay touches them."""
    from types import SimpleNamespace

    lin, _ = packed_linear()
    other, _ = packed_linear(seed=1)
    root = nn.ModuleDict({"off": nn.ModuleDict({"lin": lin}), "on": nn.ModuleDict({"lin": other})})
    root["off"]._hf_hook = SimpleNamespace(hooks=[SimpleNamespace(offload=False), SimpleNamespace(offload=True)])
    root["on"]._hf_hook = SimpleNamespace(offload=False)
    M.keep_stored(root)
    assert lin.packed_weight.__dict__.get("_glyd_keep_stored") is True
    assert "_glyd_keep_stored" not in other.packed_weight.__dict__
    h = _FakeHolder()
    h.__dict__["_glyd_keep_stored"] = True
    gpu_linear._fused_state(h)
    assert h.calls == []
    assert gpu_experts.relay_wanted(SimpleNamespace(exact=False), h) is False
    assert gpu_experts.relay_wanted(SimpleNamespace(exact=False), lin.packed_weight) is False
