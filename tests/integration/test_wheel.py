"""The figure generator from a wheel: built from the repository, installed into a fresh venv outside it, run
from another folder -- ``dstg-figures`` and ``python -m experiments.fig_*`` work without a clone.

The venv gets the wheel alone (``--no-deps``); its dependencies are read from the environment running the tests
through a ``.pth`` line (a plain path: that environment's own ``.pth`` files, an editable install of this
repository included, are not processed), so the wheel's copy of the packages is the one imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from your_models import write_your_models

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = (".git", ".venv", ".ci-venv", "build", "dist", "*.egg-info", "__pycache__", "runs", "stores", "dstg-results",
            "figures", "results", "benchmarks", "tests")


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy: the build writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_OUT))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "dist"), str(source)], check=True)
    wheel = next((root / "dist").glob("dstg_interp-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--ignore-installed",
                    "-q", str(wheel)], check=True)
    # after the install: with the test environment on its path, pip would take the wheel as installed already
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return venv, elsewhere, root


def run(venv, cwd, *argv):
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment["DSTG_CACHE"] = str(cwd / "cache")
    return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=cwd, env=environment, capture_output=True,
                          text=True)


def test_the_wheel_holds_the_figure_scripts(wheel_venv):
    venv, elsewhere, _ = wheel_venv
    found = run(venv, elsewhere, "python", "-c", "import experiments.fig_probes as m; print(m.__file__)")
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(venv)  # the wheel's copy, not the repository's
    listing = run(venv, elsewhere, "dstg-figures", "--list")
    assert listing.returncode == 0 and "probes" in listing.stdout and "ap-manifold" in listing.stdout
    assert run(venv, elsewhere, "dstg-figures").returncode == 2  # no figure named: the list, as a usage error
    assert run(venv, elsewhere, "python", "-m", "experiments.fig_probes", "--help").returncode == 0
    unknown = run(venv, elsewhere, "dstg-figures", "nope")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1


def test_a_figure_of_ones_own_models_from_the_wheel(wheel_venv):
    venv, elsewhere, root = wheel_venv
    folders = write_your_models(root / "models")
    drawn = run(venv, elsewhere, "dstg-figures", "heads", "--tiny", "--model", str(folders["tiny-dstg"]),
                str(folders["tiny-bert"]), "--name", "mine", "MiniLM-like", "--out", "figs/heads")
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert set(pd.read_csv(elsewhere / "figs" / "heads" / "heads.csv").model) == {"mine"}
    assert "[fig_heads] MiniLM-like: a Hugging Face encoder" in drawn.stderr
