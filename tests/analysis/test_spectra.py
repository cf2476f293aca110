"""Spectra: PCA and DCT on synthetic tables with known answers, the Gaussian control, model tables."""

import json

import numpy as np
import pytest
import torch

from conftest import tiny_model
from dstg_interp.analysis.spectra import (
    analyze_table,
    dct_power,
    participation_ratio,
    pca,
    per_position_mean,
    position_table,
    random_control,
    spectra_table,
)

torch.set_num_threads(1)


def cosine(n_positions: int, periods: float) -> np.ndarray:
    """cos(2 pi f (n + 1/2) / P): exactly DCT-II basis vector 2f."""
    n = np.arange(n_positions)
    return np.cos(2 * np.pi * periods * (n + 0.5) / n_positions)


@pytest.mark.parametrize("periods", [1, 2, 3, 5])
def test_cosine_of_frequency_f_puts_its_power_in_bin_2f(periods):
    power = dct_power(cosine(64, periods)[:, None])[:, 0]
    assert int(power.argmax()) == 2 * periods
    assert power[2 * periods] / power.sum() == pytest.approx(1.0, abs=1e-12)


def test_rank_two_table_has_all_variance_in_two_pcs_and_they_are_the_cosines():
    rng = np.random.default_rng(0)
    n_positions, width = 50, 16
    # two orthogonal curves (frequencies 1 and 3) along two orthonormal random directions
    curves = np.stack([3.0 * cosine(n_positions, 1), cosine(n_positions, 3)], axis=1)  # [P, 2]
    directions = np.linalg.qr(rng.standard_normal((width, 2)))[0].T  # [2, d], orthonormal rows
    table = curves @ directions + rng.standard_normal(width)  # + a constant row offset
    spectrum = analyze_table(table, name="rank2", n_control_draws=0)
    assert spectrum.summary["pc1_pc2"] == pytest.approx(1.0, abs=1e-10)
    assert spectrum.variance.cumulative.iloc[1] == pytest.approx(1.0, abs=1e-10)
    assert spectrum.variance.ratio.iloc[2:].max() < 1e-12
    # each leading PC is one of the cosines, so its DCT power sits in one bin: 2 (f=1) and 6 (f=3)
    dct_table = spectrum.dct
    peak = dct_table.loc[dct_table.groupby("pc").power.idxmax()].set_index("pc")
    assert sorted(peak.bin) == [2, 6]
    assert (peak.share > 0.999).all()
    # f=1 is inside the first four bins and f=3 is not
    assert sorted(spectrum.summary["low_freq_share_per_pc"]) == pytest.approx([0.0, 1.0], abs=1e-9)
    assert spectrum.summary["participation_ratio"] < 2.0


def test_rank_one_table_and_participation_ratio():
    ratios, scores = pca(np.outer(np.arange(10.0), [1.0, 2.0, -1.0]))
    assert ratios[0] == pytest.approx(1.0)
    assert participation_ratio(ratios) == pytest.approx(1.0)
    assert participation_ratio(np.full(8, 1 / 8)) == pytest.approx(8.0)
    assert scores[-1, 0] > scores[0, 0]  # sign convention: PC curves rise along position


def test_gaussian_control_matches_its_expected_values():
    n_positions, width = 64, 8
    control = random_control((n_positions, width), n_draws=100, seed=0)
    # centred white noise along position: first 4 bins hold ~ 3 / (P - 1) of the power (bin 0 is empty)
    assert control["low_freq_share"] == pytest.approx(3 / (n_positions - 1), rel=0.3)
    # sample covariance of isotropic noise: PR ~ d / (1 + d / P)
    assert control["participation_ratio"] == pytest.approx(width / (1 + width / n_positions), rel=0.05)
    assert 2 / width < control["pc1_pc2"] < 0.45
    assert control == random_control((n_positions, width), n_draws=100, seed=0)  # seeded


def test_smooth_table_beats_its_control_and_results_are_json_ready():
    positions = np.arange(40)
    angle = np.pi * positions / 40
    table = np.stack([np.cos(angle), np.sin(angle), 0.05 * np.sin(7 * angle)], axis=1) @ np.eye(3, 6)
    spectrum = analyze_table(table, name="arc", n_control_draws=10)
    summary = spectrum.summary
    assert summary["pc1_pc2"] > 0.99 and summary["low_freq_share"] > 0.95
    assert summary["control"]["pc1_pc2"] < 0.7 and summary["control"]["low_freq_share"] < 0.3
    json.dumps(spectrum.to_dict())  # plain types only
    row = spectra_table([spectrum]).iloc[0]
    assert row["name"] == "arc" and row["control_pc1_pc2"] == summary["control"]["pc1_pc2"]
    assert set(spectrum.curves.columns) == {"position", "pc", "score"} and len(spectrum.curves) == 2 * 40


def test_per_position_mean_recovers_the_table_it_was_built_from():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((12, 5))
    token_positions = rng.integers(0, 12, 600)
    states = table[token_positions] + 0.01 * rng.standard_normal((600, 5))
    means, positions = per_position_mean(torch.tensor(states), token_positions)
    assert list(positions) == sorted(set(token_positions))
    assert np.allclose(means, table[positions], atol=0.01)
    means, positions = per_position_mean(states, np.r_[token_positions[:-1], 30], min_count=2)
    assert 30 not in positions
    with pytest.raises(ValueError, match="n_tokens"):
        per_position_mean(states, token_positions[:10])


def test_model_tables_and_the_no_table_message():
    table = position_table(tiny_model("dstg"))
    assert table.shape == (40, 8)
    assert position_table(tiny_model("ap")).shape == (40, 32)
    for variant in ("rope", "rp"):
        with pytest.raises(ValueError, match="per_position_mean"):
            position_table(tiny_model(variant))


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="positions"):
        analyze_table(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="NaN"):
        analyze_table(np.full((5, 4), np.nan))
