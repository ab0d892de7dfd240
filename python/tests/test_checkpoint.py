"""glyd.Writer / glyd.Reader: round trips, atomicity, corruption."""

import json
import os

import pytest
import torch

import glyd


def _tensors():
    torch.manual_seed(0)
    return {
        "model.layers.0.q_proj": (torch.randn(96, 64) * 0.02).to(torch.bfloat16),
        "model.layers.0.experts.w13": (torch.randn(4, 32, 64) * 0.02).to(torch.bfloat16),
        "model.norm.weight": torch.ones(64, dtype=torch.float32),
        "model.embed_ids": torch.arange(10, dtype=torch.int64),
    }


def _write(path, layout="fixed12", max_shard_size=None, experts=True):
    ts = _tensors()
    with glyd.Writer(path, max_shard_size=max_shard_size) as w:
        w.add_packed("model.layers.0.q_proj", glyd.pack(ts["model.layers.0.q_proj"], layout=layout))
        if experts:
            w.add_packed("model.layers.0.experts.w13", glyd.pack(ts["model.layers.0.experts.w13"], layout=layout, groups=4))
        w.add_raw("model.norm.weight", ts["model.norm.weight"])
        w.add_raw("model.embed_ids", ts["model.embed_ids"])
    return ts


@pytest.mark.parametrize("layout", ["fixed12", "smallest"])
@pytest.mark.parametrize("shard", [None, 4096])
def test_round_trip(tmp_path, layout, shard):
    ts = _write(tmp_path / "ck", layout, shard)
    with glyd.Reader(tmp_path / "ck") as r:
        assert r.format == "glyd-v2"  # the expert tensor has 4 groups
        assert set(r.names()) == {k for k in ts}
        for name, t in ts.items():
            assert torch.equal(r.unpack(name), t), name
            r.verify(name)
        info = r.info("model.layers.0.experts.w13")
        assert info.layout == layout and info.num_groups == 4 and info.shape == (4, 32, 64)
        p = r.packed("model.layers.0.experts.w13")
        assert torch.equal(p.unpack_group(2), ts["model.layers.0.experts.w13"][2])
        assert r.info("model.norm.weight").layout == "raw"
        r.verify_all(progress=False)
    files = os.listdir(tmp_path / "ck")
    assert "glyd.fb" in files
    if shard:
        assert "model.safetensors.index.json" in files
        index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
        assert "model.layers.0.q_proj.glyd_sm" in index["weight_map"]


def test_dense_is_glyd_v1(tmp_path):
    _write(tmp_path / "ck", experts=False)
    with glyd.Reader(tmp_path / "ck") as r:
        assert r.format == "glyd-v1"


def test_v1_only_reader_refuses_v2(tmp_path):
    _write(tmp_path / "ck")
    with pytest.raises(glyd.VersionError, match="glyd-v2"):
        glyd.Reader(tmp_path / "ck", max_format_version=1)


def test_abort_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with glyd.Writer(tmp_path / "ck") as w:
            w.add_raw("x", torch.zeros(3))
            raise RuntimeError("killed halfway")
    assert os.listdir(tmp_path) == []


def test_existing_folder_needs_overwrite(tmp_path):
    _write(tmp_path / "ck")
    with pytest.raises(glyd.ExistsError):
        glyd.Writer(tmp_path / "ck")
    with glyd.Writer(tmp_path / "ck", overwrite=True) as w:
        w.add_raw("only", torch.zeros(2))
    with glyd.Reader(tmp_path / "ck") as r:
        assert r.names() == ["only"]


def test_flipped_bit_fails_verify_naming_tensor_and_file(tmp_path):
    ts = _write(tmp_path / "ck")
    shard = tmp_path / "ck" / "model.safetensors"
    with glyd.Reader(tmp_path / "ck") as r:
        # find the sm plane of q_proj inside the shard and flip one bit of it
        plane = r.packed("model.layers.0.q_proj").planes["sm"]
        needle = bytes(plane[:64].numpy())
    data = bytearray(shard.read_bytes())
    at = data.find(needle)
    assert at > 0
    data[at + 3] ^= 0x10
    shard.write_bytes(bytes(data))
    with glyd.Reader(tmp_path / "ck") as r:
        with pytest.raises(glyd.ChecksumError, match="q_proj") as e:
            r.verify("model.layers.0.q_proj")
        assert "model.safetensors" in str(e.value)
    del ts


def test_truncated_shard_names_file(tmp_path):
    _write(tmp_path / "ck")
    shard = tmp_path / "ck" / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(glyd.CorruptError, match="model.safetensors"):
        glyd.Reader(tmp_path / "ck")


def test_missing_folder(tmp_path):
    with pytest.raises(glyd.NotFoundError):
        glyd.Reader(tmp_path / "nope")


def test_writer_refuses_bad_input(tmp_path):
    with glyd.Writer(tmp_path / "ck") as w:
        w.add_raw("a", torch.zeros(2))
        with pytest.raises(glyd.InvalidArgumentError):
            w.add_raw("a", torch.zeros(2))  # duplicate name
        with pytest.raises(glyd.InvalidArgumentError):
            w.add_packed("b", "not packed")
    with pytest.raises(glyd.InvalidArgumentError):
        glyd.Writer(tmp_path / "x", max_shard_size="lots")


def test_shard_truncated_while_open_is_an_error_not_a_crash(tmp_path):
    # The shards are memory-mapped: reading pages past a truncation faults
    # (SIGBUS); the library reports it instead of killing the interpreter.
    with glyd.Writer(tmp_path / "ck") as w:
        w.add_raw("big", torch.arange(1 << 20, dtype=torch.float32))
        w.add_packed("w", glyd.pack((torch.randn(1024, 1024) * 0.02).to(torch.bfloat16)))
    with glyd.Reader(tmp_path / "ck") as r:
        os.truncate(tmp_path / "ck" / "model.safetensors", 4096)
        for name in ("big", "w"):
            with pytest.raises(glyd.GlydIOError, match="truncated"):
                r.unpack(name)
            with pytest.raises(glyd.GlydIOError):
                r.verify(name)
