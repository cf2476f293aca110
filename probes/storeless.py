"""Position probes without a store: the probes' sufficient statistics summed during the forward pass.

    dstg-probe --model dstg --task segment                  # the default route for a corpus: no store written
    dstg-probe --model dstg --task segment --store          # today's route: extract (or reuse) a store, then probe it
    fits = storeless_fits(encoder, sequences, plan, request)   # what probes.positions.probe_positions calls

Pass 1 runs the model (and its random-init control) over every sequence, in the batches extraction uses,
and adds each batch's probed rows to ``probes.statistics.PartStatistics``: per layer, the Gram sums of
every CV fold and of the held-out documents over ``[states | targets | 1]``, kept per token position too,
so the position-only baseline's partial R² (states minus their per-position training mean, a mean known
only at the end) comes from the same sums. From them every (layer, subspace) probe is solved exactly as
``fit_ridge_grid`` solves a store's (``probes.gram.solve_folds``: one tridiagonal reduction per fold, all alphas
and targets). The held-out rows' predictions, whose per-document errors the bootstrap resamples, need the
solved probes: pass 1 keeps those rows' states (float16, as a store holds them) up to ``held_out_memory_mb``
and predicts them once the probes are solved, so a probe is one forward pass; held-out rows beyond that
budget are predicted by pass 2, over their sequences only (no predictions when ``n_boot`` is 0).

States are rounded to float16 before they are summed, as the store holds them, so both routes read the
same numbers: the results equal the store route's to 1e-8 (``tests/probes/test_storeless.py``); with
``gram_precision="float32"`` (the Gram products in float32) to their own tolerance (``docs/probes.md``). Memory is
the statistics -- per layer (folds + 1) x (d + 4)² float64 plus the same per token position and d wide --,
one batch and at most ``held_out_memory_mb`` of held-out rows: flat in the number of tokens. Under torchrun
(``ranks``) each rank runs a share of the batches and the statistics are summed over the ranks; every rank
returns the same fits.  Given ``control_cache`` (a folder), the random-init control's R² are kept there by key
(``probes.control_cache``) and a run that finds them does not run the twin (under torchrun rank 0 reads and
writes, and every rank follows its answer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp.encoders import Encoder
from dstg_interp.encoders.inputs import length_sorted_batches, sequence_lengths
from dstg_interp.progress import progress_bar, write_line
from dstg_interp.store.distributed import Ranks
from probes.control_cache import ControlEntry, control_entry
from probes.gram import solve_folds
from probes.grid import StackedProbes, check_finite, one_blas_thread, solve_each
from probes.ridge import DEFAULT_ALPHAS, grouped_folds
from probes.splits import bootstrap_r2_ci, check_nonconstant_target
from probes.statistics import PartStatistics

__all__ = ["StorelessRequest", "StorelessUnsuitable", "storeless_fits"]

FLOAT16_MAX = float(torch.finfo(torch.float16).max)


class StorelessUnsuitable(ValueError):
    """The statistics cannot serve this probe (fewer training tokens than features): use the store route."""


@dataclass
class StorelessRequest:
    """What to probe: concrete layers and subspaces, the folds, the bootstrap and where the residual target is."""

    layers: list
    subspaces: list[str]
    n_splits: int = 5
    n_boot: int = 1000
    seed: int = 0
    residual: np.ndarray | None = None  # the position baseline's residual target (None: no partial R²)
    batch_size: int = 32
    held_out_memory_mb: float = 2048.0  # held-out rows kept from pass 1 for the predictions; beyond it, a second pass
    gram_precision: str = "float64"  # the Gram products' precision (probes.statistics.PartStatistics)


@dataclass
class _Source:
    """One layer: the hooks its requested subspaces are made of, side by side, and each subspace's columns."""

    layer: object
    hooks: list[str]
    columns: dict  # {(layer, subspace): column index array}
    width: int  # the hooks' widths summed


def _sources(encoder: Encoder, request: StorelessRequest, widths: dict) -> list[_Source]:
    sources = []
    for layer in request.layers:
        per_set = {(layer, sub): encoder.hooks_for(layer, sub) for sub in request.subspaces}
        hooks = list(dict.fromkeys(h for hooks in per_set.values() for h in hooks))
        starts = np.cumsum([0] + [widths[h] for h in hooks])
        at = {h: np.arange(starts[i], starts[i + 1]) for i, h in enumerate(hooks)}
        sources.append(_Source(layer, hooks, {key: np.concatenate([at[h] for h in hs]) for key, hs in per_set.items()},
                               int(starts[-1])))
    return sources


def _hook_widths(encoder: Encoder, hooks: list[str]) -> dict:
    tokens = torch.zeros(1, 2, dtype=torch.long, device=encoder.device)
    mask = torch.ones(1, 2, dtype=torch.bool, device=encoder.device)
    with torch.inference_mode():
        captured = encoder.capture(tokens, mask, hooks)
    return {h: int(captured[h].shape[-1]) for h in hooks}


def _float16_rows(captured: dict, hooks: list[str], mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """[rows kept, d] float16 of the hooks side by side, each rounded to float16 as a store holds it (the
    statistics read them exactly in float64).  ``keep`` picks (a mask) or picks and orders (indices) rows among the
    batch's real tokens."""
    index = torch.nonzero(mask.reshape(-1)).flatten()[keep]  # the kept real tokens' rows of the flattened batch
    widths = [int(captured[hook].shape[-1]) for hook in hooks]
    out = torch.empty(len(index), sum(widths), dtype=torch.float16, device=captured[hooks[0]].device)
    start = 0
    for hook, width in zip(hooks, widths):
        states = captured[hook]
        rows = states.reshape(-1, width).index_select(0, index).to(torch.float16)
        # beyond float16's range a state rounds to inf (or, just past it, to the largest float16): read those
        # cells' originals and refuse as a store does, here only where the rounded rows say to look
        low, high = torch.aminmax(rows)  # one pass, no temporaries, for the common case of nothing to look at
        if float(high) >= FLOAT16_MAX or float(low) <= -FLOAT16_MAX:
            suspect = rows.abs() >= FLOAT16_MAX
            original = states.reshape(-1, width).index_select(0, index)[suspect]
            beyond = original[original.abs() > FLOAT16_MAX]
            if len(beyond):
                raise ValueError(f"{hook}: activations exceed the float16 range (max |x| = "
                                 f"{float(beyond.abs().max()):.3g}) that the probes read them in")
        out[:, start:start + width].copy_(rows)
        start += width
    return out


class _HeldOut:
    """Pass 1's held-out rows, kept (float16, as a store holds them) until the probes are solved and can predict
    them, up to ``budget`` bytes; the sequences whose held-out rows did not fit (this rank's) are run again."""

    def __init__(self, test_of_row: np.ndarray, budget: float, width: int):
        self.test_of_row, self.budget, self.width, self.used = test_of_row, budget, width, 0
        self.kept: list[tuple[np.ndarray, np.ndarray, dict]] = []  # (test index, store row, {layer: float16 rows})
        self.left: list[int] = []  # sequences with held-out rows that were not kept

    def claim(self, rows: np.ndarray, row_start: np.ndarray) -> np.ndarray | None:
        """Of a batch's probed store rows, the held-out ones (a mask) if they fit in what is left of the budget
        (``keep`` then takes their states layer by layer); else None, their sequences left for pass 2."""
        held = self.test_of_row[rows] >= 0
        if not held.any():
            return None
        size = int(held.sum()) * self.width * 2
        if self.used + size > self.budget:
            self.left.extend(np.unique(np.searchsorted(row_start, rows[held], side="right") - 1).tolist())
            return None
        self.used += size
        self.kept.append((self.test_of_row[rows[held]], rows[held], {}))
        return held

    def keep(self, layer, states: torch.Tensor) -> None:
        self.kept[-1][2][layer] = states.to("cpu", torch.float16)  # exact: the states are float16-rounded


class _Pass:
    """Batches of some sequences through one encoder: yields (store rows of the real tokens, captured hooks, mask)."""

    def __init__(self, sequences, row_start: np.ndarray, lengths: np.ndarray, batch_size: int, ranks: Ranks):
        self.sequences, self.row_start, self.lengths = sequences, row_start, lengths
        self.batch_size, self.ranks = batch_size, ranks

    def batches(self, subset: np.ndarray | None = None) -> list[np.ndarray]:
        """Length-sorted batches (those of extraction when ``subset`` is None, this rank's share), or of the
        sequences ``subset`` (already this rank's own)."""
        if subset is None:
            return self.ranks.share(length_sorted_batches(self.lengths, self.batch_size))
        return [subset[b] for b in length_sorted_batches(self.lengths[subset], self.batch_size)]

    def run(self, encoder: Encoder, batch: np.ndarray, hooks: list[str]):
        items = [self.sequences[int(i)] for i in batch]
        tokens, mask = encoder.pad([item["input_ids"] for item in items])
        captured = encoder.capture(tokens, mask, hooks)
        rows = np.concatenate([np.arange(self.row_start[i], self.row_start[i] + self.lengths[i]) for i in batch])
        return rows, captured, mask


def storeless_fits(encoder: Encoder, sequences, plan, request: StorelessRequest, control: Encoder | None = None, *,
                   progress: bool = False, ranks: Ranks | None = None, desc: str = "probe",
                   control_cache: str | os.PathLike | None = None):
    """(fitted, random_init, partials) as ``probes.positions.probe_store`` gets them from ``fit_ridge_grid``:
    ``fitted`` one row per (set, target) with test R², bootstrap CI and test predictions; ``random_init`` the
    control's test R² by set (None without ``control``); ``partials`` {set: (partial R², low, high)}.

    ``plan``: a ``probes.positions.ProbePlan`` over the rows of ``sequences`` (one row per token, sequence
    after sequence, as a store's).  ``control_cache``: a folder where the control's R² are kept by key
    (``probes.control_cache``): found there, the twin is not run; None: always run."""
    ranks = ranks or Ranks()
    lengths = sequence_lengths(sequences)
    row_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    layout = _row_layout(plan, request, int(lengths.sum()))
    F = request.n_splits

    hooks = sorted({h for layer in request.layers for sub in request.subspaces for h in encoder.hooks_for(layer, sub)})
    widths = _hook_widths(encoder, hooks)
    sources = _sources(encoder, request, widths)
    if max(len(cols) for s in sources for cols in s.columns.values()) > layout.n_train - np.bincount(layout.fold, minlength=F).max():
        raise StorelessUnsuitable("fewer training tokens than features in a fold")

    entry, reused = None, None
    if control is not None and control_cache is not None:
        entry, reused = _cached_control(Path(control_cache), control, sequences, layout, request, sources, ranks,
                                        progress, desc)
    twin = control if reused is None else None

    # pass 1: the statistics of every layer (and of the control's), summed over the batches and the ranks; with a
    # bootstrap the model's held-out rows are predicted one by one, so their part needs no Gram (the control's,
    # scored from its sums, does)
    device = encoder.device
    gram_parts = F if request.n_boot else F + 1
    stats = {s.layer: PartStatistics(sum(widths[h] for h in s.hooks), layout.Y.shape[1], F + 1, layout.n_positions, device,
                                     gram_parts=gram_parts, gram_precision=request.gram_precision)
             for s in sources}
    control_stats = {s.layer: PartStatistics(sum(widths[h] for h in s.hooks), 1, F + 1, 1, device,
                                             gram_precision=request.gram_precision)
                     for s in sources} if twin is not None else {}
    passes = _Pass(sequences, row_start, lengths, request.batch_size, ranks)
    probed = np.zeros(len(lengths), dtype=bool)
    probed[np.unique(np.searchsorted(row_start, plan.tokens, side="right") - 1)] = True
    batches = [b for b in passes.batches() if probed[b].any()]
    models = [(encoder, stats, slice(None))] + ([(twin, control_stats, slice(0, 1))] if twin is not None else [])

    test_of_row = np.full(len(layout.part_of_row), -1, dtype=np.int64)
    test_of_row[plan.tokens[plan.test_idx]] = np.arange(len(plan.test_idx))
    width = sum(widths[h] for s in sources for h in s.hooks)
    held_out = _HeldOut(test_of_row, request.held_out_memory_mb * 2**20, width) if request.n_boot else None

    def statistics_pass():
        _statistics_pass(passes, batches, models, hooks, sources, stats, layout, held_out, device, progress, desc)

    with one_blas_thread():
        ranks.together(statistics_pass)  # a rank that fails stops every rank (OtherRankFailed), a dead one: PeerLost
    for table in (stats, control_stats):
        for layer_stats in table.values():
            layer_stats.reduce(ranks)

    solved = _solve(sources, stats, control_stats, layout, len(plan.targets), F, request.residual is not None)
    if reused is not None:
        solved.control_r2 = reused
    elif entry is not None:
        entry.write(solved.control_r2)  # rank 0's: every rank solved the same sums
    # the held-out predictions the bootstrap resamples: from the rows pass 1 kept, then (pass 2) the rest
    with one_blas_thread():
        predictions = _predictions(encoder, passes, sources, layout.position_of_row, held_out, solved, hooks, progress,
                                   desc) if request.n_boot else {}
    return _fit_tables(solved, predictions, layout, plan, request, control is not None)


def _cached_control(folder: Path, control: Encoder, sequences, layout: "_RowLayout", request: StorelessRequest,
                    sources: list[_Source], ranks: Ranks, progress: bool, desc: str) -> tuple[ControlEntry | None,
                                                                                            dict | None]:
    """(the entry rank 0 writes after the twin ran, the control's R² by set if its file holds them). Under torchrun
    rank 0 alone reads and writes; its answer goes to every rank, so all skip the twin or none does."""
    def read() -> tuple[ControlEntry | None, dict | None]:
        if not ranks.first:
            return None, None
        sets = [(layer, sub, control.hooks_for(layer, sub)) for source in sources for (layer, sub) in source.columns]
        settings = dict(n_splits=request.n_splits, alphas=DEFAULT_ALPHAS, gram_precision=request.gram_precision,
                        batch_size=request.batch_size, device=control.device.type, world_size=ranks.world_size)
        target = np.concatenate([layout.Y_rows[:, 0], layout.y_shift[:1]])  # the centred target and its centre
        entry = control_entry(folder, control, sequences, layout.part_of_row, target, sets, settings)
        reused = entry.read([key for source in sources for key in source.columns])
        if reused is not None and progress:
            write_line(f"[{desc}] random-init control: reused from {entry.path} (same twin, same tokens)")
        return entry, reused

    entry, reused = ranks.together(read)  # a rank that fails here stops every rank, as in the passes
    return entry, ranks.broadcast(reused)


@dataclass
class _RowLayout:
    """What each store row is to the probes: its part (CV fold 0..F-1, F = held out, -1 = not probed), its token
    position, and the targets (``Y``: one row per probed token, centred by ``y_shift`` into ``Y_rows``)."""

    part_of_row: np.ndarray
    position_of_row: np.ndarray
    Y: np.ndarray
    y_shift: np.ndarray
    Y_rows: np.ndarray
    n_positions: int
    fold: np.ndarray  # the CV fold of each training token
    n_train: int


def _row_layout(plan, request: StorelessRequest, n_rows: int) -> _RowLayout:
    names = list(plan.targets)
    check_nonconstant_target(np.column_stack([plan.targets[t] for t in names])[plan.train_idx], names)
    F = request.n_splits
    fold = grouped_folds(plan.groups[plan.train_idx], F)
    part_of_row = np.full(n_rows, -1, dtype=np.int64)
    part_of_row[plan.tokens[plan.train_idx]] = fold
    part_of_row[plan.tokens[plan.test_idx]] = F
    columns = [np.asarray(plan.targets[t], dtype=np.float64) for t in names]
    if request.residual is not None:
        columns.append(np.asarray(request.residual, dtype=np.float64))
    Y = np.column_stack(columns)
    y_shift = Y.mean(axis=0)  # fit_ridge_grid's: the mean over the training and held-out rows
    Y_rows = np.zeros((n_rows, Y.shape[1]))
    Y_rows[plan.tokens] = Y - y_shift
    position_of_row = np.zeros(n_rows, dtype=np.int64)
    position_of_row[plan.tokens] = plan.token_position
    return _RowLayout(part_of_row, position_of_row, Y, y_shift, Y_rows, int(plan.token_position.max()) + 1, fold,
                      len(plan.train_idx))


@dataclass
class _Solved:
    fits: dict  # {(layer, subspace): (columns, solve_folds result)}
    control_r2: dict  # {(layer, subspace): the random-init control's test R²}
    residual_fits: dict  # the partial R²'s probes, as ``fits``
    means: dict  # {layer: per-position training mean of the states}


def _solve(sources: list[_Source], stats: dict, control_stats: dict, layout: _RowLayout, n_targets: int, F: int,
           with_residual: bool) -> _Solved:
    """Every probe solved from the sums (``probes.gram.solve_folds``: what ``fit_ridge_grid`` does per source),
    the layers side by side (``probes.grid.solve_each``)."""
    alphas = np.asarray(DEFAULT_ALPHAS, dtype=np.float64)

    def solve_layer(source: _Source) -> _Solved:
        solved = _Solved({}, {}, {}, {})
        layer_stats = stats[source.layer]
        x_sum, counts = layer_stats.position_sums(slice(None))
        sums = layer_stats.fold_sums(x_sum.sum(axis=0) / counts.sum(), layout.y_shift[:n_targets], range(n_targets), F)
        for key, cols in source.columns.items():
            block = sums.columns(cols)
            check_finite(block, key)
            solved.fits[key] = (cols, solve_folds(block, alphas, True))
        if control_stats:
            c_stats = control_stats[source.layer]
            c_sum, c_counts = c_stats.position_sums(slice(None))
            c_sums = c_stats.fold_sums(c_sum.sum(axis=0) / c_counts.sum(), layout.y_shift[:1], [0], F)
            for key, cols in source.columns.items():
                block = c_sums.columns(cols)
                check_finite(block, key)
                solved.control_r2[key] = float(solve_folds(block, alphas, True).test_r2[0])
        if with_residual:  # the partial R²: probes of the states minus their per-position mean
            train_sum, train_counts = layer_stats.position_sums(slice(0, F))
            fallback = train_sum.sum(axis=0) / max(layout.n_train, 1)
            means = np.where(train_counts[:, None] > 0, train_sum / np.maximum(train_counts, 1)[:, None], fallback)
            solved.means[source.layer] = means.astype(np.float32).astype(np.float64)  # PositionResiduals' means
            residual = layer_stats.residual_sums(solved.means[source.layer], layout.y_shift[n_targets:], [n_targets], F)
            for key, cols in source.columns.items():
                block = residual.columns(cols)
                check_finite(block, key)
                solved.residual_fits[key] = (cols, solve_folds(block, alphas, True))
        return solved

    solved = _Solved({}, {}, {}, {})
    for layer in solve_each(sources, solve_layer):  # in the sources' order
        solved.fits.update(layer.fits)
        solved.control_r2.update(layer.control_r2)
        solved.residual_fits.update(layer.residual_fits)
        solved.means.update(layer.means)
    return solved


def _fit_tables(solved: _Solved, predictions: dict, layout: _RowLayout, plan, request: StorelessRequest,
                with_control: bool):
    """(fitted, random_init, partials), the shapes ``fit_ridge_grid`` gives ``probe_store``."""
    alphas = np.asarray(DEFAULT_ALPHAS, dtype=np.float64)
    names = list(plan.targets)
    n_targets = len(names)
    y_test = layout.Y[plan.test_idx]
    test_groups = plan.groups[plan.test_idx]
    records = []
    for key, (_, res) in solved.fits.items():
        pred = predictions.get(("main", key))
        test_r2 = _test_r2(y_test[:, :n_targets], pred) if pred is not None else res.test_r2
        for j, name in enumerate(names):
            row = {"key": key, "target": name, "alpha": alphas[res.best[j]],
                   "cv_r2": res.cv_scores[res.best[j], j],
                   "cv_r2_sd": res.fold_scores[:, res.best[j], j].std(), "test_r2": test_r2[j],
                   "n_features": res.coef.shape[0], "n_train": layout.n_train, "n_test": len(plan.test_idx)}
            if request.n_boot:
                row["r2_ci_low"], row["r2_ci_high"] = bootstrap_r2_ci(y_test[:, j], pred[:, j], test_groups,
                                                                      n_boot=request.n_boot, seed=request.seed)
            row["y_pred_test"] = pred[:, j].copy() if pred is not None else None
            records.append(row)
    partials = {}
    for key, (_, res) in solved.residual_fits.items():
        pred = predictions.get(("residual", key))
        if pred is None:
            partials[key] = (float(res.test_r2[0]), np.nan, np.nan)
            continue
        y_true = y_test[:, n_targets]
        low, high = bootstrap_r2_ci(y_true, pred[:, 0], test_groups, n_boot=request.n_boot, seed=request.seed)
        partials[key] = (float(_test_r2(y_true[:, None], pred)[0]), low, high)
    random_init = None
    if with_control:
        random_init = pd.Series(solved.control_r2)
        random_init.index = pd.Index(list(solved.control_r2), tupleize_cols=False)
    return pd.DataFrame.from_records(records), random_init, partials


def _statistics_pass(passes: _Pass, batches, models, hooks, sources, stats, layout: _RowLayout,
                     held_out: _HeldOut | None, device, progress: bool, desc: str) -> None:
    """Pass 1: every batch through the model (and its control), each batch's probed rows added to the sums; the
    model's held-out rows kept in ``held_out`` while they fit (None: no predictions wanted)."""
    lengths = passes.lengths
    # the bar counts tokens through a model: the model's own and, with the control, its random-init twin's
    through = "model + random-init control" if len(models) > 1 else "model"
    with torch.inference_mode(), progress_bar(total=int(sum(lengths[b].sum() for b in batches)) * len(models),
                                              unit="tok", desc=f"{desc}: statistics ({through})",
                                              disable=not progress, leave=False) as bar:
        for batch in batches:
            for model, sums, targets in models:
                rows, captured, mask = passes.run(model, batch, hooks)
                part = layout.part_of_row[rows]
                keep = np.flatnonzero(part >= 0)
                keep = keep[np.argsort(part[keep], kind="stable")]  # in part order: each part's rows summed in place
                keep_on = torch.from_numpy(keep).to(device)
                part_on = torch.from_numpy(part[keep]).to(device)
                position_on = torch.from_numpy(layout.position_of_row[rows][keep]).to(device) if sums is stats \
                    else torch.zeros(len(keep), dtype=torch.long, device=device)
                y_on = torch.from_numpy(layout.Y_rows[rows][keep][:, targets]).to(device)
                held = held_out.claim(rows[keep], passes.row_start) if sums is stats and held_out else None
                held_on = torch.from_numpy(held).to(device) if held is not None else None
                for source in sources:
                    states = _float16_rows(captured, source.hooks, mask, keep_on)
                    sums[source.layer].add(states, part_on, position_on, y_on)
                    if held_on is not None:
                        held_out.keep(source.layer, states[held_on])
                del captured
                bar.update(int(lengths[batch].sum()))


def _test_r2(y_true: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """probes.ridge's test R²: per column, NaN where the test target is constant."""
    if len(y_true) == 0:
        return np.full(y_true.shape[1], np.nan)
    sst = ((y_true - y_true.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sst > 0, 1.0 - ((y_true - pred) ** 2).sum(axis=0) / sst, np.nan)


def _predictions(encoder, passes: _Pass, sources, position_of_row, held_out: _HeldOut, solved: _Solved, hooks,
                 progress: bool, desc: str) -> dict:
    """The held-out rows' predictions of every fit ({("main" | "residual", key): [n_test, k]}): those pass 1 kept,
    then a forward over the sequences of the rest (this rank's); summed over ranks (each fills its own rows)."""
    n_test = int((held_out.test_of_row >= 0).sum())
    wanted = [("main", key, fit) for key, fit in solved.fits.items()] + \
             [("residual", key, fit) for key, fit in solved.residual_fits.items()]
    out = {(kind, key): np.zeros((n_test, fit[1].coef.shape[1])) for kind, key, fit in wanted}

    # per layer, its fits folded into one linear map per kind (probes.grid.StackedProbes): one product per block
    stacked = {(kind, source.layer): StackedProbes({key: fit for k, key, fit in wanted
                                                    if k == kind and key in source.columns}, source.width)
               for source in sources for kind in ("main", "residual")}

    def predict(at: np.ndarray, rows: np.ndarray, states: dict) -> None:
        for source in sources:
            x = states[source.layer].to(torch.float64).cpu().numpy()
            means = solved.means.get(source.layer)
            blocks = {"main": x, "residual": x - means[position_of_row[rows]] if means is not None else None}
            for kind, block in blocks.items():
                if block is not None:
                    for key, predicted in stacked[(kind, source.layer)].predict(block).items():
                        out[(kind, key)][at] = predicted

    for at, rows, states in held_out.kept:
        predict(at, rows, states)
    held_out.kept.clear()
    lengths = passes.lengths
    batches = passes.batches(np.asarray(sorted(held_out.left), dtype=np.int64))

    def prediction_pass():  # pass 2: the held-out rows pass 1 could not keep
        with torch.inference_mode(), progress_bar(total=int(sum(lengths[b].sum() for b in batches)), unit="tok",
                                                  desc=f"{desc}: held-out predictions", disable=not progress,
                                                  leave=False) as bar:
            for batch in batches:
                rows, captured, mask = passes.run(encoder, batch, hooks)
                held = held_out.test_of_row[rows] >= 0
                held_on = torch.from_numpy(held).to(encoder.device)
                predict(held_out.test_of_row[rows[held]], rows[held],
                        {source.layer: _float16_rows(captured, source.hooks, mask, held_on) for source in sources})
                del captured
                bar.update(int(lengths[batch].sum()))

    passes.ranks.together(prediction_pass)
    if passes.ranks.grouped and out:
        keys = list(out)
        packed = torch.from_numpy(np.concatenate([out[k].ravel() for k in keys])).to(passes.ranks.device)
        flat, start = passes.ranks.sum_(packed).cpu().numpy(), 0
        for k in keys:
            size = out[k].size
            out[k] = flat[start:start + size].reshape(out[k].shape)
            start += size
    return out
