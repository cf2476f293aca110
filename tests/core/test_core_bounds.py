"""torchrun variables without torchrun, or not numbers: one line, no wait for peers that never come (cases
ENV2, ENV3 of the fourth hostile round; docs/RELIABILITY.md).
"""

import pytest
import torch

from dstg_interp.cli.cache import main as cache_main
from dstg_interp.cli.train import main as train_main
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)
TINY_TRAIN = ("--variant", "dstg", "--d-model", "32", "--d-ap", "8", "--n-layers", "2", "--n-heads", "2",
              "--vocab-size", "200", "--max-length", "64", "--batch-size", "8", "--no-compile", "--threads", "1",
              "--quiet", "--steps", "3", "--eval-every", "10", "--save-every", "10")


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
