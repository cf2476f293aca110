"""Checkpoints: safetensors round trips, half precision, and clear errors for broken directories."""

import json

import pytest
import torch

from dstg_interp import CheckpointError, load_model
from dstg_interp.model.checkpoint import save_checkpoint

from conftest import tiny_model


def state_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_save_load_save_is_bit_identical(variant, tmp_path, padded_batch):
    model = tiny_model(variant)
    model.save(tmp_path / "a")
    loaded = load_model(tmp_path / "a")
    assert state_equal(model.state_dict(), loaded.state_dict())
    loaded.save(tmp_path / "b")
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    tokens, mask = padded_batch
    torch.testing.assert_close(model.eval()(tokens, mask), loaded(tokens, mask), rtol=0, atol=0)


def test_half_precision_checkpoint_loads_as_float32(tmp_path):
    model = tiny_model("dstg")
    model.save(tmp_path / "half", dtype=torch.float16)
    loaded = load_model(tmp_path / "half")
    assert loaded.ap_table.dtype == torch.float32
    torch.testing.assert_close(loaded.ap_table, model.ap_table.detach().half().float())


def test_saving_over_an_existing_checkpoint_replaces_it(tmp_path):
    tiny_model("rope").save(tmp_path / "ck")
    tiny_model("dstg").save(tmp_path / "ck")
    assert load_model(tmp_path / "ck").config.variant == "dstg"
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_failed_save_leaves_nothing(tmp_path, monkeypatch):
    import dstg_interp.model.saving as ck

    def boom(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(ck, "save_file", boom)
    with pytest.raises(OSError):
        save_checkpoint(tiny_model("ap"), tmp_path / "ck")
    assert list(tmp_path.iterdir()) == []


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="is not a directory"):
        load_model(tmp_path / "nope")


def test_missing_config(tmp_path):
    (tmp_path / "ck").mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_model(tmp_path / "ck")


@pytest.mark.parametrize("saved, edits, message", [
    ("rp", {"variant": "alibi"}, "unknown variant 'alibi'"),
    ("rp", {"d_model": 64, "d_head": 16, "d_mlp": None}, "has shape .* but config.json implies"),  # wrong shapes
    ("rope", {"variant": "ap"}, "weights do not match config.json"),  # weights of another variant
])
def test_a_config_that_does_not_fit_its_weights(tmp_path, saved, edits, message):
    tiny_model(saved).save(tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    (tmp_path / "ck" / "config.json").write_text(json.dumps({**cfg, **edits}))
    with pytest.raises(CheckpointError, match=message):
        load_model(tmp_path / "ck")


def test_corrupt_weights(tmp_path):
    tiny_model("ap").save(tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt safetensors"):
        load_model(tmp_path / "ck")


def test_corrupt_config_json(tmp_path):
    tiny_model("ap").save(tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_model(tmp_path / "ck")


def test_tokenizer_of_another_size_is_refused(tmp_path):
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tiny_model("rope").save(tmp_path / "ck", tokenizer=tok)
    with pytest.raises(CheckpointError, match="does not match the model's vocab_size=97"):
        load_model(tmp_path / "ck")


def test_pickle_is_never_used(tmp_path, monkeypatch):
    import pickle

    def forbidden(*a, **k):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    tiny_model("dstg").save(tmp_path / "ck")
    load_model(tmp_path / "ck")
