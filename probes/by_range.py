"""Probes by position range: is position still decodable beyond the length a model was trained on?

    from probes.by_range import probe_by_range
    store = extract(long_model, long_windows(documents, tokenizer, 256), "runs/store-256")
    ranges = probe_by_range(store, trained_length=128)          # R² and MAE inside vs beyond 128

``probe_by_range`` fits a ridge probe (``probes.ridge.fit_ridge_grid``: documents split into train/test,
penalty by grouped CV) on token position and sentence index, and reports held-out R² separately for the
tokens inside the trained range and beyond it.  ``fit_on="all"`` trains on every position (is position
still decodable out there?); ``fit_on="inside"`` trains on positions inside the trained range only (does
the representation continue the in-range code, so that an in-range probe transfers?).  R² is computed
within each range (against that range's own mean), so a probe whose predictions beyond the range are
merely offset scores below 0 there; ``mae`` (mean absolute error, in positions or sentences) says by how much.
The windows and the MLM side of the length study are in ``dstg_interp.analysis.length_eval``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dstg_interp.store import ActivationStore

from probes.ridge import DEFAULT_ALPHAS, fit_ridge_grid
from probes.splits import grouped_train_test_split

PROBE_TARGETS = ("token_position", "sentence_index")


def probe_by_range(store: ActivationStore, trained_length: int, targets: Sequence[str] = PROBE_TARGETS,
                   layers: Sequence[int | str] | None = None, subspaces: Sequence[str] | None = None,
                   fit_on: Sequence[str] = ("all", "inside"), max_tokens: int | None = None, test_fraction: float = 0.25,
                   n_splits: int = 5, seed: int = 0) -> pd.DataFrame:
    """Held-out R² and MAE of ridge probes, inside vs beyond ``trained_length``: one row per (layer, subspace,
    target, fit_on, range) with r2, mae, n_test, alpha.  ``max_tokens``: a seeded subsample of the
    (non-special) tokens."""
    labels = store.labels
    if max_tokens is not None:
        tokens = store.subsample(max_tokens, seed=seed, exclude_special=True)
    else:
        tokens = np.flatnonzero(~labels["is_special"].to_numpy())
    position = labels["token_position"].to_numpy()[tokens]
    if position.max() < trained_length:
        raise ValueError(f"no token of the store lies beyond the trained length {trained_length} "
                         f"(the longest position is {int(position.max())}); extract longer windows")
    groups = labels["doc_index"].to_numpy()[tokens]
    train_idx, test_idx = grouped_train_test_split(groups, test_fraction=test_fraction, seed=seed)
    inside_test = position[test_idx] < trained_length
    layers = list(layers) if layers is not None else list(store.layers)
    subspaces = list(subspaces) if subspaces is not None else list(store.subspaces)
    values = {name: labels[name].to_numpy()[tokens].astype(np.float64) for name in targets}
    features = {(layer, sub): (lambda layer=layer, sub=sub: np.asarray(store.states(layer, sub)[tokens]))
                for layer in layers for sub in subspaces}
    rows = []
    for fit in fit_on:
        if fit not in ("all", "inside"):
            raise ValueError(f"fit_on must be 'all' or 'inside', got {fit!r}")
        train = train_idx if fit == "all" else train_idx[position[train_idx] < trained_length]
        fitted = fit_ridge_grid(features, values, groups, train, test_idx, alphas=DEFAULT_ALPHAS, n_splits=n_splits,
                                seed=seed, keep_predictions=True)
        for record in fitted.itertuples():
            y_true = values[record.target][test_idx]
            for name, part in (("inside", inside_test), ("beyond", ~inside_test)):
                rows.append({"layer": record.key[0], "subspace": record.key[1], "target": record.target,
                             "fit_on": fit, "range": name, "r2": _r2(y_true[part], record.y_pred_test[part]),
                             "mae": float(np.abs(y_true[part] - record.y_pred_test[part]).mean()) if part.any() else np.nan,
                             "n_test": int(part.sum()), "alpha": record.alpha})
    return pd.DataFrame(rows)


def _r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    if y_true.size < 2:
        return float("nan")
    total = ((y_true - y_true.mean()) ** 2).sum()
    return float(1.0 - ((y_true - y_pred) ** 2).sum() / total) if total > 0 else float("nan")
