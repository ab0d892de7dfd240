"""Checkpoint table on the CPU: size, save and load times, bf16 vs Glyd.

Default model: granite-3.1-3b-a800m's configuration (a 3.3B mixture of
experts: 32 layers, 40 experts of 512, hidden 1536) with random weights
(randn * 0.02 in bf16) at real sizes. Prints a markdown table.

    GLYD_LIBRARY=build/libglyd.so PYTHONPATH=python .venv/bin/python \
        python/benchmarks/checkpoint_cpu.py [--layers 32] [--layout fixed12]
"""

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GraniteMoeConfig

import glyd


def granite_3b_a800m(layers: int) -> GraniteMoeConfig:
    return GraniteMoeConfig(
        hidden_size=1536, intermediate_size=512, num_hidden_layers=layers, num_attention_heads=24,
        num_key_value_heads=8, num_local_experts=40, num_experts_per_tok=8, vocab_size=49155,
        tie_word_embeddings=True, max_position_embeddings=4096,
    )


def random_model(config):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    model.tie_weights()
    return model.eval()


def size_gb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*.safetensors")) / 1e9


def timed(fn):
    gc.collect()
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--layout", default="fixed12", choices=["fixed12", "smallest"])
    args = ap.parse_args()
    model = random_model(granite_3b_a800m(args.layers))
    n = sum(p.numel() for p in model.parameters())
    tmp = Path(tempfile.mkdtemp(prefix="glyd-bench-"))
    try:
        bf16_dir, glyd_dir = tmp / "bf16", tmp / "glyd"
        _, t_save_bf16 = timed(lambda: model.save_pretrained(bf16_dir))
        _, t_save_glyd = timed(lambda: glyd.save_pretrained(model, glyd_dir, layout=args.layout, progress=False))
        del model
        ids = torch.tensor([[1, 2, 3, 4]])

        def forward(m):
            with torch.no_grad():
                return m(ids).logits

        m, t_load_bf16 = timed(lambda: AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.bfloat16))
        ref, t_fwd_bf16 = timed(lambda: forward(m))
        del m
        m, t_load_glyd = timed(lambda: glyd.from_pretrained(glyd_dir))
        out, t_fwd_glyd = timed(lambda: forward(m))
        assert torch.equal(out, ref), "Glyd logits differ from bf16"
        del m
        m, t_load_verify = timed(lambda: glyd.from_pretrained(glyd_dir, verify=True))
        del m
        print(f"granite-3.1-3b-a800m config, {args.layers} layers, {n / 1e9:.2f} B parameters, layout {args.layout}, CPU, "
              f"{torch.get_num_threads()} threads")
        print("from_pretrained maps or reads weights lazily in both cases; the first forward (4 tokens) touches them"
              " (bf16: pages in; Glyd: decodes the linears once and the routed experts); logits are identical.")
        print("| checkpoint | safetensors GB | save s | from_pretrained s | + first forward s | from_pretrained(verify=True) s |")
        print("|---|---|---|---|---|---|")
        print(f"| bf16 | {size_gb(bf16_dir):.2f} | {t_save_bf16:.1f} | {t_load_bf16:.2f} | {t_fwd_bf16:.2f} | — |")
        print(f"| Glyd {args.layout} | {size_gb(glyd_dir):.2f} | {t_save_glyd:.1f} | {t_load_glyd:.2f} | {t_fwd_glyd:.2f} | {t_load_verify:.2f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
