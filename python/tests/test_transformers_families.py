"""Tiny random models of many families: saved packed, loaded back, exactly equal.

For every model type and both layouts: every weight decodes to its exact bits,
logits are torch.equal to the bf16 model's, and generate() gives the same tokens.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

import glyd
from glyd.transformers.modules import GlydEmbedding, GlydLinear, iter_packed_modules

from conftest import RECIPES, model_inputs

MODEL_TYPES = sorted(RECIPES)
LAYOUTS = ("fixed12", "smallest")


def _assert_same_weights(ref, loaded):
    for name, p in ref.state_dict().items():
        mod, _, attr = name.rpartition(".")
        got = getattr(loaded.get_submodule(mod), attr)
        assert got.shape == p.shape, name
        if got.dtype != p.dtype:
            # transformers upcasts _keep_in_fp32_modules tensors at load, like for any bf16 checkpoint
            assert got.dtype == torch.float32 and torch.equal(got, p.to(got.dtype)), name
            continue
        if p.is_floating_point():
            got, p = got.view(torch.uint8), p.view(torch.uint8)  # bits, NaN payloads included
        assert torch.equal(got, p), name


def _generate(model, model_type):
    inputs = model_inputs(model_type, batch=1, seq=5, seed=3)
    inputs.pop("decoder_input_ids", None)
    kw = dict(max_new_tokens=4, do_sample=False)
    if model.generation_config.pad_token_id is None:
        kw["pad_token_id"] = 0
    if model.config.is_encoder_decoder and model.generation_config.decoder_start_token_id is None:
        kw["decoder_start_token_id"] = 0
    with torch.no_grad():
        return model.generate(**inputs, **kw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_roundtrip_exact(model_type, layout, tiny_model, packed_dir):
    ref = tiny_model(model_type)
    path = packed_dir(model_type, layout)
    cfg = json.loads((path / "config.json").read_text())
    q = cfg["quantization_config"]
    assert q["quant_method"] == "glyd" and q["layout"] == layout
    kind = RECIPES[model_type][3]

    model = glyd.from_pretrained(path)
    assert type(model) is type(ref)
    assert model.is_quantized
    packed = dict(iter_packed_modules(model))
    assert packed, "nothing was packed"
    groups = [h.num_groups for m in packed.values() for h in m.glyd_weights().values()]
    if kind == "moe":
        assert q["format"] == "glyd-v2" and max(groups) >= 8  # one group per expert
    else:
        assert q["format"] == "glyd-v1" and max(groups) == 1
    assert all(h.layout == layout for m in packed.values() for h in m.glyd_weights().values())

    _assert_same_weights(ref, model)
    inputs = model_inputs(model_type)
    with torch.no_grad():
        a = ref(**inputs).logits
        b = model(**inputs).logits
    assert torch.equal(a, b)
    assert torch.equal(_generate(ref, model_type), _generate(model, model_type))


@pytest.mark.parametrize("model_type", ["llama", "mixtral", "gpt_oss", "switch_transformers"])
def test_plain_transformers_load_after_import(model_type, tiny_model, packed_dir):
    """import glyd is enough: the Auto classes load a Glyd checkpoint."""
    import transformers

    path = packed_dir(model_type)
    cls = getattr(transformers, json.loads((path / "config.json").read_text())["architectures"][0])
    auto = transformers.AutoModelForCausalLM if RECIPES[model_type][3] != "seq2seq-moe" else \
        transformers.AutoModelForSeq2SeqLM
    model, info = auto.from_pretrained(path, output_loading_info=True)
    assert isinstance(model, cls)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    inputs = model_inputs(model_type)
    with torch.no_grad():
        assert torch.equal(tiny_model(model_type)(**inputs).logits, model(**inputs).logits)


def _shards(path):
    return {f: (path / f).read_bytes() for f in sorted(os.listdir(path)) if f.endswith(".safetensors")}


@pytest.mark.parametrize("model_type", ["llama", "mixtral"])
def test_packing_twice_is_byte_identical(model_type, tiny_model, tmp_path):
    m = tiny_model(model_type)
    glyd.save_pretrained(m, tmp_path / "a", progress=False, max_shard_size=40_000)
    glyd.save_pretrained(m, tmp_path / "b", progress=False, max_shard_size=40_000)
    a, b = _shards(tmp_path / "a"), _shards(tmp_path / "b")
    assert len(a) > 1 and a == b
    for f in ("glyd.fb", "config.json", "model.safetensors.index.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def _tensors(path):
    from safetensors import safe_open

    out = {}
    for f in _shards(path):
        with safe_open(str(path / f), "pt") as sf:
            for k in sf.keys():
                t = sf.get_tensor(k)
                out[k] = (str(t.dtype), tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes())
    return out


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_moe"])
def test_resave_loaded_model_is_identical(model_type, packed_dir, tmp_path):
    """A loaded Glyd model saves its planes as they are (no decode, no repack)."""
    path = packed_dir(model_type)
    model = glyd.from_pretrained(path)
    glyd.save_pretrained(model, tmp_path / "again", progress=False)
    assert _tensors(path) == _tensors(tmp_path / "again")  # same tensors (the order may differ)
    # and with another layout it repacks from the exact weights
    glyd.save_pretrained(model, tmp_path / "smallest", layout="smallest", progress=False)
    again = glyd.from_pretrained(tmp_path / "smallest")
    inputs = model_inputs(model_type)
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, again(**inputs).logits)


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_moe", "gpt_oss", "llama4_text"])
def test_deepcopy_and_pickle_a_loaded_model(model_type, packed_dir):
    """copy.deepcopy of a loaded (and used) Glyd model, and torch.save/torch.load of it
    (dense, and with packed experts: their classes, made at load, are pickled as the
    call that makes them), give a working model with the same logits: the caches
    built from the planes are not copied (they hold ctypes pointers), the copy
    rebuilds its own."""
    import copy
    import io

    m = glyd.from_pretrained(packed_dir(model_type))
    inputs = model_inputs(model_type)
    with torch.no_grad():
        want = m(**inputs).logits
        copies = [copy.deepcopy(m)]
        buf = io.BytesIO()
        torch.save(m, buf)
        buf.seek(0)
        copies.append(torch.load(buf, weights_only=False))
        for other in copies:
            assert torch.equal(other(**inputs).logits, want)
    c = copies[0]
    q = c.model.layers[0].self_attn.q_proj
    sib = q.__dict__.get("_glyd_siblings")  # the copy's siblings are its own modules
    assert sib is not None and sib.members[0] is q and not sib.pending


def test_decode_modes_and_exact_flag(tiny_model, packed_dir):
    """cache_decoded False/True and exact=True all give the same logits on the CPU."""
    ref = tiny_model("qwen2_moe")
    path = packed_dir("qwen2_moe")
    inputs = model_inputs("qwen2_moe")
    with torch.no_grad():
        want = ref(**inputs).logits
        for kw in (dict(cache_decoded=False), dict(cache_decoded=True), dict(exact=True)):
            m = glyd.from_pretrained(path, **kw)
            assert torch.equal(m(**inputs).logits, want), kw
            if kw.get("exact"):
                assert all(mod.exact for _, mod in iter_packed_modules(m))


@pytest.mark.parametrize("impl", ["eager", "batched_mm", "grouped_mm"])
def test_experts_implementations(impl, tiny_model, packed_dir):
    """Routed-expert decoding is exact whichever experts implementation runs."""
    import transformers

    path = packed_dir("qwen3_moe")
    ref = transformers.AutoModelForCausalLM.from_config(tiny_model("qwen3_moe").config, dtype=torch.bfloat16)
    ref.load_state_dict(tiny_model("qwen3_moe").state_dict())
    ref.eval().set_experts_implementation(impl)
    m = glyd.from_pretrained(path, experts_implementation=impl)
    inputs = model_inputs("qwen3_moe")
    with torch.no_grad():
        assert torch.equal(ref(**inputs).logits, m(**inputs).logits)


def test_what_stays_unpacked(packed_dir):
    """Norms and routers stay raw; linears and embeddings (untied: lm_head and
    embed_tokens too) and experts are packed; scaled embeddings stay raw."""
    with glyd.Reader(packed_dir("mixtral")) as r:
        layouts = {n: r.info(n).layout for n in r.names()}
    assert layouts["lm_head.packed_weight"] == "fixed12" and "lm_head.weight" not in layouts
    assert layouts["model.embed_tokens.packed_weight"] == "fixed12" and "model.embed_tokens.weight" not in layouts
    assert layouts["model.norm.weight"] == "raw"
    assert layouts["model.layers.0.mlp.gate.weight"] == "raw"
    assert layouts["model.layers.0.self_attn.q_proj.packed_weight"] != "raw"
    assert layouts["model.layers.0.mlp.experts.packed_gate_up"] != "raw"
    for n in layouts:
        assert "gate_up_proj" not in n and "down_proj" not in n  # no conversion regex can match


def test_linear_modules_are_glyd_linear(packed_dir):
    m = glyd.from_pretrained(packed_dir("llama"))
    assert isinstance(m.model.layers[0].self_attn.q_proj, GlydLinear)
    assert isinstance(m.model.layers[0].self_attn.q_proj, torch.nn.Linear)
    assert isinstance(m.lm_head, GlydLinear)  # untied: packed like every Linear
    assert isinstance(m.model.embed_tokens, GlydEmbedding)


def test_scaled_embeddings_stay_raw(packed_dir):
    """Subclasses of nn.Embedding (Gemma's scaled word embeddings) keep their
    table raw: their buffers come from transformers' weight init."""
    with glyd.Reader(packed_dir("gemma4_text")) as r:
        layouts = {n: r.info(n).layout for n in r.names()}
    assert layouts["model.embed_tokens.weight"] == "raw"


def test_raw_lm_head_checkpoint_loads(tmp_path, tiny_model):
    """A checkpoint whose lm_head is raw (saved before lm_head was packed, or
    with modules_to_not_convert) loads it as the nn.Linear it is."""
    model = tiny_model("llama")
    glyd.save_pretrained(model, tmp_path / "raw-head", modules_to_not_convert=["lm_head"], progress=False)
    with glyd.Reader(tmp_path / "raw-head") as r:
        assert r.info("lm_head.weight").layout == "raw"
    m = glyd.from_pretrained(tmp_path / "raw-head")
    assert type(m.lm_head) is torch.nn.Linear
    assert isinstance(m.model.layers[0].self_attn.q_proj, GlydLinear)
    inputs = model_inputs("llama")
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, m(**inputs).logits)


def test_tied_table_packed_once(tmp_path):
    """A tied lm_head and input embedding: the table is packed once, as the
    embedding; loaded, lm_head is a packed Linear sharing its PackedWeight;
    logits are the bf16 model's; saved again, still once."""
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=99, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    for step in range(2):  # packed from bf16, then saved again from the loaded model
        glyd.save_pretrained(model, tmp_path / f"tied{step}", progress=False)
        with glyd.Reader(tmp_path / f"tied{step}") as r:
            layouts = {n: r.info(n).layout for n in r.names()}
        assert layouts["model.embed_tokens.packed_weight"] == "fixed12"
        assert not any(n.startswith("lm_head.") for n in layouts)  # saved once, as the embedding
        model = glyd.from_pretrained(tmp_path / f"tied{step}")
        assert isinstance(model.model.embed_tokens, GlydEmbedding) and isinstance(model.lm_head, GlydLinear)
        assert model.lm_head.packed_weight is model.model.embed_tokens.packed_weight
        with torch.no_grad():
            assert torch.equal(model(input_ids=ids).logits, want)
        model.tie_weights()  # the pair shares its table already: left as it is
        model.tie_weights(recompute_mapping=False)
        assert model.lm_head.packed_weight is model.model.embed_tokens.packed_weight
        with torch.no_grad():
            assert torch.equal(model(input_ids=ids).logits, want)
