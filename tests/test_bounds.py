"""Every size and every wait bounded: flags checked before any allocation, corpus files that are plain files
and read no further than their size, torchrun variables without torchrun, a launcher's wait for peers.

Cases of the fourth hostile round (B7, B6, K1, K2, ENV2, ENV3, L5, L11; docs/RELIABILITY.md).
"""

import os
import signal
import socket
import subprocess
import time

import pytest
import torch

from dstg_interp.cli.cache import main as cache_main
from dstg_interp.cli.launch import main as launch_main
from dstg_interp.cli.train import main as train_main
from dstg_interp.data import load_corpus
from reliability_setup import REPO, assert_one_line_error, entry_command, make_tiny_setup, run_main, subprocess_env

torch.set_num_threads(1)
TINY_TRAIN = ("--variant", "dstg", "--d-model", "32", "--d-ap", "8", "--n-layers", "2", "--n-heads", "2",
              "--vocab-size", "200", "--max-length", "64", "--batch-size", "8", "--no-compile", "--threads", "1",
              "--quiet", "--steps", "3", "--eval-every", "10", "--save-every", "10")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_setup(tmp_path_factory.mktemp("tiny"))


# --- B7, B6: --pad-to-multiple-of bounded before anything is allocated or started ------------------
@pytest.mark.parametrize("multiple", ["10000000", "1000000000", "65"])
def test_pad_to_multiple_of_is_bounded_by_max_length(multiple, tiny, tmp_path, capsys):
    """B7: 1e7 padded the masked-token count to 22.7 GB (OOM kill); B6: 1e9 a 96 GB allocation traceback and a
    started run folder left behind."""
    out = tmp_path / "run"
    code, _, err = run_main(capsys, train_main, *TINY_TRAIN, "--corpus", tiny[1], "--out", out,
                            "--pad-to-multiple-of", multiple)
    assert_one_line_error(code, err, "--pad-to-multiple-of", "at most max_length=64", prog="dstg-train")
    assert list(tmp_path.iterdir()) == []  # no run folder, no lock


# --- K1, K2: corpus files are plain files, read no further than their size --------------------------
@pytest.mark.parametrize("kind", ["device link", "fifo"])
def test_a_corpus_file_that_is_not_a_plain_file_is_named(kind, tiny, tmp_path, capsys):
    """K1: a link to /dev/zero was read without end (22 GB, OOM kill, Ctrl-C ignored); K2: a FIFO hung forever."""
    checkpoint, corpus = tiny
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "doc.txt").write_text((corpus / sorted(os.listdir(corpus))[0]).read_text())
    odd = folder / ("zero.txt" if kind == "device link" else "pipe.txt")
    if kind == "device link":
        odd.symlink_to("/dev/zero")
    else:
        os.mkfifo(odd)
    code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", folder, "--out", tmp_path / "st",
                            "--layers", "0", "--quiet")
    what = "a device" if kind == "device link" else "a named pipe (FIFO)"
    assert_one_line_error(code, err, f"{odd} is {what}, not a plain file", prog="dstg-cache")
    assert not (tmp_path / "st").exists()


def test_a_corpus_file_is_read_no_further_than_its_size_at_opening(tmp_path, monkeypatch):
    """A file that grows while it is read (a log being appended) is bounded too: what it held when opened."""
    from dstg_interp.data import corpora

    path = tmp_path / "c" / "growing.txt"
    path.parent.mkdir()
    path.write_text("First sentence here. Second one there.\n\nA second paragraph.\n")
    opened = corpora.open_corpus_file

    def grows_after_opening(where):
        handle, size = opened(where)
        with open(where, "a") as more:
            more.write("\n\nWritten after the file was opened.\n" * 1000)
        return handle, size

    monkeypatch.setattr(corpora, "open_corpus_file", grows_after_opening)
    documents = load_corpus(str(path.parent), progress=False)
    assert "Written after" not in " ".join(documents[0].sentences)


# --- ENV2, ENV3: torchrun variables without torchrun ---------------------------------------------
@pytest.mark.parametrize("main", [cache_main, train_main], ids=["dstg-cache", "dstg-train"])
def test_torchrun_variables_without_torchrun_are_one_line(main, tiny, tmp_path, capsys, monkeypatch):
    """ENV2: leftover WORLD_SIZE=2 RANK=0 MASTER_ADDR/PORT made a plain dstg-cache wait for a peer, deaf to
    Ctrl-C and SIGTERM."""
    for name, value in dict(WORLD_SIZE="2", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29561").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    checkpoint, corpus = tiny
    args = ("--model", checkpoint, "--layers", "0") if main is cache_main else TINY_TRAIN
    code, _, err = run_main(capsys, main, *args, "--corpus", corpus, "--out", tmp_path / "out")
    assert_one_line_error(code, err, "WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29561 are set",
                          "not started by torchrun", "unset them")
    assert list(tmp_path.iterdir()) == []


def test_a_torchrun_variable_that_is_not_a_number_is_named(tiny, tmp_path, capsys, monkeypatch):
    """ENV3: WORLD_SIZE=abc was `invalid literal for int() with base 10: 'abc'`, naming no variable."""
    monkeypatch.setenv("WORLD_SIZE", "abc")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    checkpoint, corpus = tiny
    code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", tmp_path / "o")
    assert_one_line_error(code, err, "environment variable WORLD_SIZE='abc' is not a whole number", prog="dstg-cache")


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
