"""benchmarks/README.md: every table is generated from a committed result file (benchmarks/tables.py)."""

import importlib.util
import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
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
