"""Nothing lost: dstg-cache replaces only a store it wrote, and only when asked; `--out .` and a symlinked
--out are refused by name.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it. The other rooms' cases are in their own folders' test_*_output_safety.py.
"""

import json

import torch

from dstg_interp.cli.cache import main as cache_main
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)


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


# --- locks follow the real path; dstg-probe and dstg-holmes run lock their --out (N80, N81, N116) ---
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
