"""`python -m glyd.gpu pack|verify|info`: the command line for checkpoints.

Exit codes (scripts may rely on them):
  0  success
  1  verification or corruption failure (bad checksum, damaged or truncated file,
     a format newer than this glyd reads)
  2  usage error (bad arguments, a missing folder, nothing to pack)
  3  any other failure (I/O, out of memory, a bug)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

EXIT_OK, EXIT_CORRUPT, EXIT_USAGE, EXIT_OTHER = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m glyd.gpu",
        description="Pack transformers checkpoints losslessly, verify and inspect Glyd checkpoints.",
        epilog="Exit codes: 0 ok, 1 verification/corruption failure, 2 usage error, 3 other failure.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    pk = sub.add_parser("pack", help="pack a local transformers checkpoint folder",
                        description="Load SRC (a local transformers checkpoint folder), pack every linear and "
                                    "expert weight losslessly, and write the Glyd checkpoint DST.")
    pk.add_argument("src", metavar="SRC", help="local transformers checkpoint folder")
    pk.add_argument("dst", metavar="DST", help="the Glyd checkpoint folder to create")
    pk.add_argument("--layout", choices=("fixed12", "smallest"), default="fixed12",
                    help="fixed12: ~12 bits/weight, fastest (default); smallest: ~11 bits/weight")
    pk.add_argument("--max-shard-size", default="5GB", help="bytes per safetensors shard, e.g. 5GB (default)")
    pk.add_argument("--dtype", choices=("auto", "bfloat16", "float16"), default="auto",
                    help="convert the model to this dtype before packing (default: the checkpoint's own; "
                         "packing is exact for the converted weights)")
    pk.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="where to pack: auto = on the GPU when one is usable, else the CPU (same bytes)")
    pk.add_argument("--overwrite", action="store_true", help="replace DST if it exists (once the new one is complete)")
    pk.add_argument("--verify", action="store_true", help="verify every tensor of DST after writing it")
    pk.add_argument("--trust-remote-code", action="store_true", help="allow model code from SRC")
    pk.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    vf = sub.add_parser("verify", help="check every tensor of a checkpoint against its checksum",
                        description="Decode every packed tensor of DIR and compare it with the checksum of the "
                                    "original bytes. Exit 1 names the first bad tensor and its file.")
    vf.add_argument("dir", metavar="DIR")
    vf.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    inf = sub.add_parser("info", help="per tensor: layout, shape, bits/weight; totals",
                         description="List the tensors of a Glyd checkpoint: layout, dtype, shape, groups, "
                                     "bits/weight; totals and the size of the bf16 original.")
    inf.add_argument("dir", metavar="DIR")
    inf.add_argument("--summary", action="store_true", help="totals only")
    return p


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n}"


def _load_source_model(src: str, dtype: str, trust_remote_code: bool):
    import torch
    import transformers

    from .load import model_class

    import json

    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    if (cfg.get("quantization_config") or {}).get("quant_method") not in (None, "glyd"):
        raise ValueError(f"{src} is quantized with {cfg['quantization_config'].get('quant_method')!r}; "
                         f"Glyd packs bf16/fp16 checkpoints")
    cls = model_class(cfg)
    if cls is transformers.AutoModelForCausalLM and not cfg.get("architectures"):
        cls = transformers.AutoModel
    kwargs = {"dtype": "auto" if dtype == "auto" else getattr(torch, dtype)}
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    return cls.from_pretrained(src, **kwargs)


def _pack_device(choice: str) -> str:
    """The device save_pretrained packs on: the GPU when asked or, for auto, when usable."""
    if choice != "auto":
        return choice
    from .. import _gpu

    return "cuda" if _gpu.available() else "cpu"


def cmd_pack(a) -> int:
    from ..checkpoint import Reader
    from .save import save_pretrained

    if not os.path.isdir(a.src) or not os.path.isfile(os.path.join(a.src, "config.json")):
        print(f"error: {a.src}: not a transformers checkpoint folder (no config.json)", file=sys.stderr)
        return EXIT_USAGE
    if os.path.exists(a.dst) and not a.overwrite:
        print(f"error: {a.dst} exists; pass --overwrite to replace it", file=sys.stderr)
        return EXIT_USAGE
    model = _load_source_model(a.src, a.dtype, a.trust_remote_code)
    stats = save_pretrained(model, a.dst, layout=a.layout, max_shard_size=a.max_shard_size, source=a.src,
                            overwrite=a.overwrite, progress=not a.quiet, pack_device=_pack_device(a.device))
    if a.verify:
        with Reader(a.dst) as r:
            r.verify_all(progress=not a.quiet)
    total_orig = stats["original_bytes"] + stats["raw_bytes"]
    total_new = stats["packed_bytes"] + stats["raw_bytes"]
    bpw = 8 * stats["packed_bytes"] / max(1, stats["original_bytes"] / 2)
    print(f"{a.dst}: {stats['format']}, layout {a.layout}: {stats['packed_tensors']} packed tensors "
          f"({bpw:.2f} bits/weight), {stats['raw_tensors']} raw; {_human(total_new)} "
          f"instead of {_human(total_orig)} ({100 * total_new / max(1, total_orig):.1f}%)")
    return EXIT_OK


def cmd_verify(a) -> int:
    from ..checkpoint import Reader

    with Reader(a.dir) as r:
        r.verify_all(progress=not a.quiet)
        n = len(r.names())
        print(f"{a.dir}: OK, {n} tensors verified ({r.format})")
    return EXIT_OK


def cmd_info(a) -> int:
    from ..checkpoint import Reader

    with Reader(a.dir) as r:
        infos = [r.info(n) for n in r.names()]
        fmt = r.format
    packed = [i for i in infos if i.layout != "raw"]
    raw = [i for i in infos if i.layout == "raw"]
    if not a.summary:
        w = max([len(i.name) for i in infos] + [6])
        print(f"{'tensor':<{w}}  {'layout':<8} {'dtype':<8} {'groups':>6} {'bits/w':>7}  shape")
        for i in infos:
            dt = str(i.dtype).replace("torch.", "")
            print(f"{i.name:<{w}}  {i.layout:<8} {dt:<8} {i.num_groups:>6} {i.bits_per_weight:>7.3f}  "
                  f"{'x'.join(map(str, i.shape)) or 'scalar'}")
    p_orig = sum(i.original_bytes for i in packed)
    p_new = sum(i.packed_bytes for i in packed)
    r_bytes = sum(i.original_bytes for i in raw)
    elems = sum(i.original_bytes // 2 for i in packed)
    print(f"format {fmt}: {len(packed)} packed tensors, {len(raw)} raw")
    print(f"packed weights: {_human(p_new)} for {_human(p_orig)} of bf16 "
          f"({8 * p_new / max(1, elems):.3f} bits/weight)")
    print(f"raw tensors:    {_human(r_bytes)}")
    print(f"checkpoint:     {_human(p_new + r_bytes)}; original: {_human(p_orig + r_bytes)} "
          f"({100 * (p_new + r_bytes) / max(1, p_orig + r_bytes):.1f}%)")
    return EXIT_OK


def main(argv=None) -> int:
    from .. import errors

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) and usage errors (2)
        return int(e.code or 0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return {"pack": cmd_pack, "verify": cmd_verify, "info": cmd_info}[a.command](a)
    except (errors.ChecksumError, errors.CorruptError, errors.VersionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CORRUPT
    except (errors.NotFoundError, errors.InvalidArgumentError, errors.ExistsError, FileNotFoundError,
            ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI reports, scripts read the exit code
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_OTHER


if __name__ == "__main__":
    sys.exit(main())
