"""Console entry points (pyproject.toml [project.scripts]).

Each command's module imports torch, transformers and friends, which takes a second or two; a Ctrl-C in
that time used to end in a KeyboardInterrupt traceback.  These entries load nothing heavy themselves:
they import the command's module inside ``run_cli``-style handling, so an early Ctrl-C is one line and
exit code 130 like any other, and SIGTERM during the imports ends the same way (143).
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import threading
import time

from dstg_interp.cli import COMMANDS
from dstg_interp.cli.allocator import keep_freed_memory
from dstg_interp.cli.help_text import print_stored_help
from dstg_interp.cli.shell import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, exit_after_this_command, raise_terminated, say

SLOW_START_S = 3.0  # a command still importing after this long says what it is doing



class ImportNotice:
    """On a busy machine the imports (torch, transformers, transformer-lens) can take half a minute: once they
    have taken ``SLOW_START_S``, say so on a terminal, one line redrawn every 2 s, until they are done.  Not in
    a log or a pipe: there a command's stderr is read as its outcome (bad input: one line, exit 2), and a
    start-up line would become a second line.  A quick start (``--help``) prints nothing."""

    def __init__(self, prog: str):
        self.prog, self.done, self.shown, self.lock = prog, threading.Event(), False, threading.Lock()
        self.terminal = sys.stderr.isatty()
        self.started = time.monotonic()
        if self.terminal:
            threading.Thread(target=self._run, daemon=True, name="import-notice").start()

    def _run(self) -> None:
        if self.done.wait(SLOW_START_S):
            return
        while True:
            with self.lock:  # never after stop() has ended the line
                if self.done.is_set():
                    return
                text = f"{self.prog}: loading torch and transformers ... {time.monotonic() - self.started:.0f} s"
                sys.stderr.write(f"\r{text}")
                sys.stderr.flush()
                self.shown = True
            if self.done.wait(2.0):
                return

    def stop(self) -> None:
        with self.lock:
            self.done.set()
            if self.shown and self.terminal:
                sys.stderr.write("\n")
                sys.stderr.flush()


def launch(prog: str, argv: list[str] | None = None) -> int:
    """Import the module of ``prog`` and run its ``main(argv)``; interruptions while loading are one line."""
    if print_stored_help(prog, sys.argv[1:] if argv is None else argv):  # --help: no torch to import (help_text.py)
        return 0
    signal.signal(signal.SIGTERM, raise_terminated)
    keep_freed_memory()  # each batch reuses the last one's pages instead of faulting fresh ones in (allocator.py)
    slow_start = ImportNotice(prog)
    try:
        module = importlib.import_module(COMMANDS[prog])  # lazy: torch & co. load after Ctrl-C is ours
    except KeyboardInterrupt as err:
        slow_start.stop()
        name = "SIGTERM" if isinstance(err, Terminated) else "Ctrl-C"
        say(f"{prog}: interrupted ({name}) while starting; nothing was written")
        # A half-imported torch can re-deliver the signal while the interpreter shuts down (exit -2 instead of
        # 130); nothing was opened or written yet, so leave at once with the documented code.
        os._exit(EXIT_TERMINATED if isinstance(err, Terminated) else EXIT_INTERRUPTED)
    slow_start.stop()
    return module.main(argv)


def run_script(prog: str, argv: list[str] | None = None) -> int:
    """``launch`` for a process that ends with the command (a console script, ``python -m dstg_interp.cli.entry``):
    once the outcome is printed, a late signal -- torchrun stopping a rank that already said why it stopped --
    is ignored on the way out instead of becoming a traceback."""
    exit_after_this_command()
    code = launch(prog, argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # SIGTERM: ignored once settled (exit_after_this_command)
    return code


# pyproject.toml's [project.scripts] name these: ``dstg-train = "dstg_interp.cli.entry:train"`` and so on.
SCRIPTS = {"train": "dstg-train", "cache": "dstg-cache", "probe": "dstg-probe", "holmes": "dstg-holmes",
           "extend": "dstg-extend", "convert": "dstg-convert", "evaluate": "dstg-eval", "erase": "dstg-erase",
           "export": "dstg-export", "verify": "dstg-verify", "launcher": "dstg-launch"}


def __getattr__(name: str):
    """``entry.train`` and the other script entries: ``run_script`` of their command (PEP 562)."""
    if name in SCRIPTS:
        return functools.partial(run_script, SCRIPTS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # python -m dstg_interp.cli.entry dstg-cache --model dstg ...
    sys.exit(run_script(sys.argv[1], sys.argv[2:]))
