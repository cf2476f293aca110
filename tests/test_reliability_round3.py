"""Round 3 of the hostile-input report (docs/RELIABILITY.md, notes/reliability-turn3.md): one test per case.

Each test names its case (N18 ... N116, old #27 / #45 / #93) and runs it on tiny models and fixtures.
"""

import json
import shutil
from pathlib import Path

import pytest

from dstg_interp.cli.convert import main as convert_main
from dstg_interp.io import OutputError, check_replaceable, lock_path
from reliability_setup import assert_one_line_error, make_tiny_setup, run_main

FIXTURES = Path(__file__).parent / "fixtures"
AUTHORS = FIXTURES / "authors-format" / "posneobert-dstg"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_setup(tmp_path_factory.mktemp("round3"))


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- 1. dstg-convert replaces only a checkpoint it wrote (N18, N19) --------------------------------
def test_convert_overwrite_never_replaces_a_user_folder(tmp_path, capsys):
    """N18: `dstg-convert SRC out/cv-user --overwrite` deleted the user's notes.txt."""
    user = tmp_path / "cv-user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        code, _, err = run_main(capsys, convert_main, AUTHORS, user, "--no-tokenizer", *extra)
        assert_one_line_error(code, err, "notes.txt", "never replaced", "cv-user-converted", prog="dstg-convert")
        assert "--overwrite" not in err  # the refusal offers a new folder, not the flag
    assert snapshot(user) == {"notes.txt": b"mine"}


def test_convert_never_replaces_the_folder_holding_its_source(tmp_path, capsys):
    """N19: `dstg-convert models/posbert-src models --overwrite` wiped models/, the source included."""
    models = tmp_path / "models"
    shutil.copytree(AUTHORS, models / "posbert-src")
    (models / "other-model.txt").write_text("other")
    before = snapshot(models)
    code, _, err = run_main(capsys, convert_main, models / "posbert-src", models, "--no-tokenizer", "--overwrite")
    assert_one_line_error(code, err, "holds the input", "never replaced", str(models / "posbert-src-converted"))
    assert "pass --overwrite" not in err
    assert snapshot(models) == before


def test_convert_replaces_its_own_checkpoint_only_when_asked(tmp_path, capsys):
    out = tmp_path / "converted"
    assert run_main(capsys, convert_main, AUTHORS, out, "--no-tokenizer")[0] == 0
    code, _, err = run_main(capsys, convert_main, AUTHORS, out, "--no-tokenizer")
    assert_one_line_error(code, err, "already holds a checkpoint", "--overwrite")
    assert run_main(capsys, convert_main, AUTHORS, out, "--no-tokenizer", "--overwrite")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    code, _, err = run_main(capsys, convert_main, out, out, "--no-tokenizer", "--overwrite")
    assert_one_line_error(code, err, "is the input")
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    code, _, err = run_main(capsys, convert_main, AUTHORS, plain, "--no-tokenizer", "--overwrite")
    assert_one_line_error(code, err, "is a file", "never replaced")
    assert plain.read_text() == "x"


def test_every_replacing_command_refuses_a_folder_that_holds_its_input(tiny, tmp_path):
    """The same rule in the shared check: a folder that is or holds an input is never replaced."""
    checkpoint, _ = tiny
    parent = tmp_path / "models"
    shutil.copytree(checkpoint, parent / "ck")
    ours = lambda path: []  # noqa: E731  (every entry "ours": only the input rule can refuse)
    with pytest.raises(OutputError, match="holds the input"):
        check_replaceable(parent, "a checkpoint", ours, overwrite=True, inputs=[parent / "ck"])
    with pytest.raises(OutputError, match="is the input"):
        check_replaceable(parent / "ck", "a checkpoint", ours, overwrite=True, inputs=[parent / "ck"])
    (tmp_path / "link").symlink_to(parent)
    with pytest.raises(OutputError, match="symbolic link"):
        check_replaceable(tmp_path / "link", "a checkpoint", ours, overwrite=True)


# --- 4. seeds and steps are checked on the command line, before any work (N41, N43, N47, N51) --------
HUGE_SEED = "99999999999999999999"


def test_zoo_seed_and_steps_are_refused_before_any_work(tmp_path, capsys):
    """N41 / N43: a traceback after 21 s of data preparation (and an empty run folder)."""
    from experiments import pretrain_zoo

    common = ["--out", tmp_path / "zoo", "--runs", tmp_path / "runs", "--variants", "dstg", "--threads", "1"]
    for extra, needle in ((["--steps", "5", "--seeds", HUGE_SEED], "--seeds must be integers from 0 to 4294967295"),
                          (["--steps", "0", "--seeds", "0"], "--steps: expected a positive number of steps, got 0"),
                          (["--steps", "-3", "--seeds", "0"], "--steps: expected a positive number of steps")):
        code, _, err = run_main(capsys, pretrain_zoo.main, *common, *extra)
        assert_one_line_error(code, err, needle, prog="pretrain_zoo")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "zoo").exists()


def test_no_message_suggests_a_seed_that_would_fail(tmp_path, capsys):
    """N47: run_all advised `pretrain_zoo --seeds 99999999999999999999`, which then crashed."""
    from experiments import run_all
    from experiments.figure_inputs import run_as_command

    command = lambda argv: run_as_command(lambda: run_all.main(argv), "run_all")  # noqa: E731
    code, _, err = run_main(capsys, command, "--model-seeds", HUGE_SEED, "--out", tmp_path / "gallery")
    assert_one_line_error(code, err, "--model-seeds", "0 to 4294967295")
    assert "pretrain_zoo" not in err and not (tmp_path / "gallery").exists()


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

    from dstg_interp.entry import COMMANDS

    main = importlib.import_module(COMMANDS[prog]).main
    code, _, err = run_main(capsys, main, *args, "--out", tmp_path / "out")
    assert_one_line_error(code, err, f"argument {flag}", "positive" if flag == "--steps" else "0 to 4294967295")
    assert "Overflow" not in err and not (tmp_path / "out").exists()
