"""Width-matched, chance-corrected spectra: a planted 2-D low-frequency manifold in a 16-wide and a 128-wide
table (width-matched numbers agree, raw ones do not), per-PC DCT shares, and the bad widths."""

import numpy as np
import pytest

from dstg_interp.analysis.spectra import analyze_table, random_projections, width_matched

N_POSITIONS = 128


def planted_table(width: int, seed: int = 0, noise: float = 3.0) -> np.ndarray:
    """Two low-frequency curves (DCT bins 1 and 2) mixed into every column with random weights, plus
    isotropic noise: each column is drawn the same way whatever the width."""
    rng = np.random.default_rng(seed)
    n = np.arange(N_POSITIONS)
    curves = np.sqrt(2) * np.column_stack([np.cos(np.pi * (n + 0.5) * k / N_POSITIONS) for k in (1, 2)])
    return curves @ rng.standard_normal((width, 2)).T + noise * rng.standard_normal((N_POSITIONS, width))


def test_planted_manifold_width_matched_agrees_raw_does_not():
    narrow = analyze_table(planted_table(16), match_width=16).summary
    wide = analyze_table(planted_table(128), match_width=16).summary
    spread = wide["matched_pc1_pc2_std"]
    # raw: the wide table looks higher-dimensional, less collapsed and more low-frequency than the narrow one
    assert narrow["pc1_pc2"] - wide["pc1_pc2"] > 2 * spread
    assert wide["participation_ratio"] > 2 * narrow["participation_ratio"]
    assert wide["excess_pc1_pc2"] - narrow["excess_pc1_pc2"] > 0.05
    # width-matched: the same manifold gives the same numbers
    assert abs(wide["matched_pc1_pc2"] - narrow["pc1_pc2"]) < spread
    assert abs(wide["matched_participation_ratio"] - narrow["participation_ratio"]) < 1.0
    assert abs(wide["matched_excess_pc1_pc2"] - narrow["excess_pc1_pc2"]) < 0.03
    assert abs(wide["matched_low_freq_share"] - narrow["low_freq_share"]) < \
        abs(wide["low_freq_share"] - narrow["low_freq_share"]) / 3
    # a projection to the table's own width is a rotation: nothing changes, no spread
    assert narrow["matched_pc1_pc2"] == pytest.approx(narrow["pc1_pc2"]) and narrow["matched_pc1_pc2_std"] == 0.0
    assert wide["matched_projections"] == 50


def test_per_pc_dct_shares():
    n = np.arange(N_POSITIONS)
    slow, fast = np.cos(np.pi * (n + 0.5) / N_POSITIONS), np.cos(np.pi * (n + 0.5) * 40 / N_POSITIONS)
    summary = analyze_table(np.column_stack([2 * slow, fast, 0.01 * np.sin(n)]), n_control_draws=3).summary
    assert summary["pc1_low_freq_share"] > 0.99 and summary["pc2_low_freq_share"] < 0.01
    assert summary["pc2_low_freq_share"] < summary["low_freq_share"] < summary["pc1_low_freq_share"]


def test_random_projections_are_orthonormal():
    bases = random_projections(12, 5, n_projections=4, seed=1)
    for basis in bases:
        np.testing.assert_allclose(basis.T @ basis, np.eye(5), atol=1e-12)


def test_projection_wider_than_the_table_is_refused():
    with pytest.raises(ValueError, match="projection width 32 does not fit a table 16 columns wide"):
        width_matched(planted_table(16), 32)
    with pytest.raises(ValueError, match="n_projections must be at least 1"):
        width_matched(planted_table(16), 8, n_projections=0)
