"""Probes: estimators that read structure out of cached activations.

    from probes import probe_positions, RidgeProbe
    table = probe_positions("dstg", task="segment")      # tidy DataFrame, one row per layer x subspace
"""

from probes.ridge import DEFAULT_ALPHAS, RidgeProbe, fit_ridge_grid
from probes.splits import bootstrap_r2_ci, check_enough_groups, grouped_train_test_split
from probes.holmes import HolmesProbe, ProbeConfig, load_benchmark, run_holmes
from probes.positions import PositionProbeConfig, SmallSampleWarning, probe_positions, probe_store
