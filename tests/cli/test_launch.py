"""Several processes: torchrun and dstg-launch end a dead or interrupted rank in one line per rank (and one of
dstg-launch's own), never a traceback, and dstg-launch refuses a bad command once, before any rank starts.
The two-rank store itself is tests/store/test_store_distributed.py."""

import sys
from pathlib import Path

import pytest

from conftest import interrupt_when_ready


# --- torchrun teardown: a dead peer or a signal is one line per rank, never a traceback (N74, N75) ---
# The ranks' sitecustomize (imported by every python that starts with it on PYTHONPATH): rank 1 meets its
# fault at its first row write, mid-extraction. "kill": it SIGKILLs itself. "int": it says it is ready and
# waits, and the test presses Ctrl-C (SIGINT to the launcher's process group, as a terminal does).
RANK_FAULT = """
import os
if os.environ.get("RANK") == "1" and os.environ.get("FAULT"):
    import signal
    from pathlib import Path
    from dstg_interp.store import npy_writer

    def fault(self, *args, **kwargs):
        if os.environ["FAULT"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        Path(os.environ["READY"]).touch()
        signal.pause()
    npy_writer.NpyWriter.write = fault
"""
LAUNCHERS = {  # --shutdown-timeout: a rank slowed by a loaded machine is never SIGKILLed mid-cleanup here
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "--shutdown-timeout", "300", "--tee", "2", "-m", "dstg_interp.cli.cache"],
    "dstg-launch": [sys.executable, "-m", "dstg_interp.cli.entry", "dstg-launch", "--nproc-per-node", "2",
                    "--shutdown-timeout", "300", "dstg-cache"],
}
INTERRUPTED_LINE = r"dstg-cache: interrupted \(Ctrl-C\): extraction into \S+ was interrupted; the partial work was removed"
# rank 0 after rank 1's SIGKILL: it found the peer gone, or torchrun's SIGTERM came first (mid-extraction, or
# while it removed the temporary after finding the peer gone: "no store was written")
RANK0_LINE = (r"dstg-cache: (error: rank 0: another rank stopped \(.*\); no store was written"
              r"|interrupted \(SIGTERM\): (extraction into \S+ was interrupted|no store was written))")


def run_with_a_rank_fault(launcher: str, fault: str, tiny, tmp_path: Path):
    """A second store extracted under ``launcher`` over a complete first one, rank 1 meeting ``fault``:
    (completed process, the first store's manifest md5 before)."""
    import hashlib
    import os
    import subprocess

    from dstg_interp.cli.cache import main as cache_main
    from reliability_setup import REPO, subprocess_env

    checkpoint, corpus = tiny
    out = tmp_path / "store"
    args = ["--model", checkpoint, "--corpus", corpus, "--quiet", "--batch-size", "1", "--out", out]
    assert cache_main([str(a) for a in args]) == 0
    manifest = hashlib.md5((out / "manifest.json").read_bytes()).hexdigest()
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(RANK_FAULT)
    ready = tmp_path / "inject" / "rank1-ready"
    env = subprocess_env(FAULT=fault, READY=str(ready),
                         PYTHONPATH=os.pathsep.join([str(tmp_path / "inject"), str(REPO)]))
    other_store = ["--overwrite", "--layers", "0,1"]  # another store, so rank 1 gets to write rows
    process = subprocess.Popen([*LAUNCHERS[launcher], *map(str, args), *other_store], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    stdout, stderr = interrupt_when_ready(process, ready, fault)  # "int": Ctrl-C once rank 1 is mid-extraction
    assert hashlib.md5((out / "manifest.json").read_bytes()).hexdigest() == manifest  # the first store, untouched
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == [], left  # no temporary, no lock left
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("fault, codes", [("kill", {2, 143, -15}), ("int", {130})])
def test_torchrun_teardown_after_a_dead_or_interrupted_rank(fault, codes, tiny, tmp_path):
    """N75: after `kill -9` of rank 1, rank 0's cleanup called all_reduce on the broken group (a project
    traceback); N74: Ctrl-C of torchrun. Now: one line per live rank, exit 2 / 143 / 130, store untouched.
    (Plain torchrun still ends a Ctrl-C with its own SignalException traceback: dstg-launch, below, does not.)"""
    import re

    run = run_with_a_rank_fault("torchrun", fault, tiny, tmp_path)
    lines = (run.stderr + run.stdout).splitlines()
    rank_lines = {rank: [line.split("]:", 1)[1] for line in lines if line.startswith(f"[default{rank}]:")]
                  for rank in (0, 1)}  # what each rank printed (--tee 2)
    own = [line for line in rank_lines[0] if line.strip()]
    assert len(own) == 1 and re.match(INTERRUPTED_LINE if fault == "int" else RANK0_LINE, own[0]), run.stderr
    assert "dstg_interp" not in "\n".join(rank_lines[0] + rank_lines[1])  # no project traceback on any rank
    if fault == "int":
        assert rank_lines[1] == rank_lines[0], run.stderr  # rank 1: the same one line
    else:  # torchrun's report: rank 1 died of SIGKILL (-9); rank 0 ended with one of ``codes``
        # (2: it found the peer gone; 143 / -15: torchrun's SIGTERM came first, before or after its one line)
        exit_codes = {int(code) for code in re.findall(r"exitcode\s*:\s*(-?\d+)", run.stderr)}
        assert exit_codes - {-9} <= codes and exit_codes & codes, run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["int", "kill"])
def test_dstg_launch_ends_a_ctrl_c_or_a_dead_rank_in_one_line_of_its_own(fault, tiny, tmp_path):
    """N74: after a clean Ctrl-C of both ranks, torchrun's agent printed its SignalException traceback (exit 1).
    dstg-launch: the ranks' lines, then one line of the launcher, exit 130; a killed rank: exit 2."""
    import re

    run = run_with_a_rank_fault("dstg-launch", fault, tiny, tmp_path)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert "Traceback" not in run.stderr + run.stdout and run.stdout == "", run.stderr
    if fault == "int":
        assert run.returncode == 130, run.stderr
        assert len(lines) == 3 and lines[0] == lines[1] and re.match(INTERRUPTED_LINE, lines[0]), run.stderr
        assert lines[2].startswith("dstg-launch: interrupted (Ctrl-C): the 2 rank(s) of dstg-cache were stopped")
    else:
        assert run.returncode == 2, run.stderr
        assert re.fullmatch(r"dstg-launch: dstg-cache failed: rank 0 (exit code 2|exit code 143 \(SIGTERM\)|killed "
                            r"by SIGTERM), rank 1 killed by SIGKILL \(each rank's own message is above\)", lines[-1]), lines
        assert len(lines) <= 2 and all(re.match(RANK0_LINE, line) for line in lines[:-1]), run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["dstg-cache", "--model", "dstg", "--max-docs", "0", "--out", "x"], "dstg-cache: error: argument --max-docs"),
    (["dstg-eval", "--model", "dstg"], "dstg-launch: error: dstg-eval does not share its work"),
    (["dstg-nope"], "dstg-launch: error: 'dstg-nope' is not a dstg-* command"),
])
def test_dstg_launch_refuses_bad_commands_once_before_any_rank_starts(args, says, tmp_path):
    from reliability_setup import run_entry

    run = run_entry("dstg-launch", "--nproc-per-node", "2", *args, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(says) and run.stderr.count("error:") == 1, run.stderr
    assert list(tmp_path.iterdir()) == []
