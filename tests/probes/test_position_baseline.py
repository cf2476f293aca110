"""Position-only baselines: known answers (a target that is a function of token position, one independent of
it), the paired bootstrap, the CSV columns of dstg-probe, and the bad inputs."""

import numpy as np
import pandas as pd
import pytest

from probes.position_baseline import BASELINE_COLUMNS, position_means
from probes.positions import RESULT_COLUMNS, PositionProbeConfig, probe_store
from probes.splits import bootstrap_r2_ci, bootstrap_r2_difference_ci, check_fold_variance

N_DOCS, LENGTH = 60, 40


class MemoryStore:
    """The parts of an ActivationStore that probe_store reads, in memory."""

    def __init__(self, labels: pd.DataFrame, states: dict):
        self.labels, self._states = labels, states
        self.layers, self.subspaces, self.n_tokens = (0,), tuple(states), len(labels)

    def states(self, layer, subspace):
        return self._states[subspace]

    def subsample(self, n, seed=0, exclude_special=True):
        return np.arange(self.n_tokens)


def synthetic_store(seed=0, lengths=None):
    """Documents of LENGTH tokens; sentence index an exact function of token position; intra-sentence
    position drawn independently of it.  Subspaces: 'position' (a random code of token position only) and
    'target' (the intra target itself, plus noise dimensions)."""
    rng = np.random.default_rng(seed)
    position = np.tile(np.arange(LENGTH), N_DOCS)
    labels = pd.DataFrame(dict(token_position=position, doc_index=np.repeat(np.arange(N_DOCS), LENGTH),
                               sentence_index=position // 8, intra_sentence_position=rng.integers(0, 5, len(position))))
    code = rng.standard_normal((LENGTH, 12))[position]
    target = np.column_stack([labels.intra_sentence_position, rng.standard_normal((len(position), 3))])
    return MemoryStore(labels, {"position": code.astype(np.float32), "target": target.astype(np.float32)})


def probe(store, task, **kwargs):
    return probe_store(store, PositionProbeConfig(task=task, n_boot=200, controls=False, **kwargs), "synthetic").set_index("subspace")


def test_target_an_exact_function_of_position():
    table = probe(synthetic_store(), "segment")
    assert sorted(table.reset_index().columns) == sorted(RESULT_COLUMNS)
    for row in table.itertuples():
        assert row.position_r2 > 0.999 and row.position_ci_low > 0.99  # position alone explains it
        assert row.partial_r2 == 0.0 and row.partial_ci_low == row.partial_ci_high == 0.0  # nothing left
        assert row.position_selectivity <= 1e-6 and row.position_selectivity_ci_high <= 1e-6
    assert table.loc["position", "r2"] > 0.2  # the states do encode it (through position)
    assert 0.8 < table.loc["position", "position_smooth_r2"] < table.loc["position", "position_r2"]


def test_target_independent_of_position():
    table = probe(synthetic_store(), "intra")
    for row in table.itertuples():
        assert abs(row.position_r2) < 0.02 and abs(row.position_smooth_r2) < 0.02
    # the random position code carries none of it, the states that hold the target all of it
    assert abs(table.loc["position", "partial_r2"]) < 0.02 and table.loc["position", "partial_ci_low"] < 0.0 + 1e-3
    target = table.loc["target"]
    assert target.partial_r2 > 0.999 and target.position_selectivity_ci_low > 0.99


def test_partial_r2_is_the_share_of_the_residual():
    """Target = position part + a part only the states know: partial R² ~ that part's share of the residual."""
    store = synthetic_store(seed=1)
    rng = np.random.default_rng(3)
    hidden = rng.standard_normal(store.n_tokens)
    noise = rng.standard_normal(store.n_tokens)
    store.labels["sentence_index"] = store.labels.token_position / 4 + hidden + noise  # residual: hidden + noise
    store._states["target"] = np.column_stack([hidden, rng.standard_normal((store.n_tokens, 3))]).astype(np.float32)
    row = probe(store, "segment").loc["target"]
    assert 0.4 < row.partial_r2 < 0.6 and row.partial_ci_low < 0.5 < row.partial_ci_high


def test_position_means_is_the_one_hot_least_squares_fit():
    position = np.array([0, 1, 0, 2, 1, 3])
    values = np.array([1.0, 2.0, 3.0, 4.0, 6.0, 9.0])
    fitted = position_means(values, position, train=np.arange(5))  # position 3 unseen: the training mean
    np.testing.assert_allclose(fitted, [2.0, 4.0, 2.0, 4.0, 4.0, 16.0 / 5])


def test_paired_bootstrap_difference():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(30), 20)
    y = rng.standard_normal(len(groups))
    good, bad = y + 0.3 * rng.standard_normal(len(y)), y + 1.0 * rng.standard_normal(len(y))
    low, high = bootstrap_r2_difference_ci(y, good, bad, groups, n_boot=300)
    assert 0 < low < high
    low, high = bootstrap_r2_difference_ci(y, good, good, groups, n_boot=300)
    assert low == high == 0.0
    # the shared resampling leaves the one-model interval as it was
    assert bootstrap_r2_ci(y, good, groups, n_boot=300) == bootstrap_r2_ci(y, good, groups, n_boot=300, seed=0)


def test_no_variance_inside_a_fold_is_refused():
    store = synthetic_store()
    # one document with several sentences, every other in one: some CV fold has a constant target
    store.labels.loc[store.labels.doc_index > 0, "sentence_index"] = 0
    with pytest.raises(ValueError, match="no variance inside fold"):
        probe(store, "segment")
    with pytest.raises(ValueError, match="fold 2 of 3 of the grouped CV"):
        check_fold_variance(np.array([1.0, 2.0, 3.0, 3.0, 1.0]), np.array([0, 0, 1, 1, 2]), "y")


def test_a_store_without_token_positions_is_refused():
    store = synthetic_store()
    store.labels = store.labels.drop(columns="token_position")
    with pytest.raises(ValueError, match="no 'token_position' labels"):
        probe(store, "segment")


def test_the_baseline_can_be_left_out():
    table = probe(synthetic_store(), "intra", position_baseline=False)
    assert table[BASELINE_COLUMNS].isna().all().all() and table.r2.notna().all()
