"""Per-fold Gram sums read in row chunks: grouped-CV ridge over a whole store in flat memory.

    sums = FoldSums.accumulate(X, rows, fold, Y, n_folds)   # one pass over X[rows], chunk by chunk
    gram, x_sum, xy, y_sum, n = sums.train(f)               # every row outside fold f
    r2 = sums.validation_r2(f, W_raw, offset)              # fold f's R² for every (alpha, target)

Every quantity grouped CV needs is a sum over rows. Per fold f: n_f, X_f'X_f, X_f'1, X_f'Y_f, Y_f'1 and
Σy² per target. The training sums of fold f are the totals minus fold f's, and the squared error of the
predictions x'w + c on fold f is

    SSE = w'G_f w + 2c w's_f - 2 w'X_f'y + n_f c² - 2c Σy + Σy²,

so the validation R² of every alpha needs no second pass over X. Memory is O(chunk_rows x p + n_folds x p²),
flat in the number of rows (the row indices, folds and targets are O(n) vectors of scalars, not of
features). X is anything indexed by rows: an ndarray, an np.memmap of a store, a ConcatenatedRows.
Features are shifted by the mean of the first chunk and targets by their mean before summing: a shift
changes no fit, and near-centred sums keep X'X - n mean mean' from cancelling catastrophically.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_CHUNK_ROWS = 32_768  # 32k rows x 128 features in float64 = 32 MiB per chunk


def read_rows(X, rows: np.ndarray) -> np.ndarray:
    """X[rows] (sorted rows) in float64; a dense run of rows is read as one block, then selected."""
    if len(rows) == 0:
        return np.empty((0, X.shape[1]))
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 <= 2 * len(rows):  # mostly contiguous (a store minus its special tokens): one read
        block = np.asarray(X[first:last + 1])
        return block[rows - first].astype(np.float64)
    return np.asarray(X[rows]).astype(np.float64)


def chunks(n: int, chunk_rows: int):
    for start in range(0, n, chunk_rows):
        yield slice(start, min(start + chunk_rows, n))


@dataclass
class FoldSums:
    n: np.ndarray  # (F,)
    gram: np.ndarray  # (F, p, p)
    x_sum: np.ndarray  # (F, p)
    xy: np.ndarray  # (F, p, k)
    y_sum: np.ndarray  # (F, k)
    yy: np.ndarray  # (F, k)  Σy² per target
    x_shift: np.ndarray  # (p,)  subtracted from every feature row before summing
    y_shift: np.ndarray  # (k,)  subtracted from every target row
    non_finite: int  # NaN/inf feature values seen (the sums are then meaningless)

    @classmethod
    def accumulate(cls, X, rows, fold, Y, n_folds: int, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> "FoldSums":
        """Sums over ``X[rows]`` per fold; ``rows`` sorted, ``fold[i]`` in 0..n_folds-1 and ``Y[i]`` belong to rows[i]."""
        rows, fold = np.asarray(rows, dtype=np.int64), np.asarray(fold)
        Y = np.asarray(Y, dtype=np.float64).reshape(len(rows), -1)
        p, k = X.shape[1], Y.shape[1]
        y_shift = Y.mean(axis=0)
        sums = cls(n=np.bincount(fold, minlength=n_folds).astype(np.float64), gram=np.zeros((n_folds, p, p)),
                   x_sum=np.zeros((n_folds, p)), xy=np.zeros((n_folds, p, k)), y_sum=np.zeros((n_folds, k)),
                   yy=np.zeros((n_folds, k)), x_shift=None, y_shift=y_shift, non_finite=0)
        for part in chunks(len(rows), chunk_rows):
            block = read_rows(X, rows[part])
            finite = np.isfinite(block)
            if not finite.all():
                sums.non_finite += int(block.size - np.count_nonzero(finite))
                block[~finite] = 0.0  # keep the sums finite; the caller raises on non_finite
            if sums.x_shift is None:
                sums.x_shift = block.mean(axis=0)
            block -= sums.x_shift
            targets = Y[part] - y_shift
            for f in np.unique(fold[part]):
                inside = fold[part] == f
                x, y = block[inside], targets[inside]
                sums.gram[f] += x.T @ x
                sums.x_sum[f] += x.sum(axis=0)
                sums.xy[f] += x.T @ y
                sums.y_sum[f] += y.sum(axis=0)
                sums.yy[f] += (y**2).sum(axis=0)
        if sums.x_shift is None:
            sums.x_shift = np.zeros(p)
        return sums

    def totals(self):
        """(gram, x_sum, xy, y_sum, n) over every row."""
        return self.gram.sum(0), self.x_sum.sum(0), self.xy.sum(0), self.y_sum.sum(0), float(self.n.sum())

    def train(self, f: int):
        """(gram, x_sum, xy, y_sum, n) over the rows outside fold ``f``."""
        gram, x_sum, xy, y_sum, n = self.totals()
        return gram - self.gram[f], x_sum - self.x_sum[f], xy - self.xy[f], y_sum - self.y_sum[f], n - self.n[f]

    def validation_r2(self, f: int, W_raw: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """R² on fold ``f`` of predictions x'W_raw[:, a, j] + offset[a, j] (shifted coordinates): (n_alphas, k).

        As sklearn's r2_score with force_finite: a constant validation target scores 1 if predicted
        exactly, else 0."""
        gram, x_sum, xy, y_sum, yy, n = self.gram[f], self.x_sum[f], self.xy[f], self.y_sum[f], self.yy[f], self.n[f]
        quadratic = np.einsum("pak,pq,qak->ak", W_raw, gram, W_raw)
        linear = np.einsum("pak,p->ak", W_raw, x_sum)
        cross = np.einsum("pak,pk->ak", W_raw, xy)
        sse = quadratic + 2 * offset * linear - 2 * cross + n * offset**2 - 2 * offset * y_sum + yy
        sse = np.maximum(sse, 0.0)  # rounding can take an exact fit a hair below 0
        sst = yy - y_sum**2 / n
        constant = sst <= 1e-12 * np.maximum(yy, 1e-300)  # all equal: only rounding residue is left
        with np.errstate(divide="ignore", invalid="ignore"):
            r2 = 1.0 - sse / sst
        return np.where(constant, np.where(sse <= 1e-12 * np.maximum(yy, 1e-300), 1.0, 0.0), r2)
