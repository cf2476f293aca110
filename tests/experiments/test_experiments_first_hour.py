"""Small things a researcher meets in the first hour: no experiment script writes into the repository by
default.
"""

import dataclasses
import importlib
from pathlib import Path

# The scripts that rebuild committed documents from committed tables (a rerun changes nothing: test_report).
REBUILDS_COMMITTED_DOCUMENTS = {"experiments.report", "experiments.claims"}


def test_no_experiment_script_writes_into_the_repository_by_default(tmp_path, monkeypatch):
    """Every script's default --out resolves outside the tracked tree (dstg-results/ in the working folder)."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    checked = {}
    for path in sorted((root / "experiments").glob("*.py")):
        name = f"experiments.{path.stem}"
        if path.stem.startswith("_") or name in REBUILDS_COMMITTED_DOCUMENTS:
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if dataclasses.is_dataclass(value) and isinstance(value, type) and value.__module__ == name:
                out = {f.name: f for f in dataclasses.fields(value)}.get("out")
                if out is not None and out.default not in (None, dataclasses.MISSING):
                    checked[f"{name}.{value.__name__}"] = Path(out.default).resolve()
    assert len(checked) >= 12, sorted(checked)
    inside = {name: str(out) for name, out in checked.items() if out.is_relative_to(root)}
    assert not inside, f"default --out inside the repository: {inside}"
