"""The C allocator of a command's process: keep freed memory for the next batch instead of handing it back.

A forward pass on the CPU allocates and frees the same large buffers every batch (a 768-wide model at batch
32 x 256: ~100 MB an FFN activation). glibc serves any request above its mmap threshold (at most 32 MB) with
a fresh ``mmap`` and unmaps it on ``free``, so every batch faults its pages in again, zero-filled by the kernel
(what that costs a forward and the probes: ``benchmarks/README.md``, "How cost grows"). Raising the mmap and trim thresholds keeps those
pages in the heap for the next batch, which is what ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``
do from the environment; the commands set it at start (``dstg_interp.cli.entry.launch``), before torch loads.

The cost: memory freed by the process is reused by it, not returned to the system until it exits, so the
resident size stays at its peak (which a command reaches in its first batches anyway). Python users who want
the same in a notebook call ``keep_freed_memory()`` once. ``DSTG_MALLOC=system`` leaves the allocator as it is
(and so does an explicit ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment: yours).
Not glibc (musl, macOS, Windows): nothing to do, and ``keep_freed_memory`` says so by returning False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 1 << 30  # requests up to 1 GiB from the heap; up to 1 GiB of free heap top kept
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

__all__ = ["keep_freed_memory"]


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to 1 GiB for this process (see the module docstring). True when
    set; False where the C library is not glibc, or ``DSTG_MALLOC=system`` or the user's own ``MALLOC_*``
    settings ask to leave it alone."""
    if os.environ.get("DSTG_MALLOC", "").lower() == "system" or any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # no C library by that name, or one without mallopt (not glibc)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES))
