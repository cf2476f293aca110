"""Outputs checked at the swap, not only at the start; stores that prove their bytes and hold still while read.

Cases of the fourth hostile round (T1, X8, X5, P2, X7; docs/RELIABILITY.md): each writes into the target, or
damages or holds the store, at a fixed moment of the run (a patched step of the command), so the window the
report had to widen with SIGSTOP is certain here.
"""

import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from dstg_interp import io as dio
from dstg_interp import load_model
from dstg_interp.cli.cache import main as cache_main
from dstg_interp.cli.export import main as export_main
from dstg_interp.cli.verify import main as verify_main
from dstg_interp.data import load_corpus
from dstg_interp.io import OutputError, OutputLocked, output_lock
from dstg_interp.store import ActivationStore, StoreError, extract
from dstg_interp.store import checksums as checksums_module
from dstg_interp.store import export as export_module
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)
extract_module = importlib.import_module("dstg_interp.store.extract")  # the package exports a function of that name


@pytest.fixture
def store(tiny, tmp_path, capsys):
    checkpoint, corpus = tiny
    out = tmp_path / "store"
    assert run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", out, "--layers", "0,1",
                    "--quiet")[0] == 0
    return out


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- T1, X8: the swap checks again what it replaces ------------------------------------------------
def test_a_folder_a_user_makes_in_out_during_extraction_is_kept(tiny, tmp_path, capsys, monkeypatch):
    """T1: --out absent at the start, a user's folder there at the end: it was swapped out and deleted, exit 0."""
    checkpoint, corpus = tiny
    out = tmp_path / "t1"
    finish = extract_module._finish

    def user_writes_meanwhile(*args, **kwargs):
        out.mkdir()
        (out / "notes.txt").write_text("my notes")
        return finish(*args, **kwargs)

    monkeypatch.setattr(extract_module, "_finish", user_writes_meanwhile)
    code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", out, "--layers", "0",
                            "--quiet")
    assert_one_line_error(code, err, f"{out} changed while this run wrote it", "notes.txt", f"{out}-new",
                          prog="dstg-cache")
    assert snapshot(out) == {"notes.txt": b"my notes"}
    assert (tmp_path / "t1-new" / "manifest.json").is_file()  # the new store is kept, and said where
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t1", "t1-new"]  # no temporary, no lock


def test_a_file_added_to_a_store_being_replaced_is_kept(store, tiny, tmp_path, capsys, monkeypatch):
    """T1 with --overwrite: the old store gains a user's file during the run; also in the instant between the
    check and the swap (the swapped-out folder is checked and swapped back)."""
    checkpoint, corpus = tiny
    common = ("--model", checkpoint, "--corpus", corpus, "--out", store, "--quiet", "--overwrite")
    finish = extract_module._finish

    def user_writes_meanwhile(*args, **kwargs):
        (store / "my-notes.txt").write_text("kept")
        return finish(*args, **kwargs)

    monkeypatch.setattr(extract_module, "_finish", user_writes_meanwhile)
    code, _, err = run_main(capsys, cache_main, *common, "--layers", "1")
    assert_one_line_error(code, err, "my-notes.txt", "left as it is", f"{store}-new")
    assert (store / "my-notes.txt").read_text() == "kept" and (store / "layer00_sem.npy").exists()
    monkeypatch.undo()

    (store / "my-notes.txt").unlink()
    before = snapshot(store)
    exchange = dio._exchange

    def user_writes_at_the_swap(a, b):
        if not (store / "late.txt").exists():
            (store / "late.txt").write_text("written in the last instant")
        return exchange(a, b)

    monkeypatch.setattr(dio, "_exchange", user_writes_at_the_swap)
    code, _, err = run_main(capsys, cache_main, *common, "--layers", "1")
    assert_one_line_error(code, err, "late.txt", f"{store}-new-2")
    assert snapshot(store) == {**before, "late.txt": b"written in the last instant"}


def test_a_file_written_into_the_export_folder_during_the_export_is_kept(store, tmp_path, capsys, monkeypatch):
    """X8: an empty --out, accepted at the start, held a user's file at the end: deleted, exit 0."""
    out = tmp_path / "x8"
    out.mkdir()
    chunk = export_module._chunk

    def user_writes_meanwhile(*args, **kwargs):
        (out / "mine.txt").write_text("mine")
        return chunk(*args, **kwargs)

    monkeypatch.setattr(export_module, "_chunk", user_writes_meanwhile)
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", out, "--quiet")
    assert_one_line_error(code, err, "mine.txt", f"{out}-new", prog="dstg-export")
    assert snapshot(out) == {"mine.txt": b"mine"}
    assert (tmp_path / "x8-new" / "state.json").is_file()


# --- X5: a store being read holds still ------------------------------------------------------------
def test_a_store_being_exported_is_not_replaced_under_the_export(store, tiny, tmp_path, capsys, monkeypatch):
    """X5: dstg-cache --overwrite replaced the store while dstg-export read it: rows of two models, both exit 0."""
    checkpoint, corpus = tiny
    before = snapshot(store)
    chunk = export_module._chunk
    seen = {}

    def overwrite_meanwhile(*args, **kwargs):
        if not seen:
            seen["cache"] = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", store,
                                     "--layers", "1", "--overwrite", "--quiet")
        return chunk(*args, **kwargs)

    monkeypatch.setattr(export_module, "_chunk", overwrite_meanwhile)
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "x5", "--quiet")
    assert code == 0, err
    cache_code, _, cache_err = seen["cache"]
    assert_one_line_error(cache_code, cache_err, f"{store} is in use by another run (pid {os.getpid()}", prog="dstg-cache")
    assert snapshot(store) == before and (tmp_path / "x5" / "state.json").is_file()


def test_a_store_being_written_is_not_read_and_a_library_writer_does_not_swap_under_a_reader(store, tiny, tmp_path,
                                                                                             capsys):
    with output_lock(store, "dstg-cache --overwrite (a writer)"):
        code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "x", "--quiet")
    assert_one_line_error(code, err, "is being written by another run", "a writer", prog="dstg-export")
    assert not (tmp_path / "x").exists()

    checkpoint, corpus = tiny
    before = snapshot(store)
    with ActivationStore(store):  # a reader in this process; extract(overwrite=True) is another writer
        with pytest.raises(OutputError, match="in use by another run .*it was left as it is"):
            extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, layers=(1,),
                    overwrite=True, progress=False)
    assert snapshot(store) == before and (tmp_path / "store-new" / "manifest.json").is_file()
    assert not dio.lock_path(store).exists()  # the last reader removes the lock file


def test_readers_share_and_the_last_one_removes_the_lock(store):
    with ActivationStore(store) as first, ActivationStore(store) as second:
        assert first.n_tokens == second.n_tokens
        with pytest.raises(OutputLocked, match=r"in use by another run \(pid "):
            with output_lock(store):
                pass
    assert not dio.lock_path(store).exists()


# --- P2: stores prove their own bytes ---------------------------------------------------------------
def _zero_data(path: Path) -> None:
    """Keep the .npy header and the size, zero every value (a bad copy, bit rot)."""
    with open(path, "r+b") as handle:
        np.lib.format.read_magic(handle)
        np.lib.format.read_array_header_1_0(handle)
        start = handle.tell()
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(start)
        handle.write(bytes(size - start))


def test_a_store_with_zeroed_data_is_named_never_read(store, tiny, tmp_path, capsys):
    """P2: layer01_ap.npy with its header and size kept but its data zeroed was reused: AP R² -0.000 for 0.183."""
    checkpoint, corpus = tiny
    damaged = store / "layer01_ap.npy"
    intact = damaged.read_bytes()
    _zero_data(damaged)
    with pytest.raises(StoreError, match=f"{damaged} does not hold the bytes the store was written with"):
        ActivationStore(store)
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "p2", "--quiet")
    assert_one_line_error(code, err, "layer01_ap.npy", "damaged", prog="dstg-export")
    assert not (tmp_path / "p2").exists()
    # reused by extraction (a cached store of dstg-probe): said in one warning line, and extracted again
    code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", store,
                            "--layers", "0,1", "--quiet")
    assert code == 0 and err.count("\n") == 1 and "warning:" in err and "layer01_ap.npy" in err, err
    assert damaged.read_bytes() == intact


def test_dstg_verify_reads_every_byte(store, tmp_path, capsys, monkeypatch):
    """The sampled check on opening reads about 1 MiB a file; dstg-verify reads all: a byte the sample misses."""
    n_files = len(json.loads((store / "manifest.json").read_text())["checksums"]["files"])
    assert run_main(capsys, verify_main, store) == (0, f"{store}: every file holds the bytes it was written with "
                                                       f"({n_files} files, xxh3_128)\n", "")
    path = store / "labels_input_ids.npy"
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 1] ^= 0xFF
    path.write_bytes(bytes(data))
    monkeypatch.setattr(checksums_module, "_sample_offsets", lambda size: [0])  # a sample that misses it
    monkeypatch.setattr(checksums_module, "SAMPLE_BLOCKS", 1)
    monkeypatch.setattr(checksums_module, "SAMPLE_BYTES", 64)
    code, _, err = run_main(capsys, verify_main, store)
    assert_one_line_error(code, err, "labels_input_ids.npy", "does not hold the bytes", prog="dstg-verify")


def test_export_into_its_own_store_is_refused(store, capsys):
    """X7: dstg-export --out inside the store it reads was accepted (a foreign folder in the store)."""
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", store / "hf", "--quiet")
    assert_one_line_error(code, err, f"--out {store / 'hf'} is inside the store {store}", prog="dstg-export")
    assert not (store / "hf").exists()


def test_a_manifest_claiming_more_tokens_than_its_files_hold_is_named(store, tmp_path, capsys):
    """C1: a manifest claiming 10^12 tokens was blamed on the disk (`needs about 288963318 MiB`)."""
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["n_tokens"] = 10**12
    for entry in manifest["arrays"].values():
        entry["shape"][0] = 10**12
    (store / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "c1", "--quiet")
    assert_one_line_error(code, err, "is cut short", "the store is damaged", prog="dstg-export")
    assert "MiB" not in err and not (tmp_path / "c1").exists()


@pytest.mark.parametrize("where", ["under a file", "/proc"])
def test_an_unusable_export_folder_is_said_as_such(where, store, tmp_path, capsys):
    """X3: --out under a file said `<absolute path>: File exists`; X6, RO2: /proc or a read-only disk were blamed
    on free space."""
    if where == "/proc":
        out, said = Path("/proc/x6"), "cannot write in /proc"
    else:
        (tmp_path / "a-file").write_text("a file")
        out, said = tmp_path / "a-file" / "sub", f"lies under {tmp_path / 'a-file'}, which is a file"
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", out, "--quiet")
    assert_one_line_error(code, err, said, prog="dstg-export")
    assert "MiB" not in err


# --- round 5: stores read only plain files inside themselves; verify never vouches for what it did not compare ---
@pytest.mark.parametrize("name", ["documents.json", "extraction.json"])
def test_a_fifo_in_a_store_is_named_not_waited_on(name, store, tmp_path, capsys):
    """VFIFO, VFIFO2: a FIFO in place of a store file blocked dstg-verify and dstg-export in open()."""
    (store / name).unlink()
    os.mkfifo(store / name)
    code, _, err = run_main(capsys, verify_main, store)
    assert_one_line_error(code, err, name, "not a plain file", prog="dstg-verify")
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "x", "--quiet")
    assert_one_line_error(code, err, name, "not a plain file", prog="dstg-export")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", ["/dev/zero", "../outside.npy"])
def test_a_manifest_naming_a_path_out_of_the_store_is_refused(name, store, capsys):
    """VZERO: a manifest naming /dev/zero made dstg-verify read forever."""
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["checksums"]["files"][name] = {"bytes": 0, "sample": "x", "full": "y"}
    (store / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_main(capsys, verify_main, store)
    assert_one_line_error(code, err, repr(name), "not a file inside the store", prog="dstg-verify")


def test_checksums_of_another_algorithm_are_not_a_pass(store, tmp_path, capsys):
    """M8: checksums.algorithm 'md5' and a zeroed array: verify said every file holds its bytes (md5), export ran."""
    array = np.load(store / "layer01_ap.npy", mmap_mode="r+")
    array[:] = 0
    array.flush()
    del array
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["checksums"]["algorithm"] = "md5"
    (store / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = run_main(capsys, verify_main, store)
    assert_one_line_error(code, err, "cannot verify", "'md5'", "xxh3_128", prog="dstg-verify")
    assert "every file holds" not in out
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "x", "--quiet")
    assert_one_line_error(code, err, "cannot verify", prog="dstg-export")


def test_verify_judges_every_store_it_is_given(store, tmp_path, capsys):
    """VM1: verify stopped at the first damaged store of a list and said nothing of the rest."""
    import shutil
    damaged, intact = tmp_path / "damaged", tmp_path / "intact"
    shutil.copytree(store, damaged)
    shutil.copytree(store, intact)
    path = damaged / "labels_input_ids.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    code, out, err = run_main(capsys, verify_main, damaged, intact)
    assert code == 2
    assert f"{intact}: every file holds the bytes" in out
    assert "labels_input_ids.npy" in err and "1 of 2 stores damaged" in err


def test_verify_reads_each_byte_once(store, capsys, monkeypatch):
    """CV1: verify's first full read ran without the reader lock, and every byte was read twice."""
    reads = []
    full_digest = checksums_module._full_digest
    monkeypatch.setattr(checksums_module, "_full_digest", lambda path: reads.append(path) or full_digest(path))
    assert run_main(capsys, verify_main, store)[0] == 0
    n_files = len(json.loads((store / "manifest.json").read_text())["checksums"]["files"])
    assert len(reads) == n_files == len(set(reads))


def _set(path: list, value):
    def edit(manifest):
        target = manifest
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return edit


@pytest.mark.parametrize("case, edit, said", [
    ("M3", _set(["n_tokens"], -5), "n_tokens must be a count"),
    ("M10", lambda m: m["checksums"]["files"].update({next(iter(m["checksums"]["files"])): "abc"}), "checksums.files"),
    ("M11", _set(["checksums", "files"], ["a"]), "checksums must be a table"),
    ("M12", _set(["n_tokens"], "abc"), "n_tokens must be a count"),
    ("M14", _set(["arrays"], KeyError), "arrays must be a table"),
    ("M15", _set(["n_sequences"], KeyError), "n_sequences must be a count"),
    ("M19", _set(["labels"], None), "labels must be a table"),
    ("M4", lambda m: next(iter(m["arrays"].values())).update(shape=[m["n_tokens"], -8]), "must be [tokens, width >= 1]"),
])
def test_a_manifest_field_of_the_wrong_type_is_one_line_naming_it(case, edit, said, store, tmp_path, capsys):
    """M3, M4, M10-M19: wrong types or missing keys in a manifest were tracebacks, or passed verify."""
    manifest = json.loads((store / "manifest.json").read_text())
    edit(manifest)
    (store / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_main(capsys, verify_main, store)
    assert_one_line_error(code, err, "manifest.json", said, prog="dstg-verify")
    code, _, err = run_main(capsys, export_main, "--store", store, "--out", tmp_path / "x", "--quiet")
    assert_one_line_error(code, err, said, prog="dstg-export")
