"""Small things a researcher meets in the first hour: every --help with its defaults, the names dstg-probe and
dstg-cache give the models.
"""

import json

import pytest

from dstg_interp import ActivationStore
from dstg_interp.cli import cache, erase, export, extend, holmes, probe, train
from dstg_interp.cli import eval as evaluate
from dstg_interp.cli.entry import launch
from dstg_interp.tiny_zoo import tiny_zoo

COMMAND_PARSERS = {"dstg-train": train.build_parser, "dstg-probe": probe.build_parser, "dstg-cache": cache.build_parser,
                   "dstg-eval": evaluate.build_parser, "dstg-erase": erase.build_parser, "dstg-extend": extend.build_parser,
                   "dstg-export": export.build_parser,
                   "dstg-holmes run": lambda: holmes.build_parser()._subparsers._group_actions[0].choices["run"],
                   "dstg-holmes build": lambda: holmes.build_parser()._subparsers._group_actions[0].choices["build"]}


@pytest.mark.parametrize("command", COMMAND_PARSERS)
def test_every_flag_with_a_default_says_it(command):
    parser = COMMAND_PARSERS[command]()
    silent = [action.option_strings[0] for action in parser._actions
              if action.option_strings and action.default not in (None, False, "==SUPPRESS==")
              and "default" not in (action.help or "")]
    assert not silent, f"--help shows no default for {silent}"


def test_dstg_probe_names_legend_and_collisions(tmp_path, capsys):
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
    record = json.loads((tmp_path / "o2" / "results.json").read_text())
    assert record["models"] == {"a": str(tmp_path / "runs" / "a"), "b": str(tmp_path / "runs" / "b")}


def test_dstg_cache_records_and_prints_the_models_name(two_runs, tmp_path, capsys):
    run_a = str(two_runs / "runs" / "a")
    common = ["--corpus", str(two_runs / "corpus"), "--max-length", "32", "--layers", "0", "--quiet"]
    assert launch("dstg-cache", ["--model", run_a, "--out", str(tmp_path / "s1"), *common]) == 0
    assert ActivationStore(tmp_path / "s1").model_name == "a"  # the naming rule: the run's name
    assert capsys.readouterr().out.startswith(f"{tmp_path / 's1'}: a, ")
    assert launch("dstg-cache", ["--model", run_a, "--name", "DSTG-mine", "--out", str(tmp_path / "s2"), *common]) == 0
    assert ActivationStore(tmp_path / "s2").model_name == "DSTG-mine"
    assert f"{tmp_path / 's2'}: DSTG-mine, " in capsys.readouterr().out


def test_a_probe_of_another_model_does_not_replace_the_main_jobs_table():
    """Round 5, the first hour: dstg-probe --model <MiniLM> --task segment after the main job rewrote
    dstg-results/segment/results.csv (the default --out was per task, not per model)."""
    from dstg_interp.cli.probe import default_out
    main_job = default_out("segment", ["dstg"])
    assert main_job.name == "segment"  # the README's main job writes where the README says
    others = {default_out("segment", models) for models in (["path/to/all-MiniLM-L6-v2/"], ["dstg", "rope"],
                                                            ["models/a b"], ["x" * 200])}
    assert main_job not in others and len(others) == 4
    assert all(len(out.name) <= 90 and " " not in out.name for out in others)
