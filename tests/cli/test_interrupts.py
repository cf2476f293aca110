"""Ctrl-C, SIGTERM and SIGKILL at any moment: one line, exit 130 (143 for SIGTERM), nothing half-written.

Each test runs a real command in a subprocess and delivers a real signal.  Where the moment matters, the
subprocess sends the signal to itself from inside a patched step (deterministic, no sleeps to tune);
one test sends it from outside at a fixed delay, during the heavy imports.
"""

import json
import signal
import subprocess
import sys
import time

import torch

from reliability_setup import REPO, assert_interrupted, entry_command, self_signalled, subprocess_env

torch.set_num_threads(1)
FIXTURE = REPO / "tests" / "fixtures" / "holmes" / "benchmark"


def test_ctrl_c_while_the_command_loads(tmp_path):
    """#74, #150: a Ctrl-C in the first ~2 s (torch, transformers imports) gave a KeyboardInterrupt traceback."""
    result = self_signalled("importlib", "", "SIGINT", "dstg-cache", "--model", "dstg", "--corpus", "x", "--out", "o",
                            cwd=tmp_path)
    assert_interrupted(result, 130, "dstg-cache", "while starting")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == []


def test_ctrl_c_from_outside_during_imports(tmp_path):
    """The same, with the signal from another process as a terminal sends it: no traceback whenever it lands."""
    process = subprocess.Popen(entry_command("dstg-holmes", "run", "--holmes-dir", FIXTURE, "--model", "dstg",
                                             "--out", tmp_path / "o"),
                               cwd=tmp_path, env=subprocess_env(DSTG_CACHE=str(tmp_path / "cache")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.4)  # python is up, torch is loading
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("dstg-holmes: interrupted (Ctrl-C)")


def test_ctrl_c_mid_holmes_run_keeps_the_previous_tables(tiny, tmp_path):
    """#125: a KeyboardInterrupt traceback in dstg-holmes run."""
    out = tmp_path / "tables"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"benchmark_dir": "b", "models": ["m"], "probe": {}}))
    (out / "results.csv").write_text("previous\n")
    result = self_signalled("probes.holmes.run", "evaluate_features", "SIGINT", "dstg-holmes", "run", "--holmes-dir",
                            FIXTURE, "--model", tiny[0], "--out", out, cwd=tmp_path)
    assert_interrupted(result, 130, "dstg-holmes", "are as they were")
    assert (out / "results.csv").read_text() == "previous\n" and sorted(p.name for p in out.iterdir()) == [
        "config.json", "results.csv"]


def test_sigterm_during_extraction_removes_the_partial_store(tiny, tmp_path):
    """#73: SIGTERM (kill, timeout, batch preemption) left a 655 MB '.out.tmp-...' behind."""
    result = self_signalled("dstg_interp.store.extract", "_extract_into", "SIGTERM", "dstg-cache", "--model", tiny[0],
                            "--corpus", tiny[1], "--out", tmp_path / "store", "--quiet", cwd=tmp_path)
    assert_interrupted(result, 143, "dstg-cache")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == []  # no store, no temporary, no lock


def test_ctrl_c_while_training_prepares_its_data(tiny, tmp_path):
    """#150: rc 130 with no message and an empty output folder left."""
    result = self_signalled("dstg_interp.train", "prepare_data", "SIGINT", "dstg-train", "--out", tmp_path / "run",
                            "--corpus", tiny[1], "--steps", "3", "--warmup-steps", "1", "--vocab-size", "200",
                            cwd=tmp_path)
    assert_interrupted(result, 130, "dstg-train", "no checkpoint was saved yet")
    assert not (tmp_path / "run").exists() and not (tmp_path / ".run.lock").exists()


KILL_MID_EXTRACTION = """
import importlib, sys, time
extract_module = importlib.import_module("dstg_interp.store.extract")  # the package's 'extract' is the function
def stalled(folder, *args, **kwargs):
    (folder / "layer00_ap.npy").write_bytes(b"\\0" * 4096)
    print(folder, flush=True)
    time.sleep(60)
extract_module._extract_into = stalled
from dstg_interp.cli.entry import launch
sys.exit(launch("dstg-cache", sys.argv[1:]))
"""


def test_sigkill_mid_extraction_then_the_next_run_cleans_up(tiny, tmp_path):
    """#72: after SIGKILL nothing can clean up at once; the next run on the same --out removes the leftovers."""
    args = ["--model", str(tiny[0]), "--corpus", str(tiny[1]), "--out", str(tmp_path / "store"), "--quiet", "--layers", "0"]
    process = subprocess.Popen([sys.executable, "-c", KILL_MID_EXTRACTION, *args], cwd=tmp_path,
                               env=subprocess_env(DSTG_CACHE=str(tmp_path / "cache")), stdout=subprocess.PIPE, text=True)
    temporary = process.stdout.readline().strip()
    process.kill()
    process.wait()
    assert temporary and (tmp_path / temporary).exists() and not (tmp_path / "store").exists()
    rerun = subprocess.run(entry_command("dstg-cache", *args), cwd=tmp_path,
                           env=subprocess_env(DSTG_CACHE=str(tmp_path / "cache")), capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["store"]


def test_each_outcome_line_is_one_write_so_ranks_cannot_run_lines_together(monkeypatch):
    """CI, session 14: two ranks of one launch stopped at the same instant printed
    '...continue with --resumedstg-train: interrupted ...' -- print() writes the text and its newline apart,
    and the other rank's line landed between them.  Every outcome line is now one write ending in its newline."""
    import io

    from dstg_interp.cli.shell import run_cli

    class Writes(io.StringIO):
        calls: list[str] = []

        def write(self, text):
            self.calls.append(text)
            return super().write(text)

    def stopped():
        raise KeyboardInterrupt

    def refused():
        raise ValueError("a bad value; use a good one")

    for body, code in ((stopped, 130), (refused, 2)):
        Writes.calls = []
        monkeypatch.setattr(sys, "stderr", Writes())
        assert run_cli("dstg-train", body) == code
        assert len(Writes.calls) == 1 and Writes.calls[0].endswith("\n"), Writes.calls
