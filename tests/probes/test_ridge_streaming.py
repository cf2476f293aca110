"""Ridge probes over whole stores: chunked per-fold Gram sums equal the in-memory solution; memory stays
flat; position probes read every token by default."""

import tracemalloc

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from probes import fit_ridge_grid, grouped_train_test_split
from probes.positions import PositionProbeConfig, probe_store
from probes.gram import cv_ridge_streamed
from probes.ridge import _gather_float64, cv_ridge, grouped_fold_bounds, grouped_folds
from dstg_interp.store.layout import ConcatenatedRows
from synthetic_store import FakeStore

ALPHAS = np.logspace(-3, 5, 17)


@pytest.fixture(autouse=True)
def single_blas_thread():
    with threadpool_limits(limits=1):
        yield


def documents_and_features(n_docs, p, seed, dtype=np.float64):
    """Uneven documents; correlated, offset, badly scaled features; two targets (one signal, one noise)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_docs), rng.integers(5, 40, n_docs))
    n = len(groups)
    X = rng.normal(size=(n, p)) @ (np.eye(p) + rng.normal(size=(p, p)) / np.sqrt(p))
    X = (X * rng.uniform(0.1, 20.0, p) + rng.normal(0, 50.0, p)).astype(dtype)
    signal = X[:, : p // 2].astype(np.float64) @ rng.normal(size=p // 2)
    Y = np.column_stack([signal + rng.normal(0, signal.std(), n), rng.normal(size=n) + 100.0])
    return groups, X, Y


@pytest.mark.parametrize("chunk_rows", [7, 100, 10**6])
def test_chunked_gram_sums_equal_the_in_memory_solution(chunk_rows):
    groups, X, Y = documents_and_features(60, 9, seed=0, dtype=np.float16)
    fold = grouped_folds(groups, 5)
    streamed = cv_ridge_streamed(X, np.arange(len(X)), fold, Y, 5, ALPHAS, chunk_rows=chunk_rows)
    order, bounds = grouped_fold_bounds(groups, 5)
    in_memory = cv_ridge(_gather_float64(X, order), Y[order], bounds, ALPHAS)
    assert np.array_equal(streamed.best, in_memory.best)
    np.testing.assert_allclose(streamed.fold_scores, in_memory.fold_scores, rtol=0, atol=1e-9)
    np.testing.assert_allclose(streamed.cv_scores, in_memory.cv_scores, rtol=0, atol=1e-10)
    for name in ("coef", "intercept", "mean", "scale"):
        np.testing.assert_allclose(getattr(streamed, name), getattr(in_memory, name), rtol=1e-9, atol=1e-9, err_msg=name)


def test_grid_on_a_memmap_in_chunks_equals_the_grid_in_memory(tmp_path):
    groups, X, Y = documents_and_features(50, 6, seed=1, dtype=np.float16)
    np.save(tmp_path / "X.npy", X)
    mapped = np.load(tmp_path / "X.npy", mmap_mode="r")
    train, test = grouped_train_test_split(groups, 0.2, seed=0)
    targets = {"signal": Y[:, 0], "noise": Y[:, 1]}
    small = fit_ridge_grid({"L0": mapped}, targets, groups, train, test, ALPHAS, chunk_rows=13)
    whole = fit_ridge_grid({"L0": X}, targets, groups, train, test, ALPHAS, chunk_rows=10**6)
    assert list(small.alpha) == list(whole.alpha)
    np.testing.assert_allclose(small.cv_r2, whole.cv_r2, atol=1e-10)
    np.testing.assert_allclose(small.test_r2, whole.test_r2, atol=1e-10)
    for a, b in zip(small.y_pred_test, whole.y_pred_test):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    # a concatenated view (a DSTG store's `full`) reads the same rows as the concatenated array
    view = fit_ridge_grid({"L0": ConcatenatedRows([mapped[:, :4], mapped[:, 4:]])}, targets, groups, train, test,
                          ALPHAS, chunk_rows=13)
    np.testing.assert_allclose(view.test_r2, small.test_r2, atol=0)


def test_features_are_never_held_whole(tmp_path):
    groups, X, Y = documents_and_features(3000, 128, seed=2, dtype=np.float16)
    np.save(tmp_path / "X.npy", X)
    mapped = np.load(tmp_path / "X.npy", mmap_mode="r")
    train, test = grouped_train_test_split(groups, 0.2, seed=0)
    tracemalloc.start()
    fit_ridge_grid({"L0": mapped}, {"y": Y[:, 0]}, groups, train, test, ALPHAS, chunk_rows=1024, keep_predictions=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    train_as_float64 = len(train) * X.shape[1] * 8  # what the in-memory route allocates at least
    assert peak < 0.25 * train_as_float64, (peak, train_as_float64)  # (the in-memory route: > 1.0)


def test_position_probes_use_every_token_by_default():
    assert PositionProbeConfig().max_tokens is None
    store = FakeStore(40, seed=3)
    table = probe_store(store, PositionProbeConfig(task="token", n_boot=0, controls=False))
    # each feature set is loaded once, by the probe: the target is token position itself, so nothing is left
    # after position and the partial R² (0 by definition) reads no states
    assert table.n_tokens.item() == int((~store.labels["is_special"]).sum()) and store.reads == [(0, "full")]
    assert table.r2.item() > 0.9
    sampled = probe_store(store, PositionProbeConfig(task="token", n_boot=0, controls=False, max_tokens=200))
    assert sampled.n_tokens.item() == 200
