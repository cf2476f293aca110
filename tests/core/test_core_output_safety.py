"""Nothing lost, nothing half-done (dstg_interp/io.py): what may be replaced, atomic commits, locks that name
their holder and follow the real path, temporaries of killed runs, unwritable places found before any work.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it. The other rooms' cases are in their own folders' test_*_output_safety.py.
"""

import os
import socket
import subprocess
import shutil
import sys

import pytest
import torch

from dstg_interp import io as dio
from dstg_interp.io import (OutputError, atomic_directory, check_output_location, check_replaceable,
                            clean_stale_temporaries, commit_directory, lock_path)
from dstg_interp.cli.cache import main as cache_main
from reliability_setup import REPO, assert_one_line_error, run_main, subprocess_env

torch.set_num_threads(1)


# --- 1. data loss: replace only what we wrote, only when asked ------------------------------------
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
