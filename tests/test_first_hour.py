"""Small things a researcher meets in the first hour: a short run's warm-up, a run folder where its checkpoint
is meant, every --help with its defaults."""

import pytest

from conftest import tiny_model
from dstg_interp import load_model, open_encoder
from dstg_interp.cli import cache, erase, export, probe, train
from dstg_interp.train import TrainConfig


def test_default_warmup_scales_with_steps():
    assert TrainConfig(max_steps=40).warmup_steps == 4  # was 200, so --steps 40 was refused
    assert TrainConfig(max_steps=4800).warmup_steps == 200 and TrainConfig(max_steps=40, warmup_steps=0).warmup_steps == 0
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(max_steps=40, warmup_steps=40)


def test_a_run_folder_loads_its_checkpoint(tmp_path):
    tiny_model("rope").save(tmp_path / "mine" / "checkpoint")
    assert load_model(tmp_path / "mine").config.variant == "rope"
    assert open_encoder(str(tmp_path / "mine")).name == "mine"


@pytest.mark.parametrize("command", [train, probe, cache, erase, export],
                         ids=["dstg-train", "dstg-probe", "dstg-cache", "dstg-erase", "dstg-export"])
def test_every_flag_with_a_default_says_it(command):
    parser = command.build_parser()
    silent = [action.option_strings[0] for action in parser._actions
              if action.option_strings and action.default not in (None, False, "==SUPPRESS==")
              and "default" not in (action.help or "")]
    assert not silent, f"--help shows no default for {silent}"


def test_dstg_probe_names_legend_and_collisions(tmp_path, capsys):
    from dstg_interp.entry import launch
    from dstg_interp.tiny_zoo import tiny_zoo

    models, documents = tiny_zoo(["dstg", "rope"], n_docs=14, seed=0)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, document in enumerate(documents):
        (corpus / f"{i:02d}.txt").write_text(document.text)
    models["dstg"].save(tmp_path / "runs" / "a" / "checkpoint")
    models["rope"].save(tmp_path / "runs" / "b" / "checkpoint")
    common = ["--task", "token", "--corpus", str(corpus), "--layers", "last", "--no-controls", "--no-position-baseline",
              "--quiet"]
    rc = launch("dstg-probe", ["--model", str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "b"), "--name", "x", "x",
                               "--out", str(tmp_path / "o1"), *common])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--name gives 'x' twice" in err and len(err.splitlines()) == 1 and not (tmp_path / "o1").exists()
    rc = launch("dstg-probe", ["--model", str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "b"),
                               "--out", str(tmp_path / "o2"), *common])
    out = capsys.readouterr().out
    assert rc == 0 and "a/full" in out and "b/full" in out and "layer 0 = embeddings" in out and "the full table" in out
    import json
    record = json.loads((tmp_path / "o2" / "results.json").read_text())
    assert record["models"] == {"a": str(tmp_path / "runs" / "a"), "b": str(tmp_path / "runs" / "b")}
