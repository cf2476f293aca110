"""benchmarks/README.md: every table is generated from a committed result file (benchmarks/tables.py)."""

import importlib.util
import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
spec = importlib.util.spec_from_file_location("tables", BENCHMARKS / "tables.py")
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)


def test_readme_tables_are_what_the_committed_results_give():
    assert tables.main(["--check"]) == 0, "run: python benchmarks/tables.py --write"


def test_no_table_stands_outside_a_generated_block():
    outside = tables.BLOCK.sub("", (BENCHMARKS / "README.md").read_text())
    assert not re.findall(r"^\|.*\|$", outside, flags=re.M)


def test_a_changed_result_shows_in_its_table(tmp_path, monkeypatch):
    result = tables.load("training")
    result["rows"][0]["tokens_per_s"] = 123456.0
    (tmp_path / "training.json").write_text(__import__("json").dumps(result))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    assert "123,456" in tables.training()


def test_the_train_loop_table_shows_the_budget_arm_when_a_run_has_it(tmp_path, monkeypatch):
    import json

    result = tables.load("train_loop")
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    for row in result["rows"]:
        row.pop("budget", None)  # a run from before the arm
    (tmp_path / "train_loop.json").write_text(json.dumps(result))
    assert "– / –" in tables.train_loop().splitlines()[2]
    for row in result["rows"]:
        row["budget"] = dict(steady_tokens_per_s=54321.0 if row["compiled"] else 43210.0, vs_model_step=0.97)
    (tmp_path / "train_loop.json").write_text(json.dumps(result))
    assert "43,210 / 54,321" in tables.train_loop() and "/ 0.97 |" in tables.train_loop()


# committed before benchmarks/machine.py existed; a rerun writes the record (bench_holmes.py uses write_result)
NO_LOAD_RECORD = {"holmes.json"}


def test_every_result_keeps_its_load_record():
    import json

    for path in sorted((BENCHMARKS / "results").glob("*.json")):
        result = json.loads(path.read_text())
        if path.name in NO_LOAD_RECORD:
            assert "machine" not in result  # when it has one, drop it from the list
            continue
        machine = result["machine"]
        assert set(machine["load_before"]) == {"1min", "5min", "15min"} and "load_after" in machine, path.name
        assert result["quiet"] == (machine["load_before"]["1min"] <= 0.5), path.name
    for script in sorted(BENCHMARKS.glob("bench_*.py")):
        assert "write_result(" in script.read_text(), script.name  # every benchmark writes through machine.py


def test_the_training_table_reads_runs_before_and_after_the_bf16_arms(tmp_path, monkeypatch):
    import json

    result = tables.load("training")
    bf16 = [row for row in result["rows"] if row.get("precision") == "bfloat16"]
    assert bf16 and all(row["max_rel_loss_diff_vs_float32"] < 1e-3 for row in bf16)  # a bf16 speed counts only so
    lines = tables.training().splitlines()
    assert all(("bfloat16" in line) == (line.count("e-0") == 1) for line in lines[2:2 + len(result["rows"])])
    old = dict(result, rows=[{k: v for k, v in row.items() if k in ("model", "tokens_per_s", "achieved_flops", "mfu")}
                             for row in result["rows"] if row.get("precision") != "bfloat16" and not row.get("compiled")])
    old.pop("peak_flops_bfloat16")
    (tmp_path / "training.json").write_text(json.dumps(old))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    assert "| dstg | eager | float32 |" in tables.training() and "bfloat16" not in tables.training()


def test_the_expectations_table_marks_what_was_fitted_and_fits_a_line_exactly():
    rows = [{"rival": "plain_forward", "width": 128, "n_tokens": t, "seconds": 2.0 + 0.001 * t} for t in (10_000, 100_000)]
    assert tables.fitted_seconds(rows, "plain_forward", 128, 100_000) == (102.0, True)  # a measured cell as measured
    seconds, measured = tables.fitted_seconds(rows, "plain_forward", 128, 1_000_000)
    assert not measured and abs(seconds - 1002.0) < 1e-9  # a + b × tokens through the cells
    assert tables.fitted_seconds(rows, "storeless", 128, 20_000) is None
    text = tables.expectations()
    assert "| 768 | probes (storeless, the default) |" in text and "* fitted" in text
