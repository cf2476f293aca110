"""Tests for the grouped-CV ridge probe (probes.ridge) and grouped splits (probes.splits)."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from probes import (
    DEFAULT_ALPHAS,
    RidgeProbe,
    bootstrap_r2_ci,
    check_enough_groups,
    fit_ridge_grid,
    grouped_train_test_split,
)

ALPHAS = np.logspace(-3, 5, 17)


@pytest.fixture(autouse=True)
def single_blas_thread():
    """Small matrices on a shared 2-core machine: threaded BLAS only adds spin-wait contention."""
    with threadpool_limits(limits=1):
        yield


def make_documents(n_docs, tokens_per_doc, seed):
    """Document ids with uneven lengths (GroupKFold balances by size, so sizes matter)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(tokens_per_doc // 2, tokens_per_doc * 3 // 2, n_docs)
    return np.repeat(np.arange(n_docs), lengths), rng


def sklearn_search(X, y, groups, n_splits=5):
    pipe = Pipeline([("scaler", StandardScaler()), ("ridge", Ridge())])
    search = GridSearchCV(pipe, {"ridge__alpha": ALPHAS}, cv=GroupKFold(n_splits), scoring="r2")
    return search.fit(X, y, groups=groups)


def correlated_features(rng, n, p, scale_spread=True):
    """Features with uneven scales, offsets and correlations, so standardisation matters."""
    mixing = rng.normal(size=(p, p)) / np.sqrt(p)
    X = rng.normal(size=(n, p)) @ (np.eye(p) + mixing)
    if scale_spread:
        X = X * rng.uniform(0.1, 20.0, p) + rng.normal(0, 50.0, p)
    return X


def test_recovers_theoretical_r2_of_linear_signal_plus_noise():
    groups, rng = make_documents(200, 50, seed=1)
    n, p, sigma2 = len(groups), 10, 1.0
    X = rng.normal(size=(n, p))
    w = rng.normal(size=p)
    w /= np.linalg.norm(w)  # var(signal) = |w|^2 = 1 for standard-normal features
    y = X @ w + rng.normal(0.0, np.sqrt(sigma2), n)
    train, test = grouped_train_test_split(groups, 0.2, seed=0)
    probe = RidgeProbe().fit(X[train], y[train], groups[train])
    expected = 1.0 / (1.0 + sigma2)
    # Sampling sd of an R² estimate ~ sqrt(4 R² (1 - R²)² / n); allow four of them.
    tolerance = 4 * np.sqrt(4 * expected * (1 - expected) ** 2 / len(test))
    assert abs(probe.score(X[test], y[test]) - expected) < tolerance
    assert np.allclose(probe.coef_ * 1.0 / probe.scale_, w, atol=0.05)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_agrees_with_sklearn_gridsearch_on_same_folds(dtype):
    groups, rng = make_documents(40, 30, seed=2)
    X = correlated_features(rng, len(groups), 12).astype(dtype)
    y = X[:, :4].astype(np.float64) @ rng.normal(size=4) + rng.normal(0, 30.0, len(groups))
    train, test = grouped_train_test_split(groups, 0.25, seed=3)
    X64 = X.astype(np.float64)  # sklearn sees the exact same values
    ours = RidgeProbe(alphas=ALPHAS).fit(X[train], y[train], groups[train])
    ref = sklearn_search(X64[train], y[train], groups[train])
    assert ours.alpha_ == ref.best_params_["ridge__alpha"]
    assert np.max(np.abs(ours.cv_scores_ - ref.cv_results_["mean_test_score"])) < 1e-6
    assert abs(ours.score(X64[test], y[test]) - ref.score(X64[test], y[test])) < 1e-6
    assert np.max(np.abs(ours.predict(X64[test]) - ref.predict(X64[test]))) < 1e-6 * np.std(y)


def test_dual_route_agrees_with_sklearn_when_features_exceed_tokens():
    groups, rng = make_documents(12, 10, seed=4)
    X = correlated_features(rng, len(groups), 3 * len(groups))
    y = X[:, :3] @ rng.normal(size=3) + rng.normal(0, 5.0, len(groups))
    ours = RidgeProbe(alphas=ALPHAS, n_splits=4).fit(X, y, groups)
    ref = sklearn_search(X, y, groups, n_splits=4)
    assert ours.alpha_ == ref.best_params_["ridge__alpha"]
    assert np.max(np.abs(ours.cv_scores_ - ref.cv_results_["mean_test_score"])) < 1e-6
    assert np.max(np.abs(ours.predict(X) - ref.predict(X))) < 1e-6 * np.std(y)


def test_grouped_split_has_no_leakage_where_token_level_cv_does():
    # Every token of a document carries the document's random vector (plus a little noise)
    # and the document's random target: only memorising documents can "predict" it.
    groups, rng = make_documents(60, 20, seed=5)
    n_docs = 60
    doc_vectors = rng.normal(size=(n_docs, 64))
    doc_targets = rng.normal(size=n_docs)
    X = doc_vectors[groups] + 0.05 * rng.normal(size=(len(groups), 64))
    y = doc_targets[groups] + 0.05 * rng.normal(size=len(groups))
    train, test = grouped_train_test_split(groups, 0.2, seed=0)
    table = fit_ridge_grid({"doc_id_vector": X}, {"doc_target": y}, groups, train, test, ALPHAS)
    assert table.loc[0, "test_r2"] <= 0.05
    # (cv_r2 is the max over 17 alphas of a noisy score, so it is optimistic; test_r2 is not.)
    pipe = Pipeline([("scaler", StandardScaler()), ("ridge", Ridge())])
    naive = GridSearchCV(pipe, {"ridge__alpha": ALPHAS}, cv=KFold(5, shuffle=True, random_state=0), scoring="r2")
    naive.fit(X[train], y[train])
    assert naive.best_score_ > 0.8  # token-level folds leak the document identity


def test_clone_and_params_roundtrip():
    probe = RidgeProbe(alphas=(0.1, 1.0), n_splits=3, standardize=False)
    copy = clone(probe)
    assert copy.get_params() == probe.get_params()
    assert copy.get_params()["alphas"] == (0.1, 1.0)
    copy.set_params(n_splits=4)
    assert copy.n_splits == 4 and probe.n_splits == 3
    assert RidgeProbe().get_params()["alphas"] == DEFAULT_ALPHAS
    assert not hasattr(copy, "coef_")


def test_multi_target_chooses_alpha_per_target():
    groups, rng = make_documents(50, 30, seed=6)
    X = correlated_features(rng, len(groups), 8)
    signal = X @ rng.normal(size=8)
    Y = np.column_stack([signal + rng.normal(0, 0.01 * signal.std(), len(groups)),
                         rng.normal(size=len(groups)) + 0.05 * signal / signal.std()])
    both = RidgeProbe().fit(X, Y, groups)
    singles = [RidgeProbe().fit(X, Y[:, j], groups) for j in range(2)]
    assert both.coef_.shape == (2, 8) and both.cv_scores_.shape == (len(DEFAULT_ALPHAS), 2)
    assert both.alpha_[0] != both.alpha_[1]
    for j, single in enumerate(singles):
        assert both.alpha_[j] == single.alpha_
        assert np.allclose(both.cv_scores_[:, j], single.cv_scores_, atol=1e-10)
        assert np.allclose(both.predict(X)[:, j], single.predict(X), atol=1e-8)


def test_fit_ridge_grid_equals_looping_ridgeprobe():
    groups, rng = make_documents(24, 12, seed=7)
    n = len(groups)
    arrays = {("L0", "sem"): correlated_features(rng, n, 6).astype(np.float16),
              ("L0", "ap"): correlated_features(rng, n, 3),
              ("L1", "wide"): correlated_features(rng, n, n)}  # p > n_train: dual route
    targets = {"pos": arrays[("L0", "sem")][:, :2].astype(float).sum(1) + rng.normal(size=n),
               "noise": rng.normal(size=n)}
    train, test = grouped_train_test_split(groups, 0.2, seed=1)
    lazy = {key: (lambda a=a: a) for key, a in arrays.items()}  # callables load lazily
    table = fit_ridge_grid(lazy, targets, groups, train, test, ALPHAS, n_splits=4)
    assert isinstance(table, pd.DataFrame) and len(table) == 6
    pd.concat([table, table]).astype({"cv_r2": float})  # the table survives ordinary pandas operations
    assert {"key", "target", "alpha", "cv_r2", "test_r2", "n_train", "n_test"} <= set(table.columns)
    for row in table.itertuples():
        X, y = arrays[row.key], targets[row.target]
        probe = RidgeProbe(alphas=ALPHAS, n_splits=4).fit(X[train], y[train], groups[train])
        assert row.alpha == probe.alpha_
        assert abs(row.cv_r2 - probe.cv_scores_.max()) < 1e-9
        assert abs(row.test_r2 - probe.score(X[test], y[test])) < 1e-9
        assert np.allclose(row.y_pred_test, probe.predict(X[test]), atol=1e-8)
        assert (row.n_train, row.n_test) == (len(train), len(test))


def test_bootstrap_ci_contains_estimate_and_narrows_with_more_documents():
    widths = []
    for n_docs in (30, 300):
        groups, rng = make_documents(n_docs, 20, seed=8)
        y = rng.normal(size=len(groups)) + rng.normal(size=n_docs)[groups]
        pred = y + rng.normal(0, 0.7, len(groups))
        point = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        low, high = bootstrap_r2_ci(y, pred, groups, n_boot=1000, seed=0)
        assert low < point < high
        assert bootstrap_r2_ci(y, pred, groups, n_boot=1000, seed=0) == (low, high)  # seeded
        widths.append(high - low)
    assert widths[1] < 0.6 * widths[0]


def test_grouped_train_test_split_is_deterministic_and_disjoint():
    groups, _ = make_documents(50, 10, seed=9)
    train, test = grouped_train_test_split(groups, 0.2, seed=3)
    again = grouped_train_test_split(groups, 0.2, seed=3)
    assert np.array_equal(train, again[0]) and np.array_equal(test, again[1])
    assert not set(groups[train]) & set(groups[test])
    assert len(set(groups[test])) == 10 and len(train) + len(test) == len(groups)


def test_error_messages():
    groups, rng = make_documents(20, 10, seed=10)
    X, y = rng.normal(size=(len(groups), 4)), rng.normal(size=len(groups))
    train, test = grouped_train_test_split(groups, 0.2)
    with pytest.raises(ValueError, match=r"target 'flat' is constant"):
        fit_ridge_grid({"a": X}, {"flat": np.ones(len(y))}, groups, train, test)
    with pytest.raises(ValueError, match=r"target 'y' is constant"):
        RidgeProbe().fit(X, np.full(len(y), 3.0), groups)
    bad = X.copy()
    bad[5, 1] = np.nan
    with pytest.raises(ValueError, match=r"feature set \('L2', 'sem'\) contains 1 NaN/inf"):
        fit_ridge_grid({("L2", "sem"): bad}, {"y": y}, groups, train, test)
    bad[5, 1] = np.inf
    with pytest.raises(ValueError, match=r"feature set 'X' contains 1 NaN/inf"):
        RidgeProbe().fit(bad, y, groups)
    few = groups % 3
    with pytest.raises(ValueError, match=r"needs at least 5 documents in the training set, got 3"):
        RidgeProbe(n_splits=5).fit(X, y, few)
    with pytest.raises(ValueError, match=r"needs at least 4 documents .* got 2"):
        check_enough_groups([1, 1, 2], 4)
    with pytest.raises(ValueError, match=r"needs groups="):
        RidgeProbe().fit(X, y)
    with pytest.raises(ValueError, match=r"train and test share 1 document"):
        fit_ridge_grid({"a": X}, {"y": y}, groups, train, np.r_[test, train[:1]])
    assert check_enough_groups(groups, 5) == 20


# --- scikit-learn's estimator contract -------------------------------------------------------------
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

# Checks that cannot apply, with the reason (scikit-learn's documented expected_failed_checks); none today:
# with require_groups=False every check of the regressor contract runs and must pass.
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


@parametrize_with_checks([RidgeProbe(require_groups=False)],
                         expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS)
def test_sklearn_estimator_contract(estimator, check, monkeypatch):
    # scikit-learn's own CI sets this; without it check_array_api_input (NumPy inputs under array-API dispatch:
    # results unchanged) skips itself, and no check may be skipped here
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    with threadpool_limits(1):
        check(estimator)


def test_groups_stay_required_by_default_and_ungrouped_means_one_group_per_row():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 0.0]) + rng.normal(scale=0.1, size=60)
    with pytest.raises(ValueError, match="needs groups="):
        RidgeProbe().fit(X, y)
    ungrouped = RidgeProbe(require_groups=False).fit(X, y)
    one_per_row = RidgeProbe().fit(X, y, groups=np.arange(60))
    np.testing.assert_array_equal(ungrouped.cv_scores_, one_per_row.cv_scores_)
    np.testing.assert_array_equal(ungrouped.coef_, one_per_row.coef_)
    for bad, message in ((dict(alphas=[]), "alphas must be"), (dict(alphas=[0.0, 1.0]), "alphas must be"),
                         (dict(n_splits=1), "n_splits must be"), (dict(standardize="yes"), "standardize must be")):
        with pytest.raises(ValueError, match=message):
            RidgeProbe(**bad).fit(X, y, groups=np.arange(60) // 6)
