"""``--help`` without the heavy imports: every command's help text, rendered from its live parser, ships beside it.

A dstg-* command's parser is built from config dataclasses that live beside torch and transformers, so building
it costs the seconds those imports take.  When a command line only asks for help (``dstg-probe --help``,
``dstg-holmes run -h``, ``dstg-figures heads --help``), the entries (``entry.launch``, ``experiments.figures``)
print the stored text instead, in milliseconds; any other command line is parsed by the live parser, help
included (``dstg-probe --model x --help``).  A command without a stored text is answered live.

The texts are the live parsers' output at HELP_COLUMNS columns, written by ``python -m experiments.help_texts``
into ``help/`` (package data, so a wheel has them); ``tests/cli/test_help_texts.py`` renders every parser again
and fails on any difference, so a stored text cannot go stale where the tests pass.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HELP_DIR = Path(__file__).resolve().parent / "help"
HELP_COLUMNS = 100  # argparse wraps to $COLUMNS; the stored texts are rendered at this width
HELP_FLAGS = ("-h", "--help")


def help_key(prog: str, argv: Sequence[str]) -> str | None:
    """The stored text a command line asks for: ``dstg-probe`` for ``["--help"]``, ``dstg-holmes run`` for
    ``["run", "-h"]``; None for a command line that asks for anything else (it is parsed live)."""
    argv = list(argv)
    if not argv or argv[-1] not in HELP_FLAGS or len(argv) > 2 or any(word.startswith("-") for word in argv[:-1]):
        return None
    return " ".join([prog, *argv[:-1]])


def help_path(key: str) -> Path:
    return HELP_DIR / f"{key.replace(' ', '_')}.txt"


def stored_help(key: str | None) -> str | None:
    """The stored help text of ``key`` (``help_key``), or None where there is none: the live parser answers."""
    if key is None:
        return None
    try:
        return help_path(key).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def print_stored_help(prog: str, argv: Sequence[str]) -> bool:
    """Print the stored text if ``argv`` only asks for help and one is stored; whether it did."""
    text = stored_help(help_key(prog, argv))
    if text is None:
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


def render_help(main: Callable, argv: Sequence[str], prog: str | None = None) -> str:
    """What ``main(argv)`` prints for a help request, at HELP_COLUMNS columns; ``prog``: the name a parser that
    takes it from ``sys.argv[0]`` shows (the figure scripts)."""
    buffer = io.StringIO()
    saved_columns, saved_program = os.environ.get("COLUMNS"), sys.argv[0]
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    sys.argv[0] = prog or saved_program
    try:
        with contextlib.redirect_stdout(buffer):
            main(list(argv))
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise RuntimeError(f"{prog or main} {' '.join(argv)} exited {stop.code} instead of printing help") from None
    else:
        raise RuntimeError(f"{prog or main} {' '.join(argv)} returned without printing help")
    finally:
        sys.argv[0] = saved_program
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns
    return buffer.getvalue()
