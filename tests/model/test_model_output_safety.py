"""Nothing lost: dstg-convert replaces only a checkpoint it wrote, never the folder holding its source.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it. The other rooms' cases are in their own folders' test_*_output_safety.py.
"""

import shutil
from pathlib import Path

import torch

from dstg_interp.cli.convert import main as convert_main
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AUTHORS = FIXTURES / "authors-format" / "posneobert-dstg"


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- dstg-convert replaces only a checkpoint it wrote (N18, N19) ----------------------------------
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
