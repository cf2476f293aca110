"""Nothing lost, nothing half-done in the commands: dstg-extend replaces only its own checkpoint, dstg-train
and dstg-probe lock their --out, a full disk leaves no empty --out.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it. The other rooms' cases are in their own folders' test_*_output_safety.py.
"""

import json

import pytest
import torch

from dstg_interp.cli.extend import main as extend_main
from dstg_interp.io import OutputLocked, output_lock
from reliability_setup import (
    assert_one_line_error, run_main, check_a_full_disk_leaves_no_empty_out, check_a_run_locks_its_out, snapshot)

torch.set_num_threads(1)


# --- 1. data loss: replace only what we wrote, only when asked ------------------------------------
def test_extend_never_replaces_without_overwrite(tiny, tmp_path, capsys):
    """#158, #159: dstg-extend replaced an existing checkpoint (and the user's NOTES.md) or a plain file."""
    checkpoint, _ = tiny
    foreign = tmp_path / "existing"
    foreign.mkdir()
    for file in checkpoint.iterdir():
        (foreign / file.name).write_bytes(file.read_bytes())
    (foreign / "NOTES.md").write_text("notes")
    plain = tmp_path / "plainfile"
    plain.write_text("mine")
    before = snapshot(foreign)
    for out in (foreign, plain):
        code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", "2", "--out", out)
        assert_one_line_error(code, err, str(out.name), prog="dstg-extend")
    assert snapshot(foreign) == before and plain.read_text() == "mine"
    code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", "2", "--out", checkpoint, "--overwrite")
    assert_one_line_error(code, err, "is the input checkpoint")
    out = tmp_path / "longer"
    assert run_main(capsys, extend_main, "--model", checkpoint, "--factor", "2", "--out", out)[0] == 0
    code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", "3", "--out", out)
    assert_one_line_error(code, err, "already holds a checkpoint", "--overwrite")
    assert run_main(capsys, extend_main, "--model", checkpoint, "--factor", "3", "--out", out, "--overwrite")[0] == 0
    assert json.loads((out / "config.json").read_text())["max_positions"] == 192


# --- 5. one run per output folder -----------------------------------------------------------------
def test_train_takes_the_same_lock(tmp_path, capsys):
    from dstg_interp.cli.train import main as train_main

    out = tmp_path / "run"
    with output_lock(out, "first dstg-train"):
        code, _, err = run_main(capsys, train_main, "--out", out, "--steps", "3", "--warmup-steps", "1",
                                "--vocab-size", "200", "--corpus", tmp_path / "nothing-needed")
    assert_one_line_error(code, err, "in use by another run", "first dstg-train", prog="dstg-train")
    assert not out.exists()
    with output_lock(out):
        with pytest.raises(OutputLocked):
            with output_lock(out):
                pass


# --- locks follow the real path; dstg-probe and dstg-holmes run lock their --out (N80, N81, N116) ---
@pytest.mark.parametrize("command", ["probe"])
def test_probe_and_holmes_runs_lock_their_out(command, tiny, tmp_path, capsys):
    """N116: two `dstg-holmes run` on one --out both reported success; the first run's tables were gone."""
    check_a_run_locks_its_out(command, tiny, tmp_path, capsys)


# --- leftovers on a full disk: no empty --out (old #93, N89) --------------------------------------
@pytest.mark.parametrize("command", ["probe"])
def test_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch):
    check_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch)
