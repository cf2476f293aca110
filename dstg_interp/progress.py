"""Progress bars: one helper for the whole package, so that every bar behaves the same on a terminal and in a log.

    from dstg_interp.progress import progress_bar
    for batch in progress_bar(batches, desc="extract dstg", unit="batch", disable=not progress): ...
    with progress_bar(total=n_bytes, unit="B", unit_scale=True, desc="fetch wikipedia") as bar: bar.update(k)

On a terminal it is tqdm's bar, redrawn in place at most every 0.5 s (at 100 columns and 24 rows when the
terminal reports a size of 0, where tqdm would draw nothing), and at least every 2 s: a heartbeat thread redraws its elapsed
time while one long step (a batch, a document) holds the count.  When stderr is not a terminal (a log file, a pipe, CI), each
redraw is a line of its own and comes every ``LOG_INTERVAL_S`` seconds, no more and (the heartbeat) no less: a
few lines per bar, never hundreds of carriage-return updates.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from tqdm import tqdm as std_tqdm
from tqdm.auto import tqdm

LOG_INTERVAL_S = 8.0  # the longest a bar stays silent in a log (stderr not a terminal)
TERMINAL_INTERVAL_S = 0.5
TERMINAL_HEARTBEAT_S = 2.0  # on a terminal a bar's elapsed time moves at least this often
FALLBACK_COLUMNS = 100
FALLBACK_ROWS = 24  # tqdm hides every bar at or below a terminal's last row, so a reported height of 0 hides them all


class LineStream:
    """A text stream for tqdm that writes each redraw as a line of its own (no ``\\r``), for logs."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        text = text.replace("\r", "").rstrip("\n").rstrip()
        if text:
            self.stream.write(text + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_size(stream) -> tuple[int | None, int | None]:
    """(columns, rows) for tqdm: None where the terminal reports a size (tqdm measures it), the fallback where it
    says 0, as pseudo-terminals opened without a size and some recorders do."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None, None
    return (None if size.columns > 0 else FALLBACK_COLUMNS), (None if size.lines > 0 else FALLBACK_ROWS)


class Bar(std_tqdm):
    """tqdm whose elapsed time keeps ticking while one step takes long (a forward of a long batch, a long
    document's sentence split): a daemon thread redraws it every ``heartbeat_s`` without a redraw."""

    def __init__(self, *args, heartbeat_s: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._stop_beat = threading.Event()
        if heartbeat_s and not self.disable:
            threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True, name="progress-heartbeat").start()

    def _beat(self, every: float) -> None:
        while not self._stop_beat.wait(every):
            last: float = getattr(self, "last_print_t", 0.0)
            if not self.disable and time.time() - last >= every:
                self.refresh()  # under tqdm's lock, as update's redraws
                self.last_print_t = time.time()

    def close(self) -> None:
        self._stop_beat.set()
        super().close()


def _in_notebook() -> bool:
    """A running Jupyter kernel, not merely ``ipykernel`` imported somewhere in the process (a test, a tool)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def progress_bar(iterable=None, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)`` with the package's settings (module docstring); every tqdm keyword works,
    and an explicit ``file``, ``mininterval`` or ``ncols`` wins."""
    given = kwargs.pop("file", None)
    stream = given or sys.stderr
    if given is None and _in_notebook():  # a notebook: tqdm.auto's widget
        return tqdm(iterable, **kwargs)
    if _is_terminal(stream):
        kwargs.setdefault("mininterval", TERMINAL_INTERVAL_S)
        columns, rows = _terminal_size(stream)
        kwargs.setdefault("ncols", columns)
        kwargs.setdefault("nrows", rows)
        return Bar(iterable, file=stream, heartbeat_s=TERMINAL_HEARTBEAT_S, **kwargs)
    kwargs.setdefault("mininterval", LOG_INTERVAL_S)
    kwargs.setdefault("ncols", FALLBACK_COLUMNS)
    kwargs.setdefault("ascii", True)
    kwargs["leave"] = True  # a log keeps each bar's last line (clearing it writes nothing)
    return Bar(iterable, file=LineStream(stream), dynamic_ncols=False, heartbeat_s=LOG_INTERVAL_S, **kwargs)


def heartbeat(bar: tqdm) -> None:
    """Redraw ``bar`` (its elapsed time) once its interval has passed, for a wait that advances no count."""
    if not bar.disable and time.time() - bar.last_print_t >= bar.mininterval:
        bar.refresh()
        bar.last_print_t = time.time()


def write_line(text: str) -> None:
    """One line on stderr that does not break a bar on screen (``tqdm.write``)."""
    tqdm.write(text, file=sys.stderr)
