"""Position-only baselines for position probes: what token position alone already explains, and what the
states explain beyond it.

    from probes.position_baseline import PositionBaseline
    baseline = PositionBaseline.fit(token_position, y, groups, train_idx, test_idx, n_splits=5, n_boot=1000)
    baseline.r2, baseline.ci, baseline.smooth_r2         # held-out R² of token position alone
    partial = baseline.partial_r2(states, rows, "layer 3 ap")  # share of the residual the states explain
    partials = baseline.partial_r2_sets(store_feature_sets(store), rows)   # every set, one pass per layer
    r2 = position_r2_of_columns(codes, token_position, groups, train_idx, test_idx)   # position_r2 of many columns

Every structure target of a position probe (sentence or paragraph index, intra-segment position) is
correlated with the token position the model is *given*: a later token tends to sit in a later sentence.
A probe's R² mixes what the states add with what position already says.  Three readings separate them,
all fitted on the probe's own tokens, held-out documents, grouped CV folds and bootstrap:

- ``position_r2``: a ridge probe on a one-hot code of token position (the per-position mean of the
  target, the best any function of position alone does on these documents).  For an intra-segment target
  it is "position relative to the segment start, given only token position".
- ``position_smooth_r2``: the same probe on a cubic B-spline basis of token position (a smooth function of
  position; a large gap to the one-hot reading says the target's dependence on position is not smooth).
- ``partial_r2``: the partial R² of the states given token position (Frisch-Waugh-Lovell): the target and
  every state dimension are residualised on token position (minus their per-position mean over the
  training tokens), and a ridge probe from residual states to residual target is scored on held-out
  documents.  It is the share of the target's variance left after token position that the states explain:
  0 when the states know nothing beyond position, 1 when they explain the rest.  When token position
  explains the target exactly (no residual variance in the training tokens), there is nothing left to
  explain and ``partial_r2`` is 0 by definition (interval [0, 0]).
- ``position_selectivity``: R² of the states minus ``position_r2``, with a paired bootstrap interval over
  the same resamples of held-out documents (an interval above 0: the states predict the target better than
  position alone does).
"""

from __future__ import annotations

from numpy.typing import ArrayLike
from collections.abc import Hashable

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse
from sklearn.preprocessing import SplineTransformer

from probes.gram import chunks, read_rows
from probes.grid import Columns, grouped_by_source, load
from probes.ridge import DEFAULT_ALPHAS, fit_ridge_grid, grouped_folds
from probes.splits import bootstrap_r2_difference_ci, check_fold_variance

SPLINE_KNOTS = 8  # cubic B-splines on 8 uniform knots: 10 smooth bumps over the positions seen
# below this share of the target's training variance, the residual after position is rounding residue
RESIDUAL_TOLERANCE = 1e-10
BASELINE_COLUMNS = ["position_r2", "position_ci_low", "position_ci_high", "position_smooth_r2",
                    "position_smooth_ci_low", "position_smooth_ci_high", "partial_r2", "partial_ci_low",
                    "partial_ci_high", "position_selectivity", "position_selectivity_ci_low",
                    "position_selectivity_ci_high"]


def one_hot_positions(token_position: np.ndarray) -> np.ndarray:
    """[n, max position + 1] float32 indicator of each token's position."""
    token_position = np.asarray(token_position, dtype=np.int64)
    code = np.zeros((len(token_position), int(token_position.max()) + 1), dtype=np.float32)
    code[np.arange(len(token_position)), token_position] = 1.0
    return code


def spline_positions(token_position: np.ndarray, n_knots: int = SPLINE_KNOTS) -> np.ndarray:
    """[n, n_knots + 2] cubic B-spline basis of token position over the range of positions seen."""
    positions = np.asarray(token_position, dtype=np.float64).reshape(-1, 1)
    return SplineTransformer(n_knots=n_knots, degree=3).fit_transform(positions)


def position_means(values: np.ndarray, token_position: np.ndarray, train: np.ndarray) -> np.ndarray:
    """The per-position mean of ``values`` over the ``train`` rows, at every row (a position no training
    token has gets the training mean): the least-squares fit of ``values`` on one-hot position."""
    values = np.asarray(values, dtype=np.float64)
    flat = values.reshape(len(values), -1)
    n_positions = int(token_position.max()) + 1
    indicator = scipy.sparse.csr_matrix((np.ones(len(train)), (token_position[train], np.arange(len(train)))),
                                        shape=(n_positions, len(train)))
    counts = np.asarray(indicator.sum(axis=1)).ravel()
    sums = indicator @ flat[train]
    means = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], flat[train].mean(axis=0))
    return means[token_position].reshape(values.shape)


def position_r2_of_columns(values: ArrayLike, token_position: ArrayLike, groups: ArrayLike, train_idx: np.ndarray,
                          test_idx: np.ndarray, n_splits: int = 5, min_nonzero: int = 1) -> np.ndarray:
    """Held-out R² of the position-only probe (``position_r2``: a ridge probe on one-hot token position, its
    penalty chosen by grouped CV on the training documents) for every column of ``values`` [n, m] at once: one
    ``fit_ridge_grid`` call, whose factorisations serve all columns.  What token position alone explains of
    each column (an SAE latent's activation, a neuron).  A column nonzero on fewer than ``min_nonzero`` training
    or held-out tokens (a latent that never fires there) gets NaN: its R² would read noise."""
    values = np.asarray(values, dtype=np.float64)
    train_idx, test_idx = np.asarray(train_idx), np.asarray(test_idx)
    nonzero = np.minimum((values[train_idx] != 0).sum(0), (values[test_idx] != 0).sum(0))
    varies = (values[train_idx].var(0) > 0) & (values[test_idx].var(0) > 0)
    kept = np.flatnonzero((nonzero >= min_nonzero) & varies)
    r2 = np.full(values.shape[1], np.nan)
    if len(kept) == 0:
        return r2
    fitted = fit_ridge_grid({"position": one_hot_positions(np.asarray(token_position))},
                            {str(j): values[:, j] for j in kept}, np.asarray(groups), train_idx, test_idx,
                            alphas=DEFAULT_ALPHAS, n_splits=n_splits, keep_predictions=False)
    r2[fitted.target.astype(int).to_numpy()] = fitted.test_r2.to_numpy()
    return r2


class PositionResiduals:
    """``states[rows]`` minus each token's per-position training mean, in float64, read lazily by row.

    The residual states ``partial_r2`` probes, without holding them: one pass over the training rows sums
    each position's states (float64, as ``position_means``), then any row read is its stored state minus
    its position's mean. Indexed like the array it stands for ([tokens, d], token coordinates), so
    ``fit_ridge_grid`` streams it chunk by chunk; a column block of it is the residual of that block."""

    def __init__(self, states, rows: np.ndarray, token_position: np.ndarray, train: np.ndarray,
                 chunk_rows: int = 32_768):
        self.states, self.rows = states, np.asarray(rows, dtype=np.int64)
        self.token_position = np.asarray(token_position, dtype=np.int64)
        p = states.shape[1]
        n_positions = int(self.token_position.max()) + 1
        sums, total = np.zeros((n_positions, p)), np.zeros(p)
        train = np.sort(np.asarray(train, dtype=np.int64))
        for part in chunks(len(train), chunk_rows):
            values = read_rows(states, self.rows[train[part]]).astype(np.float32).astype(np.float64)
            positions = self.token_position[train[part]]
            order = np.argsort(positions, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(positions[order]) != 0])
            sums[positions[order][starts]] += np.add.reduceat(values[order], starts, axis=0)
            total += values.sum(axis=0)
        counts = np.bincount(self.token_position[train], minlength=n_positions)
        fallback = total / max(len(train), 1)  # a position no training token has: the training mean
        self.means = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], fallback).astype(np.float32)
        self.shape, self.ndim, self.dtype = (len(self.rows), p), 2, np.dtype(np.float64)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        tokens = np.arange(self.shape[0])[index]
        values = read_rows(self.states, self.rows[tokens])  # float64: the residual is not rounded again, so the
        return values - self.means[self.token_position[tokens]]  # storeless route's sums (probes.statistics) equal it


@dataclass
class PositionBaseline:
    """The position-only probes of one target on one set of tokens, and what residualising needs.

    All arrays are over the probed tokens (local rows); ``train_idx`` / ``test_idx`` index them.
    """

    token_position: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    train_idx: np.ndarray
    test_idx: np.ndarray
    n_splits: int
    n_boot: int
    seed: int
    table: pd.DataFrame  # fit_ridge_grid rows of the one-hot and spline probes (with test predictions)
    residual: np.ndarray  # y minus its per-position training mean
    exact: bool  # token position explains the target exactly on the training tokens

    @classmethod
    def fit(cls, token_position: ArrayLike, y: ArrayLike, groups: ArrayLike, train_idx: np.ndarray, test_idx: np.ndarray,
            n_splits: int = 5, n_boot: int = 1000,
            seed: int = 0, name: str = "target") -> PositionBaseline:
        token_position = np.asarray(token_position, dtype=np.int64)
        y = np.asarray(y, dtype=np.float64)
        fold = grouped_folds(groups[train_idx], n_splits)
        check_fold_variance(y[train_idx], fold, name, "position-only baseline's grouped CV")
        check_fold_variance(y[test_idx], np.zeros(len(test_idx), dtype=np.int64), name, "held-out documents")
        features = {"one-hot": one_hot_positions(token_position), "spline": spline_positions(token_position)}
        table = fit_ridge_grid(features, {"target": y}, groups, train_idx, test_idx, alphas=DEFAULT_ALPHAS,
                               n_splits=n_splits, n_boot=n_boot, seed=seed).set_index("key")
        residual = y - position_means(y, token_position, train_idx)
        exact = float(residual[train_idx].var()) <= RESIDUAL_TOLERANCE * float(y[train_idx].var())
        return cls(token_position, y, np.asarray(groups), np.asarray(train_idx), np.asarray(test_idx), n_splits,
                   n_boot, seed, table, residual, exact)

    def _reading(self, key: str) -> tuple[float, float, float]:
        row = self.table.loc[key]
        return float(row.test_r2), float(row.get("r2_ci_low", np.nan)), float(row.get("r2_ci_high", np.nan))

    @property
    def r2(self) -> float:
        return self._reading("one-hot")[0]

    @property
    def predictions(self) -> np.ndarray:
        """The one-hot probe's held-out predictions, aligned with ``test_idx``."""
        return self.table.loc["one-hot"].y_pred_test

    def partial_r2(self, states: ArrayLike, rows: np.ndarray | None = None, name: Hashable = "states") -> tuple[float, float, float]:
        """(partial R², CI low, CI high) of the states given token position (module doc).

        ``states``: anything indexed by rows (a store's memmap); ``rows``: its sorted rows that hold the
        probed tokens (default: its first rows, in order)."""
        return self.partial_r2_sets({name: states}, rows)[name]

    def partial_r2_sets(self, feature_sets, rows: np.ndarray | None = None, device: str | None = None,
                        progress=None) -> dict:
        """{key: (partial R², CI low, CI high)} for every feature set, as ``fit_ridge_grid`` takes them:
        sets given as ``Columns`` of one source (``probes.grid.store_feature_sets``) share its passes (one
        for the per-position means, one for the probe), and no residual states are ever held whole."""
        if self.exact:
            if progress is not None:
                progress(len(feature_sets) * (2 if self.n_boot else 1))
            return dict.fromkeys(feature_sets, (0.0, 0.0, 0.0))
        sets = {}
        for source, members in grouped_by_source(feature_sets):  # (``device``: as fit_ridge_grid's)
            states = load(source)
            rows_ = np.arange(len(self.y)) if rows is None else np.asarray(rows, dtype=np.int64)
            residuals = PositionResiduals(states, rows_, self.token_position, self.train_idx)
            sets |= {key: Columns(residuals, columns) for key, columns in members}
        fitted = fit_ridge_grid(sets, {"residual": self.residual}, self.groups, self.train_idx, self.test_idx,
                                alphas=DEFAULT_ALPHAS, n_splits=self.n_splits, n_boot=self.n_boot, seed=self.seed,
                                keep_predictions=False, device=device, progress=progress)
        return {row.key: (float(row.test_r2), float(getattr(row, "r2_ci_low", np.nan)),
                          float(getattr(row, "r2_ci_high", np.nan))) for row in fitted.itertuples()}

    def columns(self, r2: float, test_predictions: np.ndarray, partial: tuple[float, float, float],
                ci_defined: bool = True) -> dict:
        """The BASELINE_COLUMNS of one probe whose held-out R² is ``r2`` and predictions ``test_predictions``."""
        one_hot, smooth = self._reading("one-hot"), self._reading("spline")
        low, high = (np.nan, np.nan)
        if self.n_boot and ci_defined:
            low, high = bootstrap_r2_difference_ci(self.y[self.test_idx], test_predictions, self.predictions,
                                                   self.groups[self.test_idx], n_boot=self.n_boot, seed=self.seed)

        def ci(reading):
            return reading[1:] if ci_defined else (np.nan, np.nan)

        values = [one_hot[0], *ci(one_hot), smooth[0], *ci(smooth), partial[0], *ci(partial), r2 - one_hot[0], low, high]
        return dict(zip(BASELINE_COLUMNS, values))
