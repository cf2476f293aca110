"""The ridge solves (every alpha from one tridiagonal reduction per fold, the refit by one Cholesky solve per chosen
alpha) equal a straightforward reference -- one dense solve of (Z'Z + alpha I) w = Z'y per alpha -- to 1e-8, on
well-conditioned and ill-conditioned features, and the comparison fails on a wrong solve."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import probes.gram as gram
import probes.lapack as lapack
from probes.gram import (
    FoldSums,
    eigen_ridge_path,
    primal_refit,
    ridge_path,
    scale_from_var,
    solve_folds,
    standardized_sums,
)
from probes.lapack import Tridiagonal, solve_positive_definite

ALPHAS = np.logspace(-3, 5, 17)  # probes.ridge.DEFAULT_ALPHAS
TOLERANCE = 1e-8


@pytest.fixture(autouse=True)
def single_blas_thread():
    with threadpool_limits(limits=1):
        yield


def features(kind: str, n: int = 600, p: int = 40, seed: int = 0) -> np.ndarray:
    """``well``: correlated, offset, badly scaled columns. ``ill``: as well plus a near-duplicate column (1e-6
    apart), a constant one, one a million times larger and a block of rank 8 under 1e-7 noise: a standardised
    Gram with eigenvalues from ~1e-9 (and rounding below 0) to ~1e4."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)) @ (np.eye(p) + rng.normal(size=(p, p)) / np.sqrt(p))
    X = X * rng.uniform(0.1, 20.0, p) + rng.normal(0, 50.0, p)
    if kind == "ill":
        X[:, 1] = X[:, 0] + 1e-6 * rng.normal(size=n)
        X[:, 2] = 3.0
        X[:, 3] *= 1e6
        X[:, 12:] = rng.normal(size=(n, 8)) @ rng.normal(size=(8, p - 12)) + 1e-7 * rng.normal(size=(n, p - 12))
    return X


def targets(X: np.ndarray, seed: int = 1) -> np.ndarray:
    """Three targets: a signal of the first columns with noise, the same with little noise, pure noise."""
    rng = np.random.default_rng(seed)
    first = X[:, :6]
    signal = (first - first.mean(0)) / first.std(0).clip(1e-12) @ rng.normal(size=first.shape[1])
    return np.column_stack([signal + rng.normal(size=len(X)), signal + 0.01 * rng.normal(size=len(X)),
                            rng.normal(size=len(X)) + 100.0])


def direct_ridge(z_gram: np.ndarray, z_y: np.ndarray, alpha: float) -> np.ndarray:
    """The reference: one dense solve (LU) of (Z'Z + alpha I) w = Z'y."""
    return np.linalg.solve(z_gram + alpha * np.eye(len(z_gram)), z_y)


def assert_close(actual, expected, name: str) -> None:
    """Equal to ``TOLERANCE`` relative to the largest value compared (so a tiny coefficient beside large ones is
    held to the scale of the solution, not to its own)."""
    scale = max(float(np.abs(expected).max()), 1e-300)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=TOLERANCE * scale, err_msg=name)


def standardized(kind: str, p: int = 40):
    X = features(kind, p=p)
    Y = targets(X)
    return standardized_sums(X.T @ X, X.sum(0), X.T @ Y, Y.sum(0), float(len(X)), True)[:2]


# ----------------------------------------------------------------------------- the solves themselves
@pytest.mark.parametrize("kind", ["well", "ill"])
def test_every_alpha_equals_a_dense_solve(kind):
    z_gram, z_y = standardized(kind)
    if kind == "ill":  # as ill-conditioned as it says: Z'Z + 1e-3 I has a condition number above 1e6
        eigenvalues = np.linalg.eigvalsh(z_gram) + ALPHAS[0]
        assert eigenvalues[-1] / eigenvalues[0] > 1e6
    W = ridge_path(z_gram, z_y, ALPHAS)
    assert W.shape == (len(z_gram), len(ALPHAS), z_y.shape[1])
    eigen = eigen_ridge_path(z_gram, z_y, ALPHAS)  # what every solve used before
    for a, alpha in enumerate(ALPHAS):
        reference = direct_ridge(z_gram, z_y, alpha)
        assert_close(W[:, a], reference, f"alpha {alpha:g}")
        assert_close(W[:, a], eigen[:, a], f"alpha {alpha:g} against the eigendecomposition")
        shifted = z_gram + alpha * np.eye(len(z_gram))
        residual = shifted @ W[:, a] - z_y  # backward stable: a residual at the rounding of the product
        assert np.abs(residual).max() <= 1e-12 * (np.abs(shifted).max() * np.abs(W[:, a]).max() + np.abs(z_y).max())


@pytest.mark.parametrize("p", [1, 2, 5])
def test_every_alpha_on_the_smallest_grams(p):
    z_gram, z_y = standardized("well", p=p)
    W = ridge_path(z_gram, z_y, ALPHAS)
    for a, alpha in enumerate(ALPHAS):
        assert_close(W[:, a], direct_ridge(z_gram, z_y, alpha), f"p {p}, alpha {alpha:g}")


@pytest.mark.parametrize("kind", ["well", "ill"])
def test_the_refit_equals_a_dense_solve_at_each_targets_alpha(kind):
    X = features(kind)
    Y = targets(X)
    sums = (X.T @ X, X.sum(0), X.T @ Y, Y.sum(0), float(len(X)))
    chosen = ALPHAS[[0, 8, 0]]  # two targets share an alpha, one has its own
    coef, mean, scale, y_mean = primal_refit(*sums, chosen, True)
    z_gram, z_y, ref_mean, ref_scale, ref_y_mean = standardized_sums(*sums, True)
    for j, alpha in enumerate(chosen):
        assert_close(coef[:, j], direct_ridge(z_gram, z_y[:, j], alpha), f"target {j}")
    assert np.array_equal(mean, ref_mean) and np.array_equal(scale, ref_scale) and np.array_equal(y_mean, ref_y_mean)


def test_not_positive_definite_falls_back_to_the_eigendecomposition():
    """A shifted Gram that is not numerically positive definite (here an indefinite one, standardize off) is
    solved as before, by the eigendecomposition, in both the path and the refit; LAPACK's refusal is an error."""
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    indefinite = basis @ np.diag([-1.0, 0.5, 1.0, 2.0, 3.0, 4.0]) @ basis.T
    z_y = rng.normal(size=(6, 2))
    with pytest.raises(np.linalg.LinAlgError):
        Tridiagonal.of(indefinite).solve_shifted(1e-3, z_y)
    with pytest.raises(np.linalg.LinAlgError):
        solve_positive_definite(indefinite, z_y, shift=1e-3)
    np.testing.assert_array_equal(ridge_path(indefinite, z_y, ALPHAS), eigen_ridge_path(indefinite, z_y, ALPHAS))
    coef, *_ = primal_refit(indefinite, np.zeros(6), z_y, np.zeros(2), 10.0, ALPHAS[[0, 0]], False)
    np.testing.assert_array_equal(coef, eigen_ridge_path(indefinite, z_y, ALPHAS[:1])[:, 0])


# ----------------------------------------------------------------------------- a whole grouped-CV fit
def fold_sums(kind: str) -> FoldSums:
    """Sums of 5 CV folds and a held-out part (documents of 20 rows), as fit_ridge_grid forms them."""
    X = features(kind)
    Y = targets(X)
    part = (np.arange(len(X)) // 20) % 6  # part 5 is held out
    return FoldSums.accumulate(X, np.arange(len(X)), part, Y, 5, held_out=True)


def reference_fit(sums: FoldSums, alphas: np.ndarray):
    """Grouped-CV ridge as the textbook writes it, from the same sums: per fold and alpha, standardise the training
    sums, solve densely, score the fold; the refit at each target's best alpha; the held-out R². Returns
    (fold_scores, cv_scores, best, coef, intercept, mean, scale, test_r2)."""
    def standardise(g, s, xy, ys, n):
        mean = s / n
        cov = g - n * np.outer(mean, mean)
        scale = scale_from_var(np.diag(cov) / n, mean, n, True)
        return cov / np.outer(scale, scale), (xy - np.outer(mean, ys)) / scale[:, None], mean, scale, ys / n

    k = sums.y_sum.shape[1]
    fold_scores = np.empty((sums.n_folds, len(alphas), k))
    for f in range(sums.n_folds):
        z_gram, z_y, mean, scale, y_mean = standardise(*sums.train(f))
        W = np.stack([direct_ridge(z_gram, z_y, alpha) for alpha in alphas], axis=1) / scale[:, None, None]
        fold_scores[f] = sums.validation_r2(f, W, y_mean - np.einsum("p,pak->ak", mean, W))
    cv_scores = fold_scores.mean(axis=0)
    best = np.argmax(cv_scores, axis=0)
    z_gram, z_y, mean, scale, y_mean = standardise(*sums.totals())
    coef = np.column_stack([direct_ridge(z_gram, z_y[:, j], alphas[best[j]]) for j in range(k)])
    W = (coef / scale[:, None])[:, None, :]
    test_r2 = sums.validation_r2(sums.n_folds, W, (y_mean - mean @ W[:, 0, :])[None, :])[0]
    return fold_scores, cv_scores, best, coef, y_mean + sums.y_shift, mean + sums.x_shift, scale, test_r2


def assert_same_fit(fit, reference) -> None:
    fold_scores, cv_scores, best, coef, intercept, mean, scale, test_r2 = reference
    np.testing.assert_array_equal(fit.best, best, err_msg="the chosen alphas")
    for name, actual, expected in [("fold_scores", fit.fold_scores, fold_scores), ("cv_scores", fit.cv_scores, cv_scores),
                                   ("intercept", fit.intercept, intercept), ("mean", fit.mean, mean),
                                   ("scale", fit.scale, scale), ("test_r2", fit.test_r2, test_r2)]:
        np.testing.assert_allclose(actual, expected, rtol=0, atol=TOLERANCE, err_msg=name)
    for j in range(coef.shape[1]):
        assert_close(fit.coef[:, j], coef[:, j], f"coef of target {j}")


@pytest.mark.parametrize("kind", ["well", "ill"])
def test_solve_folds_equals_the_reference(kind):
    sums = fold_sums(kind)
    fit = solve_folds(sums, ALPHAS, True)
    assert len(set(fit.best)) > 1  # the targets choose different alphas: each refit alpha is exercised
    assert_same_fit(fit, reference_fit(sums, ALPHAS))


def q_instead_of_q_transposed(self, values):
    return self._apply(values, b"N")


def cholesky_at_twice_the_alpha(matrix, values, shift=0.0):
    return np.linalg.solve(matrix + 2 * shift * np.eye(len(matrix)), values)


def eigenvalues_off_by_a_little(z_gram, z_y, alphas):
    return eigen_ridge_path(z_gram * (1 + 1e-6), z_y, alphas)


@pytest.mark.parametrize("wrong", [(lapack.Tridiagonal, "rotate", q_instead_of_q_transposed),
                                   (gram, "solve_positive_definite", cholesky_at_twice_the_alpha),
                                   (gram, "ridge_path", eigenvalues_off_by_a_little)],
                         ids=["path: Q for Q'", "refit: twice the alpha", "path: Gram off by 1e-6"])
@pytest.mark.parametrize("kind", ["well", "ill"])
def test_the_comparison_fails_on_a_wrong_solve(kind, wrong, monkeypatch):
    sums = fold_sums(kind)
    reference = reference_fit(sums, ALPHAS)
    monkeypatch.setattr(*wrong)
    with pytest.raises(AssertionError):
        assert_same_fit(solve_folds(sums, ALPHAS, True), reference)
