"""The shell every dstg-* command runs in: one line on stderr and an exit code for every expected failure.

    from dstg_interp.cli.shell import run_cli

    def main(argv=None):
        return run_cli("dstg-cache", lambda: _main(argv))   # exit 2 + one line; Ctrl-C 130; SIGTERM 143

Bad input, an unwritable output, a full disk, too little memory: exit code 2 and ``prog: error: ...``;
Ctrl-C: 130; SIGTERM: 143 (raised as ``Terminated``, a KeyboardInterrupt, so every cleanup path runs);
a warning: one ``prog: warning: ...`` line.  A bug (any other exception) keeps its traceback.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import warnings
from collections.abc import Callable

from dstg_interp.io import DISK_FULL

EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout, batch preemption), raised like Ctrl-C so every cleanup path runs."""


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def describe_os_error(err: OSError) -> str:
    """One line for an OSError, naming the file and, for a full disk, what to do."""
    where = err.filename if err.filename is not None else ""
    if err.errno in DISK_FULL:
        return f"disk full while writing {where or 'the output'}; free space or choose another --out"
    if err.strerror and where:
        return f"{where}: {err.strerror}"
    return first_line(err)


# "received": set by the handler, so code that re-raises its own KeyboardInterrupt keeps it known;
# "settled": the command's outcome is decided (and being printed): a late SIGTERM -- torchrun stopping the
# other ranks after one failed -- is then ignored instead of raising a traceback through the exit path;
# "exiting": a console script runs one command and exits, so "settled" holds until the process is gone.
_TERMINATED = {"received": False, "settled": False, "exiting": False}


def exit_after_this_command() -> None:
    """The process ends when this command does (a console script): once its outcome is settled, a late SIGTERM
    is ignored through the interpreter's exit too (a rank under torchrun, stopped after printing its line)."""
    _TERMINATED["exiting"] = True


def raise_terminated(signum, frame):
    """The SIGTERM handler: raise Terminated, as Ctrl-C raises KeyboardInterrupt.  Only once: a second SIGTERM
    (torchrun repeats it) must not cut short the cleanup the first one started."""
    if _TERMINATED["settled"] or _TERMINATED["received"]:
        return
    _TERMINATED["received"] = True
    raise Terminated("terminated (SIGTERM)")


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM raises Terminated (a KeyboardInterrupt) for the duration, so temporary work is removed
    exactly as on Ctrl-C instead of being left behind."""
    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def say(line: str) -> None:
    """Write one line to stderr in one write: ``print`` writes the text and its newline separately, so two
    ranks of one launch stopping at the same instant could run their lines together on the shared stderr."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _show_warning(prog: str):
    def show(message, category, filename, lineno, file=None, line=None):
        say(f"{prog}: warning: {first_line(message if isinstance(message, BaseException) else Warning(message))}")
    return show


def run_cli(prog: str, body: Callable[[], int | None], interrupted: Callable[[], str] | None = None) -> int:
    """Run a command's ``body`` and turn every expected failure into one line on stderr and an exit code:
    bad input, unwritable output, a full disk, too little memory: 2; Ctrl-C: 130; SIGTERM: 143.
    ``interrupted()`` says what an interruption left behind (default: nothing half-written).
    Warnings print as one ``prog: warning: ...`` line.  A bug (any other exception) keeps its traceback."""
    try:
        with terminate_as_interrupt(), warnings.catch_warnings():
            warnings.showwarning = _show_warning(prog)
            return _settled(prog, body, interrupted)
    finally:  # the handler is restored by now; the next in-process command starts afresh
        if not _TERMINATED["exiting"]:
            _TERMINATED["settled"] = _TERMINATED["received"] = False


def _settled(prog: str, body: Callable[[], int | None], interrupted: Callable[[], str] | None) -> int:
    try:
        code = int(body() or 0)
        _TERMINATED["settled"] = True
        return code
    except KeyboardInterrupt as err:
        _TERMINATED["settled"] = True
        terminated = isinstance(err, Terminated) or _TERMINATED["received"]
        detail = first_line(err) if str(err).strip() and not isinstance(err, Terminated) else None
        if detail is None:
            detail = interrupted() if interrupted is not None else "nothing half-written was left"
        say(f"{prog}: interrupted ({'SIGTERM' if terminated else 'Ctrl-C'}): {detail}")
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except OSError as err:
        _TERMINATED["settled"] = True
        left = f" ({interrupted()})" if err.errno in DISK_FULL and interrupted is not None else ""
        say(f"{prog}: error: {describe_os_error(err)}{left}")
        return EXIT_ERROR
    except MemoryError:
        _TERMINATED["settled"] = True
        say(f"{prog}: error: out of memory; use smaller sizes (model, --batch-size, --max-docs)")
        return EXIT_ERROR
    except ValueError as err:  # CheckpointError, StoreError, DataError, OutputError, config checks
        _TERMINATED["settled"] = True
        say(f"{prog}: error: {first_line(err)}")
        return EXIT_ERROR
