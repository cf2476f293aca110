"""Nothing lost, nothing half-done in Holmes: an interrupted suite build, tables of an earlier run, the lock on
--out, readable tables with no rows, no empty --out on a full disk.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it. The other rooms' cases are in their own folders' test_*_output_safety.py.
"""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from dstg_interp.io import OutputError
from probes.holmes.suite import build as suite_build
from probes.holmes.run import write_tables
from probes.holmes.suite import build_suite, is_complete_suite
from reliability_setup import run_main, check_a_full_disk_leaves_no_empty_out, check_a_run_locks_its_out

torch.set_num_threads(1)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TEMPLATE_DATASETS = ["offline-age_comparison", "offline-size_comparison"]  # built from templates: no download


# --- 2. half-done work is never taken for complete -------------------------------------------------
def test_interrupted_suite_build_leaves_nothing_and_is_rebuilt(tmp_path, monkeypatch):
    """#126: a Ctrl-C during the first suite build left 15 of 25 datasets that the next run probed."""
    out = tmp_path / "suite"
    real_write = suite_build.write_dataset
    calls = []

    def interrupted_write(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(*args, **kwargs)

    monkeypatch.setattr(suite_build, "write_dataset", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS)
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no suite, no temporary folder
    monkeypatch.undo()
    # the remains of an interrupted build of the old code (datasets, no suite.json) are not a suite ...
    (out / TEMPLATE_DATASETS[0]).mkdir(parents=True)
    assert not is_complete_suite(out)
    # ... and are replaced without asking; a complete suite only with overwrite
    assert build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS) == TEMPLATE_DATASETS
    assert is_complete_suite(out)
    with pytest.raises(OutputError, match="--overwrite"):
        build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS)
    build_suite(out, n_per_dataset=40, names=TEMPLATE_DATASETS, overwrite=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "paper.tex").write_text("x")
    with pytest.raises(OutputError, match="never replaced"):
        build_suite(tmp_path / "mine", n_per_dataset=40, names=TEMPLATE_DATASETS, overwrite=True)


def test_holmes_tables_of_an_earlier_run_are_removed(tmp_path):
    """#120: a run with 0 rows left the previous run's scores/winning_rates/... beside its new results."""
    out = tmp_path / "holmes"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"benchmark_dir": "b", "models": ["m"], "probe": {}}))
    for name in ("scores", "winning_rates", "areas", "phenomena", "a_vs_b"):
        (out / f"{name}.csv").write_text("old,numbers\n1,2\n")
    (out / "plot.png").write_bytes(b"not ours, not touched")
    empty = pd.DataFrame(columns=["model", "dataset", "layer", "subspace", "control", "seed", "metric", "score"])
    empty.attrs["skipped"] = [{"dataset": "d", "model": "*", "reason": "malformed"}]
    write_tables(empty, out)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "plot.png", "results.csv", "skipped.csv"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.csv").write_text("someone else's")
    with pytest.raises(OutputError, match="never replaced"):
        write_tables(empty, foreign)
    assert (foreign / "results.csv").read_text() == "someone else's"


# --- locks follow the real path; dstg-probe and dstg-holmes run lock their --out (N80, N81, N116) ---
@pytest.mark.parametrize("command", ["holmes"])
def test_probe_and_holmes_runs_lock_their_out(command, tiny, tmp_path, capsys):
    """N116: two `dstg-holmes run` on one --out both reported success; the first run's tables were gone."""
    check_a_run_locks_its_out(command, tiny, tmp_path, capsys)


# --- every table has its header, also with no rows (a_vs_b.csv of a one-model Holmes run) ---------
def test_a_one_model_holmes_run_writes_readable_tables(tiny, tmp_path, capsys):
    import pandas as pd

    from dstg_interp.cli.holmes import main as holmes_main

    checkpoint, _ = tiny
    out = tmp_path / "holmes"
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", tmp_path / "bench" / "fx-sentence")
    code, _, err = run_main(capsys, holmes_main, "run", "--benchmark", tmp_path / "bench", "--model", checkpoint,
                            "--seeds", "0", "--quiet", "--out", out)
    assert code == 0, err
    for table in sorted(out.glob("*.csv")):
        frame = pd.read_csv(table)  # a 1-byte a_vs_b.csv raised EmptyDataError here
        assert len(frame.columns) > 0, table.name
    assert list(pd.read_csv(out / "a_vs_b.csv").columns) == ["a", "b", "area", "wins", "ties", "losses", "n_phenomena"]


# --- leftovers on a full disk: no empty --out (old #93, N89) --------------------------------------
@pytest.mark.parametrize("command", ["holmes"])
def test_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch):
    check_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch)
