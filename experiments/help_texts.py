"""Render every dstg-* command's and figure's ``--help`` into ``dstg_interp/cli/help/``: the texts the entries
print without importing torch (``dstg_interp.cli.help_text``).

    python -m experiments.help_texts        # after changing a command's flags, defaults or docstring

``tests/cli/test_help_texts.py`` renders the same requests and fails where a stored text differs, naming this
command.  Texts of requests that no longer exist are removed.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from dstg_interp.cli import COMMANDS
from dstg_interp.cli.help_text import HELP_DIR, help_path, render_help
from dstg_interp.io import write_text_atomic
from experiments.figures import FIGURES, PROG

SUBCOMMANDS = {"dstg-holmes": ("build", "run")}  # commands whose subcommands have help texts of their own


def help_requests() -> dict[str, tuple[Callable, list[str], str | None]]:
    """key -> (main, argv, prog) of every help text the entries serve: each command (and subcommand) and
    each figure of ``dstg-figures``."""
    requests: dict[str, tuple[Callable, list[str], str | None]] = {}
    for prog, module_name in COMMANDS.items():
        main = importlib.import_module(module_name).main
        requests[prog] = (main, ["--help"], None)
        for sub in SUBCOMMANDS.get(prog, ()):
            requests[f"{prog} {sub}"] = (main, [sub, "--help"], None)
    for name, row in FIGURES.items():
        requests[f"{PROG} {name}"] = (importlib.import_module(row.module).main, ["--help"], f"{PROG} {name}")
    return requests


def rendered() -> dict[str, str]:
    """key -> the live parser's help text at HELP_COLUMNS columns."""
    return {key: render_help(main, argv, prog) for key, (main, argv, prog) in help_requests().items()}


def main() -> int:
    texts = rendered()
    HELP_DIR.mkdir(exist_ok=True)
    kept = {help_path(key) for key in texts}
    for key, text in texts.items():
        write_text_atomic(help_path(key), text)
    for stale in set(HELP_DIR.glob("*.txt")) - kept:
        stale.unlink()
    print(f"{len(texts)} help texts in {HELP_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
