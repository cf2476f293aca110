"""Side-by-side benchmark: probes.fit_ridge_grid vs scikit-learn GridSearchCV on the same grid.

The grid is the main probing job of ``dstg-probe``: every layer x subspace x target, each a
ridge probe whose alpha is chosen by grouped 5-fold CV over 17 alphas. Features are synthetic
(positional codes + document-level structure + token noise, anisotropic scales and offsets),
stored as float16 ``.npy`` files and memory-mapped, as an activation store would hold them.

The scikit-learn side is what a user would write: per feature set and target,
``GridSearchCV(Pipeline([StandardScaler(), Ridge()]), {"ridge__alpha": alphas},
cv=GroupKFold(5), scoring="r2")`` on the same training rows and groups (hence the same folds),
then ``.score`` on the held-out documents. Both sides run in this process with BLAS limited
to one thread (the machine is a shared 2-core box; threaded BLAS there mostly spin-waits).
If scikit-learn's full grid would exceed the time budget, it is timed on whole layers (each
layer covers all three widths) until the budget is spent and extrapolated linearly per width.

    python benchmarks/bench_ridge.py            # writes benchmarks/results/ridge.json
    python benchmarks/bench_ridge.py --docs 100 --sklearn-budget 5 --out /tmp/ridge.json   # a smoke run

Whole stores (every token, streamed) against the 100k-token subsample: bench_probe_store.py.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy
import sklearn
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from machine import LoadWatch, add_load_arguments, write_result
from probes import fit_ridge_grid, grouped_train_test_split

N_DOCS = 1000
LAYERS = 7
SUBSPACES = {"sem": 112, "ap": 16, "full": 128}
ALPHAS = np.logspace(-3, 5, 17)
N_SPLITS = 5
SKLEARN_BUDGET_S = 90.0  # stop timing scikit-learn after the first whole layer past this
RESULT_PATH = Path(__file__).parent / "results" / "ridge.json"


def make_corpus(seed=0, n_docs=N_DOCS):
    """Token-level document ids and three position targets for ~120 tokens per document."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 191, n_docs)
    groups = np.repeat(np.arange(n_docs), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    position = np.arange(groups.size) - starts
    relative = position / (lengths[groups] - 1)
    # Sentences of 8-30 tokens: the sentence index is a step function of position.
    sentence_len = rng.integers(8, 31, n_docs)[groups]
    sentence = position // sentence_len
    targets = {"position": position.astype(float), "relative_position": relative, "sentence_index": sentence.astype(float)}
    freqs = np.geomspace(1 / 200, 1 / 4, 6)
    codes = np.column_stack(
        [np.sin(position[:, None] * freqs), np.cos(position[:, None] * freqs),
         np.sin(np.pi * relative[:, None] * [1, 2, 3]), np.cos(np.pi * relative[:, None] * [1, 2, 3]),
         np.sin(sentence[:, None] * [0.3, 1.0, 2.0]), np.cos(sentence[:, None] * [0.3, 1.0, 2.0])]
    ).astype(np.float32)
    doc_latent = rng.normal(size=(n_docs, 32)).astype(np.float32)
    return groups, targets, codes, doc_latent


def write_feature_sets(folder, groups, codes, doc_latent, seed=1):
    """One float16 .npy per (layer, subspace); returns {key: path}."""
    rng = np.random.default_rng(seed)
    n = groups.size
    paths = {}
    for layer in range(LAYERS):
        for subspace, width in SUBSPACES.items():
            positional = {"sem": 0.3, "ap": 2.0, "full": 1.0}[subspace] / (1 + 0.3 * layer)
            X = positional * (codes @ rng.normal(size=(codes.shape[1], width)).astype(np.float32))
            X += doc_latent[groups] @ rng.normal(size=(doc_latent.shape[1], width)).astype(np.float32)
            X += rng.normal(size=(n, width)).astype(np.float32)
            X *= rng.lognormal(0.0, 1.0, width).astype(np.float32)  # anisotropic, like residual streams
            X += rng.normal(0.0, 3.0, width).astype(np.float32)
            path = Path(folder) / f"L{layer}_{subspace}.npy"
            np.save(path, X.astype(np.float16))
            paths[(f"L{layer}", subspace)] = path
    return paths


def run_sklearn(paths, keys, targets, groups, train, test):
    """GridSearchCV per (feature set, target); returns per-row results and per-key seconds."""
    rows, seconds = {}, {}
    for key in keys:
        start = time.perf_counter()
        X = np.load(paths[key], mmap_mode="r")
        X_train, X_test = np.asarray(X[train], np.float64), np.asarray(X[test], np.float64)
        for name, y in targets.items():
            pipe = Pipeline([("scaler", StandardScaler()), ("ridge", Ridge())])
            search = GridSearchCV(pipe, {"ridge__alpha": ALPHAS}, cv=GroupKFold(N_SPLITS), scoring="r2")
            search.fit(X_train, y[train], groups=groups[train])
            rows[(key, name)] = (search.best_params_["ridge__alpha"], search.best_score_, search.score(X_test, y[test]))
        seconds[key] = time.perf_counter() - start
    return rows, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=N_DOCS, help="documents (~120 tokens each)")
    parser.add_argument("--sklearn-budget", type=float, default=SKLEARN_BUDGET_S,
                        help="stop timing scikit-learn after the first whole layer past this many seconds")
    parser.add_argument("--out", default=str(RESULT_PATH))
    add_load_arguments(parser)
    args = parser.parse_args()
    watch = LoadWatch.start(args)
    wall_start = time.perf_counter()
    groups, targets, codes, doc_latent = make_corpus(n_docs=args.docs)
    train, test = grouped_train_test_split(groups, test_fraction=0.2, seed=0)
    with tempfile.TemporaryDirectory() as folder, threadpool_limits(limits=1):
        paths = write_feature_sets(folder, groups, codes, doc_latent)
        lazy = {key: (lambda path=path: np.load(path, mmap_mode="r")) for key, path in paths.items()}

        start = time.perf_counter()
        table = fit_ridge_grid(lazy, targets, groups, train, test, ALPHAS, N_SPLITS)
        ours_s = time.perf_counter() - start
        tracemalloc.start()  # second pass only to measure peak memory (numpy allocations are traced)
        fit_ridge_grid(lazy, targets, groups, train, test, ALPHAS, N_SPLITS)
        ours_peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        start = time.perf_counter()
        boot = [fit_ridge_grid({key: lazy[key]}, targets, groups, train, test, ALPHAS, N_SPLITS, n_boot=1000)
                for key in list(lazy)[:1]][0]
        boot_s = time.perf_counter() - start

        sk_rows, sk_seconds = {}, {}
        for layer in range(LAYERS):
            if sum(sk_seconds.values()) > args.sklearn_budget:
                break
            layer_keys = [key for key in paths if key[0] == f"L{layer}"]
            rows, seconds = run_sklearn(paths, layer_keys, targets, groups, train, test)
            sk_rows.update(rows)
            sk_seconds.update(seconds)

    timed_keys = list(sk_seconds)
    per_width = {w: np.mean([s for k, s in sk_seconds.items() if SUBSPACES[k[1]] == w]) for w in SUBSPACES.values()}
    sklearn_full_s = sum(per_width[SUBSPACES[key[1]]] for key in paths)
    extrapolated = len(timed_keys) < len(paths)

    compared = table[[(row.key, row.target) in sk_rows for row in table.itertuples()]]
    d_cv = [abs(r.cv_r2 - sk_rows[(r.key, r.target)][1]) for r in compared.itertuples()]
    d_test = [abs(r.test_r2 - sk_rows[(r.key, r.target)][2]) for r in compared.itertuples()]
    same_alpha = sum(r.alpha == sk_rows[(r.key, r.target)][0] for r in compared.itertuples())

    result = {
        "benchmark": "fit_ridge_grid vs GridSearchCV(Pipeline[StandardScaler, Ridge], GroupKFold) per target",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__},
        "blas_threads": 1,
        "n_tokens": int(groups.size), "n_documents": args.docs, "n_train": int(train.size), "n_test": int(test.size),
        "feature_sets": len(paths), "widths_p": SUBSPACES, "layers": LAYERS, "targets": list(targets),
        "n_alphas": len(ALPHAS), "n_splits": N_SPLITS, "storage_dtype": "float16 .npy, memory-mapped",
        "ours_seconds": round(ours_s, 2),
        "ours_peak_traced_mb": round(ours_peak_mb, 1),
        "ours_bootstrap_1000_seconds_one_feature_set_3_targets_including_fit": round(boot_s, 2),
        "sklearn_seconds_timed": round(sum(sk_seconds.values()), 2),
        "sklearn_feature_sets_timed": [f"{k[0]}/{k[1]}" for k in timed_keys],
        "sklearn_seconds_per_timed_set": {f"{k[0]}/{k[1]}": round(v, 2) for k, v in sk_seconds.items()},
        "sklearn_n_jobs": 1,
        "sklearn_seconds_full_grid": round(sklearn_full_s, 2),
        "sklearn_full_grid_extrapolated": extrapolated,
        "extrapolation": (f"mean seconds per feature set of each width over the timed layers x {LAYERS} sets per width"
                          if extrapolated else "none: full grid timed"),
        "speedup": round(sklearn_full_s / ours_s, 1),
        "compared_rows": len(compared),
        "same_alpha_rows": int(same_alpha),
        "max_abs_delta_cv_r2": float(max(d_cv)),
        "max_abs_delta_test_r2": float(max(d_test)),
        "bootstrap_ci_example": [
            {"key": "/".join(r.key), "target": r.target, "test_r2": round(r.test_r2, 4),
             "ci95": [round(r.r2_ci_low, 4), round(r.r2_ci_high, 4)]} for r in boot.itertuples()
        ],
        "total_wall_seconds": round(time.perf_counter() - wall_start, 1),
    }

    print(f"{'':28s}{'seconds':>10s}")
    print(f"{f'fit_ridge_grid ({len(paths)} sets)':28s}{ours_s:10.1f}")
    label = "GridSearchCV (extrapolated)" if extrapolated else f"GridSearchCV ({len(paths)} sets)"
    print(f"{label:28s}{sklearn_full_s:10.1f}   timed {len(timed_keys)} sets in {sum(sk_seconds.values()):.1f}s")
    print(f"speedup {result['speedup']}x; same alpha {same_alpha}/{len(compared)}; "
          f"max|dR2| cv {result['max_abs_delta_cv_r2']:.2e} test {result['max_abs_delta_test_r2']:.2e}")
    print(table.pivot_table(index="key", columns="target", values="test_r2").round(3))
    write_result(args.out, result, watch, args)


if __name__ == "__main__":
    main()
