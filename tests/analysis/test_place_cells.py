"""Place cells: synthetic latents with known receptive fields (Gaussian bumps over position) are recovered --
peaks within one position, widths within 20 % -- latents that ignore position are not tuned (the document
confound included, through the within-document shuffle), the latents sit on the position curve where their
peaks are, and bad input is one clear ValueError."""

import numpy as np
import pytest

from dstg_interp.analysis.place_cells import FWHM_PER_SD, peaks_and_widths, place_cells, tiling

N_SEQUENCES, LENGTH = 200, 64
PEAKS = np.array([8, 15, 22, 30, 37, 44, 50, 56])
SDS = np.array([1.5, 2, 3, 4, 2.5, 3.5, 2, 1.5])


def synthetic(seed=0, n_blind=30):
    """200 sequences of 64 positions; 8 place cells (a Gaussian bump over position times an exponential gain per
    token) then ``n_blind`` sparse latents that ignore position (firing on 10 % of tokens at random)."""
    rng = np.random.default_rng(seed)
    positions = np.tile(np.arange(LENGTH), N_SEQUENCES)
    groups = np.repeat(np.arange(N_SEQUENCES), LENGTH)
    bumps = np.exp(-(positions[:, None] - PEAKS) ** 2 / (2 * SDS**2)) * rng.exponential(1.0, (len(positions), 8))
    blind = (rng.random((len(positions), n_blind)) < 0.1) * rng.exponential(1.0, (len(positions), n_blind))
    return np.hstack([bumps, blind]), positions, groups


def test_gaussian_place_cells_are_recovered_and_position_blind_latents_are_not_tuned():
    codes, positions, groups = synthetic()
    cells = place_cells(codes, positions, groups)
    place, blind = cells.table.iloc[:8], cells.table.iloc[8:]
    assert np.abs(place.peak.to_numpy() - PEAKS).max() <= 1
    ratio = place.width.to_numpy() / (FWHM_PER_SD * SDS)
    assert np.all(np.abs(ratio - 1) <= 0.2), ratio  # measured 0.92 .. 1.11
    assert place.tuned.all() and not place.cut.any() and (place.eta2 > 0.4).all()  # measured 0.44 .. 0.49
    assert not blind.tuned.any() and (blind.eta2 < 0.01).all()  # measured 0.004 .. 0.006; threshold 0.0067
    assert 0 < cells.threshold < 0.01 and cells.null.shape == (5, 38)
    assert cells.fields.shape == (38, LENGTH) and list(cells.positions) == list(range(LENGTH))
    assert np.allclose(cells.fields[:, 10], codes[positions == 10].mean(axis=0))
    # eta2 by hand for one latent: between-position over total sum of squares
    a = codes[:, 3]
    means = np.array([a[positions == t].mean() for t in range(LENGTH)])
    by_hand = (N_SEQUENCES * (means - a.mean()) ** 2).sum() / ((a - a.mean()) ** 2).sum()
    assert cells.table.eta2[3] == pytest.approx(by_hand)


def test_the_width_is_the_interpolated_full_width_at_half_maximum():
    positions = np.arange(11)
    triangle = np.maximum(0, 4 - np.abs(positions - 5)).astype(float)  # base 0, peak 4 at 5: half level 2 at 3 and 7
    edge = np.linspace(1, 0, 11)  # peak at the first position: cut there
    peaks, widths, cut = peaks_and_widths(np.stack([triangle, edge, np.ones(11)]), positions)
    assert list(peaks) == [5, 0, 0] and widths[0] == pytest.approx(4) and not cut[0]
    assert widths[1] == pytest.approx(5) and cut[1]  # from position 0 to the half level at 5
    assert np.isnan(widths[2])  # a flat field has no half maximum


def test_a_latent_that_tracks_documents_is_not_taken_for_a_place_cell():
    # documents of 16 to 64 tokens; a latent fires more in long documents, so late positions (seen only in long
    # documents) have a higher mean: a global shuffle breaks that and calls it tuned, the within-document one not
    rng = np.random.default_rng(1)
    lengths = rng.integers(16, 65, 300)
    positions = np.concatenate([np.arange(n) for n in lengths])
    groups = np.repeat(np.arange(300), lengths)
    level = np.repeat(lengths / 64.0, lengths)
    codes = (level * rng.exponential(1.0, len(positions)))[:, None] * (rng.random((len(positions), 3)) < 0.5)
    within = place_cells(codes, positions, groups)
    globally = place_cells(codes, positions)
    assert not within.table.tuned.any() and globally.table.tuned.all()


def test_the_latents_sit_on_the_position_curve_at_their_peaks():
    # states = codes @ decoder: the place cells' directions go round a circle in the order of their peaks, so the
    # curve of per-position means is a loop and each latent's point points where the curve is at its peak
    codes, positions, groups = synthetic(n_blind=10)
    rng = np.random.default_rng(2)
    angle = 2 * np.pi * PEAKS / LENGTH
    decoder = np.zeros((18, 5))
    decoder[:8, 0], decoder[:8, 1] = np.cos(angle), np.sin(angle)
    decoder[8:] = 0.3 * rng.standard_normal((10, 5))
    states = codes @ decoder + 0.05 * rng.standard_normal((len(codes), 5))
    cells = place_cells(codes, positions, groups)
    curve, points, share = tiling(decoder, cells, states, positions)
    assert list(curve.columns) == ["position", "pc1", "pc2"] and len(curve) == LENGTH and points.shape == (18, 2)
    assert share > 0.95  # measured 0.99
    at_peak = curve.set_index("position").loc[cells.table.peak[:8].astype(int), ["pc1", "pc2"]].to_numpy()
    turn = np.angle((points[:8, 0] + 1j * points[:8, 1]) / (at_peak[:, 0] + 1j * at_peak[:, 1]))
    assert np.degrees(np.abs(turn)).max() < 25  # measured 14
    with pytest.raises(ValueError, match=r"decoder must be \[m, d\] = \[18, 5\]"):
        tiling(decoder[:, :4], cells, states, positions)


@pytest.mark.parametrize("change, message", [
    (lambda c, p, g: (np.where(np.arange(c.shape[1]) == 2, np.nan, c), p, g), "NaN or infinite"),
    (lambda c, p, g: (c, p[:-1], g), r"codes must be \[n, m\] and positions \[n\]"),
    (lambda c, p, g: (c[:, 0], p, g), r"codes must be \[n, m\]"),
    (lambda c, p, g: (c, np.zeros_like(p), g), "2 positions or more, got 1"),
    (lambda c, p, g: (c, p - 1, g), "integers >= 0"),
    (lambda c, p, g: (c, p.astype(float), g), "integers >= 0"),
    (lambda c, p, g: (c, p, g[:10]), "one group .* per token"),
])
def test_bad_input_is_one_clear_value_error(change, message):
    codes, positions, groups = synthetic(n_blind=2)
    with pytest.raises(ValueError, match=message):
        place_cells(*change(codes, positions, groups))
    with pytest.raises(ValueError, match="n_shuffles"):
        place_cells(codes, positions, n_shuffles=0)
    with pytest.raises(ValueError, match="quantile"):
        place_cells(codes, positions, quantile=1.0)
