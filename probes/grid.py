"""The whole probe grid from one pass per feature source: every subspace, target, fold and alpha.

    sets = {(3, "sem"): Columns(full3, slice(0, 112)), (3, "ap"): Columns(full3, slice(112, 128)),
            (3, "full"): Columns(full3, slice(None))}          # one read of layer 3 serves all three
    fit_ridge_grid(sets, targets, groups, train_idx, test_idx, device="cuda")   # the pass on the GPU
    store_feature_sets(store, layers, subspaces)                # the same dict, built from a store

A feature set that is a column block of a wider array (DSTG's ``sem`` and ``ap`` are the two blocks of
``full``) needs no pass of its own: its Gram sums X'X, X'1, X'Y are the matching blocks of the wider
array's. So the grid groups feature sets by source, reads each source once, chunk by chunk, and forms per
part (the CV folds of the training rows plus the held-out test rows as one more part) the sums over all
its columns; each set's folds are then solved from its block (``probes.gram.solve_folds``: one tridiagonal
reduction per fold for all alphas and targets at once, one Cholesky solve for the refit) and its test R² comes
from the held-out part's sums, so without predictions to keep
there is no second pass. Memory: one chunk of rows plus (folds + 1) x p² sums per source.

The solves of several sets run side by side (``solve_each``), each on one BLAS thread: at the authors' width
(sets of 768 features, then one eigendecomposition per fold) one BLAS thread per solve was faster than two even on a
quiet two-core machine (7.2 s against 11.1 s for the 21 sets of a 6-layer DSTG), and OpenBLAS's spinning
threads made the two-thread solves 7x slower beside another job (benchmarks/README.md, "Where the time goes").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from probes.gram import FoldSums, chunks, read_rows
from probes.splits import non_finite_error


@dataclass(frozen=True, eq=False)
class Columns:
    """Columns ``columns`` (a slice or index array; None: all) of ``source``; sets over one source share a pass.

    ``source`` is what ``fit_ridge_grid`` takes as a feature set (an array, a memmap, a ConcatenatedRows or a
    zero-argument callable returning one): sets sharing the very same object are read together."""

    source: Any
    columns: Any = None


def load(source):
    return source() if callable(source) else source


def one_blas_thread():
    """numpy's and scipy's BLAS / LAPACK calls each on one thread for the duration (threadpoolctl): OpenBLAS's
    threads spin-wait between calls and take the cores from whatever else runs (torch's forward, the other
    solves on the pool, another process). Entered once by the thread that hands out the work (the limit is
    process-wide), never inside the pool's threads."""
    return threadpool_limits(limits=1, user_api="blas")


Job = TypeVar("Job")


def solve_each(jobs: Sequence[Job], solve: Callable[[Job], Any], threads: int | None = None) -> list:
    """``[solve(job) for job in jobs]``, side by side on ``threads`` threads (default: torch's thread count, the
    cores the rest of the run uses), each on one BLAS thread; LAPACK lets go of the GIL, so they overlap.  Each
    solve is the same call it would be alone, so the results do not depend on ``threads``.  The first error a
    job raises is raised here."""
    threads = max(1, torch.get_num_threads() if threads is None else int(threads))
    with one_blas_thread():
        if threads == 1 or len(jobs) <= 1:
            return [solve(job) for job in jobs]
        with ThreadPoolExecutor(min(threads, len(jobs)), thread_name_prefix="ridge-solves") as pool:
            return list(pool.map(solve, jobs))


def grouped_by_source(feature_sets) -> list[tuple[Any, list[tuple[Any, Any]]]]:
    """[(source, [(key, columns), ...]), ...] in the order sources first appear."""
    groups: dict[int, tuple[Any, list]] = {}
    for key, value in feature_sets.items():
        source, columns = (value.source, value.columns) if isinstance(value, Columns) else (value, None)
        columns = slice(None) if columns is None else columns
        groups.setdefault(id(source), (source, []))[1].append((key, columns))
    return list(groups.values())


def predictions(X, rows, fits: dict, chunk_rows: int) -> dict:
    """{key: (len(rows), k) predictions} for every fitted set over X, one read of ``X[rows]`` (any order)."""
    rows = np.asarray(rows, dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    stacked = StackedProbes(fits, X.shape[1])
    out = {key: np.empty((len(rows), fit.coef.shape[1])) for key, (_, fit) in fits.items()}
    for part in chunks(len(rows), chunk_rows):
        for key, predicted in stacked.predict(read_rows(X, sorted_rows[part])).items():
            out[key][order[part]] = predicted
    return out


class StackedProbes:
    """Fitted probes over column sets of one source, folded into one linear map: ``predict(X)`` gives each fit's
    ``((X[:, columns] - mean) / scale) @ coef + intercept`` from one product ``X @ W + b``, with ``W`` holding
    ``coef / scale`` in the fit's rows and columns (zero elsewhere) and ``b = intercept - (mean / scale) @ coef``,
    instead of a copy, a standardisation and a product per fit.  ``fits``: {key: (columns, fit)}."""

    def __init__(self, fits: dict, width: int):
        sizes = [fit.coef.shape[1] for _, fit in fits.values()]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        self.weights = np.zeros((width, starts[-1]))
        self.offset = np.zeros(starts[-1])
        self.outputs = {}
        for (key, (columns, fit)), start, stop in zip(fits.items(), starts[:-1], starts[1:]):
            scaled = fit.coef / fit.scale[:, None]
            self.weights[columns, start:stop] = scaled
            self.offset[start:stop] = fit.intercept - fit.mean @ scaled
            self.outputs[key] = slice(start, stop)

    def predict(self, X: np.ndarray) -> dict:
        predicted = np.asarray(X, dtype=np.float64) @ self.weights + self.offset
        return {key: predicted[:, at] for key, at in self.outputs.items()}


def store_feature_sets(store, layers=None, subspaces=None) -> dict:
    """{(layer, subspace): feature set} of a store, for ``fit_ridge_grid``; lazily loaded.

    Where the store serves a subspace as the concatenation of others (DSTG ``full`` = [sem | ap]), the
    requested ones among them become ``Columns`` of that one array, so a layer is read once for all."""
    layers = store.layers if layers is None else layers
    subspaces = store.subspaces if subspaces is None else subspaces
    arrays = getattr(store, "manifest", {}).get("arrays", {})  # (an in-memory stand-in has none: nothing shared)
    sets: dict = {}
    for layer in layers:
        shared = {}
        for sub in subspaces:  # a served concatenation whose parts are requested subspaces of this layer
            entry = arrays.get(f"{_layer_name(layer)}/{sub}", {})
            parts = [part.split("/", 1)[1] for part in entry.get("parts", ())]
            if parts and all(part in subspaces for part in parts):
                source = (lambda layer=layer, sub=sub: store.states(layer, sub))
                widths = [arrays[f"{_layer_name(layer)}/{part}"]["shape"][1] for part in parts]
                starts = np.cumsum([0] + widths)
                shared = {part: Columns(source, slice(int(a), int(b))) for part, a, b in zip(parts, starts, starts[1:])}
                shared[sub] = Columns(source)
                break
        for sub in subspaces:
            sets[(layer, sub)] = shared.get(sub) or (lambda layer=layer, sub=sub: store.states(layer, sub))
    return sets


def _layer_name(layer) -> str:
    return str(int(layer)) if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool) else str(layer)


def check_finite(sums: FoldSums, key) -> None:
    if sums.non_finite:
        raise non_finite_error(key, sums.non_finite)
