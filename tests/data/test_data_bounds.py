"""Corpus files that are plain files, read no further than their size at opening (cases K1, K2 of the fourth
hostile round; docs/RELIABILITY.md).
"""

import os

import pytest
import torch

from dstg_interp.cli.cache import main as cache_main
from dstg_interp.data import load_corpus
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)


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
