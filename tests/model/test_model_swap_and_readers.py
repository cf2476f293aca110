"""Outputs checked at the swap (case T1 of the fourth hostile round; docs/RELIABILITY.md): a user's file
written into a checkpoint folder while it is saved is kept.
"""


import pytest
import torch

from reliability_setup import check_a_writer_checks_at_the_swap

torch.set_num_threads(1)


# --- T1, X8: the swap checks again what it replaces ------------------------------------------------
@pytest.mark.parametrize("writer", ["checkpoint"])
def test_every_other_writer_checks_at_the_swap(writer, tiny, tmp_path, monkeypatch):
    """The same check for the other folders a command replaces: a training checkpoint, a Holmes suite."""
    check_a_writer_checks_at_the_swap(writer, tiny, tmp_path, monkeypatch)
