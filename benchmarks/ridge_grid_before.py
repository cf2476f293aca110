"""The probe grid as ``fit_ridge_grid`` ran it before the shared pass (commit 447a0a1): the reference.

One pass per feature set over its training rows (a DSTG layer read three times: sem, ap and full =
[sem | ap]), per chunk each fold's rows copied out by a mask, then a second pass over the test rows for
predictions and the test R². Kept verbatim in its arithmetic (the primal route, which every store probe
takes) so that ``bench_probe_store.py`` times before and after in one process and
``tests/probes/test_ridge_grid_shared.py`` checks the new results against these to 1e-10.

    table = fit_ridge_grid_before(feature_sets, targets, groups, train_idx, test_idx, alphas)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from probes.gram import DEFAULT_CHUNK_ROWS, FoldSums, chunks, primal_solutions
from probes.ridge import grouped_folds


def read_rows(X, rows):
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 <= 2 * len(rows):
        return np.asarray(X[first:last + 1])[rows - first].astype(np.float64)
    return np.asarray(X[rows]).astype(np.float64)


def fold_sums(X, rows, fold, Y, n_folds, chunk_rows):
    p, k = X.shape[1], Y.shape[1]
    y_shift = Y.mean(axis=0)
    gram, x_sum, xy = np.zeros((n_folds, p, p)), np.zeros((n_folds, p)), np.zeros((n_folds, p, k))
    y_sum, yy, x_shift = np.zeros((n_folds, k)), np.zeros((n_folds, k)), None
    for part in chunks(len(rows), chunk_rows):
        block = read_rows(X, rows[part])
        finite = np.isfinite(block)
        if not finite.all():
            block[~finite] = 0.0
        if x_shift is None:
            x_shift = block.mean(axis=0)
        block -= x_shift
        targets = Y[part] - y_shift
        for f in np.unique(fold[part]):
            inside = fold[part] == f
            x, y = block[inside], targets[inside]
            gram[f] += x.T @ x
            x_sum[f] += x.sum(axis=0)
            xy[f] += x.T @ y
            y_sum[f] += y.sum(axis=0)
            yy[f] += (y**2).sum(axis=0)
    return FoldSums(n=np.bincount(fold, minlength=n_folds).astype(np.float64), gram=gram, x_sum=x_sum, xy=xy,
                    y_sum=y_sum, yy=yy, x_shift=x_shift, y_shift=y_shift, non_finite_columns=np.zeros(p, np.int64),
                    n_folds=n_folds)


def cv_ridge_streamed(X, rows, fold, Y, n_splits, alphas, standardize, chunk_rows):
    sums = fold_sums(X, rows, fold, Y, n_splits, chunk_rows)
    fold_scores = np.empty((n_splits, alphas.size, Y.shape[1]))
    for f in range(n_splits):
        W, mean, scale, y_mean = primal_solutions(*sums.train(f), alphas, standardize)
        W_raw = W / scale[:, None, None]
        offset = y_mean - np.einsum("p,pak->ak", mean, W_raw)
        fold_scores[f] = sums.validation_r2(f, W_raw, offset)
    W, mean, scale, y_mean = primal_solutions(*sums.totals(), alphas, standardize)
    cv_scores = fold_scores.mean(axis=0)
    best = np.argmax(cv_scores, axis=0)
    return {"fold_scores": fold_scores, "cv_scores": cv_scores, "best": best,
            "coef": W[:, best, np.arange(Y.shape[1])], "intercept": y_mean + sums.y_shift,
            "mean": mean + sums.x_shift, "scale": scale}


def predict_rows(X, rows, res, chunk_rows):
    order = np.argsort(rows, kind="stable")
    pred = np.empty((len(rows), res["coef"].shape[1]))
    for part in chunks(len(rows), chunk_rows):
        block = read_rows(X, rows[order[part]])
        pred[order[part]] = ((block - res["mean"]) / res["scale"]) @ res["coef"] + res["intercept"]
    return pred


def fit_ridge_grid_before(feature_sets, targets, groups, train_idx, test_idx, alphas, n_splits=5,
                          standardize=True, chunk_rows=DEFAULT_CHUNK_ROWS) -> pd.DataFrame:
    """Rows (key, target, alpha, cv_r2, cv_r2_sd, test_r2) and ``y_pred_test``, as fit_ridge_grid gave them."""
    groups, train_idx, test_idx = np.asarray(groups), np.asarray(train_idx), np.asarray(test_idx)
    names = list(targets)
    Y = np.column_stack([np.asarray(targets[t], dtype=np.float64).ravel() for t in names])
    fold = grouped_folds(groups[train_idx], n_splits)
    by_row = np.argsort(train_idx, kind="stable")
    rows_train, fold_train = train_idx[by_row], fold[by_row]
    Y_train, Y_test = Y[rows_train], Y[test_idx]
    alphas = np.asarray(alphas, dtype=np.float64).ravel()
    records = []
    for key, source in feature_sets.items():
        X = source() if callable(source) else source
        res = cv_ridge_streamed(X, rows_train, fold_train, Y_train, n_splits, alphas, standardize, chunk_rows)
        pred = predict_rows(X, test_idx, res, chunk_rows)
        for j, name in enumerate(names):
            y_true = Y_test[:, j]
            sst = ((y_true - y_true.mean()) ** 2).sum()
            records.append({"key": key, "target": name, "alpha": alphas[res["best"][j]],
                            "cv_r2": res["cv_scores"][res["best"][j], j],
                            "cv_r2_sd": res["fold_scores"][:, res["best"][j], j].std(),
                            "test_r2": 1.0 - ((y_true - pred[:, j]) ** 2).sum() / sst if sst > 0 else np.nan,
                            "y_pred_test": pred[:, j].copy()})
    return pd.DataFrame.from_records(records)
