"""Small things a researcher meets in the first hour: the Holmes tables use the names given."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from dstg_interp.cli.entry import launch
from dstg_interp.tiny_zoo import tiny_zoo

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "holmes" / "benchmark"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two tiny models saved as run folders (runs/a, runs/b) and a small text folder."""
    root = tmp_path_factory.mktemp("names")
    models, documents = tiny_zoo(["dstg", "rope"], n_docs=8, seed=0)
    corpus = root / "corpus"
    corpus.mkdir()
    for i, document in enumerate(documents):
        (corpus / f"{i:02d}.txt").write_text(document.text)
    for folder, model in (("a", models["dstg"]), ("b", models["rope"])):
        model.save(root / "runs" / folder / "checkpoint", tokenizer=model.tokenizer)
    return root


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
