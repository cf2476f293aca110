"""The probe grid in one pass per layer (sem / ap / full share it; test R² from the held-out sums) gives the
results of the per-set route it replaced (benchmarks/ridge_grid_before.py) to 1e-10, on numpy and on torch."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from conftest import RandomSequences, tiny_model
from dstg_interp import extract
from probes import fit_ridge_grid, grouped_train_test_split
from probes.gram import RidgeFit, release_pages
from probes.grid import Columns, StackedProbes, store_feature_sets

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
spec = importlib.util.spec_from_file_location("ridge_grid_before", BENCHMARKS / "ridge_grid_before.py")
before = importlib.util.module_from_spec(spec)
sys.modules["ridge_grid_before"] = before
spec.loader.exec_module(before)

ALPHAS = np.logspace(-3, 5, 17)
TARGETS = ("token_position", "sentence_index", "intra_sentence_position")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def single_blas_thread():
    with threadpool_limits(limits=1):
        yield


def Documents(n=60):
    """60 documents of 12-40 random tokens with sentence structure, [CLS]/[SEP] at the ends."""
    return RandomSequences(np.random.default_rng(0).integers(12, 41, n), sentence=7, paragraph=14)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    model = tiny_model("dstg").eval()
    return extract(model, Documents(), tmp_path_factory.mktemp("grid") / "s", layers=(0, 1, 2), dtype="float16")


def grid_inputs(store):
    labels = store.labels
    rows = np.flatnonzero(~labels["is_special"].to_numpy())
    groups = labels["doc_index"].to_numpy()
    targets = {name: labels[name].to_numpy().astype(np.float64) for name in TARGETS}
    train, test = grouped_train_test_split(groups[rows], test_fraction=0.2, seed=0)
    return targets, groups, rows[train], rows[test]


def per_set(store):
    return {(layer, sub): (lambda layer=layer, sub=sub: store.states(layer, sub))
            for layer in store.layers for sub in store.subspaces}


def assert_same_grid(new, old):
    assert list(new.key) == list(old.key) and list(new.target) == list(old.target)
    assert np.array_equal(new.alpha.to_numpy(), old.alpha.to_numpy())
    for column in ("cv_r2", "cv_r2_sd", "test_r2"):
        np.testing.assert_allclose(new[column].to_numpy(float), old[column].to_numpy(float), rtol=0, atol=1e-10,
                                   err_msg=column)


def test_store_feature_sets_share_one_source_per_layer(store):
    sets = store_feature_sets(store)
    assert list(sets) == [(layer, sub) for layer in store.layers for sub in ("sem", "ap", "full")]
    for layer in store.layers:
        sem, ap, full = (sets[(layer, sub)] for sub in ("sem", "ap", "full"))
        assert all(isinstance(s, Columns) for s in (sem, ap, full)) and sem.source is ap.source is full.source
        whole = np.asarray(full.source())
        np.testing.assert_array_equal(whole[:, sem.columns], np.asarray(store.states(layer, "sem")))
        np.testing.assert_array_equal(whole[:, ap.columns], np.asarray(store.states(layer, "ap")))
    # asked for sem alone, nothing is shared (a full pass would cost more than the sem one)
    assert not isinstance(store_feature_sets(store, subspaces=("sem",))[(0, "sem")], Columns)


@pytest.mark.parametrize("chunk_rows", [97, 10**6])
def test_one_pass_per_layer_equals_the_per_set_route(store, chunk_rows):
    targets, groups, train, test = grid_inputs(store)
    old = before.fit_ridge_grid_before(per_set(store), targets, groups, train, test, ALPHAS, chunk_rows=chunk_rows)
    reads = []

    def counted(layer):
        def load():
            reads.append(layer)
            return store.states(layer, "full")
        return load

    shared = {}
    for layer in store.layers:
        source = counted(layer)
        d_sem = store.states(layer, "sem").shape[1]
        shared |= {(layer, "sem"): Columns(source, slice(0, d_sem)), (layer, "ap"): Columns(source, slice(d_sem, None)),
                   (layer, "full"): Columns(source)}
    new = fit_ridge_grid(shared, targets, groups, train, test, ALPHAS, chunk_rows=chunk_rows, keep_predictions=False)
    assert reads == list(store.layers)  # each layer read once for its three subspaces
    assert_same_grid(new, old)
    kept = fit_ridge_grid(store_feature_sets(store), targets, groups, train, test, ALPHAS, chunk_rows=chunk_rows)
    assert_same_grid(kept, old)
    for a, b in zip(kept.y_pred_test, old.y_pred_test):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)


def test_the_torch_path_gives_the_numpy_results(store):
    targets, groups, train, test = grid_inputs(store)
    on_numpy = fit_ridge_grid(store_feature_sets(store), targets, groups, train, test, ALPHAS, chunk_rows=101)
    on_torch = fit_ridge_grid(store_feature_sets(store), targets, groups, train, test, ALPHAS, chunk_rows=101,
                              device="cpu")
    assert_same_grid(on_torch, on_numpy)


def test_a_shared_set_agrees_with_scikit_learn(store):
    """The ap block of a shared pass against GridSearchCV(StandardScaler + Ridge, GroupKFold) on its own rows."""
    targets, groups, train, test = grid_inputs(store)
    y = targets["token_position"]
    table = fit_ridge_grid(store_feature_sets(store, layers=(1,)), {"pos": y}, groups, train, test, ALPHAS)
    row = table[table.key == (1, "ap")].iloc[0]
    X = np.asarray(store.states(1, "ap"), dtype=np.float64)
    order = np.argsort(train, kind="stable")
    search = GridSearchCV(make_pipeline(StandardScaler(), Ridge()), {"ridge__alpha": ALPHAS}, cv=GroupKFold(5),
                          scoring="r2").fit(X[train[order]], y[train[order]], groups=groups[train[order]])
    assert row.alpha == search.best_params_["ridge__alpha"]
    assert abs(row.cv_r2 - search.best_score_) < 1e-10
    np.testing.assert_allclose(row.y_pred_test, search.predict(X[test]), rtol=1e-9, atol=1e-9)


def test_non_finite_values_name_the_sets_that_hold_them(tmp_path, store):
    targets, groups, train, test = grid_inputs(store)
    d_sem = store.states(0, "sem").shape[1]
    X = np.asarray(store.states(0, "full"), dtype=np.float64)
    X[train[3], d_sem + 1] = np.nan  # in an ap column
    sets = {(0, "sem"): Columns(X, slice(0, d_sem)), (0, "ap"): Columns(X, slice(d_sem, None)), (0, "full"): Columns(X)}
    with pytest.raises(ValueError, match=r"feature set \(0, 'ap'\) contains 1 NaN/inf"):
        fit_ridge_grid(sets, targets, groups, train, test, ALPHAS)
    clean = fit_ridge_grid({(0, "sem"): sets[(0, "sem")]}, targets, groups, train, test, ALPHAS)
    assert np.isfinite(clean.test_r2).all()


def test_pages_are_released_only_from_read_only_maps(tmp_path):
    np.save(tmp_path / "X.npy", np.arange(40, dtype=np.float32).reshape(10, 4))
    edited = np.load(tmp_path / "X.npy", mmap_mode="c")
    edited[0, 0] = -1.0  # a copy-on-write edit lives in this process's pages only
    release_pages(edited)
    assert edited[0, 0] == -1.0
    read_only = np.load(tmp_path / "X.npy", mmap_mode="r")
    before = np.array(read_only)
    release_pages(read_only)
    np.testing.assert_array_equal(read_only, before)  # dropped pages are read again from the file


@pytest.mark.parametrize("keep_predictions", [False, True])
def test_no_test_rows_give_nan_test_r2_without_warnings(keep_predictions):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(30), 10)
    X = rng.normal(size=(300, 5))
    y = X[:, 0] + rng.normal(size=300)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = fit_ridge_grid({"a": X}, {"y": y}, groups, np.arange(300), np.array([], dtype=int), ALPHAS,
                               keep_predictions=keep_predictions)
    assert np.isnan(table.test_r2.item()) and np.isfinite(table.cv_r2.item())


def test_partial_r2_streamed_per_layer_equals_the_in_memory_residuals(store):
    """partial_r2_sets (residuals read lazily, sem/ap/full in one pass per layer) against what partial_r2 did:
    the residual states materialised as float32 and probed in memory."""
    from probes.position_baseline import PositionBaseline, position_means
    from probes.ridge import DEFAULT_ALPHAS

    labels = store.labels
    tokens = np.flatnonzero(~labels["is_special"].to_numpy())
    known = np.asarray(store.states(2, "full"), dtype=np.float64)[tokens, 0]  # what the states know beyond position
    noise = np.random.default_rng(0).normal(scale=known.std(), size=len(tokens))
    y = labels["sentence_index"].to_numpy()[tokens] + known + noise
    groups = labels["doc_index"].to_numpy()[tokens]
    position = labels["token_position"].to_numpy()[tokens]
    train, test = grouped_train_test_split(groups, test_fraction=0.2, seed=0)
    baseline = PositionBaseline.fit(position, y, groups, train, test, n_splits=5, n_boot=50)
    assert not baseline.exact
    new = baseline.partial_r2_sets(store_feature_sets(store), tokens)
    assert list(new) == list(store_feature_sets(store))
    for (layer, sub), (r2, low, high) in new.items():
        residual = np.asarray(store.states(layer, sub))[tokens].astype(np.float32)
        residual -= position_means(residual, position, train).astype(np.float32)
        old = fit_ridge_grid({"x": residual}, {"residual": baseline.residual}, groups, train, test, DEFAULT_ALPHAS,
                             n_boot=50, keep_predictions=False).iloc[0]
        np.testing.assert_allclose([r2, low, high], [old.test_r2, old.r2_ci_low, old.r2_ci_high], rtol=0, atol=1e-8)
    assert new[(2, "full")][0] > 0.1  # a reading, not a zero
    # the same probe alone as among its source's column sets (BLAS may sum in another order: a few ulps)
    np.testing.assert_allclose(baseline.partial_r2(store.states(1, "ap"), tokens, name="ap"), new[(1, "ap")],
                               rtol=0, atol=1e-12)
    on_torch = baseline.partial_r2_sets(store_feature_sets(store, layers=(1,)), tokens, device="cpu")
    for key, reading in on_torch.items():
        np.testing.assert_allclose(reading, new[key], rtol=0, atol=1e-10)


def test_stacked_probes_predict_what_each_fit_predicts_on_its_own_columns():
    """Fits over column sets of one source folded into one product give each fit's standardised prediction."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 9)).astype(np.float16)
    fits = {}
    for key, columns, k in (("sem", np.arange(0, 6), 2), ("ap", np.arange(6, 9), 1), ("full", slice(None), 3)):
        p = len(np.arange(9)[columns])
        fits[key] = (columns, RidgeFit(np.empty(0), np.empty(0), np.empty(0), coef=rng.normal(size=(p, k)),
                                       intercept=rng.normal(size=k), mean=rng.normal(size=p),
                                       scale=rng.uniform(0.5, 2, size=p)))
    predicted = StackedProbes(fits, 9).predict(X)
    assert list(predicted) == ["sem", "ap", "full"]
    for key, (columns, fit) in fits.items():
        direct = ((X[:, columns].astype(np.float64) - fit.mean) / fit.scale) @ fit.coef + fit.intercept
        np.testing.assert_allclose(predicted[key], direct, rtol=1e-12, atol=1e-12)


def test_solves_side_by_side_are_the_solves_one_by_one():
    """solve_each: the same results, bit for bit, on one thread or several (each solve on one BLAS thread), in
    the jobs' order; a job's error is raised as it was."""
    from probes.gram import FoldSums
    from probes.gram import solve_folds
    from probes.grid import solve_each

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 24))
    Y = X[:, :3] @ rng.standard_normal((3, 2)) + 0.1 * rng.standard_normal((400, 2))
    part = np.arange(400) % 6  # five folds and a held-out part
    sums = FoldSums.accumulate(X, np.arange(400), part, Y, 5, 64, "cpu", held_out=True)
    sets = [slice(0, 8), slice(8, 24), slice(None), slice(3, 5)]
    alphas = np.logspace(-3, 3, 7)

    def solve(columns):
        return solve_folds(sums.columns(columns), alphas, True)

    alone, together = solve_each(sets, solve, threads=1), solve_each(sets, solve, threads=3)
    for a, b in zip(alone, together):
        assert np.array_equal(a.coef, b.coef) and np.array_equal(a.cv_scores, b.cv_scores)
    assert not np.array_equal(alone[0].coef, alone[2].coef[:8])  # the sets differ: the order is checked

    def fails(columns):
        raise ValueError(f"set {columns} has no rows")

    with pytest.raises(ValueError, match="has no rows"):
        solve_each(sets, fails, threads=2)
