"""Bad input for the transformers integration: each failure is loud and names what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import glyd
from glyd.transformers import cli
from glyd.transformers.config import GUARD

from conftest import make_model, model_inputs, safetensors_offsets

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(glyd.__file__))))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(glyd.__file__)),
                                         env.get("PYTHONPATH", "")])
    return env


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_missing_path(tmp_path):
    with pytest.raises(glyd.NotFoundError, match="no such checkpoint folder"):
        glyd.from_pretrained(tmp_path / "nope")


def test_not_a_glyd_checkpoint(tmp_path):
    m = make_model("llama")
    m.save_pretrained(tmp_path / "plain")
    with pytest.raises(glyd.InvalidArgumentError, match="not a Glyd checkpoint"):
        glyd.from_pretrained(tmp_path / "plain")


def test_missing_shard(tmp_path):
    m = make_model("mixtral")
    d = tmp_path / "ckpt"
    glyd.save_pretrained(m, d, max_shard_size=100_000, progress=False)
    shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    assert len(shards) > 1
    os.remove(d / shards[1])
    with pytest.raises((glyd.GlydError, OSError)) as e:
        glyd.from_pretrained(d)
    assert shards[1] in str(e.value)


def test_corrupted_shard_names_file_and_tensor(tmp_path, packed_dir):
    d = _copy(packed_dir("llama"), tmp_path / "ckpt")
    name = "model.layers.1.mlp.down_proj.packed_weight"
    shard = d / "model.safetensors"
    start, end = safetensors_offsets(shard, f"{name}.glyd_sm")
    data = bytearray(shard.read_bytes())
    data[(start + end) // 2] ^= 0x40  # one sign/mantissa bit: structure intact, values wrong
    shard.write_bytes(bytes(data))
    with pytest.raises(glyd.ChecksumError) as e:
        glyd.from_pretrained(d, verify=True)
    assert name in str(e.value) and "model.safetensors" in str(e.value)
    # the CLI says the same, with exit code 1
    assert cli.main(["verify", "-q", str(d)]) == 1


def test_nothing_to_pack(tmp_path):
    m = make_model("llama").to(torch.float32)
    with pytest.raises(glyd.InvalidArgumentError, match="nothing to pack.*float32"):
        glyd.save_pretrained(m, tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()
    m = make_model("llama")
    with pytest.raises(glyd.InvalidArgumentError, match="nothing to pack"):
        glyd.save_pretrained(m, tmp_path / "y", progress=False,
                             modules_to_not_convert=["self_attn", "mlp", "lm_head", "embed_tokens"])


def test_newer_format_is_refused(tmp_path, packed_dir):
    d = _copy(packed_dir("llama"), tmp_path / "ckpt")
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["format"] = "glyd-v3"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(glyd.VersionError, match="glyd-v3.*glyd-v2"):
        glyd.from_pretrained(d)
    import transformers

    with pytest.raises(glyd.VersionError):
        transformers.AutoModelForCausalLM.from_pretrained(d)


def test_without_import_glyd_loading_fails_loudly(packed_dir):
    """Stock transformers must not hand back random weights for a Glyd checkpoint."""
    d = packed_dir("llama")
    code = textwrap.dedent(f"""
        import sys
        from transformers import AutoModelForCausalLM
        AutoModelForCausalLM.from_pretrained({str(d)!r})
        assert "glyd" not in sys.modules
        print("LOADED")
    """)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0, r.stdout
    assert "LOADED" not in r.stdout
    assert "import glyd" in r.stderr
    assert GUARD in r.stderr


def test_save_error_leaves_no_folder(tmp_path, monkeypatch):
    """An error halfway (e.g. out of disk) removes the temporary folder; nothing appears at the destination."""
    import errno

    from glyd import checkpoint

    m = make_model("llama")
    calls = {"n": 0}
    orig = checkpoint.Writer.add_packed

    def failing(self, name, packed):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return orig(self, name, packed)

    monkeypatch.setattr(checkpoint.Writer, "add_packed", failing)
    with pytest.raises(OSError, match="No space"):
        glyd.save_pretrained(m, tmp_path / "ckpt", progress=False)
    assert os.listdir(tmp_path) == []


def test_save_killed_leaves_no_valid_checkpoint(tmp_path):
    """A process killed in the middle of a save leaves no folder that looks like a checkpoint."""
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import glyd
        from glyd import checkpoint
        from conftest import make_model
        orig = checkpoint.Writer.add_packed
        n = [0]
        def add(self, name, p):
            n[0] += 1
            if n[0] == 6:
                os.kill(os.getpid(), 9)
            return orig(self, name, p)
        checkpoint.Writer.add_packed = add
        glyd.save_pretrained(make_model("llama"), {str(tmp_path / "ckpt")!r}, progress=False)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == -9, r.stderr
    assert not (tmp_path / "ckpt").exists()
    for entry in os.listdir(tmp_path):  # a leftover temporary folder must not pass as a checkpoint
        assert not os.path.exists(tmp_path / entry / "config.json")
        with pytest.raises(glyd.GlydError):
            glyd.from_pretrained(tmp_path / entry)


def test_overwrite(tmp_path):
    m = make_model("llama")
    glyd.save_pretrained(m, tmp_path / "c", progress=False)
    with pytest.raises(glyd.ExistsError):
        glyd.save_pretrained(m, tmp_path / "c", progress=False)
    glyd.save_pretrained(m, tmp_path / "c", progress=False, overwrite=True, layout="smallest")
    assert json.loads((tmp_path / "c" / "config.json").read_text())["quantization_config"]["layout"] == "smallest"


def test_bad_layout(tmp_path):
    with pytest.raises(glyd.InvalidArgumentError, match="layout"):
        glyd.save_pretrained(make_model("llama"), tmp_path / "c", layout="tiny", progress=False)


# ---- the command line ------------------------------------------------------------------

def test_cli_help_and_usage(capsys):
    assert cli.main(["--help"]) == 0
    assert "pack" in capsys.readouterr().out
    assert cli.main([]) == 2
    assert cli.main(["pack", "--help"]) == 0
    assert cli.main(["frobnicate"]) == 2


def test_cli_pack_info_verify(tmp_path, capsys):
    m = make_model("qwen3_moe")
    m.save_pretrained(tmp_path / "src")
    assert cli.main(["pack", "-q", str(tmp_path / "src"), str(tmp_path / "dst"), "--layout", "smallest",
                     "--verify"]) == 0
    out = capsys.readouterr().out
    assert "glyd-v2" in out and "bits/weight" in out
    assert cli.main(["pack", "-q", str(tmp_path / "src"), str(tmp_path / "dst")]) == 2  # exists
    assert cli.main(["pack", "-q", str(tmp_path / "nope"), str(tmp_path / "d2")]) == 2
    assert cli.main(["info", str(tmp_path / "dst")]) == 0
    out = capsys.readouterr().out
    assert "model.layers.0.mlp.experts.packed_gate_up" in out and "smallest" in out and "original" in out
    assert cli.main(["verify", "-q", str(tmp_path / "dst")]) == 0
    assert cli.main(["verify", "-q", str(tmp_path / "nope")]) == 2
    loaded = glyd.from_pretrained(tmp_path / "dst")
    inputs = model_inputs("qwen3_moe")
    with torch.no_grad():
        assert torch.equal(m(**inputs).logits, loaded(**inputs).logits)


def test_cli_module_entry(tmp_path, packed_dir):
    r = subprocess.run([sys.executable, "-m", "glyd.gpu", "info", "--summary", str(packed_dir("llama"))],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "bits/weight" in r.stdout
