"""Fixtures for the transformers tests: tiny random bf16 models of many families.

Recipes follow transformers 5.17 (see the shared TRANSFORMERS.md, section 4):
small hidden sizes, 2-4 layers, 8 experts of which 2 are routed per token.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VOCAB = 99
BASE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, vocab_size=VOCAB)
DS_MLA = dict(kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)

# model_type -> (config class name, kwargs, model class name or None for AutoModelForCausalLM, kind)
# kind: "dense" / "moe" (experts packed with one group per expert) / "seq2seq-moe".
RECIPES = {
    # dense
    "llama": ("LlamaConfig", dict(BASE), None, "dense"),
    "qwen2": ("Qwen2Config", dict(BASE), None, "dense"),
    "qwen3": ("Qwen3Config", dict(BASE, head_dim=16), None, "dense"),
    "mistral": ("MistralConfig", dict(BASE), None, "dense"),
    "gemma": ("GemmaConfig", dict(BASE, head_dim=16), None, "dense"),
    "gemma2": ("Gemma2Config", dict(BASE, head_dim=16), None, "dense"),
    "phi3": ("Phi3Config", dict(BASE, pad_token_id=0), None, "dense"),
    "phi": ("PhiConfig", dict(BASE), None, "dense"),
    "gpt2": ("GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB), None, "dense"),
    # mixtures of experts, standard fused 3-D layout
    "mixtral": ("MixtralConfig", dict(BASE, num_local_experts=8, num_experts_per_tok=2), None, "moe"),
    "phimoe": ("PhimoeConfig", dict(BASE, num_local_experts=8, num_experts_per_tok=2), None, "moe"),
    "granitemoe": ("GraniteMoeConfig", dict(BASE, num_local_experts=8, num_experts_per_tok=2), None, "moe"),
    "qwen2_moe": ("Qwen2MoeConfig", dict(BASE, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                                          num_experts=8, num_experts_per_tok=2), None, "moe"),
    "qwen3_moe": ("Qwen3MoeConfig", dict(BASE, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2),
                  None, "moe"),
    "olmoe": ("OlmoeConfig", dict(BASE, num_experts=8, num_experts_per_tok=2), None, "moe"),
    "deepseek_v3": ("DeepseekV3Config", dict(BASE, moe_intermediate_size=32, n_routed_experts=8,
                                              num_experts_per_tok=2, n_group=2, topk_group=1,
                                              first_k_dense_replace=1, **DS_MLA), None, "moe"),
    "deepseek_v2": ("DeepseekV2Config", dict(BASE, head_dim=16, moe_intermediate_size=32, n_routed_experts=8,
                                              num_experts_per_tok=2, first_k_dense_replace=1, **DS_MLA),
                    None, "moe"),
    "jamba": ("JambaConfig", dict(BASE, num_experts=8, num_experts_per_tok=2, attn_layer_period=2,
                                  attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1), None, "moe"),
    "qwen3_next": ("Qwen3NextConfig", dict(BASE, num_hidden_layers=4, moe_intermediate_size=32,
                                            shared_expert_intermediate_size=48, num_experts=8,
                                            num_experts_per_tok=2, head_dim=16, linear_num_key_heads=2,
                                            linear_num_value_heads=4, linear_key_head_dim=16,
                                            linear_value_head_dim=16,
                                            layer_types=["linear_attention"] * 3 + ["full_attention"]),
                   None, "moe"),
    "gemma4_text": ("Gemma4TextConfig", dict(BASE, num_hidden_layers=4, head_dim=16, hidden_size_per_layer_input=16,
                                              layer_types=["sliding_attention"] * 3 + ["full_attention"],
                                              enable_moe_block=True, num_experts=8, top_k_experts=2,
                                              moe_intermediate_size=32), None, "moe"),
    "granitemoehybrid": ("GraniteMoeHybridConfig", dict(BASE, num_hidden_layers=4, shared_intermediate_size=48,
                                                         num_local_experts=8, num_experts_per_tok=2, mamba_n_heads=8,
                                                         layer_types=["mamba", "attention"] * 2), None, "moe"),
    # special layouts
    "nemotron_h": ("NemotronHConfig", dict({k: v for k, v in BASE.items() if k != "num_hidden_layers"},
                                            head_dim=16, moe_intermediate_size=32,
                                            moe_shared_expert_intermediate_size=48, n_routed_experts=8,
                                            num_experts_per_tok=2, mamba_num_heads=8, mamba_head_dim=16,
                                            layers_block_type=["linear_attention", "moe", "full_attention", "mlp"]),
                   None, "moe"),
    "gpt_oss": ("GptOssConfig", dict(BASE, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
                                     layer_types=["sliding_attention", "full_attention"]), None, "moe"),
    "llama4_text": ("Llama4TextConfig", dict(BASE, num_hidden_layers=4, intermediate_size_mlp=96, head_dim=16,
                                              num_local_experts=8, num_experts_per_tok=2,
                                              layer_types=["chunked_attention"] * 3 + ["full_attention"],
                                              no_rope_layers=[1, 1, 1, 0]), None, "moe"),
    "dbrx": ("DbrxConfig", dict(d_model=64, n_heads=4, n_layers=2, vocab_size=VOCAB,
                                ffn_config={"ffn_hidden_size": 96, "moe_num_experts": 8, "moe_top_k": 2},
                                attn_config={"kv_n_heads": 2, "rope_theta": 1e4, "clip_qkv": 8.0}), None, "moe"),
    "jetmoe": ("JetMoeConfig", dict(hidden_size=64, intermediate_size=96, num_key_value_heads=2, kv_channels=16,
                                    num_hidden_layers=2, num_local_experts=8, num_experts_per_tok=2,
                                    vocab_size=VOCAB), None, "moe"),
    "aria_text": ("AriaTextConfig", dict(BASE, head_dim=16, moe_num_experts=8, moe_topk=2), None, "moe"),
    "longcat_flash": ("LongcatFlashConfig", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                                  vocab_size=VOCAB, expert_ffn_hidden_size=32, ffn_hidden_size=96,
                                                  head_dim=8, num_layers=1, n_routed_experts=8, zero_expert_num=2,
                                                  moe_topk=2, **DS_MLA), None, "moe"),
    "step3p7": ("Step3p7Config", "step3p7", "Step3p7ForConditionalGeneration", "moe"),
    # seq2seq mixtures of experts: one nn.Linear per expert
    "switch_transformers": ("SwitchTransformersConfig", dict(d_model=64, num_layers=2, num_decoder_layers=2, d_ff=64,
                                                             d_kv=16, num_heads=4, num_experts=8, vocab_size=VOCAB),
                            "SwitchTransformersForConditionalGeneration", "seq2seq-moe"),
    "nllb_moe": ("NllbMoeConfig", dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, encoder_attention_heads=4, decoder_attention_heads=4,
                                       num_experts=8, vocab_size=VOCAB), "NllbMoeForConditionalGeneration",
                 "seq2seq-moe"),
}


def _step3p7_config():
    import transformers

    text = dict(BASE, head_dim=16, moe_intermediate_size=32, share_expert_dim=48, num_local_experts=8,
                n_routed_experts=8, num_experts_per_tok=2, sliding_window=16,
                layer_types=["full_attention"] * 2, mlp_layer_types=["sparse"] * 2)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    return transformers.Step3p7Config(text_config=text, vision_config=vision)


def make_config(model_type: str):
    import transformers

    cfg_name, kwargs, _, _ = RECIPES[model_type]
    if kwargs == "step3p7":
        return _step3p7_config()
    return getattr(transformers, cfg_name)(**kwargs)


def make_model(model_type: str, seed: int = 0):
    """A tiny random model in bf16, eval mode, on the CPU."""
    import transformers

    cfg = make_config(model_type)
    torch.manual_seed(seed)
    cls_name = RECIPES[model_type][2]
    # Built in bf16 the way from_pretrained builds it (buffers such as rotary
    # frequencies stay fp32), so that the packed model loaded back can be equal.
    if cls_name is not None:
        model = getattr(transformers, cls_name)._from_config(cfg, dtype=torch.bfloat16)
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return model.eval()


def model_inputs(model_type: str, batch: int = 2, seq: int = 7, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if RECIPES[model_type][3] == "seq2seq-moe":
        inputs["decoder_input_ids"] = torch.randint(3, VOCAB, (batch, 5), generator=g)
    return inputs


@pytest.fixture(scope="session")
def tiny_model():
    """tiny_model(model_type) -> cached bf16 model (do not modify it)."""
    cache = {}

    def get(model_type: str):
        if model_type not in cache:
            cache[model_type] = make_model(model_type)
        return cache[model_type]

    return get


@pytest.fixture(scope="session")
def packed_dir(tmp_path_factory, tiny_model):
    """packed_dir(model_type, layout) -> folder of the tiny model saved by glyd (cached)."""
    import glyd

    cache = {}

    def get(model_type: str, layout: str = "fixed12"):
        key = (model_type, layout)
        if key not in cache:
            d = tmp_path_factory.mktemp(f"{model_type}-{layout}") / "ckpt"
            glyd.save_pretrained(tiny_model(model_type), d, layout=layout, progress=False)
            cache[key] = d
        return cache[key]

    return get


def safetensors_offsets(path, name):
    """(start, end) byte range of tensor ``name`` inside a .safetensors file."""
    import json
    import struct

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    a, b = header[name]["data_offsets"]
    return 8 + n + a, 8 + n + b


def graph_replays_match(fn, x, new_input, want, what, replays=3):
    """GPU tests: capture fn(x) in a CUDA graph (fn warmed up outside it), then
    replay it on `replays` new inputs new_input(i) written into x, each output
    torch.equal to want(x)."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x)
    for i in range(replays):
        x.copy_(new_input(i))
        graph.replay()
        expect = want(x)
        torch.cuda.synchronize()
        assert torch.equal(out, expect), f"{what}: replay {i} differs"
