"""Grouped splits, input checks and a document-level bootstrap for probe scores.

Tokens of one document share context, length and position structure, so every split
and every resample here works on whole groups (documents), never on single tokens.

    from probes.splits import grouped_train_test_split, bootstrap_r2_ci
    train_idx, test_idx = grouped_train_test_split(doc_ids, test_fraction=0.2, seed=0)
    low, high = bootstrap_r2_ci(y[test_idx], y_pred, doc_ids[test_idx], n_boot=1000)
"""

from __future__ import annotations

from numpy.typing import ArrayLike
from collections.abc import Hashable

import numpy as np

__all__ = [
    "grouped_train_test_split",
    "bootstrap_r2_ci",
    "bootstrap_r2_difference_ci",
    "check_fold_variance",
    "check_enough_groups",
    "check_finite_features",
    "check_nonconstant_target",
    "non_finite_error",
]


def check_enough_groups(groups: ArrayLike, n_splits: int, where: str = "training set") -> int:
    """Raise a one-line ``ValueError`` unless ``groups`` holds at least ``n_splits`` documents.

    Parameters
    ----------
    groups : array-like of shape (n_samples,)
        Document id of every token.
    n_splits : int
        Number of grouped cross-validation folds that will be cut from these groups.
    where : str
        Name of the data these groups belong to, used in the message.

    Returns
    -------
    n_groups : int
        Number of distinct groups.
    """
    n_groups = int(np.unique(np.asarray(groups)).size)
    if n_groups < n_splits:
        raise ValueError(
            f"grouped {n_splits}-fold CV needs at least {n_splits} documents in the {where}, "
            f"got {n_groups}; add documents or lower n_splits"
        )
    return n_groups


def check_finite_features(X: np.ndarray, name: Hashable = "features") -> None:
    """Raise a one-line ``ValueError`` naming the feature set if ``X`` holds NaN or inf.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    name : hashable
        Feature-set key (e.g. ``("layer3", "sem")``) to name in the message.
    """
    finite = np.isfinite(X)
    if not finite.all():
        raise non_finite_error(name, int(X.size - np.count_nonzero(finite)))


def non_finite_error(name: Hashable, count: int) -> ValueError:
    """The one-line error for ``count`` NaN/inf values in feature set ``name``."""
    return ValueError(
        f"feature set {name!r} contains {count} NaN/inf value(s); clean or re-extract these activations before probing"
    )


def check_nonconstant_target(y: np.ndarray, name: str | list[str] = "y") -> None:
    """Raise a one-line ``ValueError`` if a target column is constant (R² is then undefined).

    Parameters
    ----------
    y : ndarray of shape (n_samples,) or (n_samples, n_targets)
    name : str or sequence of str
        Target name, or one name per column.
    """
    y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    names = [name] if isinstance(name, str) else list(name)
    if len(names) != y2.shape[1]:
        names = [f"{names[0]}[{j}]" for j in range(y2.shape[1])] if y2.shape[1] > 1 else names[:1]
    for j, label in enumerate(names):
        column = y2[:, j]
        if not np.isfinite(column).all():
            raise ValueError(f"target {label!r} contains NaN/inf; drop those tokens before probing")
        if column.size == 0 or np.ptp(column) == 0:
            value = column[0] if column.size else "n/a"
            raise ValueError(
                f"target {label!r} is constant on the training set (all values = {value}); "
                "R² is undefined — drop this target or check its labels"
            )


def check_fold_variance(y: np.ndarray, fold: np.ndarray, name: str, what: str = "grouped CV") -> None:
    """Raise a one-line ``ValueError`` if ``y`` is constant inside one of the folds (R² is undefined there).

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
    fold : ndarray of shape (n_samples,)
        The fold of every row (0..n_folds-1); a held-out side can be passed as one fold.
    name, what : the target and the fits these folds serve, named in the message.
    """
    y, fold = np.asarray(y, dtype=np.float64), np.asarray(fold)
    n_folds = int(fold.max()) + 1 if fold.size else 0
    for f in range(n_folds):
        inside = y[fold == f]
        if inside.size and np.ptp(inside) == 0:
            raise ValueError(
                f"target {name!r} has no variance inside fold {f + 1} of {n_folds} of the {what} "
                f"(every one of its {inside.size} tokens = {inside[0]:g}): R² is undefined there; add documents "
                "with more than one value of the target"
            )


def grouped_train_test_split(groups: ArrayLike, test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split token indices into train and test by whole groups, deterministically.

    Parameters
    ----------
    groups : array-like of shape (n_samples,)
        Document id of every token.
    test_fraction : float in (0, 1)
        Fraction of *documents* (not tokens) that go to the test side; rounded, with at
        least one document on each side.
    seed : int
        Seed of the permutation of the sorted unique group ids.

    Returns
    -------
    train_idx, test_idx : ndarray of int64
        Sorted token indices; no group appears in both.
    """
    groups = np.asarray(groups)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    unique, inverse = np.unique(groups, return_inverse=True)
    if unique.size < 2:
        raise ValueError(f"a grouped train/test split needs at least 2 documents, got {unique.size}")
    n_test = min(max(int(round(test_fraction * unique.size)), 1), unique.size - 1)
    order = np.random.default_rng(seed).permutation(unique.size)
    is_test_group = np.zeros(unique.size, bool)
    is_test_group[order[:n_test]] = True
    is_test = is_test_group[inverse.ravel()]
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _r2_from_sums(count, sum_y, sum_y2, sse):
    """R² = 1 - SSE/SST with SST from sufficient statistics (any broadcastable shapes)."""
    sst = sum_y2 - sum_y**2 / count
    # A resample of documents whose targets are all equal leaves only rounding residue in SST (not an
    # exact 0): treat it as constant, or R² explodes to ~1e16.
    sst = np.where(sst > 1e-8 * np.maximum(count, 1), sst, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 - sse / sst


def _document_stats(y_true, predictions, groups):
    """Per-document sums (count, Σy, Σy², one Σ residual² per prediction) of centred targets: (n_groups, 3 + k)."""
    y_true = np.asarray(y_true, dtype=np.float64).ravel()
    predictions = [np.asarray(pred, dtype=np.float64).ravel() for pred in predictions]
    groups = np.asarray(groups)
    if not all(y_true.shape == pred.shape == groups.shape for pred in predictions):
        raise ValueError(
            f"y_true, y_pred and groups must have the same length, got {y_true.size}, "
            f"{', '.join(str(pred.size) for pred in predictions)}, {groups.size}"
        )
    _, inverse = np.unique(groups, return_inverse=True)
    inverse = inverse.ravel()
    n_groups = int(inverse.max()) + 1
    # Centre first so Σy² - (Σy)²/n does not cancel catastrophically for targets far from 0.
    centred = y_true - y_true.mean()
    columns = [np.bincount(inverse, minlength=n_groups).astype(np.float64),
               np.bincount(inverse, weights=centred, minlength=n_groups),
               np.bincount(inverse, weights=centred**2, minlength=n_groups)]
    columns += [np.bincount(inverse, weights=(y_true - pred) ** 2, minlength=n_groups) for pred in predictions]
    return np.stack(columns, axis=1)


def _resampled_sums(stats: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Column sums of ``stats`` over ``n_boot`` resamples of its rows (documents) with replacement: (n_boot, columns).

    A resample is a weighted sum over documents, so ``n_boot`` resamples cost one (n_boot × n_groups) @
    (n_groups × columns) product instead of touching every token."""
    n_groups = len(stats)
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, stats.shape[1]))
    chunk = max(1, 2_000_000 // n_groups)  # bound the (chunk × n_groups) count matrix
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        draws = rng.integers(0, n_groups, size=(stop - start, n_groups))
        offsets = (np.arange(stop - start) * n_groups)[:, None]
        counts = np.bincount((draws + offsets).ravel(), minlength=(stop - start) * n_groups)
        out[start:stop] = counts.reshape(stop - start, n_groups).astype(np.float64) @ stats
    return out


def _percentiles(values: np.ndarray, level: float, what: str) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise ValueError(f"every bootstrap resample had a constant target; the {what} interval is undefined")
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_r2_ci(y_true: ArrayLike, y_pred: ArrayLike, groups: ArrayLike, n_boot: int = 1000, level: float = 0.95, seed: int = 0):
    """Percentile bootstrap interval of pooled R², resampling test documents with replacement.

    Each resample draws as many documents as there are, with replacement, and pools all
    their tokens. It is computed from per-document sums (count, Σy, Σy², Σ residual²).

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,)
        Held-out target and prediction.
    groups : array-like of shape (n_samples,)
        Document id of every held-out token.
    n_boot : int
        Number of resamples.
    level : float
        Coverage of the two-sided percentile interval.
    seed : int
        Seed of the resampling.

    Returns
    -------
    low, high : float
        Interval bounds. Resamples whose target is constant (SST = 0) are dropped.
    """
    sums = _resampled_sums(_document_stats(y_true, [y_pred], groups), n_boot, seed)
    return _percentiles(_r2_from_sums(sums[:, 0], sums[:, 1], sums[:, 2], sums[:, 3]), level, "R²")


def bootstrap_r2_difference_ci(y_true: ArrayLike, y_pred_a: ArrayLike, y_pred_b: ArrayLike, groups: ArrayLike, n_boot: int = 1000, level: float = 0.95,
                               seed: int = 0):
    """Paired percentile bootstrap interval of R²(a) - R²(b): both predictions of the same held-out tokens,
    scored on the same resamples of documents (so what the documents share cancels).

    Returns (low, high); an interval above 0 says ``a`` predicts these documents better than ``b``.
    """
    sums = _resampled_sums(_document_stats(y_true, [y_pred_a, y_pred_b], groups), n_boot, seed)
    r2_a = _r2_from_sums(sums[:, 0], sums[:, 1], sums[:, 2], sums[:, 3])
    r2_b = _r2_from_sums(sums[:, 0], sums[:, 1], sums[:, 2], sums[:, 4])
    return _percentiles(r2_a - r2_b, level, "R² difference")
