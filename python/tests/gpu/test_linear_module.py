"""GlydLinear on the GPU (glyd.transformers.gpu_linear), on a tiny Qwen3 model:

* exact=True: logits torch.equal to the bf16 model's on the same GPU;
* default (fused) mode: logits within LOGITS_REL of the bf16 model's;
* determinism: the checkpoint saved packed and loaded gives logits bit for bit
  equal to the same bf16 model packed in memory as it loads (both modes);
* torch.compile (fullgraph=False) runs the custom op glyd::linear, the
  GlydLinear alone compiles with fullgraph=True (no graph break);
* a decode step with a static KV cache captured in a CUDA graph replays
  correctly with new inputs (default and exact);
* bad input raises glyd.InvalidArgumentError naming the argument.
Skipped without a GPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import glyd

pytestmark = pytest.mark.gpu

_gpu = pytest.importorskip("glyd._gpu")
if not torch.cuda.is_available() or not _gpu.available():
    pytest.skip("no CUDA GPU (or libglyd finds no driver)", allow_module_level=True)

from glyd.errors import InvalidArgumentError  # noqa: E402
from glyd.gpu.bench import StepRunner, linears_fn  # noqa: E402
from glyd.transformers import gpu_experts, gpu_linear  # noqa: E402
from glyd.transformers.modules import GlydEmbedding, GlydLinear, iter_packed_modules  # noqa: E402

from conftest import model_inputs  # noqa: E402

DEV = torch.device("cuda", 0)
#: Default (fused) mode, whole-model logits vs bf16: ||got - ref|| / ||ref||.
LOGITS_REL = 2.0 ** -5


def _inputs():
    return {k: v.to(DEV) for k, v in model_inputs("qwen3", batch=2, seq=7).items()}


def _logits(model, inputs):
    with torch.no_grad():
        out = model(**inputs).logits
    torch.cuda.synchronize()
    return out


def rel(got, ref):
    got, ref = got.float(), ref.float()
    return ((got - ref).norm() / ref.norm()).item()


@pytest.fixture(scope="module")
def models(tiny_model, packed_dir):
    # Loaded on the CPU then moved, like the bf16 reference: the rotary buffers are computed
    # the same way (test_device_map_cuda loads both straight to the GPU instead).
    bf16 = copy.deepcopy(tiny_model("qwen3")).to(DEV)
    path = packed_dir("qwen3")
    loaded = glyd.from_pretrained(path).to(DEV).eval()
    loaded_exact = glyd.from_pretrained(path, exact=True).to(DEV).eval()
    yield bf16, loaded, loaded_exact, path
    del bf16, loaded, loaded_exact
    torch.cuda.empty_cache()


def test_device_map_cuda(tiny_model, packed_dir, tmp_path):
    """glyd.from_pretrained(device_map="cuda"): linears prepared at load; exact=True logits equal to
    the bf16 checkpoint loaded by transformers the same way; default mode close."""
    from transformers import AutoModelForCausalLM

    tiny_model("qwen3").save_pretrained(tmp_path / "bf16")
    ref = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype=torch.bfloat16, device_map="cuda").eval()
    path = packed_dir("qwen3")
    exact = glyd.from_pretrained(path, device_map="cuda", exact=True)
    fused = glyd.from_pretrained(path, device_map="cuda")
    x = _inputs()
    want = _logits(ref, x)
    got = _logits(exact, x)
    assert torch.equal(got, want), f"exact=True differs from bf16: rel {rel(got, want):.3g}"
    assert rel(_logits(fused, x), want) < LOGITS_REL
    lins = [m for _, m in iter_packed_modules(fused) if isinstance(m, GlydLinear)]
    assert len(lins) == 2 * 7 + 1  # 7 per layer, and the untied lm_head
    for m in lins:
        h = m.packed_weight
        assert h.device.type == "cuda" and isinstance(h.__dict__.get("_glyd_handle"), int)


def test_loaded_linears_are_packed_and_prepared(models):
    _, loaded, _, _ = models
    lins = [m for _, m in iter_packed_modules(loaded) if isinstance(m, GlydLinear)]
    assert len(lins) == 2 * 7 + 1  # 7 per layer, and the untied lm_head
    for m in lins:
        h = m.packed_weight
        assert h.device.type == "cuda"
        assert isinstance(h.__dict__.get("_glyd_handle"), int)  # given at load (attach hook -> prepare)
    assert gpu_linear.prepare(loaded) == len(lins) + 1  # and the embedding's state
    for m in lins:
        st = m.packed_weight.__dict__.get("_glyd_state")  # device state built outside any capture
        assert st is not None and st.key == m.packed_weight._planes_key()


def test_embedding_lookup_exact(models):
    """The untied input embedding is packed; a lookup on the GPU decodes only
    its rows, bit for bit the bf16 table's, in both modes."""
    bf16, loaded, loaded_exact, _ = models
    ids = torch.randint(0, bf16.config.vocab_size, (3, 11), generator=torch.Generator().manual_seed(5)).to(DEV)
    want = bf16.model.embed_tokens(ids)
    for m in (loaded, loaded_exact):
        emb = m.model.embed_tokens
        assert isinstance(emb, GlydEmbedding)
        assert torch.equal(emb(ids), want)
        assert emb(ids.int()).shape == want.shape
        assert emb.packed_weight._decoded is None  # the table was never decoded whole


def test_tied_table_on_gpu(tmp_path):
    """A tied lm_head and embedding, packed once: on the GPU the lookup and the
    fused lm_head read the one PackedWeight; exact=True logits equal the bf16
    model's, the default ones are close."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=99, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
    glyd.save_pretrained(model, tmp_path / "tied", progress=False)
    ref = model.to(DEV)
    ids = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(2)).to(DEV)
    with torch.no_grad():
        want = ref(input_ids=ids).logits
    for exact in (False, True):
        m = glyd.from_pretrained(tmp_path / "tied", exact=exact).to(DEV).eval()
        assert m.lm_head.packed_weight is m.model.embed_tokens.packed_weight
        with torch.no_grad():
            got = m(input_ids=ids).logits
        if exact:
            assert torch.equal(got, want)
        else:
            assert rel(got, want) < LOGITS_REL


def test_exact_logits_equal_bf16(models):
    bf16, _, loaded_exact, _ = models
    for _, m in iter_packed_modules(loaded_exact):
        m.packed_weight.drop_cache()
    x = _inputs()
    want = _logits(bf16, x)
    got = _logits(loaded_exact, x)
    assert torch.equal(got, want), f"exact=True differs from bf16: rel {rel(got, want):.3g}"
    # just in time: the forward leaves no decoded weight cached on the GPU
    for _, m in iter_packed_modules(loaded_exact):
        assert m.packed_weight._decoded is None


def test_default_logits_close_to_bf16(models):
    bf16, loaded, _, _ = models
    x = _inputs()
    want = _logits(bf16, x)
    got = _logits(loaded, x)
    assert torch.isfinite(got).all()
    assert rel(got, want) < LOGITS_REL
    assert torch.equal(_logits(loaded, x), got)  # deterministic


@pytest.mark.parametrize("exact", [False, True])
def test_checkpoint_equals_packed_in_memory(models, tiny_model, exact):
    _, loaded, loaded_exact, _ = models
    mem = gpu_experts.pack_module(copy.deepcopy(tiny_model("qwen3")).to(DEV), exact=exact)
    x = _inputs()
    a = _logits(loaded_exact if exact else loaded, x)
    b = _logits(mem, x)
    assert torch.equal(a, b), f"checkpoint vs packed in memory (exact={exact}): rel {rel(a, b):.3g}"


def test_deepcopy_after_use(models):
    # the copy rebuilds its device state, escape indices and siblings' launch state
    # from its own planes (the original's hold ctypes pointers to the original's)
    _, loaded, _, _ = models
    x = _inputs()
    want = _logits(loaded, x)
    c = copy.deepcopy(loaded)
    assert torch.equal(_logits(c, x), want)
    q = c.model.layers[0].self_attn.q_proj
    assert q.__dict__["_glyd_siblings"].members[0] is q
    del c
    torch.cuda.empty_cache()


def test_linear_module_fused_and_exact():
    torch.manual_seed(0)
    for n, k, rows in [(96, 64, 1), (1000, 1040, 7), (4096, 4096, 64), (777, 528, 300)]:
        parent = nn.Sequential(nn.Linear(k, n, bias=True)).to(torch.bfloat16).to(DEV)
        with torch.no_grad():
            parent[0].weight.normal_(0, 0.02)
            parent[0].bias.normal_(0, 0.02)
        ref = copy.deepcopy(parent[0])
        gpu_experts.pack_module(parent)
        lin = parent[0]
        assert isinstance(lin, GlydLinear)
        x = torch.randn(rows, k, device=DEV).to(torch.bfloat16)
        with torch.no_grad():
            want = ref(x)
            lin.exact = True
            assert torch.equal(lin(x), want)
            lin.exact = False
            got = lin(x)
            ref32 = x.float() @ ref.weight.float().t() + ref.bias.float()
            err = (got.float() - ref32).abs()
            # the prompt path's GEMM is cuBLAS's: twice the fused kernels' tolerance (test_kernels.PROMPT_TOL)
            tol = 2.0 ** -6 if rows >= _gpu.prompt_rows() > 0 else 2.0 ** -7
            assert (err <= tol * (ref32.abs() + ref32.pow(2).mean().sqrt())).all(), f"{n}x{k} rows {rows}"
            x3 = x.view(1, rows, k)
            assert torch.equal(lin(x3), got.view(1, rows, n))  # batch dims kept, same bits


def test_compile_linear_fullgraph():
    parent = nn.Sequential(nn.Linear(256, 512)).to(torch.bfloat16).to(DEV)
    ref = copy.deepcopy(parent[0])
    gpu_experts.pack_module(parent)
    x = torch.randn(4, 256, device=DEV).to(torch.bfloat16)
    with torch.no_grad():
        eager = parent(x)
        ex = torch._dynamo.explain(parent)(x)
        assert ex.graph_break_count == 0, ex.break_reasons
        assert "glyd.linear" in ex.graphs[0].code
        got = torch.compile(parent, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(got, eager)
    assert rel(got, ref(x)) < 2.0 ** -7


def test_compile_model(models):
    _, loaded, _, _ = models
    x = _inputs()
    eager = _logits(loaded, x)
    torch._dynamo.reset()
    compiled = torch.compile(loaded, backend="aot_eager", fullgraph=False)
    got = _logits(compiled, x)
    assert torch.isfinite(got).all() and rel(got, eager) < 2.0 ** -7
    with torch.no_grad():
        ex = torch._dynamo.explain(loaded)(**x)
    code = "\n".join(g.code for g in ex.graphs)
    assert code.count("glyd.linear") == 2 * 7 + 1, ex.break_reasons


def test_compile_inductor_linear():
    pytest.importorskip("triton")
    parent = nn.Sequential(nn.Linear(128, 256), nn.GELU()).to(torch.bfloat16).to(DEV)
    gpu_experts.pack_module(parent)
    x = torch.randn(8, 128, device=DEV).to(torch.bfloat16)
    with torch.no_grad():
        eager = parent(x)
        got = torch.compile(parent, fullgraph=True)(x)
    assert rel(got, eager) < 2.0 ** -6


@pytest.mark.parametrize("exact", [False, True])
def test_graph_captured_decode_step(models, exact):
    bf16, loaded, loaded_exact, _ = models
    model = loaded_exact if exact else loaded
    sg = StepRunner(model, 3, 5, 16, seed=11)
    sb = StepRunner(bf16, 3, 5, 16, seed=11)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        sg.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sg.step()
    for seed in (1, 2):
        new = torch.randint(0, model.config.vocab_size, sg.ids.shape, device=DEV,
                            generator=torch.Generator(device=DEV).manual_seed(seed))
        sg.ids.copy_(new)
        sb.ids.copy_(new)
        sg.logits.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        replayed = sg.logits.clone()
        sg.step()  # eager, same inputs, same cache slot
        torch.cuda.synchronize()
        assert torch.equal(replayed, sg.logits), "graph replay differs from the eager step"
        sb.step()
        if exact:
            assert torch.equal(replayed, sb.logits), f"exact step differs from bf16: rel {rel(replayed, sb.logits):.3g}"
        else:
            assert rel(replayed, sb.logits) < LOGITS_REL
    del g


def test_graph_captured_linears(models):
    _, loaded, _, _ = models
    fn, n = linears_fn(loaded, 5)
    fn()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()


# ---- siblings: q/k/v and gate/up in one launch ----------------------------------------------------

class _Attention(nn.Module):
    """q/k/v/o of one input width, called like a transformers attention (o on
    another input), or as a cross-attention (k and v on the encoder's states)."""

    def __init__(self, d=512, kv=128):
        super().__init__()
        self.q_proj = nn.Linear(d, d, bias=True)
        self.k_proj = nn.Linear(d, kv, bias=True)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, enc=None):
        src = x if enc is None else enc
        q, k, v = self.q_proj(x), self.k_proj(src), self.v_proj(src)
        return q, k, v, self.o_proj(q * 0.5)


def _siblings(m):
    s = m.__dict__.get("_glyd_siblings")
    return None if s is None else s.members


def _attention_pair(seed):
    torch.manual_seed(seed)
    ref = _Attention().to(torch.bfloat16).to(DEV)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.02)
    return ref, gpu_experts.pack_module(copy.deepcopy(ref))


def _close(got, ref_module, x):
    want = x.float() @ ref_module.weight.float().t()
    if ref_module.bias is not None:
        want += ref_module.bias.float()
    tol = 2.0 ** -6 if x.numel() // x.shape[-1] >= _gpu.prompt_rows() > 0 else 2.0 ** -7
    return bool(((got.float() - want).abs() <= tol * (want.abs() + want.pow(2).mean().sqrt())).all())


@pytest.mark.parametrize("rows", [1, 7, 64, 300])
def test_siblings_share_one_launch(rows):
    ref, att = _attention_pair(rows)
    assert _siblings(att.q_proj) == [att.q_proj, att.k_proj, att.v_proj, att.o_proj]  # same K: grouped at prepare
    x = torch.randn(2, rows, 512, device=DEV).to(torch.bfloat16)
    prompt = 0 < _gpu.prompt_rows() <= 2 * rows
    with torch.no_grad():
        first = att(x)
        if prompt:  # prompts: every linear alone (decode tiles + cuBLAS), the group untouched
            assert _siblings(att.q_proj) == [att.q_proj, att.k_proj, att.v_proj, att.o_proj]
        else:  # o_proj ran on another input: dropped; q/k/v stay one launch
            assert _siblings(att.q_proj) == [att.q_proj, att.k_proj, att.v_proj] and _siblings(att.o_proj) is None
        second = att(x)
        for got, want in zip(second, first):
            assert torch.equal(got, want)  # dropping o_proj changes nothing in q/k/v
        q = second[0]
        for got, name, inp in zip(second, ("q_proj", "k_proj", "v_proj", "o_proj"), (x, x, x, q * 0.5)):
            assert got.shape == (2, rows, getattr(ref, name).out_features) and got.is_contiguous()
            assert _close(got, getattr(ref, name), inp), f"{name} rows {rows}"
        # k called first (any order works), q on the same input later
        k = att.k_proj(x)
        assert torch.equal(att.q_proj(x), second[0]) and torch.equal(k, second[1])
        assert torch.equal(att.v_proj(x), second[2])


def test_siblings_cross_attention_and_in_place_changes():
    ref, att = _attention_pair(5)
    x = torch.randn(3, 4, 512, device=DEV).to(torch.bfloat16)
    enc = torch.randn(3, 9, 512, device=DEV).to(torch.bfloat16)
    with torch.no_grad():
        q, k, v, _ = att(x, enc)  # k and v take another input: all dropped
        assert all(_siblings(m) is None for m in (att.q_proj, att.k_proj, att.v_proj, att.o_proj))
        assert _close(q, ref.q_proj, x) and _close(k, ref.k_proj, enc) and _close(v, ref.v_proj, enc)
        # an input changed in place between siblings: the stale output is not used
        ref2, att2 = _attention_pair(6)
        x2 = x.clone()
        att2.q_proj(x2)
        x2.mul_(2)
        k2 = att2.k_proj(x2)
        assert _close(k2, ref2.k_proj, x2)
        assert _siblings(att2.k_proj) is None


def test_siblings_not_for_exact_or_autograd():
    _, att = _attention_pair(7)
    att_exact = gpu_experts.pack_module(copy.deepcopy(_attention_pair(7)[0]), exact=True)
    assert _siblings(att_exact.q_proj) is None
    x = torch.randn(1, 3, 512, device=DEV).to(torch.bfloat16).requires_grad_()
    q, k, v, o = att(x)  # grad mode: each linear is the op alone, nothing waits in the group
    assert not att.q_proj.__dict__["_glyd_siblings"].pending
    (q.float().sum() + k.float().sum()).backward()
    assert x.grad is not None


# ---- bad input ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lin():
    parent = nn.Sequential(nn.Linear(64, 48)).to(torch.bfloat16).to(DEV)
    gpu_experts.pack_module(parent)
    return parent[0]


def test_bad_input_dtype(lin):
    with pytest.raises(InvalidArgumentError, match="input is torch.float32"):
        lin(torch.randn(2, 64, device=DEV))


def test_bad_input_device(lin):
    with pytest.raises(InvalidArgumentError, match="input is on cpu"):
        gpu_linear.linear_forward(lin, torch.randn(2, 64).to(torch.bfloat16))


def test_bad_input_shape(lin):
    with pytest.raises(InvalidArgumentError, match="last dimension must be 64"):
        lin(torch.randn(2, 65, device=DEV).to(torch.bfloat16))


def test_bad_bias(lin):
    old = lin.bias
    try:
        lin.bias = nn.Parameter(torch.zeros(48, device="cpu", dtype=torch.bfloat16), requires_grad=False)
        with pytest.raises(InvalidArgumentError, match="bias"):
            lin(torch.randn(2, 64, device=DEV).to(torch.bfloat16))
    finally:
        lin.bias = old


def test_misaligned_and_strided_inputs_work(lin):
    buf = torch.randn(2 * 64 + 1, device=DEV).to(torch.bfloat16)
    x = buf[1:].view(2, 64)  # 2 bytes past an aligned address
    assert x.data_ptr() % 16 != 0
    xt = torch.randn(64, 2, device=DEV).to(torch.bfloat16).t()
    with torch.no_grad():
        assert torch.equal(lin(x), lin(x.clone()))
        assert torch.equal(lin(xt), lin(xt.contiguous()))


def test_device_tensor_bad_arguments(lin):
    dt = gpu_linear.device_tensor(lin.packed_weight)
    x = torch.randn(3, 64, device=DEV).to(torch.bfloat16)
    with pytest.raises(InvalidArgumentError, match="out"):
        dt.linear(x, out=torch.empty(3, 48, device=DEV))  # float32
    with pytest.raises(InvalidArgumentError, match="out"):
        dt.linear(x, out=torch.empty(48, 3, device=DEV, dtype=torch.bfloat16).t())  # not contiguous
    with pytest.raises(InvalidArgumentError, match="out"):
        dt.linear(x, out=torch.empty(3, 47, device=DEV, dtype=torch.bfloat16))
    with pytest.raises(InvalidArgumentError, match="bias"):
        dt.linear(x, bias=torch.zeros(48, dtype=torch.bfloat16))  # on the CPU
    with pytest.raises(InvalidArgumentError, match="workspace"):
        ws = torch.empty(1 << 20 + 1, dtype=torch.uint8, device=DEV)[1:]
        dt.linear(x, workspace=ws)
    with pytest.raises(InvalidArgumentError, match="x must be"):
        dt.linear(x.float())
    with pytest.raises(InvalidArgumentError, match="out"):
        dt.decode(out=torch.empty(48, 63, device=DEV, dtype=torch.bfloat16))
    with pytest.raises(InvalidArgumentError, match="out"):
        dt.decode(out=torch.empty(48, 64, device=DEV))
    # the process and the CUDA context are alive
    torch.cuda.synchronize()
    assert torch.isfinite(lin(x)).all()
