"""benchmarks/machine.py: results say whether the machine was quiet; an under-load run keeps committed results."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parents[2] / "benchmarks" / "machine.py")
machine = importlib.util.module_from_spec(spec)
sys.modules["machine"] = machine  # benchmarks import it under this name; dataclasses look it up there
spec.loader.exec_module(machine)


def arguments(*argv):
    parser = argparse.ArgumentParser()
    machine.add_load_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def load(monkeypatch, tmp_path):
    """Set the machine's 1-minute load average; temporary files go to tmp_path."""
    monkeypatch.setattr(machine.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def set_load(one_minute):
        monkeypatch.setattr(machine.os, "getloadavg", lambda: (one_minute, 1.0, 1.0))

    return set_load


def test_a_quiet_run_writes_its_result_with_the_machine(load, tmp_path):
    load(0.3)
    path = tmp_path / "results" / "store.json"
    path.parent.mkdir()
    path.write_text("{}")
    machine.write_result(path, {"speed": 1.0}, machine.LoadWatch.start(arguments()), arguments())
    result = json.loads(path.read_text())
    assert result["speed"] == 1.0 and result["quiet"] is True and result["machine"]["quiet"] is True
    record = result["machine"]
    assert record["load_before"]["1min"] == 0.3 and record["cores"] >= 1 and "numpy" in record["versions"]
    assert set(record) >= {"load_after", "cores_usable", "torch_threads", "started", "wall_s"}


def test_an_under_load_run_keeps_committed_results(load, tmp_path, capsys):
    path = tmp_path / "store.json"
    path.write_text('{"committed": true}')
    load(1.7)
    watch = machine.LoadWatch.start(arguments())
    assert not watch.quiet
    with pytest.raises(SystemExit) as stopped:
        machine.write_result(path, {"speed": 0.5}, watch, arguments())
    assert stopped.value.code == 2
    assert json.loads(path.read_text()) == {"committed": True}
    aside = json.loads((tmp_path / "tmp" / "store.under-load.json").read_text())
    assert aside["quiet"] is False and aside["speed"] == 0.5
    assert "under load" in capsys.readouterr().err

    machine.write_result(path, {"speed": 0.5}, watch, arguments("--allow-load"))  # asked for: written, marked
    assert json.loads(path.read_text())["quiet"] is False


def test_an_under_load_run_with_nothing_to_replace_is_written_marked(load, tmp_path):
    load(3.0)
    path = tmp_path / "new.json"
    machine.write_result(path, {}, machine.LoadWatch.start(arguments()), arguments())
    assert json.loads(path.read_text())["quiet"] is False
