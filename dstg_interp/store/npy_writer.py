"""A .npy file of known shape, reserved on disk up front and filled block by block.

    writer = NpyWriter("layer03_sem.npy", shape=(n_tokens, 112), dtype=np.float16)
    writer.write(start_row, rows)          # rows: [k, 112], goes to rows start_row .. start_row+k-1
    writer.close()
    states = np.load("layer03_sem.npy", mmap_mode="r")
    NpyWriter(path, shape, dtype, create=False)   # open a file another process created, to fill other rows

Why pwrite and not a writable np.memmap: pages dirtied through a mapping count in the process's RSS
until the kernel writes them back, so a memmap-filled store makes peak RSS grow with the number of
tokens. Plain writes go through the page cache, which is not charged to the process.
The space is reserved with posix_fallocate, so a full disk fails at the start with ENOSPC instead of
half-way through (where the OS supports it; otherwise the file is sparse and a later write fails).
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import numpy as np


class NpyWriter:
    def __init__(self, path: str | Path, shape: tuple[int, ...], dtype, create: bool = True):
        self.path, self.shape, self.dtype = Path(path), tuple(int(x) for x in shape), np.dtype(dtype)
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape})
        self.header = header.getvalue()
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.nbytes = len(self.header) + self.shape[0] * self.row_bytes
        if not create:  # rows of a sharded extraction: the file is already reserved and has its header
            self.fd = os.open(self.path, os.O_WRONLY)
            if os.fstat(self.fd).st_size != self.nbytes:
                self.close()
                raise ValueError(f"{self.path.name}: {os.path.getsize(self.path)} bytes, expected {self.nbytes}")
            return
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _reserve(self.fd, self.nbytes)
            self._pwrite(self.header, 0)
        except BaseException:
            self.close()
            raise

    def write(self, start_row: int, rows: np.ndarray) -> None:
        if rows.dtype != self.dtype or rows.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path.name}: rows of {rows.dtype}{rows.shape[1:]} do not fit {self.dtype}{self.shape[1:]}")
        if start_row < 0 or start_row + rows.shape[0] > self.shape[0]:
            raise ValueError(f"{self.path.name}: rows {start_row}..{start_row + rows.shape[0]} outside 0..{self.shape[0]}")
        self._pwrite(np.ascontiguousarray(rows).data.cast("B"), len(self.header) + start_row * self.row_bytes)

    def _pwrite(self, data, offset: int) -> None:
        view = memoryview(data)
        while view.nbytes:  # pwrite may write less than asked (signals, quotas)
            written = os.pwrite(self.fd, view, offset)
            view, offset = view[written:], offset + written

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


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
