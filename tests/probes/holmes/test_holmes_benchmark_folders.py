"""Holmes benchmark folders and flags a user can get wrong without a traceback (round 4: HM1, HM2, HO2, HO4):
every dataset folder once, a bad link skipped with its reason, a bounded stderr, and flags that would give
misleading numbers said or refused."""

import os
import shutil
from pathlib import Path

import pandas as pd
import torch

from dstg_interp.cli.holmes import main as holmes_main
from probes.holmes.format import load_benchmark
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)
SENTENCE = Path(__file__).resolve().parents[2] / "fixtures" / "holmes" / "benchmark" / "fx-sentence"


def run_holmes(capsys, checkpoint, bench, out, *extra):
    return run_main(capsys, holmes_main, "run", "--benchmark", bench, "--model", checkpoint, "--seeds", "0", "--quiet",
                    "--out", out, *extra)


def test_a_chain_of_links_is_one_dataset_and_bad_links_say_why(tmp_path):
    """HM2: `good`, l0 -> good, l1 -> l0 ... l45 -> l44 and self -> self probed `good` 41 times under 41 names and
    dropped l40 ... l45 and self without a word."""
    bench = tmp_path / "bench"
    shutil.copytree(SENTENCE, bench / "good")
    previous = "good"
    for i in range(46):
        os.symlink(previous, bench / f"l{i}")
        previous = f"l{i}"
    os.symlink("self", bench / "self")
    loaded, skipped = load_benchmark(bench)
    assert [d.name for d in loaded] == ["good"]
    reasons = {s.dataset: s.reason for s in skipped}
    assert set(reasons) == {f"l{i}" for i in range(46)} | {"self"}
    assert all("the same folder as 'good'" in reasons[f"l{i}"] for i in range(46))
    assert "a symbolic link that leads to no folder" in reasons["self"]


def test_thousands_of_junk_folders_are_a_bounded_report(tiny, tmp_path, capsys):
    """HM1: 3,000 junk folders printed 3,000 `skipped:` lines."""
    bench = tmp_path / "bench"
    shutil.copytree(SENTENCE, bench / "good")
    for i in range(60):
        (bench / f"junk{i:03d}").mkdir()
    code, _, err = run_holmes(capsys, tiny[0], bench, tmp_path / "out")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("skipped:")]
    assert len(lines) == 21 and lines[-1].startswith("skipped: 40 more dataset folders; every reason is in skipped.csv")
    assert len(pd.read_csv(tmp_path / "out" / "skipped.csv")) == 60


def test_a_flash_fraction_that_leaves_a_handful_of_rows_is_said(tiny, tmp_path, capsys):
    """HO2: --flash-fraction 1e-9 probed every dataset on 2 training examples without a word."""
    bench = tmp_path / "bench"
    shutil.copytree(SENTENCE, bench / "good")
    code, _, err = run_holmes(capsys, tiny[0], bench, tmp_path / "out", "--flash-fraction", "1e-9")
    assert code == 0, err
    warning = [line for line in err.splitlines() if "warning:" in line]
    assert len(warning) == 1 and "flash fraction 1e-09 keeps 2 of its" in warning[0], err


def test_a_seed_given_twice_is_refused(tiny, tmp_path, capsys):
    """HO4: --seeds 0,0 ran each probe twice and reported score_std 0.0, as if two seeds agreed exactly."""
    code, _, err = run_main(capsys, holmes_main, "run", "--benchmark", SENTENCE.parent, "--model", tiny[0],
                            "--seeds", "0,0", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "seed 0 is given twice")
    assert not (tmp_path / "out").exists()
