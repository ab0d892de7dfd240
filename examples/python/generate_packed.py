"""A decoder LLM packed, loaded and run: generate() from the packed weights,
default mode and exact=True, on the GPU when one is present.

A Qwen3-architecture model with random weights (no download) is saved as a Glyd
checkpoint, loaded with glyd.from_pretrained, and asked for the same greedy
continuation as the bf16 model:

* exact=True computes what the bf16 model computes (each weight decoded just
  in time, then the bf16 model's own op): the logits are bit for bit the bf16
  model's and so are the tokens;
* the default mode on a GPU multiplies from the packed weights inside Glyd's
  kernels (q/k/v and gate/up of a layer in one launch each): within bf16
  rounding of the bf16 model, so a long greedy continuation may part from it
  where two tokens are nearly tied. On the CPU it decodes the weights and is
  exact too.

    PYTHONPATH=python python examples/python/generate_packed.py [--layers 4]
"""

import argparse
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3Config

import glyd
from glyd.transformers.modules import GlydLinear


def model_bytes(model) -> int:
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=24, help="tokens to generate")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    torch.manual_seed(0)
    cfg = Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=args.layers,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=64, vocab_size=4096)
    bf16 = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():  # trained-like magnitudes: the default init is tiny and mostly escapes
        for p in bf16.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    bf16 = bf16.to(device).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qwen3-glyd"
        glyd.save_pretrained(bf16, path, progress=False)
        packed = glyd.from_pretrained(path, device_map=device).eval()
        exact = glyd.from_pretrained(path, device_map=device, exact=True).eval()

    linears = [m for m in packed.modules() if isinstance(m, GlydLinear)]
    groups = {id(m.__dict__["_glyd_siblings"]) for m in linears if "_glyd_siblings" in m.__dict__}
    print(f"device {device}: {len(linears)} packed linears; memory bf16 {model_bytes(bf16) / 1e6:.1f} MB, "
          f"Glyd {model_bytes(packed) / 1e6:.1f} MB (norms stay bf16)")
    print(f"sibling groups: {len(groups)} (per layer q/k/v/o and gate/up: same input width)")

    gen = dict(max_new_tokens=args.tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want_logits = bf16(prompt).logits
        assert torch.equal(exact(prompt).logits, want_logits), "exact=True must give the bf16 logits"
        want = bf16.generate(prompt, **gen)
        got_exact = exact.generate(prompt, **gen)
        got = packed.generate(prompt, **gen)
        rel = ((packed(prompt).logits.float() - want_logits.float()).norm() / want_logits.float().norm()).item()
    assert torch.equal(got_exact, want), "exact=True must generate the bf16 tokens"
    same = int((got[0, prompt.shape[1]:] == want[0, prompt.shape[1]:]).sum())
    print(f"exact=True: logits and {args.tokens} generated tokens identical to bf16")
    print(f"default:    logits within {rel:.1e} of bf16 (relative norm); {same}/{args.tokens} generated tokens "
          f"equal")
    if device == "cpu":
        assert torch.equal(got, want), "on the CPU the default mode is exact too"
    if device == "cuda":  # the siblings run on the GPU: o_proj, called on another input, has left its group
        sizes = sorted({len(m.__dict__["_glyd_siblings"].members) for m in linears if "_glyd_siblings" in m.__dict__})
        print(f"after generate, sibling groups of {sizes} linears: one launch for q/k/v, one for gate/up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
