"""Per-fold Gram sums read in row chunks: grouped-CV ridge over a whole store in flat memory.

    sums = FoldSums.accumulate(X, rows, fold, Y, n_folds)   # one pass over X[rows], chunk by chunk
    gram, x_sum, xy, y_sum, n = sums.train(f)               # every row outside fold f
    r2 = sums.validation_r2(f, W_raw, offset)              # fold f's R² for every (alpha, target)
    res = cv_ridge_streamed(X, rows, fold, Y, n_folds, alphas)   # a RidgeFit, as probes.ridge.cv_ridge

Every quantity grouped CV needs is a sum over rows. Per fold f: n_f, X_f'X_f, X_f'1, X_f'Y_f, Y_f'1 and
Σy² per target. The training sums of fold f are the totals minus fold f's, and the squared error of the
predictions x'w + c on fold f is

    SSE = w'G_f w + 2c w's_f - 2 w'X_f'y + n_f c² - 2c Σy + Σy²,

so the validation R² of every alpha needs no second pass over X. Memory is O(chunk_rows x p + n_folds x p²),
flat in the number of rows (the row indices, folds and targets are O(n) vectors of scalars, not of
features). X is anything indexed by rows: an ndarray, an np.memmap of a store, a ConcatenatedRows.
Features are shifted by the mean of the first chunk and targets by their mean before summing: a shift
changes no fit, and near-centred sums keep X'X - n mean mean' from cancelling catastrophically.
``held_out=True`` adds the test rows as one more part (never trained on; its sums give the test R²), and
``device`` forms the sums with torch there (a GPU); ``probes.grid`` shares one pass between column blocks.
"""

from __future__ import annotations

import mmap
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import torch

from probes.lapack import Tridiagonal, solve_positive_definite
from probes.splits import non_finite_error

DEFAULT_CHUNK_ROWS = 32_768  # 32k rows x 128 features in float64 = 32 MiB per chunk
_EPS = np.finfo(np.float64).eps


def read_rows(X, rows: np.ndarray) -> np.ndarray:
    """X[rows] (sorted rows) in float64; a dense run of rows is read as one block, then selected."""
    out = np.empty((len(rows), X.shape[1]))
    if len(rows):
        fill_rows(X, rows, np.arange(len(rows)), out)
    return out


def chunks(n: int, chunk_rows: int):
    for start in range(0, n, chunk_rows):
        yield slice(start, min(start + chunk_rows, n))


def fill_rows(X, rows: np.ndarray, order: np.ndarray, out: np.ndarray) -> None:
    """out[:] = X[rows[order]] upcast, read straight into ``out`` (no concatenated or float64 temporary).

    ``rows`` sorted; a dense run of rows (a store minus its special tokens) is read as one block, and a
    ConcatenatedRows (DSTG ``full``) part by part into its columns."""
    parts = getattr(X, "parts", None) or [X]
    picked = rows[order]
    first, last = int(rows[0]), int(rows[-1])
    dense = last - first + 1 <= 2 * len(rows)
    start = 0
    for part in parts:
        width = part.shape[1]
        out[:, start:start + width] = part[first:last + 1][picked - first] if dense else part[picked]
        start += width
        release_pages(part)


def release_pages(array) -> None:
    """Drop the pages of a read-only memory map that this process has read from its resident set.

    They stay in the page cache (a second pass reads them from memory), but are no longer counted in
    this process's RSS: a pass over a whole store then holds one chunk, not the store's mapped pages."""
    mapping = getattr(array, "_mmap", None)  # np.memmap's mmap.mmap (None for plain arrays)
    if getattr(array, "mode", None) != "r":  # never a writable or copy-on-write map: its edits would be lost
        return
    if mapping is not None and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mapping.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):  # a closed or unusual mapping: keep the pages, lose nothing
            pass


class _Device:
    """Where the O(n p²) sums are formed: numpy (BLAS syrk) or torch on ``device`` (e.g. "cuda").

    The sums are float64 on either; they come back to numpy at the end (the solves are p x p)."""

    def __init__(self, device):
        self.torch = device is not None
        self.device = torch.device(device) if self.torch else None

    def from_host(self, block: np.ndarray):
        return torch.from_numpy(block).to(self.device) if self.torch else block

    def zeros(self, *shape):
        return torch.zeros(shape, dtype=torch.float64, device=self.device) if self.torch else np.zeros(shape)

    def numpy(self, values) -> np.ndarray:
        return values.cpu().numpy() if self.torch else values


@dataclass
class FoldSums:
    n: np.ndarray  # (P,)  P = n_folds, or n_folds + 1 with a held-out part
    gram: np.ndarray  # (P, p, p)
    x_sum: np.ndarray  # (P, p)
    xy: np.ndarray  # (P, p, k)
    y_sum: np.ndarray  # (P, k)
    yy: np.ndarray  # (P, k)  Σy² per target
    x_shift: np.ndarray  # (p,)  subtracted from every feature row before summing
    y_shift: np.ndarray  # (k,)  subtracted from every target row
    non_finite_columns: np.ndarray  # (p,) NaN/inf feature values seen per column (the sums are then meaningless)
    n_folds: int  # the CV folds: parts 0..n_folds-1; part n_folds (if any) is held out, never trained on

    @property
    def non_finite(self) -> int:
        return int(self.non_finite_columns.sum())

    @classmethod
    def accumulate(cls, X, rows, fold, Y, n_folds: int, chunk_rows: int = DEFAULT_CHUNK_ROWS, device=None,
                   held_out: bool = False) -> "FoldSums":
        """Sums over ``X[rows]`` per fold; ``rows`` sorted, ``fold[i]`` and ``Y[i]`` belong to rows[i].

        ``fold[i]`` is in 0..n_folds-1, or n_folds for a held-out row when ``held_out`` (its sums give the
        test R² without a second pass). ``device``: None for numpy, else a torch device for the sums.

        Each chunk is laid out as [x - shift | y - y_shift | 1] with each fold's rows contiguous, so one
        symmetric product per fold gives X'X, X'y, y'y, X'1, y'1 and n at once."""
        rows, fold = np.asarray(rows, dtype=np.int64), np.asarray(fold, dtype=np.int64)
        Y = np.asarray(Y, dtype=np.float64).reshape(len(rows), -1)
        p, k, parts = X.shape[1], Y.shape[1], n_folds + int(held_out)
        y_shift = Y.mean(axis=0)
        on = _Device(device)
        width = p + k + 1
        augmented = on.zeros(parts, width, width)
        bad = np.zeros(p, dtype=np.int64)
        x_shift = None
        buffer = np.empty((min(chunk_rows, max(len(rows), 1)), width))
        for part in chunks(len(rows), chunk_rows):
            order = np.argsort(fold[part], kind="stable")  # each fold one run of rows, in store order within it
            bounds = np.searchsorted(fold[part][order], np.arange(parts + 1))
            block = buffer[:part.stop - part.start]
            fill_rows(X, rows[part], order, block)
            features = block[:, :p]
            column_sums = features.sum(axis=0)  # NaN/inf anywhere in a column shows here, at no extra pass
            if not np.isfinite(column_sums).all():
                finite = np.isfinite(features)
                bad += (~finite).sum(axis=0)
                features[~finite] = 0.0  # keep the sums finite; the caller raises on non_finite
                column_sums = features.sum(axis=0)
            if x_shift is None:
                x_shift = column_sums / len(block)
            features -= x_shift
            block[:, p:p + k] = Y[part][order] - y_shift
            block[:, -1] = 1.0
            on_device = on.from_host(block)
            for f in range(parts):
                if bounds[f] < bounds[f + 1]:
                    x = on_device[bounds[f]:bounds[f + 1]]
                    augmented[f] += x.T @ x  # numpy: one syrk (x.T and x share memory)
        augmented = on.numpy(augmented)
        diagonal = np.arange(p, p + k)
        return cls(n=augmented[:, -1, -1].copy(), gram=augmented[:, :p, :p].copy(), x_sum=augmented[:, :p, -1].copy(),
                   xy=augmented[:, :p, p:p + k].copy(), y_sum=augmented[:, p:p + k, -1].copy(),
                   yy=augmented[:, diagonal, diagonal].copy(), x_shift=np.zeros(p) if x_shift is None else x_shift,
                   y_shift=y_shift, non_finite_columns=bad, n_folds=n_folds)

    def columns(self, columns) -> "FoldSums":
        """The sums of the feature set made of ``columns`` of X (a slice or index array): no pass over X."""
        index = np.arange(self.gram.shape[1])[columns]
        return FoldSums(n=self.n, gram=self.gram[:, index[:, None], index], x_sum=self.x_sum[:, index],
                        xy=self.xy[:, index], y_sum=self.y_sum, yy=self.yy, x_shift=self.x_shift[index],
                        y_shift=self.y_shift, non_finite_columns=self.non_finite_columns[index], n_folds=self.n_folds)

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """(gram, x_sum, xy, y_sum, n) over every training row (the CV folds, not a held-out part)."""
        F = self.n_folds
        return (self.gram[:F].sum(0), self.x_sum[:F].sum(0), self.xy[:F].sum(0), self.y_sum[:F].sum(0),
                float(self.n[:F].sum()))

    def train(self, f: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """(gram, x_sum, xy, y_sum, n) over the rows outside fold ``f``."""
        gram, x_sum, xy, y_sum, n = self.totals()
        return gram - self.gram[f], x_sum - self.x_sum[f], xy - self.xy[f], y_sum - self.y_sum[f], n - self.n[f]

    def validation_r2(self, f: int, W_raw: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """R² on fold ``f`` of predictions x'W_raw[:, a, j] + offset[a, j] (shifted coordinates): (n_alphas, k).

        As sklearn's r2_score with force_finite: a constant validation target scores 1 if predicted
        exactly, else 0."""
        gram, x_sum, xy, y_sum, yy, n = self.gram[f], self.x_sum[f], self.xy[f], self.y_sum[f], self.yy[f], self.n[f]
        # W' G W per (alpha, target): G's product with every weight vector at once (one BLAS call), then the
        # diagonal terms (a three-operand einsum runs as a plain C loop over p x p x alphas x targets, no BLAS)
        quadratic = np.einsum("pak,pak->ak", W_raw, (gram @ W_raw.reshape(len(gram), -1)).reshape(W_raw.shape))
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


def standardized_sums(gram: np.ndarray, x_sum: np.ndarray, xy: np.ndarray, y_sum: np.ndarray, n: float,
                      standardize: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The training sums on standardised features z = (x - mean) / scale, from raw sums (features already
    globally shifted): (Z'Z, Z'(y - ybar), feature mean (p,), scale (p,), y mean (k,)).

    gram: (p, p) = X'X, x_sum: (p,), xy: (p, k) = X'Y, y_sum: (k,)."""
    mean = x_sum / n
    cov = gram - n * np.outer(mean, mean)  # centred Gram = sum of (x - mean)(x - mean)'
    scale = scale_from_var(np.diag(cov) / n, mean, n, standardize)
    z_gram = cov / np.outer(scale, scale)
    z_y = (xy - np.outer(mean, y_sum)) / scale[:, None]  # Z'(y - ybar) = (X - mean)'y
    return z_gram, z_y, mean, scale, y_sum / n


def primal_solutions(gram: np.ndarray, x_sum: np.ndarray, xy: np.ndarray, y_sum: np.ndarray, n: float,
                     alphas: np.ndarray, standardize: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All-alpha ridge weights from raw training sums (features already globally shifted), as
    ``standardized_sums`` takes them.

    Returns W (p, n_alphas, k) on standardised features, feature mean (p,), scale (p,), y mean (k,).
    """
    z_gram, z_y, mean, scale, y_mean = standardized_sums(gram, x_sum, xy, y_sum, n, standardize)
    return ridge_path(z_gram, z_y, alphas), mean, scale, y_mean


def ridge_path(z_gram: np.ndarray, z_y: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """(Z'Z + alpha I)⁻¹ Z'y for every alpha: (p, n_alphas, k).

    From one tridiagonal reduction Z'Z = Q T Q' (``probes.lapack``): (Z'Z + alpha I)⁻¹ = Q (T + alpha I)⁻¹ Q',
    and each (T + alpha I)⁻¹ is O(p) per target. That is the first stage of an eigendecomposition without the
    eigenvectors, a third of its time at width 768, and as accurate (both are backward stable; the weights agree
    to the rounding the Gram's conditioning allows). Where T + alpha I is not numerically positive definite (an
    alpha at the rounding of a singular Gram) the eigendecomposition gives the weights, as it always did."""
    try:
        reduced = Tridiagonal.of(z_gram)
        rotated = reduced.rotate(z_y)  # Q'Z'y
        shrunk = np.stack([reduced.solve_shifted(alpha, rotated) for alpha in alphas], axis=1)  # (p, n_alphas, k)
        return reduced.unrotate(shrunk.reshape(len(z_gram), -1)).reshape(shrunk.shape)
    except np.linalg.LinAlgError:
        return eigen_ridge_path(z_gram, z_y, alphas)


def eigen_ridge_path(z_gram: np.ndarray, z_y: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``ridge_path`` from the eigendecomposition Z'Z = V diag(lam) V': W = V diag(1/(lam + alpha)) V'Z'y."""
    # numpy's eigh (LAPACK's syevd) lets go of the GIL, scipy's wrapper does not (probes.grid.solve_each)
    lam, V = np.linalg.eigh(z_gram)
    proj = V.T @ z_y  # (p, k)
    shrunk = proj[:, None, :] / (lam[:, None, None] + alphas[None, :, None])  # (p, n_alphas, k)
    return (V @ shrunk.reshape(len(V), -1)).reshape(shrunk.shape)


def primal_refit(gram: np.ndarray, x_sum: np.ndarray, xy: np.ndarray, y_sum: np.ndarray, n: float,
                 target_alphas: np.ndarray, standardize: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ridge weights at one alpha per target (``target_alphas`` (k,): each target's chosen alpha), from raw
    training sums as ``primal_solutions`` takes them: (coef (p, k), feature mean, scale, y mean).

    The refit on every training row needs no alpha grid, so one Cholesky solve per distinct alpha takes the place
    of an eigendecomposition (a tenth of its time at width 768); the eigendecomposition where Z'Z + alpha I is not
    numerically positive definite."""
    z_gram, z_y, mean, scale, y_mean = standardized_sums(gram, x_sum, xy, y_sum, n, standardize)
    coef = np.empty_like(z_y)
    for alpha in np.unique(target_alphas):
        targets = target_alphas == alpha
        try:
            coef[:, targets] = solve_positive_definite(z_gram, z_y[:, targets], shift=alpha)
        except np.linalg.LinAlgError:
            coef[:, targets] = eigen_ridge_path(z_gram, z_y[:, targets], np.array([alpha]))[:, 0]
    return coef, mean, scale, y_mean


@dataclass
class RidgeFit:
    """One feature set's grouped-CV ridge over an alpha grid and its refit on every training row: what
    ``probes.ridge.cv_ridge``, ``cv_ridge_streamed`` and ``solve_folds`` return.  For ``n_splits`` folds,
    ``n_alphas`` penalties, ``p`` features and ``k`` targets:"""

    fold_scores: np.ndarray  # (n_splits, n_alphas, k): R² on each fold's held-out rows
    cv_scores: np.ndarray  # (n_alphas, k): their mean over folds
    best: np.ndarray  # (k,): each target's best alpha (index; the first maximum, as GridSearchCV)
    coef: np.ndarray  # (p, k): the refit's weights on standardised features, at each target's best alpha
    intercept: np.ndarray  # (k,)
    mean: np.ndarray  # (p,): the features' mean ...
    scale: np.ndarray  # (p,): ... and scale (1 without standardisation): x -> (x - mean) / scale
    test_r2: np.ndarray | None = None  # (k,): R² on the test rows, once they are scored

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n, k) predictions of ``X`` (n, p) at each target's best alpha."""
        return ((X - self.mean) / self.scale) @ self.coef + self.intercept


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
    sums = FoldSums.accumulate(X, rows, fold, Y, n_splits, chunk_rows)
    if sums.non_finite:
        raise non_finite_error(name, sums.non_finite)
    return solve_folds(sums, np.asarray(alphas, dtype=np.float64), standardize)


def solve_folds(sums: FoldSums, alphas: np.ndarray, standardize: bool) -> RidgeFit:
    """Grouped-CV ridge from one feature set's sums: a RidgeFit, with the held-out part's ``test_r2`` (NaN without
    one).

    Each fold's validation R² for every alpha and target comes from one tridiagonal reduction of its training
    Gram (``ridge_path``); the refit on every training row from one Cholesky solve per chosen alpha
    (``primal_refit``)."""
    n_splits, k = sums.n_folds, sums.y_sum.shape[1]
    fold_scores = np.empty((n_splits, alphas.size, k))
    for f in range(n_splits):
        W, mean, scale, y_mean = primal_solutions(*sums.train(f), alphas, standardize)
        W_raw = W / scale[:, None, None]
        offset = y_mean - np.einsum("p,pak->ak", mean, W_raw)  # prediction = x W_raw + offset (shifted x, y)
        fold_scores[f] = sums.validation_r2(f, W_raw, offset)
    cv_scores = fold_scores.mean(axis=0)
    best = np.argmax(cv_scores, axis=0)  # first maximum, like GridSearchCV's rank_test_score == 1
    coef, mean, scale, y_mean = primal_refit(*sums.totals(), alphas[best], standardize)
    return RidgeFit(fold_scores, cv_scores, best, coef, intercept=y_mean + sums.y_shift, mean=mean + sums.x_shift,
                    scale=scale, test_r2=held_out_r2(sums, coef, mean, scale, y_mean))


def held_out_r2(sums: FoldSums, coef, mean, scale, y_mean) -> np.ndarray:
    """Test R² per target from the held-out part's sums (NaN for a constant test target, as before)."""
    if sums.gram.shape[0] == sums.n_folds or sums.n[-1] == 0:  # no held-out part, or no test rows
        return np.full(coef.shape[1], np.nan)
    W_raw = (coef / scale[:, None])[:, None, :]  # (p, 1, k)
    offset = (y_mean - mean @ W_raw[:, 0, :])[None, :]
    r2 = sums.validation_r2(sums.n_folds, W_raw, offset)[0]
    yy, y_sum, n = sums.yy[-1], sums.y_sum[-1], sums.n[-1]
    constant = yy - y_sum**2 / n <= 1e-12 * np.maximum(yy, 1e-300)
    return np.where(constant, np.nan, r2)
