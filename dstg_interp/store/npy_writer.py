"""A .npy file of known shape, reserved on disk up front and filled block by block.

    writer = NpyWriter("layer03_sem.npy", shape=(n_tokens, 112), dtype=np.float16)
    writer.write(start_row, rows)          # rows: [k, 112], goes to rows start_row .. start_row+k-1
    writer.close()
    states = np.load("layer03_sem.npy", mmap_mode="r")
    NpyWriter(path, shape, dtype, create=False)   # open a file another process created, to fill other rows
    NpyWriter(path, shape, dtype, direct=True)    # the rows past the page cache (O_DIRECT), where the OS allows

Why pwrite and not a writable np.memmap: pages dirtied through a mapping count in the process's RSS
until the kernel writes them back, so a memmap-filled store makes peak RSS grow with the number of
tokens. Plain writes go through the page cache, which is not charged to the process.
The space is reserved with posix_fallocate, so a full disk fails at the start with ENOSPC instead of
half-way through (where the OS supports it; otherwise the file is sparse and a later write fails).

``direct=True`` (what extraction uses) writes each block of rows past the page cache: the whole 4 KiB pages
a block covers go through a second descriptor opened with O_DIRECT, from a page-aligned staging buffer, and
only the partial pages at its two ends (under 4 KiB each) go through the page cache. Why: on the two-core
machine of benchmarks/README.md, writing 1 GB through the page cache took 0.5-2.9 s of CPU (the copies, the
kernel's writeback), O_DIRECT 0.1-0.2 s; extraction's forward ran 7.5% slower while buffered writes went on
beside it. The bytes on disk are the same either way. Where O_DIRECT is not there (macOS, a filesystem that
refuses it, such as an older tmpfs, or one that wants a larger alignment) the writer uses the page cache
alone, from the first refusal on (``direct_io`` says which path wrote). Writers of other processes (ranks of
a sharded extraction) may share a partial page at the ends of their blocks: those go through the page
cache, which merges them byte by byte; no page is ever written both ways.
"""

from __future__ import annotations

import errno
import io
import mmap
import os
import threading
from pathlib import Path

import numpy as np


PAGE = 4096  # O_DIRECT's alignment of file offsets, lengths and memory on the filesystems it is used on
DIRECT_MIN_BYTES = 1 << 16  # a smaller block goes through the page cache whole (staging it saves nothing)
STAGING_BYTES = 1 << 23  # a multiple of PAGE: each writing thread's staging buffer
_staging = threading.local()  # that buffer, made on the thread's first direct write


class NpyWriter:
    def __init__(self, path: str | Path, shape: tuple[int, ...], dtype, create: bool = True, direct: bool = False):
        self.path, self.shape, self.dtype = Path(path), tuple(int(x) for x in shape), np.dtype(dtype)
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape})
        self.header = header.getvalue()
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.nbytes = len(self.header) + self.shape[0] * self.row_bytes
        self.fd = self.direct_fd = None
        if not create:  # rows of a sharded extraction: the file is already reserved and has its header
            self.fd = os.open(self.path, os.O_WRONLY)
            if os.fstat(self.fd).st_size != self.nbytes:
                self.close()
                raise ValueError(f"{self.path.name}: {os.path.getsize(self.path)} bytes, expected {self.nbytes}")
        else:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _reserve(self.fd, self.nbytes)
                _pwrite_all(self.fd, self.header, 0)
            except BaseException:
                self.close()
                raise
        if direct and hasattr(os, "O_DIRECT"):
            try:
                self.direct_fd = os.open(self.path, os.O_WRONLY | os.O_DIRECT)
            except OSError as err:
                if err.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    self.close()
                    raise

    @property
    def direct_io(self) -> bool:
        """Whether whole pages still go past the page cache (False: never asked, or the OS refused)."""
        return self.direct_fd is not None

    def write(self, start_row: int, rows: np.ndarray) -> None:
        if rows.dtype != self.dtype or rows.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path.name}: rows of {rows.dtype}{rows.shape[1:]} do not fit {self.dtype}{self.shape[1:]}")
        if start_row < 0 or start_row + rows.shape[0] > self.shape[0]:
            raise ValueError(f"{self.path.name}: rows {start_row}..{start_row + rows.shape[0]} outside 0..{self.shape[0]}")
        data, offset = np.ascontiguousarray(rows).data.cast("B"), len(self.header) + start_row * self.row_bytes
        first, end = -(-offset // PAGE) * PAGE, (offset + data.nbytes) // PAGE * PAGE  # the whole pages inside
        if self.direct_fd is not None and end - first >= DIRECT_MIN_BYTES and self._write_direct(data[first - offset:end - offset], first):
            _pwrite_all(self.fd, data[:first - offset], offset)  # the partial page at each end
            _pwrite_all(self.fd, data[end - offset:], end)
        else:
            _pwrite_all(self.fd, data, offset)

    def _write_direct(self, data: memoryview, offset: int) -> bool:
        """Whole pages past the page cache, STAGING_BYTES at a time through this thread's page-aligned buffer;
        False (and the page cache from now on) where the OS refuses."""
        buffer = getattr(_staging, "buffer", None)
        if buffer is None:
            buffer = _staging.buffer = mmap.mmap(-1, STAGING_BYTES)  # anonymous maps are page-aligned
        with memoryview(buffer) as staging:
            for start in range(0, data.nbytes, STAGING_BYTES):
                piece = data[start:start + STAGING_BYTES]
                staged = staging[:piece.nbytes]
                staged[:] = piece
                try:
                    _pwrite_all(self.direct_fd, staged, offset + start)
                except OSError as err:
                    if err.errno != errno.EINVAL:  # EINVAL: an alignment this filesystem does not take
                        raise
                    os.close(self.direct_fd)
                    self.direct_fd = None
                    return False
                finally:
                    staged.release()
        return True

    def close(self) -> None:
        for name in ("direct_fd", "fd"):
            if getattr(self, name, None) is not None:
                os.close(getattr(self, name))
                setattr(self, name, None)


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data)
    while view.nbytes:  # pwrite may write less than asked (signals, quotas)
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _reserve(fd: int, nbytes: int) -> None:
    if nbytes == 0:
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except AttributeError:  # no posix_fallocate (macOS): a sparse file of the right size
        os.ftruncate(fd, nbytes)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)):
            os.ftruncate(fd, nbytes)
        else:
            raise
