"""Models fail fast, in one line: absurd sizes, NaN or integer weights, a pickle payload, a tokenizer far
smaller than the embedding, a full disk while saving a checkpoint.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import errno
import shutil
import json
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import dstg_interp.model.checkpoint as checkpoint_module
import dstg_interp.model.saving as saving_module
from conftest import tiny_model
from dstg_interp import CheckpointError, ModelConfig, load_model
from dstg_interp.cli.convert import main as convert_main
from dstg_interp.cli.extend import main as extend_main
from dstg_interp.model.checkpoint import NonFiniteWeightsWarning
from dstg_interp.cli.cache import main as cache_main
from reliability_setup import FIXTURES, assert_one_line_error, run_main

AUTHORS = FIXTURES / "authors-format" / "posneobert-dstg"


# --- bad content ----------------------------------------------------------------------------------
def test_absurd_model_sizes(tiny, tmp_path, capsys):
    """#16: vocab_size 1e12 tried to allocate 448 TB; #153/#154: --factor inf / 100000."""
    with pytest.raises(ValueError, match="TB of memory.*vocab_size=1000000000000"):
        ModelConfig(variant="dstg", d_sem=24, d_ap=8, n_heads=4, vocab_size=10**12)
    checkpoint, _ = tiny
    huge = tmp_path / "huge"
    huge.mkdir()
    config = json.loads((checkpoint / "config.json").read_text())
    (huge / "config.json").write_text(json.dumps(dict(config, vocab_size=10**12)))
    (huge / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes())
    code, _, err = run_main(capsys, cache_main, "--model", huge, "--corpus", tiny[1], "--out", tmp_path / "s", "--quiet")
    assert_one_line_error(code, err, "huge/config.json", "TB of memory")
    for factor, fragment in (("inf", "finite"), ("100000", "TB of memory"), ("nan", "must be > 1")):
        code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", factor, "--out", tmp_path / "x")
        assert_one_line_error(code, err, fragment, prog="dstg-extend")
    assert not (tmp_path / "x").exists()


def test_model_too_big_for_this_machine(monkeypatch):
    monkeypatch.setattr(checkpoint_module, "physical_memory", lambda: 10**6)
    with pytest.raises(CheckpointError, match="needs about .* GB but this machine has"):
        checkpoint_module.build_model(ModelConfig(variant="rope", d_model=32, n_heads=4, vocab_size=10_000))


def test_nan_weights_are_reported_and_integer_weights_refused(tmp_path):
    """#22: a NaN checkpoint extracted a store full of NaN without a word; #23: int32 weights were cast."""
    model = tiny_model("rope")
    with torch.no_grad():
        model.blocks[0].mlp.w_out.weight[0, 0] = float("nan")
    model.save(tmp_path / "nan")
    with pytest.warns(NonFiniteWeightsWarning, match="model.safetensors: 1 tensor.*NaN"):
        load_model(tmp_path / "nan")
    from safetensors.torch import load_file, save_file

    state = load_file(str(tmp_path / "nan" / "model.safetensors"))
    state = {k: (v.to(torch.int32) if k == "tok_embed.weight" or k.endswith("embed.weight") else v.nan_to_num())
             for k, v in state.items()}
    save_file(state, str(tmp_path / "nan" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="has dtype int32; weights must be floating point"):
        load_model(tmp_path / "nan")


# --- the one line is the only line: third-party noise silenced, real warnings in our words --------
def authors_copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(AUTHORS, folder)
    return folder


def test_a_pickle_payload_is_refused_in_one_line(tmp_path, capsys):
    """N9 / N10: torch's 2-line 'Detected pickle protocol 4' UserWarning came before the refusal."""
    import os
    import pickle

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'PWNED'}",)

    folder = authors_copy(tmp_path, "pickle")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"embed.weight": Payload()}, protocol=4))
    code, _, err = run_main(capsys, convert_main, folder, tmp_path / "out", "--no-tokenizer")
    assert_one_line_error(code, err, "never unpickled", prog="dstg-convert")
    assert len(err.strip().splitlines()) == 1 and "UserWarning" not in err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


def test_nan_weights_are_one_warning_line_of_our_own(tmp_path, capsys):
    """N26: dstg-convert reported NaN weights as a raw Python warning with a source line."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = authors_copy(tmp_path, "nan")
    state = load_file(folder / "model.safetensors")
    name = next(key for key in state if "embed" in key)
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, folder / "model.safetensors")
    code, out, err = run_main(capsys, convert_main, folder, tmp_path / "out", "--no-tokenizer")
    assert code == 0 and out.startswith("wrote ")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dstg-convert: warning:") and "NaN" in lines[0], err


def test_a_tokenizer_far_smaller_than_the_embedding_is_refused_unless_allowed(tmp_path, capsys):
    """N31: a 25-token vocab.txt for a 100-row model was accepted silently; round 5 (newcomer): it only warned
    and a full table followed.  Refused (one line, exit 2, nothing written); --allow-tokenizer-mismatch reads it
    with the warning."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(20)]) + "\n")
    code, _, err = run_main(capsys, convert_main, AUTHORS, tmp_path / "out", "--tokenizer", vocab)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dstg-convert: error:"), err
    assert "25 tokens for an embedding of 100 rows" in lines[0] and "another model's tokenizer" in lines[0]
    assert "--allow-tokenizer-mismatch" in lines[0] and not (tmp_path / "out").exists()
    code, _, err = run_main(capsys, convert_main, AUTHORS, tmp_path / "out", "--tokenizer", vocab,
                            "--allow-tokenizer-mismatch")
    lines = err.strip().splitlines()
    assert code == 0 and len(lines) == 1 and lines[0].startswith("dstg-convert: warning:"), err
    assert "25 tokens for an embedding of 100 rows" in lines[0] and (tmp_path / "out" / "config.json").is_file()


# --- disk full ------------------------------------------------------------------------------------
def full_disk_save_file(*args, **kwargs):
    raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')


def test_disk_full_while_saving_a_checkpoint(tiny, tmp_path, capsys, monkeypatch):
    """#149, #160: safetensors' own error type escaped as a traceback; the previous checkpoint must stay."""
    checkpoint, _ = tiny
    monkeypatch.setattr(saving_module, "save_file", full_disk_save_file)
    code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", "2", "--out", tmp_path / "longer")
    assert_one_line_error(code, err, "disk full while writing", "longer", prog="dstg-extend")
    assert list(tmp_path.iterdir()) == []  # no temporary folder left
    before = (checkpoint / "model.safetensors").read_bytes()
    with pytest.raises(OSError) as caught:
        load_model(checkpoint).save(checkpoint)
    assert caught.value.errno == errno.ENOSPC
    assert (checkpoint / "model.safetensors").read_bytes() == before
    assert [p.name for p in checkpoint.parent.iterdir() if p.name.startswith(".")] == []


def test_to_tokens_of_a_huge_text_tokenizes_a_prefix_only_and_keeps_what_the_whole_text_gives():
    """TK1: an 11 MB string was tokenized whole (18 s, 2 GB) before the cut; TK6, TK9: None and a lone surrogate."""
    import pytest

    from dstg_interp import load_model
    model = load_model("dstg")
    text = " ".join(f"word{i} and more" for i in range(60_000))  # ~1 MB
    encoded, encode = [], model._encode
    model._encode = lambda part, special: encoded.append(len(part)) or encode(part, special)
    tokens = model.to_tokens(text)
    del model._encode
    assert max(encoded) < len(text) / 100  # a prefix of a few kB, not the whole text
    whole = model._tokenizer().encode(text).ids
    limit = model.config.max_positions
    assert tokens[0].tolist() == whole[:limit - 1] + whole[-1:]
    with pytest.raises(ValueError, match="more than .* tokens long, past max_positions"):
        model.to_tokens(text, truncate=False)
    with pytest.raises(TypeError, match="got NoneType"):
        model.to_tokens(None)
    with pytest.raises(ValueError, match="not valid Unicode"):
        model.to_tokens("\ud800 abc")
