"""The commands fail fast, in one line: a --config that is not JSON, nonsense flag values and seeds, --device
cuda without a GPU, an unusable or full --out of dstg-probe.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import errno
import json

import pandas as pd
import pytest
import torch

from dstg_interp.cli.cache import main as cache_main
from dstg_interp.cli.train import main as train_main
from dstg_interp.cli.probe import main as probe_main
from dstg_interp.cli.holmes import main as holmes_main
from reliability_setup import assert_one_line_error, run_main


# --- bad content ----------------------------------------------------------------------------------
def test_config_that_is_not_json_names_its_file(tmp_path, capsys):
    """#146: 'Expecting property name' with no file named."""
    bad = tmp_path / "recipe.json"
    bad.write_text("{nope")
    code, _, err = run_main(capsys, train_main, "--config", bad, "--out", tmp_path / "run")
    assert_one_line_error(code, err, "--config", "recipe.json", "not valid JSON")


# --- disk full ------------------------------------------------------------------------------------
def test_disk_full_while_writing_probe_results(tiny, tmp_path, capsys, monkeypatch):
    """#93: a traceback after the whole probe, and .results.*.tmp left behind; old results must survive."""
    checkpoint, corpus = tiny
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"command": "dstg-probe", "old": True}))
    (out / "results.csv").write_text("old\n")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    code, _, err = run_main(capsys, probe_main, "--model", checkpoint, "--task", "token", "--corpus", corpus, "--out", out,
                            "--layers", "0", "--subspaces", "ap", "--no-controls", "--quiet")
    assert_one_line_error(code, err, "disk full", prog="dstg-probe")
    assert sorted(p.name for p in out.iterdir()) == ["results.csv", "results.json"]
    assert (out / "results.csv").read_text() == "old\n"


def test_probe_refuses_an_unusable_out_before_probing(tiny, tmp_path, capsys, monkeypatch):
    """#90-#92: the whole probe ran, then a traceback at write time."""
    import dstg_interp.cli.probe as probe_cli

    monkeypatch.setattr(probe_cli, "run", lambda args: pytest.fail("probed although --out was unusable"))
    (tmp_path / "plain").write_text("x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.csv").write_text("someone else's")
    for out, fragment in ((tmp_path / "plain", "is a file"), (tmp_path / "plain" / "res", "which is a file"),
                          (foreign, "did not write")):
        code, _, err = run_main(capsys, probe_main, "--model", tiny[0], "--task", "token", "--out", out)
        assert_one_line_error(code, err, fragment, prog="dstg-probe")


# --- nonsense values ------------------------------------------------------------------------------
@pytest.mark.parametrize("main, args, fragment", [
    (cache_main, ["--model", "dstg", "--corpus", "x", "--out", "o", "--max-docs", "-5"], "--max-docs"),
    (cache_main, ["--model", "dstg", "--corpus", "x", "--out", "o", "--max-docs", "0"], "--max-docs"),
    (probe_main, ["--task", "token", "--max-docs", "-10"], "--max-docs"),
    (train_main, ["--out", "o", "--threads", "0"], "--threads"),
    (train_main, ["--out", "o", "--max-docs", "-1"], "--max-docs"),
    (holmes_main, ["run", "--holmes-dir", "h", "--model", "dstg", "--threads", "0"], "--threads"),
    (holmes_main, ["run", "--holmes-dir", "h", "--model", "dstg", "--seeds", "-2"], "--seeds"),
    (holmes_main, ["run", "--holmes-dir", "h", "--model", "dstg", "--layers", "x,y"], "--layers"),
    (holmes_main, ["build", "--out", "o", "--n-per-dataset", "0"], "--n-per-dataset"),
])
def test_nonsense_values_name_their_flag(main, args, fragment, capsys, tmp_path, monkeypatch):
    """#57, #58, #88, #121, #123, #127, #151 (threads 0): refused before anything runs, naming the flag."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, main, *args)
    assert_one_line_error(code, err, fragment)
    assert list(tmp_path.iterdir()) == [tmp_path / "cache"] or list(tmp_path.iterdir()) == []


def test_cuda_without_a_gpu(tmp_path, capsys):
    """#147: 'Expected a torch.device with a specified index' for --device cuda on a CPU machine."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so the refusal of --device cuda without one cannot happen here")
    code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", "--device", "cuda")
    assert_one_line_error(code, err, "--device cuda: no CUDA device")


# --- seeds and steps are checked on the command line, before any work (N41, N43, N47, N51) --------
HUGE_SEED = "99999999999999999999"


@pytest.mark.parametrize("prog, flag, args", [
    ("dstg-train", "--seed", ["--steps", "10", "--seed", HUGE_SEED]),
    ("dstg-train", "--data-seed", ["--steps", "10", "--data-seed", HUGE_SEED]),
    ("dstg-train", "--steps", ["--steps", "0"]),
    ("dstg-probe", "--seed", ["--task", "segment", "--seed", HUGE_SEED]),
    ("dstg-eval", "--seed", ["--model", "dstg", "--seed", HUGE_SEED]),
    ("dstg-holmes", "--seeds", ["run", "--seeds", f"0,{HUGE_SEED}"]),
])
def test_seed_and_step_flags_name_the_flag_and_its_range(prog, flag, args, tmp_path, capsys):
    """N51: `dstg-train --seed 99999999999999999999` said only 'Overflow when unpacking long long'."""
    import importlib

    from dstg_interp.cli import COMMANDS

    main = importlib.import_module(COMMANDS[prog]).main
    code, _, err = run_main(capsys, main, *args, "--out", tmp_path / "out")
    assert_one_line_error(code, err, f"argument {flag}", "positive" if flag == "--steps" else "0 to 4294967295")
    assert "Overflow" not in err and not (tmp_path / "out").exists()
