"""One family of commands: a shared flag means the same thing, with the same help words, in every dstg-* command."""

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import tiny_model, write_synthetic_corpus
from dstg_interp.cli import flags
from dstg_interp.encoders import selection
from dstg_interp.cli.extend import build_parser as extend_parser
from dstg_interp.data import load_corpus, train_tokenizer
from dstg_interp.cli.eval import build_parser as eval_parser
from dstg_interp.cli.cache import build_parser as cache_parser, main as cache_main
from dstg_interp.cli.train import build_parser as train_parser, main as train_main
from dstg_interp.cli.probe import build_parser as probe_parser, main as probe_main
from dstg_interp.cli.holmes import build_parser as holmes_parser, main as holmes_main
from dstg_interp.cli.erase import build_parser as erase_parser
from dstg_interp.cli.export import build_parser as export_parser
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)
HOLMES = Path(__file__).resolve().parents[1] / "fixtures" / "holmes" / "benchmark"
PARSERS = {"dstg-train": train_parser, "dstg-cache": cache_parser, "dstg-probe": probe_parser,
           "dstg-holmes": holmes_parser, "dstg-extend": extend_parser, "dstg-eval": eval_parser,
           "dstg-erase": erase_parser, "dstg-export": export_parser}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A synthetic corpus and two tiny checkpoints (DSTG, RoPE) sharing one trained tokenizer."""
    root = tmp_path_factory.mktemp("family")
    corpus = write_synthetic_corpus(root / "corpus", n_docs=24)
    tokenizer = train_tokenizer(load_corpus(str(corpus), progress=False), vocab_size=120)
    paths = {}
    for variant in ("dstg", "rope"):
        tiny_model(variant, vocab_size=tokenizer.get_vocab_size(), max_positions=64).save(root / variant, tokenizer=tokenizer)
        paths[variant] = root / variant
    return corpus, paths


pytestmark = pytest.mark.usefixtures("private_cache")  # DSTG_CACHE in the test's own folder (conftest)


# --- the words ----------------------------------------------------------------------------------
def test_every_command_uses_the_shared_help_words():
    seen = {}
    for prog, build in PARSERS.items():
        for where, text in flags.shared_help(build()).items():
            flag = where.split()[-1]
            assert text == flags.HELP[flag] or text.startswith(flags.HELP[flag] + " (default: ") \
                or (flag == "--out" and text.startswith(flags.HELP[flag] + ": ")) \
                or (flag == "--device" and text.startswith(flags.HELP[flag])), (prog, where, text)
            seen.setdefault(flag, set()).add(prog)
    # each shared flag is in every command that has the concept
    assert seen["--model"] == {"dstg-cache", "dstg-probe", "dstg-holmes", "dstg-extend", "dstg-eval", "dstg-erase"}
    assert seen["--layers"] == {"dstg-cache", "dstg-probe", "dstg-holmes", "dstg-erase", "dstg-export"}
    assert seen["--quiet"] == {"dstg-train", "dstg-cache", "dstg-probe", "dstg-holmes", "dstg-erase", "dstg-export",
                               "dstg-eval"}
    assert {"dstg-train", "dstg-probe", "dstg-holmes", "dstg-eval"} <= seen["--seed"]
    assert set(PARSERS) - {"dstg-cache", "dstg-extend", "dstg-export"} <= seen["--threads"]


def test_model_is_repeatable_and_listable():
    parser = probe_parser()
    for argv in (["--model", "dstg", "--model", "rope"], ["--model", "dstg", "rope"], ["--model", "dstg", "rope", "--model", "dstg"]):
        assert flags.models(parser.parse_args(["--task", "token", *argv])) == ["dstg", "rope"]
    assert flags.models(parser.parse_args(["--task", "token"])) == ["dstg"]  # the default, once
    assert flags.models(parser.parse_args(["--task", "token"])) == ["dstg"]  # and not grown by a second parse


def test_layer_grammar():
    assert flags.parse_layers("0,3,last,final") == (0, 3, "last", "final")
    assert flags.parse_layers("all") == "all"
    assert selection.resolve_layers((0, "last", "final"), 4) == [0, 4, "final"]
    assert selection.resolve_layers("all", 2) == [0, 1, 2] and selection.resolve_layers(None, 2, default="last") == [2]
    for bad in ("x,y", "-1", "0,0", "all,1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            flags.parse_layers(bad)


def test_a_command_that_takes_one_model_says_so(models, tmp_path, capsys):
    corpus, paths = models
    code, _, err = run_main(capsys, cache_main, "--model", paths["dstg"], "--model", paths["rope"], "--corpus", corpus,
                            "--out", tmp_path / "store", "--quiet")
    assert_one_line_error(code, err, "dstg-cache takes one --model, got 2", prog="dstg-cache")
    assert not (tmp_path / "store").exists()


def test_train_layers_points_to_n_layers(tmp_path, capsys):
    for old, new in (("--layers", "--n-layers"), ("--heads", "--n-heads")):
        code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", old, "4")
        assert_one_line_error(code, err, f"{old} is now {new}", prog="dstg-train")
    code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", "--no-progress")
    assert_one_line_error(code, err, "--no-progress is now --quiet", prog="dstg-train")
    from dstg_interp.cli.train import parse_args

    cfg = parse_args(["--n-layers", "3", "--n-heads", "2", "--quiet"]).training
    assert cfg.model["n_layers"] == 3 and cfg.model["n_heads"] == 2 and cfg.progress is False
    assert not (tmp_path / "run").exists()


# --- the runs -----------------------------------------------------------------------------------
def test_probe_two_models_probes_both(models, tmp_path, capsys):
    """#14: `--model dstg --model rope` used to probe only rope."""
    corpus, paths = models
    code, _, err = run_main(capsys, probe_main, "--model", paths["dstg"], "--model", paths["rope"], "--task", "token",
                            "--corpus", corpus, "--layers", "last", "--no-controls", "--out", tmp_path / "o", "--quiet")
    assert code == 0, err
    results = pd.read_csv(tmp_path / "o" / "results.csv")
    assert set(results.model) == {"dstg", "rope"}  # their folders' own names (naming.py)
    assert set(results.layer) == {2}  # "last" of a 2-block model
    record = json.loads((tmp_path / "o" / "results.json").read_text())
    assert record["arguments"]["model"] == [str(paths["dstg"]), str(paths["rope"])]


def test_holmes_layers_1_gives_layer_1_only_and_both_spellings_agree(models, tmp_path, capsys):
    _, paths = models
    common = ["--benchmark", HOLMES, "--model", paths["dstg"], "--layers", "1", "--seeds", "0", "--quiet"]
    code, _, err = run_main(capsys, probe_main, "--task", "holmes", *common, "--out", tmp_path / "probe")
    assert code == 0, err
    code, _, err = run_main(capsys, holmes_main, "run", *common, "--out", tmp_path / "alias")
    assert code == 0, err
    probe = pd.read_csv(tmp_path / "probe" / "results.csv")
    alias = pd.read_csv(tmp_path / "alias" / "results.csv")
    assert set(probe.layer) == {1} and len(probe)
    columns = ["model", "dataset", "layer", "subspace", "control", "seed", "metric", "score"]
    pd.testing.assert_frame_equal(probe[columns], alias[columns])
    assert json.loads((tmp_path / "probe" / "config.json").read_text()) == \
        json.loads((tmp_path / "alias" / "config.json").read_text())


def test_holmes_seed_sets_the_probe_seeds():
    from dstg_interp.cli.holmes import parse_args as holmes_args
    from dstg_interp.cli.probe import parse_args as probe_args

    assert probe_args(["--task", "holmes", "--seed", "3"]).holmes_config().probe.seeds == (3, 4, 5, 6, 7)
    cfg = holmes_args(["run", "--model", "dstg", "--seed", "3", "--seeds", "1,2", "--layers", "0,last"]).config()
    assert cfg.probe.seeds == (1, 2) and cfg.layers == [0, "last"] and cfg.models == ["dstg"]


def test_every_console_script_reaches_its_command_module():
    """pyproject.toml's [project.scripts] -> dstg_interp.cli.entry -> one module per command in dstg_interp/cli/."""
    import re

    from dstg_interp.cli import entry

    scripts = dict(re.findall(r'^(dstg-[a-z]+) = "dstg_interp\.cli\.entry:([a-z]+)"$',
                              (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(), re.M))
    assert scripts and set(scripts) == set(entry.COMMANDS)
    for prog, name in scripts.items():
        assert getattr(entry, name).args == (prog,)
        assert entry.COMMANDS[prog] == "dstg_interp.cli." + entry.COMMANDS[prog].split(".")[-1]


def test_every_command_has_one_shape():
    """Each dstg-* command (but the torchrun launcher) is ``build_parser`` + ``run_command(parser, its config
    dataclass, run)``; a shared flag comes from a field helper of dstg_interp.config, never from a field's name."""
    import dataclasses
    import importlib
    import inspect

    from dstg_interp.cli import COMMANDS
    from dstg_interp.cli.config_args import config_flags
    from dstg_interp.config import ConfigIO, SHARED_FLAGS

    for prog, name in COMMANDS.items():
        if prog == "dstg-launch":
            continue
        module = importlib.import_module(name)
        assert hasattr(module, "build_parser") and "run_command(build_parser()," in inspect.getsource(module.main), prog
        configs = [obj for obj in vars(module).values() if inspect.isclass(obj) and dataclasses.is_dataclass(obj)
                   and obj.__module__ == name]
        assert configs and all(issubclass(config, ConfigIO) for config in configs), prog
        for config in configs:
            for path, _, spec, _ in config_flags(config):
                flag = spec.metadata.get("flag", "--" + spec.name.replace("_", "-"))
                if flag.lstrip("-") in SHARED_FLAGS and not spec.metadata.get("positional"):
                    assert spec.metadata.get("shared") == flag.lstrip("-"), f"{prog}: {config.__name__}.{path}"
