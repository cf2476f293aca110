"""Nothing lost, nothing half-done: what each command may replace, atomic commits, locks, leftovers.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it.
"""

import json
import os
import socket
import subprocess
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from dstg_interp import io as dio
from dstg_interp.cli.convert import main as convert_main
from dstg_interp.cli.extend import main as extend_main
from dstg_interp.io import (OutputError, OutputLocked, atomic_directory, check_output_location, check_replaceable,
                            clean_stale_temporaries, commit_directory, lock_path, output_lock)
from dstg_interp.cli.cache import main as cache_main
from dstg_interp.train import read_resume_state
from probes.holmes.suite import build as suite_build
from probes.holmes.run import write_tables
from probes.holmes.suite import build_suite, is_complete_suite
from reliability_setup import REPO, assert_one_line_error, make_tiny_setup, run_main, subprocess_env

torch.set_num_threads(1)
FIXTURES = Path(__file__).parent / "fixtures"
AUTHORS = FIXTURES / "authors-format" / "posneobert-dstg"
TEMPLATE_DATASETS = ["offline-age_comparison", "offline-size_comparison"]  # built from templates: no download


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_setup(tmp_path_factory.mktemp("tiny"))


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- 1. data loss: replace only what we wrote, only when asked ------------------------------------
def test_cache_overwrite_never_replaces_a_user_folder_or_file(tiny, tmp_path, capsys):
    """#61-#64: --overwrite used to rmtree whatever --out named."""
    checkpoint, corpus = tiny
    user = tmp_path / "userdir"
    (user / "sub").mkdir(parents=True)
    (user / "thesis.txt").write_text("three years of work")
    (user / "sub" / "data.csv").write_text("a,b\n")
    plain = tmp_path / "afile.txt"
    plain.write_text("mine")
    before = snapshot(user)
    for out in (user, plain):
        code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", out,
                                "--overwrite", "--quiet")
        assert_one_line_error(code, err, str(out.name), "never replaced", prog="dstg-cache")
        assert "pass --overwrite" not in err and "overwrite=True" not in err  # it once suggested the flag that deleted
    assert snapshot(user) == before and plain.read_text() == "mine"


def test_cache_replaces_its_own_store_only_when_asked(tiny, tmp_path, capsys):
    checkpoint, corpus = tiny
    out = tmp_path / "store"
    common = ("--model", checkpoint, "--corpus", corpus, "--out", out, "--quiet")
    assert run_main(capsys, cache_main, *common, "--layers", "0")[0] == 0
    code, _, err = run_main(capsys, cache_main, *common, "--layers", "1")
    assert_one_line_error(code, err, "different store", "--overwrite")
    assert run_main(capsys, cache_main, *common, "--layers", "1", "--overwrite")[0] == 0
    assert json.loads((out / "manifest.json").read_text())["layers"] == [1]
    (out / "my-notes.txt").write_text("written into the store folder by hand")
    code, _, err = run_main(capsys, cache_main, *common, "--layers", "0", "--overwrite")
    assert_one_line_error(code, err, "my-notes.txt", "never replaced")
    assert (out / "my-notes.txt").exists()


def test_cache_out_dot_is_refused_by_name(tiny, tmp_path, capsys, monkeypatch):
    """#65: '--out .' gave "PosixPath('.') has an empty name"."""
    checkpoint, corpus = tiny
    inner = tmp_path / "dotbox"
    inner.mkdir()
    (inner / "keep.txt").write_text("keep")
    monkeypatch.chdir(inner)
    code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", ".", "--overwrite", "--quiet")
    assert_one_line_error(code, err, "keep.txt", "never replaced")
    assert (inner / "keep.txt").read_text() == "keep"


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


def test_check_replaceable_rules(tmp_path):
    ours = lambda path: (path / "manifest.json").exists()  # noqa: E731
    assert check_replaceable(tmp_path / "missing", "a store", ours, overwrite=False) is False
    (tmp_path / "empty").mkdir()
    assert check_replaceable(tmp_path / "empty", "a store", ours, overwrite=False) is False
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "manifest.json").write_text("{}")
    with pytest.raises(OutputError, match="pass --overwrite"):
        check_replaceable(tmp_path / "store", "a store", ours, overwrite=False)
    assert check_replaceable(tmp_path / "store", "a store", ours, overwrite=True) is True
    (tmp_path / "link").symlink_to(tmp_path / "store")
    with pytest.raises(OutputError, match="never replaced"):
        check_replaceable(tmp_path / "link", "a store", ours, overwrite=True)


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


# --- 2. half-done work is never taken for complete -------------------------------------------------
def test_interrupted_suite_build_leaves_nothing_and_is_rebuilt(tmp_path, monkeypatch):
    """#126: a Ctrl-C during the first suite build left 15 of 25 datasets that the next run probed."""
    out = tmp_path / "suite"
    real_write = suite_build.write_dataset
    calls = []

    def interrupted_write(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(*args, **kwargs)

    monkeypatch.setattr(suite_build, "write_dataset", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS)
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no suite, no temporary folder
    monkeypatch.undo()
    # the remains of an interrupted build of the old code (datasets, no suite.json) are not a suite ...
    (out / TEMPLATE_DATASETS[0]).mkdir(parents=True)
    assert not is_complete_suite(out)
    # ... and are replaced without asking; a complete suite only with overwrite
    assert build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS) == TEMPLATE_DATASETS
    assert is_complete_suite(out)
    with pytest.raises(OutputError, match="--overwrite"):
        build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS)
    build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS, overwrite=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "paper.tex").write_text("x")
    with pytest.raises(OutputError, match="never replaced"):
        build_suite(tmp_path / "mine", n_per_dataset=40, names=TEMPLATE_DATASETS, overwrite=True)


def test_holmes_tables_of_an_earlier_run_are_removed(tmp_path):
    """#120: a run with 0 rows left the previous run's scores/winning_rates/... beside its new results."""
    out = tmp_path / "holmes"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"benchmark_dir": "b", "models": ["m"], "probe": {}}))
    for name in ("scores", "winning_rates", "areas", "phenomena", "a_vs_b"):
        (out / f"{name}.csv").write_text("old,numbers\n1,2\n")
    (out / "plot.png").write_bytes(b"not ours, not touched")
    empty = pd.DataFrame(columns=["model", "dataset", "layer", "subspace", "control", "seed", "metric", "score"])
    empty.attrs["skipped"] = [{"dataset": "d", "model": "*", "reason": "malformed"}]
    write_tables(empty, out)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "plot.png", "results.csv", "skipped.csv"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.csv").write_text("someone else's")
    with pytest.raises(OutputError, match="never replaced"):
        write_tables(empty, foreign)
    assert (foreign / "results.csv").read_text() == "someone else's"


def test_commit_directory_swaps_in_one_step(tmp_path, monkeypatch):
    """#133: between the two renames of a commit there was no folder under the final name."""
    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "a").write_text("old")
    tmp = atomic_directory(target)
    (tmp / "a").write_text("new")
    renames = []
    monkeypatch.setattr(dio.os, "replace", lambda a, b: renames.append((a, b)) or os.rename(a, b))
    commit_directory(tmp, target)
    assert (target / "a").read_text() == "new"
    assert renames == [] or dio._LIBC is None  # Linux: one renameat2(RENAME_EXCHANGE), no window
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]


def test_a_checkpoint_caught_between_two_renames_is_put_back(tmp_path):
    """#133 where no atomic swap exists: the next --resume restores '.checkpoint.old-HOST-PID'."""
    from dstg_interp.train import TrainConfig

    cfg = TrainConfig(out_dir=str(tmp_path / "run"), model=dict(variant="dstg", d_sem=24, d_ap=8, n_layers=1, n_heads=4),
                      vocab_size=200, max_length=32, max_steps=4, warmup_steps=1)
    (tmp_path / "run").mkdir()
    dead_pid = 2**22 + 12345  # above the default pid_max: never a live process
    old = tmp_path / "run" / f".checkpoint.old-{dio._HOST}-{dead_pid}"
    old.mkdir()
    (old / "train_state.json").write_text(json.dumps({"step": 2, "tokens_seen": 1, "train_seconds": 0.1}))
    (old / "train_config.json").write_text(json.dumps(cfg.to_dict()))
    from safetensors.torch import save_file

    save_file({"0.step": torch.tensor(2.0)}, str(old / "optimizer.safetensors"))
    state, checkpoint = read_resume_state(cfg)
    assert state["step"] == 2 and checkpoint.is_dir() and not old.exists()


def test_temporaries_of_a_killed_run_are_removed_by_the_next(tiny, tmp_path, capsys):
    """#72, #73: a SIGKILLed extraction left a 977 MB '.out.tmp-...' that nothing ever removed."""
    checkpoint, corpus = tiny
    out = tmp_path / "store"
    dead = tmp_path / f".store.tmp-{dio._HOST}-{2**22 + 1}-abc123"
    dead.mkdir()
    (dead / "layer00_ap.npy").write_bytes(b"\0" * 1000)
    alive = tmp_path / f".store.tmp-{dio._HOST}-{os.getppid()}-def456"  # a live writer's: kept
    alive.mkdir()
    other = tmp_path / f".elsewhere.tmp-{dio._HOST}-{2**22 + 1}-x"  # another folder's: not ours to judge
    other.mkdir()
    assert run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", out, "--quiet",
                    "--layers", "0")[0] == 0
    assert not dead.exists() and alive.exists() and other.exists()
    assert clean_stale_temporaries(out) == []


# --- 5. one run per output folder -----------------------------------------------------------------
HOLD_LOCK = """
import sys, time
from dstg_interp.io import output_lock
with output_lock(sys.argv[1], "holder --out " + sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_second_run_on_a_locked_folder_names_the_first(tiny, tmp_path, capsys):
    """#151, #77: two runs on one --out both 'succeeded' and interleaved their output."""
    checkpoint, corpus = tiny
    out = tmp_path / "store"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], env=subprocess_env(), cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", out, "--quiet")
        assert_one_line_error(code, err, "in use by another run", f"pid {holder.pid}", socket.gethostname(), "holder --out")
        assert not out.exists()
    finally:
        holder.kill()  # the kernel drops a dead process's lock: no stale lock to clean up
        holder.wait()
    assert run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", out, "--quiet",
                    "--layers", "0")[0] == 0
    assert not dio.lock_path(out).exists()


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


def test_unwritable_out_is_found_before_any_work(tmp_path):
    """#67, #90-#92, #124, #128: checked up front, one line naming the place."""
    (tmp_path / "plain").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        check_output_location(tmp_path / "plain")
    with pytest.raises(OutputError, match="lies under .*plain, which is a file"):
        check_output_location(tmp_path / "plain" / "sub" / "out")
    if os.path.isdir("/proc/sys"):
        with pytest.raises(OutputError, match="cannot write in /proc"):
            check_output_location("/proc/sys/out")
    assert check_output_location(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


# --- locks follow the real path; dstg-probe and dstg-holmes run lock their --out (N80, N81, N116) ---
def test_a_symlinked_out_shares_the_folders_lock(tmp_path):
    """N80: `--out out/xl3-alias` (-> xl3) took another lock than `--out out/xl3`; both trained at once."""
    from dstg_interp.io import OutputLocked, output_lock

    (tmp_path / "xl3").mkdir()
    (tmp_path / "xl3-alias").symlink_to("xl3")
    assert lock_path(tmp_path / "xl3-alias") == lock_path(tmp_path / "xl3") == lock_path(tmp_path / "a" / ".." / "xl3")
    with output_lock(tmp_path / "xl3", "first run"):
        with pytest.raises(OutputLocked, match="in use by another run .*first run"):
            with output_lock(tmp_path / "xl3-alias"):
                pass


def test_cache_names_a_symlinked_out_as_a_link(tiny, tmp_path, capsys):
    """N81: a symlinked --out was refused (safely) but called 'a file'."""
    from dstg_interp.cli.cache import main as cache_main

    checkpoint, corpus = tiny
    store = tmp_path / "store"
    args = ["--model", checkpoint, "--corpus", corpus, "--quiet", "--layers", "0"]
    assert run_main(capsys, cache_main, *args, "--out", store)[0] == 0
    (tmp_path / "st-link").symlink_to(store)
    code, _, err = run_main(capsys, cache_main, *args, "--layers", "0,1", "--overwrite", "--out", tmp_path / "st-link")
    assert_one_line_error(code, err, "is a symbolic link", "never replaced")
    assert "is a file" not in err


@pytest.mark.parametrize("command", ["probe", "holmes"])
def test_probe_and_holmes_runs_lock_their_out(command, tiny, tmp_path, capsys):
    """N116: two `dstg-holmes run` on one --out both reported success; the first run's tables were gone."""
    from dstg_interp.cli.holmes import main as holmes_main
    from dstg_interp.cli.probe import main as probe_main
    from dstg_interp.io import output_lock

    checkpoint, corpus = tiny
    out = tmp_path / "results"
    if command == "probe":
        main, args = probe_main, ["--task", "segment", "--model", checkpoint, "--corpus", corpus, "--layers", "1"]
    else:
        main, args = holmes_main, ["run", "--benchmark", FIXTURES / "holmes" / "benchmark", "--model", checkpoint]
    with output_lock(out, "the first run"):
        code, _, err = run_main(capsys, main, *args, "--quiet", "--out", out)
    assert_one_line_error(code, err, "is in use by another run", "the first run")
    assert not out.exists()


# --- every table has its header, also with no rows (a_vs_b.csv of a one-model Holmes run) ---------
def test_a_one_model_holmes_run_writes_readable_tables(tiny, tmp_path, capsys):
    import pandas as pd

    from dstg_interp.cli.holmes import main as holmes_main

    checkpoint, _ = tiny
    out = tmp_path / "holmes"
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", tmp_path / "bench" / "fx-sentence")
    code, _, err = run_main(capsys, holmes_main, "run", "--benchmark", tmp_path / "bench", "--model", checkpoint,
                            "--seeds", "0", "--quiet", "--out", out)
    assert code == 0, err
    for table in sorted(out.glob("*.csv")):
        frame = pd.read_csv(table)  # a 1-byte a_vs_b.csv raised EmptyDataError here
        assert len(frame.columns) > 0, table.name
    assert list(pd.read_csv(out / "a_vs_b.csv").columns) == ["a", "b", "area", "wins", "ties", "losses", "n_phenomena"]


# --- leftovers on a full disk: no empty --out (old #93, N89) --------------------------------------
@pytest.mark.parametrize("command", ["probe", "holmes"])
def test_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch):
    import errno

    import pandas as pd

    from dstg_interp.cli.holmes import main as holmes_main
    from dstg_interp.cli.probe import main as probe_main

    checkpoint, corpus = tiny

    def full_disk(self, path, *args, **kwargs):
        Path(path).write_text("")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    out = tmp_path / "new" / "results"
    if command == "probe":
        args = [probe_main, "--task", "token", "--model", checkpoint, "--corpus", corpus, "--layers", "0",
                "--subspaces", "ap", "--no-controls"]
    else:
        shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", tmp_path / "bench" / "fx-sentence")
        args = [holmes_main, "run", "--benchmark", tmp_path / "bench", "--model", checkpoint, "--seeds", "0"]
    code, _, err = run_main(capsys, *args, "--quiet", "--out", out)
    assert_one_line_error(code, err, "disk full")
    assert not (tmp_path / "new").exists()  # neither --out nor the folder above it, made for it, is left
