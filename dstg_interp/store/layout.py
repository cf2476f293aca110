"""Store layout (format 2): each stream is written once; a concatenated array is served on read.

    derived = derived_parts(targets)       # {"3/full": ["3/sem", "3/ap"], ...}: no file for these keys
    full = ConcatenatedRows([sem, ap])     # [n_tokens, d_sem + d_ap], rows read only when indexed
    full[rows], full[1000:2000], np.asarray(full)

Format 1 wrote DSTG ``full`` = [sem | ap] as a third file beside ``sem`` and ``ap``: the same bytes
twice, plus a concatenation per batch, which held extraction at ~0.7x the plain forward. Format 2
records such an array in the manifest as ``{"parts": ["3/sem", "3/ap"], "shape": ..., "dtype": ...}``
without a file, and the reader returns a ConcatenatedRows over the two memory-mapped parts, so reading
rows of ``full`` reads exactly the bytes it did from one file. An array is derived only when every part
is stored: ``full`` asked for without ``sem`` and ``ap`` is still written as its own file.
"""

from __future__ import annotations

import numpy as np


def derived_parts(targets) -> dict[str, list[str]]:
    """{key of an array served as a concatenation: keys of the stored arrays it is made of, in order}."""
    single = {target.hooks[0]: target.key for target in targets if len(target.hooks) == 1}
    return {target.key: [single[hook] for hook in target.hooks] for target in targets
            if len(target.hooks) > 1 and all(hook in single for hook in target.hooks)}


class ConcatenatedRows:
    """A read-only [n, d_1 + d_2 + ...] array made of 2-D arrays side by side, read lazily.

    Indexing takes rows first (an int, a slice, an index array or a boolean mask), optionally followed
    by a column index, and returns an ndarray holding only those rows; ``np.asarray(view)`` reads all.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        if not self.parts or any(part.ndim != 2 or len(part) != len(self.parts[0]) for part in self.parts):
            raise ValueError("ConcatenatedRows needs 2-D parts with the same number of rows")
        self.shape = (len(self.parts[0]), sum(part.shape[1] for part in self.parts))
        self.dtype = np.result_type(*(part.dtype for part in self.parts))
        self.ndim = 2

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ConcatenatedRows(shape={self.shape}, dtype={self.dtype}, parts={len(self.parts)})"

    def __getitem__(self, key):
        rows, columns = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if rows is Ellipsis or rows is None or len(columns) > 1:
            raise IndexError("index ConcatenatedRows as [rows] or [rows, columns]")
        out = np.concatenate([np.asarray(part[rows]) for part in self.parts], axis=-1)
        if columns:
            out = out[(slice(None),) * (out.ndim - 1) + columns]
        return out

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)

    def __iter__(self):
        for start in range(0, len(self), 4096):
            yield from self[start:start + 4096]
