"""dstg-launch: no ranks refused in one line, a Ctrl-C while waiting for another node ends at once (cases L5,
L11 of the fourth hostile round; docs/RELIABILITY.md).
"""

import os
import signal
import socket
import subprocess
import time

import pytest
import torch

from dstg_interp.cli.launch import main as launch_main
from reliability_setup import REPO, assert_one_line_error, entry_command, run_main, subprocess_env

torch.set_num_threads(1)


# --- L5, L11: dstg-launch ---------------------------------------------------------------------------
@pytest.mark.parametrize("count", ["0", "-1"])
def test_launch_refuses_no_ranks_in_one_line(count, tiny, tmp_path, capsys):
    """L5: --nproc-per-node 0 / -1 was torch's 24-line AssertionError traceback, exit 1."""
    code, _, err = run_main(capsys, launch_main, "--nproc-per-node", count, "dstg-cache", "--model", tiny[0],
                            "--corpus", tiny[1], "--out", tmp_path / "o")
    assert_one_line_error(code, err, "--nproc-per-node: expected a positive number of ranks", prog="dstg-launch")
    assert list(tmp_path.iterdir()) == []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ctrl_c_while_waiting_for_another_node_ends_at_once(tiny, tmp_path):
    """L11: with --nnodes 2 and no second node, Ctrl-C was ignored until torch's rendezvous timed out (911 s)."""
    port = _free_port()
    process = subprocess.Popen(
        entry_command("dstg-launch", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                      "--master-port", port, "--node-rank", "0", "dstg-cache", "--model", tiny[0], "--corpus",
                      tiny[1], "--out", tmp_path / "o", "--quiet"),
        cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:  # waiting: its store listens for node 1
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        time.sleep(1)  # inside the C++ wait
        os.killpg(process.pid, signal.SIGINT)
        started = time.monotonic()
        _, err = process.communicate(timeout=60)
        assert time.monotonic() - started < 20, err
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("dstg-launch: interrupted (Ctrl-C) while waiting for the other nodes "
                                            "(no rank was started)"), err
    assert not (tmp_path / "o").exists()
