"""Outputs checked at the swap (case T1 of the fourth hostile round; docs/RELIABILITY.md): a user's file
written into a Holmes suite folder while it is built is kept.
"""

from pathlib import Path

import pytest
import torch

from dstg_interp import load_model
from dstg_interp.io import OutputError
from reliability_setup import make_tiny_setup

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_setup(tmp_path_factory.mktemp("tiny"))


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- T1, X8: the swap checks again what it replaces ------------------------------------------------
@pytest.mark.parametrize("writer", ["holmes suite"])
def test_every_other_writer_checks_at_the_swap(writer, tiny, tmp_path, monkeypatch):
    """The same check for the other folders a command replaces: a training checkpoint, a Holmes suite."""
    out = tmp_path / "target"
    if writer == "checkpoint":
        from dstg_interp.model import saving

        model = load_model(tiny[0])
        saving.save_checkpoint(model, out)
        module, step = saving, "save_file"
        write = lambda: saving.save_checkpoint(model, out)  # noqa: E731
    else:
        from probes.holmes.suite import build as suite_build

        suite_build.build_suite(out, n_per_dataset=40, names=["offline-age_comparison"])
        module, step = suite_build, "write_dataset"
        write = lambda: suite_build.build_suite(out, n_per_dataset=40, names=["offline-age_comparison"],  # noqa: E731
                                                overwrite=True)
    before = snapshot(out)
    real = getattr(module, step)

    def user_writes_meanwhile(*args, **kwargs):
        (out / "notes.txt").write_text("mine")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, step, user_writes_meanwhile)
    with pytest.raises(OutputError, match=f"notes.txt, which dstg-interp did not write; .* is in {out}-new"):
        write()
    assert snapshot(out) == {**before, "notes.txt": b"mine"} and (tmp_path / "target-new").is_dir()
