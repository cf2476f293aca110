"""Probes: estimators that read structure out of cached activations.

    from probes import probe_positions, RidgeProbe
    table = probe_positions("dstg", task="segment")      # tidy DataFrame, one row per layer x subspace

The public names load on first use (PEP 562), as in ``dstg_interp``: ``from probes import RidgeProbe`` loads
numpy and the ridge module only, not torch or the Holmes runner.
"""

from dstg_interp.lazy import lazy_face

_EXPORTS = {
    "DEFAULT_ALPHAS": "probes.ridge", "RidgeProbe": "probes.ridge", "fit_ridge_grid": "probes.ridge",
    "bootstrap_r2_ci": "probes.splits", "check_enough_groups": "probes.splits",
    "grouped_train_test_split": "probes.splits",
    "HolmesProbe": "probes.holmes", "HolmesProbeConfig": "probes.holmes", "load_benchmark": "probes.holmes",
    "run_holmes": "probes.holmes",
    "PositionProbeConfig": "probes.positions", "SmallSampleWarning": "probes.positions",
    "probe_positions": "probes.positions", "probe_store": "probes.positions", "probe_sequences": "probes.positions",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
