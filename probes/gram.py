"""Per-fold Gram sums read in row chunks: grouped-CV ridge over a whole store in flat memory.

    sums = FoldSums.accumulate(X, rows, fold, Y, n_folds)   # one pass over X[rows], chunk by chunk
    gram, x_sum, xy, y_sum, n = sums.train(f)               # every row outside fold f
    r2 = sums.validation_r2(f, W_raw, offset)              # fold f's R² for every (alpha, target)
    res = cv_ridge_streamed(X, rows, fold, Y, n_folds, alphas)   # what probes.ridge.cv_ridge returns

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

from collections.abc import Hashable

from dataclasses import dataclass

import numpy as np
from scipy.linalg import eigh

from probes.splits import non_finite_error

DEFAULT_CHUNK_ROWS = 32_768  # 32k rows x 128 features in float64 = 32 MiB per chunk
_EPS = np.finfo(np.float64).eps


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

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """(gram, x_sum, xy, y_sum, n) over every row."""
        return self.gram.sum(0), self.x_sum.sum(0), self.xy.sum(0), self.y_sum.sum(0), float(self.n.sum())

    def train(self, f: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
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


# ----------------------------------------------------------------------------- the primal route
def scale_from_var(var: np.ndarray, mean: np.ndarray, n: float, standardize: bool) -> np.ndarray:
    """StandardScaler's scale: sqrt(var), with near-constant features (its own bound) set to 1."""
    if not standardize:
        return np.ones_like(var)
    var = np.maximum(var, 0.0)
    constant = var <= n * _EPS * var + (n * mean * _EPS) ** 2
    return np.where(constant, 1.0, np.sqrt(var))


def primal_solutions(gram: np.ndarray, x_sum: np.ndarray, xy: np.ndarray, y_sum: np.ndarray, n: float,
                     alphas: np.ndarray, standardize: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All-alpha ridge weights from raw training sums (features already globally shifted).

    gram: (p, p) = X'X, x_sum: (p,), xy: (p, k) = X'Y, y_sum: (k,).
    Returns W (p, n_alphas, k) on standardised features, feature mean (p,), scale (p,), y mean (k,).
    """
    mean = x_sum / n
    cov = gram - n * np.outer(mean, mean)  # centred Gram = sum of (x - mean)(x - mean)'
    scale = scale_from_var(np.diag(cov) / n, mean, n, standardize)
    z_gram = cov / np.outer(scale, scale)
    z_y = (xy - np.outer(mean, y_sum)) / scale[:, None]  # Z'(y - ybar) = (X - mean)'y
    lam, V = eigh(z_gram, overwrite_a=True, check_finite=False, driver="evd")
    proj = V.T @ z_y  # (p, k)
    W = np.einsum("pq,qak->pak", V, proj[:, None, :] / (lam[:, None, None] + alphas[None, :, None]))
    return W, mean, scale, y_sum / n


def cv_ridge_streamed(X, rows, fold, Y, n_splits, alphas, standardize: bool = True, chunk_rows=DEFAULT_CHUNK_ROWS, name: Hashable = "X"):
    """``cv_ridge`` (primal route) from per-fold sums read in chunks of ``X[rows]``: same results, flat memory.

    Parameters
    ----------
    X : array-like of shape (n, p), indexable by rows (ndarray, np.memmap, ConcatenatedRows)
    rows : ndarray of shape (n_train,), sorted row indices of X to train on
    fold : ndarray of shape (n_train,), the CV fold of each of those rows
    Y : ndarray of shape (n_train, k), float64, aligned with rows
    name : the feature set's name in error messages
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    sums = FoldSums.accumulate(X, rows, fold, Y, n_splits, chunk_rows)
    if sums.non_finite:
        raise non_finite_error(name, sums.non_finite)
    fold_scores = np.empty((n_splits, alphas.size, Y.shape[1]))
    for f in range(n_splits):
        W, mean, scale, y_mean = primal_solutions(*sums.train(f), alphas, standardize)
        W_raw = W / scale[:, None, None]
        offset = y_mean - np.einsum("p,pak->ak", mean, W_raw)  # prediction = x W_raw + offset (shifted x, y)
        fold_scores[f] = sums.validation_r2(f, W_raw, offset)
    W, mean, scale, y_mean = primal_solutions(*sums.totals(), alphas, standardize)
    cv_scores = fold_scores.mean(axis=0)
    best = np.argmax(cv_scores, axis=0)  # first maximum, like GridSearchCV's rank_test_score == 1
    return {
        "fold_scores": fold_scores,
        "cv_scores": cv_scores,
        "best": best,
        "coef": W[:, best, np.arange(Y.shape[1])],
        "intercept": y_mean + sums.y_shift,
        "mean": mean + sums.x_shift,
        "scale": scale,
    }


def predict_rows(X, rows, res, chunk_rows, name) -> np.ndarray:
    """Predictions (len(rows), k) of the fitted ``res`` for ``X[rows]``, read in chunks (rows in any order)."""
    rows = np.asarray(rows, dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    pred = np.empty((len(rows), res["coef"].shape[1]))
    bad = 0
    for part in chunks(len(rows), chunk_rows):
        block = read_rows(X, rows[order[part]])
        finite = np.isfinite(block)
        bad += int(block.size - np.count_nonzero(finite))
        pred[order[part]] = ((block - res["mean"]) / res["scale"]) @ res["coef"] + res["intercept"]
    if bad:
        raise non_finite_error(name, bad)
    return pred
