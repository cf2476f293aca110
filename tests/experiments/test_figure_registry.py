"""A new figure is one row of ``experiments.figures.FIGURES``: a throwaway row (the geometry script under another
name, in the gallery) is listed and run by dstg-figures, gets a stored help text, refuses a user's --out, and is a
step of run_all's gallery, drawn into its own folder; a name the registry lacks is refused."""

import importlib
import json

import pandas as pd
import pytest

from experiments import figures, help_texts
from reliability_setup import assert_one_line_error, run_main

ROW = figures.Figure("experiments.fig_geometry", "a throwaway row: the geometry table under another name", "throwaway")


@pytest.fixture
def throwaway_row(monkeypatch):
    from experiments import run_all
    monkeypatch.setitem(figures.FIGURES, "throwaway", ROW)
    yield importlib.reload(run_all)  # run_all reads the registry as it is imported
    monkeypatch.undo()
    importlib.reload(run_all)


def test_a_new_row_reaches_every_consumer(throwaway_row, tmp_path, capsys):
    run_all = throwaway_row
    # dstg-figures: listed, resolved by its name, refused on a user's folder as every figure
    code, listed, _ = run_main(capsys, figures.main, "--list")
    line = next(line for line in listed.splitlines() if line.split()[:1] == ["throwaway"])
    assert code == 0 and line.endswith(f"{ROW.what} ({ROW.module})")
    assert figures.module_of("throwaway") == ROW.module
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    code, _, err = run_main(capsys, figures.main, "throwaway", "--out", user)
    assert_one_line_error(code, err, f"--out {user} holds files no figure script wrote", prog="dstg-figures throwaway")
    # the stored help texts: one for the row
    assert "dstg-figures throwaway" in help_texts.help_requests()
    # run_all: a gallery step between the figures and the claims, run on run_all's config into its folder
    assert run_all.STEPS.index("throwaway") == run_all.STEPS.index("claims") - 1
    others = [step for step in run_all.STEPS if step != "throwaway"]
    out = tmp_path / "gallery"
    timing = run_all.main(["--tiny", "--quiet", "--out", str(out), "--skip", *others, "--model-seeds", "0",
                           "--store-root", str(tmp_path / "stores")])
    assert {t["step"]: t["status"] for t in timing}["throwaway"] == "ok"
    table = pd.read_csv(out / "throwaway" / "geometry.csv")
    assert set(table.model) == {"dstg", "rope", "ap", "rp", "nope"} and set(table.seed) == {0}  # the zoo and its floor
    assert json.loads((out / "throwaway" / "config.json").read_text())["tiny"] is True


def test_a_name_the_registry_lacks_is_refused(capsys):
    from experiments import run_all
    code, _, err = run_main(capsys, figures.main, "no-such-figure")
    assert_one_line_error(code, err, "no figure named 'no-such-figure'", prog="dstg-figures")
    with pytest.raises(ValueError, match=r"unknown step\(s\) \['no-such-step'\]"):
        run_all.RunAllConfig(skip=["no-such-step"])
