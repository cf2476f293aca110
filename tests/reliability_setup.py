"""Fixtures shared by the command-line tests (the rooms' bad-input and output-safety tests, test_interrupts,
test_launch, ...): a tiny checkpoint and corpus, CLI helpers, a command that signals itself mid-step."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import tiny_model, write_synthetic_corpus
from dstg_interp.data import load_corpus, train_tokenizer

REPO = Path(__file__).resolve().parent.parent


def make_tiny_setup(root: Path, n_docs: int = 12, vocab_size: int = 150, name: str = "ck",
                    prepare: Callable | None = None) -> tuple[Path, Path]:
    """(checkpoint folder ``root/name`` with a tokenizer, corpus folder) of a d=32 DSTG model: extraction takes
    ~0.1 s.  ``prepare(model)``, if given, edits the weights before they are saved."""
    corpus = write_synthetic_corpus(root / "corpus", n_docs=n_docs)
    tokenizer = train_tokenizer(load_corpus(str(corpus), progress=False), vocab_size=vocab_size)
    model = tiny_model("dstg", vocab_size=tokenizer.get_vocab_size(), max_positions=64)
    if prepare is not None:
        prepare(model)
    model.save(root / name, tokenizer=tokenizer)
    return root / name, corpus


def run_main(capsys, main, *args) -> tuple[int, str, str]:
    """Run a CLI's main in-process; (exit code, stdout, stderr). argparse errors exit with SystemExit(2)."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *fragments: str, prog: str | None = None) -> None:
    """Exit 2, the last stderr line is the error (argparse prints its usage above it), no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "error:" in last and (prog is None or last.startswith(prog)), err
    for fragment in fragments:
        assert fragment in last, (fragment, last)


def entry_command(prog: str, *args) -> list[str]:
    """The console command as installed (through dstg_interp.cli.entry), runnable from a fresh checkout."""
    return [sys.executable, "-m", "dstg_interp.cli.entry", prog, *map(str, args)]


def subprocess_env(**extra) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


def run_entry(prog: str, *args, cwd=None, env=None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(entry_command(prog, *args), cwd=cwd or REPO, env=env or subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


# Runs a command through dstg_interp.cli.entry after patching one step to signal the process itself.
SELF_SIGNAL = """
import os, signal, sys, time, importlib
module_name, attribute, signal_name, prog = sys.argv[1:5]
def signalled(*args, **kwargs):
    os.kill(os.getpid(), getattr(signal, signal_name))
    time.sleep(30)  # the handler raises long before this ends
if module_name == "importlib":  # the signal arrives while the command's module is being imported
    real_import = importlib.import_module
    def slow_import(name, *rest):
        os.kill(os.getpid(), getattr(signal, signal_name))
        time.sleep(30)
    importlib.import_module = slow_import
else:
    setattr(importlib.import_module(module_name), attribute, signalled)
from dstg_interp.cli.entry import launch
sys.exit(launch(prog, sys.argv[5:]))
"""


def self_signalled(module, attribute, signal_name, prog, *args, cwd):
    return subprocess.run([sys.executable, "-c", SELF_SIGNAL, module, attribute, signal_name, prog, *map(str, args)],
                          cwd=cwd, env=subprocess_env(DSTG_CACHE=str(cwd / "cache")), capture_output=True, text=True,
                          timeout=120)


def assert_interrupted(result, code: int, *fragments: str):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr, result.stderr
    assert "interrupted" in lines[-1], result.stderr
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


# --- test bodies whose parametrised cases are split by room (tests/<room>/test_<room>_*.py) ---------------
FIXTURES = REPO / "tests" / "fixtures"


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_a_run_locks_its_out(command, tiny, tmp_path, capsys):
    """The body of ``test_probe_and_holmes_runs_lock_their_out``, whose cases sit in the rooms they pin."""
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


def check_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch):
    """The body of ``test_a_full_disk_leaves_no_empty_out``, whose cases sit in the rooms they pin."""
    import errno
    import shutil

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


def check_a_writer_checks_at_the_swap(writer, tiny, tmp_path, monkeypatch):
    """The body of ``test_every_other_writer_checks_at_the_swap``, whose cases sit in the rooms they pin."""
    import pytest

    from dstg_interp import load_model
    from dstg_interp.io import OutputError

    out = tmp_path / "target"
    if writer == "checkpoint":
        from dstg_interp.model import saving

        model = load_model(tiny[0])
        saving.save_checkpoint(model, out)
        module, step = saving, "save_file"
        write = lambda: saving.save_checkpoint(model, out)  # noqa: E731
    else:
        from probes.holmes.suite import build as suite_build

        suite_build.build_suite(out, n_per_dataset=40, names=["offline-age_comparison"])
        module, step = suite_build, "write_dataset"
        write = lambda: suite_build.build_suite(out, n_per_dataset=40, names=["offline-age_comparison"],  # noqa: E731
                                                overwrite=True)
    before = snapshot(out)
    real = getattr(module, step)

    def user_writes_meanwhile(*args, **kwargs):
        (out / "notes.txt").write_text("mine")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, step, user_writes_meanwhile)
    with pytest.raises(OutputError, match=f"notes.txt, which dstg-interp did not write; .* is in {out}-new"):
        write()
    assert snapshot(out) == {**before, "notes.txt": b"mine"} and (tmp_path / "target-new").is_dir()
