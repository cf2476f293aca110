"""Each package's face says what it holds: the files a package docstring lists are the files it has, the lazy
faces load only what is asked for, and no message names a ``dstg-*`` command that does not exist."""

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = [init for init in sorted((ROOT / "dstg_interp").glob("*/__init__.py")) if "Files:" in ast.get_docstring(
    ast.parse(init.read_text())) or ""]


@pytest.mark.parametrize("init", FACES, ids=lambda p: p.parent.name)
def test_a_package_docstring_names_every_file_of_the_package(init):
    docstring = ast.get_docstring(ast.parse(init.read_text()))
    files = sorted(p.name for p in init.parent.glob("*.py") if p.name != "__init__.py")
    missing = [name for name in files if name not in docstring]
    assert not missing, f"{init.relative_to(ROOT)}'s docstring does not list {', '.join(missing)}"


def test_the_probes_face_is_lazy_and_complete():
    code = ("import sys, probes; from probes import RidgeProbe; print('probes.holmes' in sys.modules); "
            "print(all(getattr(probes, name) is not None for name in probes.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["False", "True"]  # RidgeProbe alone does not load the Holmes runner; every name resolves
    import probes

    with pytest.raises(AttributeError, match="no attribute 'ProbeConfig'"):
        probes.ProbeConfig  # the Holmes config is named for Holmes: HolmesProbeConfig


def test_messages_name_only_commands_that_exist():
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    named = {}
    for folder in ("dstg_interp", "probes", "experiments"):
        for path in (ROOT / folder).rglob("*.py"):
            # a command name stands alone: not inside a path (runs/dstg-ddp), a file name or a longer name
            for match in re.finditer(r"(?<![\w/.-])dstg-[a-z]+(?![\w-])", path.read_text()):
                named.setdefault(match.group(), path.relative_to(ROOT))
    not_commands = {"dstg-interp", "dstg-offset", "dstg-results"}  # the package, a zoo member, the output folder
    unknown = {name: str(where) for name, where in named.items() if name not in scripts | not_commands}
    assert not unknown, f"commands named but not installed: {unknown}"


@pytest.mark.parametrize("script", ["fig_probes", "fig_ap_manifold", "fig_heads", "recipe_study", "pretrain_zoo"])
def test_no_help_text_shows_this_machines_absolute_paths(script, capsys):
    """A default folder of the package is shown as <dstg_interp>/... or <checkout>/..., not /home/someone/..."""
    import importlib

    module = importlib.import_module(f"experiments.{script}")
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "(default:" in text and str(ROOT) not in text
