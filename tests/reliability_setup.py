"""Fixtures shared by the command-line tests (test_bad_input, test_output_safety, test_interrupts,
test_launch, ...): a tiny checkpoint and corpus, CLI helpers."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import tiny_model, write_synthetic_corpus
from dstg_interp.data import load_corpus, train_tokenizer

REPO = Path(__file__).resolve().parent.parent


def make_tiny_setup(root: Path, n_docs: int = 12) -> tuple[Path, Path]:
    """(checkpoint folder with a tokenizer, corpus folder) of a d=32 DSTG model: extraction takes ~0.1 s."""
    corpus = write_synthetic_corpus(root / "corpus", n_docs=n_docs)
    tokenizer = train_tokenizer(load_corpus(str(corpus), progress=False), vocab_size=150)
    model = tiny_model("dstg", vocab_size=tokenizer.get_vocab_size(), max_positions=64)
    model.save(root / "ck", tokenizer=tokenizer)
    return root / "ck", corpus


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
