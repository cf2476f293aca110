"""A writer thread: each batch's rows go to disk while the next batch runs through the model.

    with BackgroundWrites(depth=2) as writes:
        for batch in batches:
            rows = forward(batch)                                   # the model, on the main thread
            writes.submit([(writer, first_row, rows[key]) ...])     # queued; blocks only when `depth` batches wait

Why: extraction wrote each batch with pwrite before the next forward began, so every millisecond the disk
took (page-cache copies, and on a real disk the kernel throttling a process with many dirty pages) was added
to the forward's time: 0.89x the plain forward on a disk (issue #39). pwrite releases the GIL, as do
PyTorch's kernels, so the two overlap. The queue is bounded: at most ``depth`` batches of rows wait in
memory, so RSS stays flat. The bytes and their places in the files are exactly those of the synchronous
writes (one pwrite per (array, run of rows)), so the store and its checksums are unchanged.

An error in the thread (a full disk: OSError ENOSPC) is raised again, as it was, on the main thread at its
next ``submit`` or at the end; an interruption on the main thread stops the thread before the temporary
folder is removed (queued batches are dropped, the one being written finishes).
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from .npy_writer import NpyWriter

Job = tuple[NpyWriter, int, np.ndarray]  # (file, first row, rows)
STOP_WAIT_S = 10.0


class BackgroundWrites:
    def __init__(self, depth: int = 2):
        self.jobs: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            batch = self.jobs.get()
            if batch is None:
                return
            if self.error is not None or self.stopping.is_set():
                continue  # drain: the main thread has been told, or is stopping
            try:
                for writer, first_row, rows in batch:
                    if self.stopping.is_set():  # not one more write into files about to be closed
                        break
                    writer.write(first_row, rows)
            except BaseException as err:  # noqa: BLE001 -- handed to the main thread, raised there as it was
                self.error = err

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            self.stopping.set()
            raise error

    def submit(self, batch: list[Job]) -> None:
        """Queue one batch's writes (blocks while ``depth`` batches wait); raises a write error of an earlier batch."""
        self._raise()
        self.jobs.put(batch)

    def finish(self) -> None:
        """Wait until every queued write is on its way to disk; raises the first write error."""
        self.jobs.put(None)
        self.thread.join()
        self._raise()

    def stop(self) -> None:
        """Drop what waits, let the write in progress end, and stop the thread (an interruption, an error)."""
        self.stopping.set()
        while True:
            try:
                self.jobs.get_nowait()
            except queue.Empty:
                break
        self.jobs.put(None)
        self.thread.join(timeout=STOP_WAIT_S)  # a write stuck in the kernel (a hung network disk) does not hold
        # the interruption; the thread is a daemon and checks ``stopping`` before each further write

    def __enter__(self) -> "BackgroundWrites":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.finish()
        else:
            self.stop()
