"""Batched ridge probes with grouped cross-validation over an alpha grid.

A position or structure probe is ridge regression from one activation subspace to one
per-token target. The penalty is chosen by grouped K-fold CV (groups = documents, so the
tokens of a document never sit on both sides of a fold), features are standardised inside
each training fold, and every alpha is scored from one factorisation per fold:

    primal (n > p):  Z'Z = Q T Q' (T tridiagonal)    w(alpha) = Q (T + alpha I)⁻¹ Q'Z'y
    dual   (p > n):  ZZ' = U diag(lam) U'            w(alpha) = Z'U diag(1/(lam + alpha)) U'y

(``probes.gram.ridge_path``: each (T + alpha I)⁻¹ is O(p), so every alpha costs what the reduction does, a
third of an eigendecomposition). The primal refit on every training row at the chosen alpha is one Cholesky
solve (``probes.gram.primal_refit``).

In the primal route the per-fold training Gram matrices come from per-fold sums
(train Gram = total Gram - validation-fold Gram), so the O(n p^2) work is done once per
feature set, not once per fold, and it is shared by every target and every alpha. Those sums
are read in row chunks (``probes.gram``) and the validation R² comes from them too, so a probe
over every token of a store holds one chunk of features at a time, never the whole X.
The dual route (p > n, small by definition) works on X in memory.

The CV score of an alpha is the *mean over folds of the per-fold R²* (each fold's R² uses
its own validation mean), which is what ``GridSearchCV(..., scoring="r2")`` reports as
``mean_test_score``; ties go to the first (smallest) alpha, as in ``GridSearchCV``.

    from probes import RidgeProbe, fit_ridge_grid
    probe = RidgeProbe().fit(X, y, groups=doc_ids)          # one feature set
    table = fit_ridge_grid({("L3", "sem"): X3}, {"pos": y}, doc_ids, train_idx, test_idx)
    table = fit_ridge_grid({("L3", "sem"): store.states(3, "sem")}, ...)   # a store's memmap: read in chunks
"""

from __future__ import annotations

from numpy.typing import ArrayLike
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.linalg import eigh
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import GroupKFold
from sklearn.utils.validation import check_is_fitted, validate_data

from probes.gram import (
    DEFAULT_CHUNK_ROWS,
    FoldSums,
    RidgeFit,
    cv_ridge_streamed,
    primal_refit,
    primal_solutions,
    scale_from_var,
    solve_folds,
)
from probes.grid import check_finite, grouped_by_source, load, predictions, solve_each
from probes.splits import (
    bootstrap_r2_ci,
    check_enough_groups,
    check_finite_features,
    check_nonconstant_target,
)

__all__ = ["RidgeProbe", "fit_ridge_grid", "DEFAULT_ALPHAS"]

DEFAULT_ALPHAS = tuple(np.logspace(-3, 5, 17))


# ----------------------------------------------------------------------------- folds and data
def grouped_fold_bounds(groups_train: ArrayLike, n_splits: int) -> tuple[np.ndarray, np.ndarray]:
    """Assign training tokens to ``GroupKFold(n_splits)`` folds and sort them by fold.

    Returns
    -------
    order : ndarray of shape (n_train,)
        Permutation of the training rows that makes every fold a contiguous block.
    bounds : ndarray of shape (n_splits + 1,)
        Block ``f`` is ``order[bounds[f]:bounds[f + 1]]``.
    """
    groups_train = np.asarray(groups_train)
    check_enough_groups(groups_train, n_splits)
    fold = np.empty(groups_train.size, dtype=np.int64)
    # Use sklearn's own assignment so folds equal those of GridSearchCV(cv=GroupKFold(n_splits)).
    for f, (_, val) in enumerate(GroupKFold(n_splits).split(np.empty((groups_train.size, 1)), groups=groups_train)):
        fold[val] = f
    order = np.argsort(fold, kind="stable")
    bounds = np.searchsorted(fold[order], np.arange(n_splits + 1))
    return order, bounds


def grouped_folds(groups_train: ArrayLike, n_splits: int) -> np.ndarray:
    """The ``GroupKFold(n_splits)`` fold (0..n_splits-1) of every training token, in its own row order."""
    order, bounds = grouped_fold_bounds(groups_train, n_splits)
    fold = np.empty(len(order), dtype=np.int64)
    for f in range(n_splits):
        fold[order[bounds[f] : bounds[f + 1]]] = f
    return fold


def _needs_dual(p: int, fold: np.ndarray, n_splits: int) -> bool:
    """True when some training fold has fewer rows than features (then X'X is singular)."""
    return p > len(fold) - np.bincount(fold, minlength=n_splits).max()


def _gather_float64(X, rows, chunk: int = 16384) -> np.ndarray:
    """Copy ``X[rows]`` into float64 in row chunks, so a float16 source is never upcast whole."""
    out = np.empty((len(rows), X.shape[1]), dtype=np.float64)
    for start in range(0, len(rows), chunk):
        out[start : start + chunk] = X[rows[start : start + chunk]]
    return out


def _fold_r2(y_val, pred):
    """R² of each (alpha, target) column on one validation fold, as sklearn's r2_score computes it.

    y_val: (n_val, k); pred: (n_val, n_alphas, k) -> (n_alphas, k)
    """
    sse = ((pred - y_val[:, None, :]) ** 2).sum(axis=0)
    sst = ((y_val - y_val.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = 1.0 - sse / sst
    # r2_score(force_finite=True): a constant validation target scores 1 if predicted exactly, else 0.
    return np.where(sst == 0, np.where(sse == 0, 1.0, 0.0), r2)


# ----------------------------------------------------------------------------- the solver
def _dual_solutions(X_train, Y_train, alphas, standardize):
    """All-alpha ridge weights via the n_train x n_train kernel, for p > n_train."""
    n = X_train.shape[0]
    mean = X_train.mean(axis=0)
    Z = X_train - mean
    scale = scale_from_var((Z**2).mean(axis=0), mean, n, standardize)
    Z /= scale
    y_mean = Y_train.mean(axis=0)
    lam, U = eigh(Z @ Z.T, overwrite_a=True, check_finite=False, driver="evd")
    proj = U.T @ (Y_train - y_mean)  # (n, k)
    dual = np.einsum("nm,mak->nak", U, proj[:, None, :] / (lam[:, None, None] + alphas[None, :, None]))
    W = np.einsum("np,nak->pak", Z, dual)
    return W, mean, scale, y_mean


def _predict_all(X, W, mean, scale, y_mean):
    """((X - mean) / scale) @ W + y_mean for every alpha, without forming the standardised X."""
    p, n_alphas, k = W.shape
    W_raw = (W / scale[:, None, None]).reshape(p, n_alphas * k)
    pred = X @ W_raw - mean @ W_raw
    return pred.reshape(len(X), n_alphas, k) + y_mean


def cv_ridge(X, Y, bounds, alphas, standardize: bool = True):
    """Grouped-CV ridge for one feature set and several targets, plus the refit on all rows.

    Parameters
    ----------
    X : ndarray of shape (n_train, p), float64, rows sorted by fold (modified in place)
    Y : ndarray of shape (n_train, k), float64, same row order
    bounds : ndarray of shape (n_splits + 1,)
        Fold ``f`` is rows ``bounds[f]:bounds[f + 1]``.
    alphas : ndarray of shape (n_alphas,)
    standardize : bool

    Returns
    -------
    RidgeFit (probes.gram): fold_scores (n_splits, n_alphas, k), cv_scores (n_alphas, k), best (k,) alpha
    indices, coef (p, k) on standardised features, intercept (k,), mean (p,), scale (p,).
    """
    n, p = X.shape
    n_splits = len(bounds) - 1
    alphas = np.asarray(alphas, dtype=np.float64)
    # A global shift keeps X'X - n mean mean' well conditioned; it does not change any fit.
    shift = X.mean(axis=0)
    X -= shift
    fold_scores = np.empty((n_splits, alphas.size, Y.shape[1]))
    folds = [slice(bounds[f], bounds[f + 1]) for f in range(n_splits)]
    use_dual = p > n - max(s.stop - s.start for s in folds)
    if use_dual:
        for f, val in enumerate(folds):
            train = np.r_[0 : val.start, val.stop : n]
            sol = _dual_solutions(X[train], Y[train], alphas, standardize)
            fold_scores[f] = _fold_r2(Y[val], _predict_all(X[val], *sol))
    else:
        grams = [X[s].T @ X[s] for s in folds]
        sums = [X[s].sum(axis=0) for s in folds]
        xys = [X[s].T @ Y[s] for s in folds]
        ysums = [Y[s].sum(axis=0) for s in folds]
        total = tuple(sum(parts) for parts in (grams, sums, xys, ysums))
        for f, val in enumerate(folds):
            n_train = n - (val.stop - val.start)
            sol = primal_solutions(
                total[0] - grams[f], total[1] - sums[f], total[2] - xys[f], total[3] - ysums[f],
                n_train, alphas, standardize,
            )
            fold_scores[f] = _fold_r2(Y[val], _predict_all(X[val], *sol))
    cv_scores = fold_scores.mean(axis=0)
    best = np.argmax(cv_scores, axis=0)  # first maximum, like GridSearchCV's rank_test_score == 1
    if use_dual:
        W, mean, scale, y_mean = _dual_solutions(X, Y, alphas, standardize)
        coef = W[:, best, np.arange(Y.shape[1])]
    else:
        coef, mean, scale, y_mean = primal_refit(total[0], total[1], total[2], total[3], n, alphas[best], standardize)
    return RidgeFit(fold_scores, cv_scores, best, coef, intercept=y_mean, mean=mean + shift, scale=scale)


def _test_r2(y_true, pred) -> np.ndarray:
    """R² per target column on the test rows; NaN where the test target is constant (or there is none)."""
    if len(y_true) == 0:
        return np.full(y_true.shape[1], np.nan)
    sst = ((y_true - y_true.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sst > 0, 1.0 - ((y_true - pred) ** 2).sum(axis=0) / sst, np.nan)


def _as_2d_target(y):
    y = np.asarray(y, dtype=np.float64)
    if y.ndim not in (1, 2):
        raise ValueError(f"y must be 1-D or 2-D, got shape {y.shape}")
    return y.reshape(len(y), -1), y.ndim == 1


# ----------------------------------------------------------------------------- estimator
class RidgeProbe(RegressorMixin, BaseEstimator):
    """Ridge probe whose penalty is chosen by grouped K-fold CV over an alpha grid.

    Parameters
    ----------
    alphas : sequence of float, default ``np.logspace(-3, 5, 17)``
        Penalty grid; the objective is ``||y - Zw - b||² + alpha ||w||²`` on standardised Z.
    n_splits : int, default 5
        Number of ``GroupKFold`` folds.
    standardize : bool, default True
        Standardise features inside each training fold (mean/std of the fold's train part).
        (No ``random_state``: ``GroupKFold`` assigns folds deterministically.)
    require_groups : bool, default True
        ``fit`` refuses to run without ``groups``; False lets ``groups=None`` mean one group per row (plain
        K-fold), the generic scikit-learn regressor (``tests/probes/test_ridge.py`` runs its estimator checks on it).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Weights on standardised features: ``predict(X) = ((X - mean_) / scale_) @ coef_.T + intercept_``.
    intercept_ : float or ndarray of shape (n_targets,)
        Unpenalised intercept (the training mean of y).
    alpha_ : float or ndarray of shape (n_targets,)
        Chosen penalty, per target.
    cv_scores_ : ndarray of shape (n_alphas,) or (n_alphas, n_targets)
        Mean over folds of the per-fold validation R² (GridSearchCV's ``mean_test_score``).
    cv_fold_scores_ : ndarray of shape (n_splits, n_alphas) or (n_splits, n_alphas, n_targets)
    mean_, scale_ : ndarray of shape (n_features,)
        Standardisation fitted on all training rows (scale_ is 1 when ``standardize=False``).
    """

    def __init__(self, alphas=DEFAULT_ALPHAS, *, n_splits: int = 5, standardize: bool = True,
                 require_groups: bool = True):
        self.alphas = alphas
        self.n_splits = n_splits
        self.standardize = standardize
        self.require_groups = require_groups

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # y of shape (n_samples, n_targets): one fit, one alpha per target
        tags.input_tags.allow_nan = False
        return tags

    def fit(self, X: ArrayLike, y: ArrayLike, groups: ArrayLike | None = None) -> RidgeProbe:
        """Choose alpha by grouped CV and refit on all rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), float16/32/64 (read in row chunks, never upcast whole)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        groups : array-like of shape (n_samples,)
            Document id of every token.  Required unless ``require_groups=False``; then None makes every row
            its own group (plain K-fold: the tokens of one document may fall on both sides of a fold, so the
            CV score is optimistic for token data; that is the generic estimator scikit-learn's checks test).
        """
        self._check_params()
        if groups is None and self.require_groups:
            raise ValueError("RidgeProbe.fit needs groups= (document id per token) for grouped CV; "
                             "RidgeProbe(require_groups=False) treats each row as its own group")
        # dtype kept (a float16 store is read in chunks below); NaN/inf are found chunk by chunk, in one line
        features, target = validate_data(self, X, y, dtype="numeric", ensure_all_finite=False, multi_output=True,
                             y_numeric=True, ensure_min_samples=2)
        Y, was_1d = _as_2d_target(target)
        group_ids = np.arange(len(features)) if groups is None else np.asarray(groups)
        if not (len(features) == len(Y) == len(group_ids)):
            raise ValueError(f"X, y and groups must have the same length, got {len(features)}, {len(Y)}, {len(group_ids)}")
        check_nonconstant_target(Y, "y")
        alphas = np.asarray(self.alphas, dtype=np.float64).ravel()
        fold = grouped_folds(group_ids, self.n_splits)
        if _needs_dual(features.shape[1], fold, self.n_splits):
            order, bounds = grouped_fold_bounds(group_ids, self.n_splits)
            Xf = _gather_float64(features, order)
            check_finite_features(Xf, "X")
            res = cv_ridge(Xf, Y[order], bounds, alphas, self.standardize)
        else:
            res = cv_ridge_streamed(features, np.arange(len(features)), fold, Y, self.n_splits, alphas, self.standardize)
        pick = (lambda a: a[..., 0]) if was_1d else (lambda a: a)
        self.cv_fold_scores_ = pick(res.fold_scores)
        self.cv_scores_ = pick(res.cv_scores)
        self.alpha_ = float(alphas[res.best[0]]) if was_1d else alphas[res.best]
        self.coef_ = res.coef[:, 0] if was_1d else res.coef.T.copy()
        self.intercept_ = float(res.intercept[0]) if was_1d else res.intercept
        self.mean_, self.scale_ = res.mean, res.scale
        return self

    def _check_params(self) -> None:
        """Hyper-parameters are checked in fit (scikit-learn's rule), each in one line."""
        alphas = np.asarray(self.alphas, dtype=np.float64).ravel()
        if alphas.size == 0 or not np.all(np.isfinite(alphas)) or np.any(alphas <= 0):
            raise ValueError(f"alphas must be a non-empty sequence of positive finite floats, got {self.alphas!r}")
        if isinstance(self.n_splits, bool) or not isinstance(self.n_splits, (int, np.integer)) or self.n_splits < 2:
            raise ValueError(f"n_splits must be an integer of at least 2, got {self.n_splits!r}")
        for name in ("standardize", "require_groups"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predict targets; returns shape (n_samples,) or (n_samples, n_targets)."""
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return ((X - self.mean_) / self.scale_) @ self.coef_.T + self.intercept_


# ----------------------------------------------------------------------------- batched grid
# Over 60 lines by its signature and numpy-style docstring alone (15 public keywords, each documented where a
# user looks); the body is three named stages: _GridRows.of, _fit_source (one pass per source), _grid_table.
def fit_ridge_grid(
    feature_sets: Mapping,
    targets: Mapping[str, ArrayLike],
    groups: ArrayLike,
    train_idx: ArrayLike,
    test_idx: ArrayLike,
    alphas: ArrayLike = DEFAULT_ALPHAS,
    n_splits: int = 5,
    standardize: bool = True,
    n_boot: int = 0,
    level: float = 0.95,
    seed: int = 0,
    keep_predictions: bool = True,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    device: str | None = None,
    progress: Callable[[int], object] | None = None,
) -> pd.DataFrame:
    """Fit a grouped-CV ridge probe for every (feature set, target) pair.

    One pass per feature source reads ``chunk_rows`` rows at a time and forms the Gram sums of every
    CV fold and of the test rows; feature sets given as ``probes.grid.Columns`` of one source (a
    DSTG layer's sem / ap / full: ``probes.grid.store_feature_sets``) share that pass. One
    tridiagonal reduction per (feature set, fold) then serves all targets and all alphas, and the test
    R² comes from the test rows' sums; a second pass over the test rows runs only for predictions
    (``keep_predictions``, ``n_boot``). Memory is flat in the number of tokens: pass a store's
    memory-mapped states whole, with ``train_idx``/``test_idx`` naming the rows to use.

    Parameters
    ----------
    feature_sets : Mapping[key, array of shape (n, p_key), zero-argument callable returning one, or Columns]
        E.g. ``{("layer3", "sem"): X}``; a callable (or an ``np.memmap``) loads lazily. Anything
        indexed by rows works (``ActivationStore.states`` returns such arrays). ``Columns(source, cols)``
        is a column block of ``source``; sets over the same source object are read in one pass.
    targets : Mapping[str, array of shape (n,)]
    groups : array of shape (n,)
        Document id per token.
    train_idx, test_idx : arrays of int
        Token indices of the train and test sides (e.g. from ``grouped_train_test_split``).
    alphas, n_splits, standardize
        As in :class:`RidgeProbe`.
    n_boot : int, default 0
        If > 0, add ``r2_ci_low``/``r2_ci_high``: document-bootstrap interval of test R².
    level, seed
        Coverage and seed of that interval.
    keep_predictions : bool, default True
        Keep the ``y_pred_test`` column (drop it, or pass False, before writing CSV).
    chunk_rows : int
        Rows of features read (and upcast to float64) at a time.
    device : str, optional
        None: the sums are formed with numpy (BLAS). A torch device ("cuda", "cpu"): each chunk, read and
        upcast on the host, is summed with torch there; the p x p solves stay on the host.
    progress : callable, optional
        Called with the number of feature sets done as each source is fitted, and with 1 as each set's
        bootstrap ends (``n_boot``): a bar's ``update`` over ``len(feature_sets) * (2 if n_boot else 1)``.

    Returns
    -------
    pandas.DataFrame
        One row per (key, target): key, target, alpha, cv_r2, cv_r2_sd (across folds),
        test_r2, n_features, n_train, n_test [, r2_ci_low, r2_ci_high] [, y_pred_test].
        ``y_pred_test`` holds each row's held-out predictions, an ndarray aligned with
        ``test_idx``, so ``bootstrap_r2_ci(y[test_idx], row.y_pred_test, groups[test_idx])``
        can be run later. (A column, not ``df.attrs``: pandas compares attrs on concat.)
    """
    rows = _GridRows.of(targets, groups, train_idx, test_idx, alphas, n_splits)
    want_predictions = keep_predictions or n_boot > 0
    fitted = {}
    for source, members in grouped_by_source(feature_sets):
        fitted.update(_fit_source(load(source), members, rows, standardize, chunk_rows, device, want_predictions))
        if progress is not None:
            progress(len(members))
    return _grid_table(feature_sets, fitted, rows, n_boot, level, seed, keep_predictions, progress)


@dataclass
class _GridRows:
    """The rows of one grid: the training rows in store order with their CV fold, the test rows, and one pass's
    order over both (the test rows are part ``n_splits``); targets as columns [n, n_targets] in ``names`` order."""

    names: list
    groups: np.ndarray
    train_idx: np.ndarray
    test_idx: np.ndarray
    alphas: np.ndarray
    n_splits: int
    rows_train: np.ndarray
    fold_train: np.ndarray
    Y_train: np.ndarray
    Y_test: np.ndarray
    rows_all: np.ndarray
    part_all: np.ndarray
    Y_all: np.ndarray

    @classmethod
    def of(cls, targets, groups, train_idx, test_idx, alphas, n_splits: int) -> "_GridRows":
        groups = np.asarray(groups)
        train_idx = np.asarray(train_idx, dtype=np.int64)
        test_idx = np.asarray(test_idx, dtype=np.int64)
        shared = np.intersect1d(groups[train_idx], groups[test_idx])
        if shared.size:
            raise ValueError(f"train and test share {shared.size} document(s) (e.g. {shared[0]!r}); split by whole groups")
        names = list(targets)
        Y = np.column_stack([np.asarray(targets[t], dtype=np.float64).ravel() for t in names])
        if len(Y) != len(groups):
            raise ValueError(f"targets have {len(Y)} rows but groups has {len(groups)}")
        check_nonconstant_target(Y[train_idx], names)
        fold = grouped_folds(groups[train_idx], n_splits)
        by_row = np.argsort(train_idx, kind="stable")  # read the training rows in store order
        rows_train, fold_train = train_idx[by_row], fold[by_row]
        Y_train, Y_test = Y[rows_train], Y[test_idx]
        # One pass per source over the training rows (each in its CV fold) and the test rows (one more part).
        rows_all = np.concatenate([rows_train, test_idx])
        by_store_row = np.argsort(rows_all, kind="stable")
        part_all = np.r_[fold_train, np.full(len(test_idx), n_splits)][by_store_row]
        return cls(names, groups, train_idx, test_idx, np.asarray(alphas, dtype=np.float64).ravel(), n_splits,
                   rows_train, fold_train, Y_train, Y_test, rows_all[by_store_row], part_all,
                   np.concatenate([Y_train, Y_test])[by_store_row])


def _fit_source(X, members, rows: _GridRows, standardize: bool, chunk_rows: int, device, want_predictions: bool) -> dict:
    """key -> (the CV fit with its ``test_r2``, the test predictions or None) for every set over one source ``X``."""
    if X.ndim != 2 or X.shape[0] != len(rows.groups):
        raise ValueError(f"feature set {members[0][0]!r} has shape {X.shape}; expected ({len(rows.groups)}, p)")
    fitted = {}
    if _needs_dual(X.shape[1], rows.fold_train, rows.n_splits):  # fewer rows than features: small, in memory
        order, bounds = grouped_fold_bounds(rows.groups[rows.rows_train], rows.n_splits)
        for key, columns in members:
            X_train = _gather_float64(X, rows.rows_train[order])[:, columns]
            X_test = _gather_float64(X, rows.test_idx)[:, columns]
            check_finite_features(X_train, key)
            check_finite_features(X_test, key)
            res = cv_ridge(X_train, rows.Y_train[order], bounds, rows.alphas, standardize)
            pred = res.predict(X_test)
            res.test_r2 = _test_r2(rows.Y_test, pred)
            fitted[key] = (res, pred)
        return fitted
    sums = FoldSums.accumulate(X, rows.rows_all, rows.part_all, rows.Y_all, rows.n_splits, chunk_rows, device,
                               held_out=True)

    def solve(member):
        key, columns = member
        block = sums.columns(columns)
        check_finite(block, key)
        return key, (columns, solve_folds(block, rows.alphas, standardize))

    fits = dict(solve_each(members, solve))  # DSTG's sem, ap and full of one layer side by side
    preds = predictions(X, rows.test_idx, fits, chunk_rows) if want_predictions else {}
    for key, (_, res) in fits.items():
        if key in preds:  # the R² of the predictions the table keeps (and the bootstrap resamples)
            res.test_r2 = _test_r2(rows.Y_test, preds[key])
        fitted[key] = (res, preds.get(key))
    return fitted


def _grid_table(feature_sets, fitted: dict, rows: _GridRows, n_boot: int, level: float, seed: int,
                keep_predictions: bool, progress) -> pd.DataFrame:
    """``fit_ridge_grid``'s table: one row per (key, target), with the bootstrap interval when ``n_boot``."""
    records = []
    for key in feature_sets:
        res, pred = fitted[key]
        for j, name in enumerate(rows.names):
            best = res.best[j]
            row = {
                "key": key,
                "target": name,
                "alpha": rows.alphas[best],
                "cv_r2": res.cv_scores[best, j],
                "cv_r2_sd": res.fold_scores[:, best, j].std(),
                "test_r2": res.test_r2[j],
                "n_features": res.coef.shape[0],
                "n_train": len(rows.train_idx),
                "n_test": len(rows.test_idx),
            }
            if n_boot:
                row["r2_ci_low"], row["r2_ci_high"] = bootstrap_r2_ci(
                    rows.Y_test[:, j], pred[:, j], rows.groups[rows.test_idx], n_boot=n_boot, level=level, seed=seed
                )
            if keep_predictions:
                row["y_pred_test"] = pred[:, j].copy()
            records.append(row)
        if progress is not None and n_boot:
            progress(1)
    return pd.DataFrame.from_records(records)
