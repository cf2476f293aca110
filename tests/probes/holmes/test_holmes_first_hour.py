"""Small things a researcher meets in the first hour: the Holmes tables use the names given."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from dstg_interp.cli.entry import launch

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "holmes" / "benchmark"


@pytest.mark.parametrize("spelling", [["dstg-holmes", "run"], ["dstg-probe", "--task", "holmes"]],
                         ids=["dstg-holmes run", "dstg-probe --task holmes"])
def test_holmes_tables_use_the_names_given(two_runs, tmp_path, capsys, spelling):
    benchmark = tmp_path / "bench"
    shutil.copytree(FIXTURES / "fx-sentence", benchmark / "fx-sentence")
    runs = [str(two_runs / "runs" / "a"), str(two_runs / "runs" / "b")]
    common = ["--benchmark", str(benchmark), "--seeds", "0", "--quiet"]
    assert launch(spelling[0], [*spelling[1:], "--model", *runs, "--name", "DSTG-a", "RoPE-b",
                                "--out", str(tmp_path / "named"), *common]) == 0
    assert sorted(pd.read_csv(tmp_path / "named" / "scores.csv")["model"].unique()) == ["DSTG-a", "RoPE-b"]
    assert launch(spelling[0], [*spelling[1:], "--model", *runs, "--out", str(tmp_path / "default"), *common]) == 0
    assert sorted(pd.read_csv(tmp_path / "default" / "scores.csv")["model"].unique()) == ["a", "b"]
    capsys.readouterr()
    assert launch(spelling[0], [*spelling[1:], "--model", *runs, "--name", "x", "x", "--out", str(tmp_path / "clash"),
                                *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--name gives 'x' twice" in err[0] and not (tmp_path / "clash").exists()
