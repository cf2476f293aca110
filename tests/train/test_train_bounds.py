"""Every size bounded before anything is allocated or started: --pad-to-multiple-of (cases B7, B6 of the
fourth hostile round; docs/RELIABILITY.md).
"""

import pytest
import torch

from dstg_interp.cli.train import main as train_main
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)
TINY_TRAIN = ("--variant", "dstg", "--d-model", "32", "--d-ap", "8", "--n-layers", "2", "--n-heads", "2",
              "--vocab-size", "200", "--max-length", "64", "--batch-size", "8", "--no-compile", "--threads", "1",
              "--quiet", "--steps", "3", "--eval-every", "10", "--save-every", "10")


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
