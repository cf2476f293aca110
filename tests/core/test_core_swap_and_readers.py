"""Outputs checked at the swap (case T1 of the fourth hostile round; docs/RELIABILITY.md): commit_directory
onto nothing, an empty folder or a file that appeared meanwhile.
"""

from pathlib import Path

import pytest
import torch

from dstg_interp import io as dio
from dstg_interp.io import OutputError, commit_directory

torch.set_num_threads(1)


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- T1, X8: the swap checks again what it replaces ------------------------------------------------
def test_commit_directory_onto_nothing_or_an_empty_folder_needs_no_recogniser(tmp_path):
    for target in (tmp_path / "absent", tmp_path / "empty"):
        if target.name == "empty":
            target.mkdir()
        new = dio.atomic_directory(target)
        (new / "a.txt").write_text("a")
        commit_directory(new, target)
        assert snapshot(target) == {"a.txt": b"a"}
    target = tmp_path / "file"
    target.write_text("a file appeared where the folder goes")
    new = dio.atomic_directory(target)
    with pytest.raises(OutputError, match="is a file or a link now"):
        commit_directory(new, target)
    assert target.read_text() == "a file appeared where the folder goes"
