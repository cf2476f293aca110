"""analysis.geometry: the numbers of a position table against values computed here, MDS stress on known shapes,
the outlier rule on planted dimensions, and the storeless sums against the states themselves."""

import numpy as np
import pytest
import torch
from scipy.fft import dct

from dstg_interp import open_encoder
from dstg_interp.analysis.geometry import (PositionStatistics, classical_mds, euclidean_distances, layer_statistics,
                                           mds_stress, outlier_dimensions, state_geometry, stress_control,
                                           table_geometry)
from dstg_interp.analysis.spectra import per_position_mean, smooth_controls
from dstg_interp.tiny_zoo import tiny_zoo
from probes.positions import probing_sequences

torch.set_num_threads(1)


def sinusoidal_table(n_positions: int = 128, width: int = 16) -> np.ndarray:
    """BERT's / Vaswani's fixed table: sin and cos of position / 10000^(2i/d)."""
    angles = np.arange(n_positions)[:, None] / 10000 ** (2 * np.arange(width // 2)[None] / width)
    table = np.zeros((n_positions, width))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


def numbers_by_hand(table: np.ndarray) -> dict:
    """PC1+PC2, PCs to 95%, participation ratio and the bins-0..3 DCT share of PC1 and PC2, from an SVD here."""
    centred = table - table.mean(axis=0)
    _, s, _ = np.linalg.svd(centred, full_matrices=False)
    variance = s**2 / (s**2).sum()
    scores = np.linalg.svd(centred, full_matrices=False)[0][:, :2] * s[:2]
    power = dct(scores, type=2, norm="ortho", axis=0) ** 2
    return {"pc1_pc2": variance[:2].sum(), "pcs_95": int(np.argmax(np.cumsum(variance) >= 0.95 - 1e-12) + 1),
            "participation_ratio": variance.sum() ** 2 / (variance**2).sum(),
            "low_freq_share": power[:4].sum() / power.sum()}


@pytest.mark.parametrize("kind", ["sinusoidal", "learned random"])
def test_a_table_row_has_the_pca_and_dct_numbers_computed_independently(kind):
    table = sinusoidal_table() if kind == "sinusoidal" else np.random.default_rng(3).standard_normal((128, 16))
    row = table_geometry(table, seed=0, n_stress_draws=5)
    expected = numbers_by_hand(table)
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert row["low_freq_bins"] == "0-3" and row["n_positions"] == 128 and row["width"] == 16
    if kind == "sinusoidal":  # eight frequencies, the slowest barely turning over 128 positions: not a 2-D plane
        assert 0.3 < row["pc1_pc2"] < 0.4 and row["pcs_95"] == 7
    else:  # white noise: PC1+PC2 near 2/16, no low-frequency excess
        assert row["pc1_pc2"] < 0.3 and row["low_freq_share"] < 0.2
    # the controls are spectra.smooth_controls' own numbers, not a copy of them
    controls = smooth_controls(table, seed=0)
    for key in ("walk_pc1_pc2", "walk_pc1_pc2_q95", "smoothed_participation_ratio_q95", "walk_low_freq_share"):
        assert row[key] == controls[key]


def test_mds_stress_is_zero_on_a_plane_and_clearly_positive_for_a_random_table():
    rng = np.random.default_rng(0)
    plane = rng.standard_normal((100, 2)) @ rng.standard_normal((2, 40)) + rng.standard_normal(40)  # a 2-D affine plane
    circle = np.c_[np.cos(np.linspace(0, 2 * np.pi, 64)), np.sin(np.linspace(0, 2 * np.pi, 64))] @ rng.standard_normal((2, 8))
    random = rng.standard_normal((128, 64))
    assert mds_stress(plane) < 1e-9 and mds_stress(circle) < 1e-9
    assert mds_stress(random) > 0.6  # measured 0.75: a 2-D map keeps little of 64 independent directions
    helix = np.c_[np.cos(np.arange(64) / 4), np.sin(np.arange(64) / 4), np.arange(64) / 16]
    assert 0.05 < mds_stress(helix) < mds_stress(random)  # a third direction the plane cannot hold


def test_classical_mds_of_euclidean_distances_recovers_them_up_to_rotation():
    points = np.random.default_rng(1).standard_normal((30, 2))
    embedded = classical_mds(euclidean_distances(points))
    np.testing.assert_allclose(euclidean_distances(embedded), euclidean_distances(points), atol=1e-9)
    with pytest.raises(ValueError, match="square"):
        classical_mds(np.zeros((3, 4)))


def test_the_stress_control_is_seeded_and_a_walk_sits_between_a_plane_and_noise():
    walk = stress_control((128, 16), "walk", n_draws=10, seed=0)
    assert walk == stress_control((128, 16), "walk", n_draws=10, seed=0)
    assert 0.05 < walk["q05"] <= walk["mean"] <= walk["q95"] < 0.5  # measured mean ~0.2
    smoothed = stress_control((128, 16), "smoothed", roughness=0.0, n_draws=10, seed=0)
    assert smoothed["mean"] > walk["q95"]  # rough noise needs more than a plane
    with pytest.raises(ValueError, match="roughness"):
        stress_control((128, 16), "smoothed")


def planted_statistics(plant: str | None, n_docs: int = 60, n_positions: int = 32, width: int = 24):
    """Per-token states of ``n_docs`` sequences (N(0, 1) per dimension) with dimension 5 set to the position
    (``"position"``), to a large constant plus noise (``"constant"``), or left alone (None)."""
    rng = np.random.default_rng(7)
    positions = np.tile(np.arange(n_positions), n_docs)
    states = rng.standard_normal((len(positions), width))
    if plant == "position":
        states[:, 5] = positions
    elif plant == "constant":
        states[:, 5] = 20 + rng.standard_normal(len(positions))
    statistics = PositionStatistics(n_positions, width)
    for part in np.array_split(np.arange(len(positions)), 7):  # summed in batches, as in the forward pass
        statistics.add(states[part], positions[part])
    return statistics, states, positions


def test_a_planted_position_outlier_is_found_and_none_is_reported_without_one():
    found, states, positions = planted_statistics("position")
    magnitude, r2 = found.dimension_numbers()
    np.testing.assert_allclose(magnitude, np.abs(states).mean(axis=0))
    assert r2[5] == pytest.approx(1.0) and r2[np.arange(24) != 5].max() < 0.05
    assert outlier_dimensions(magnitude, r2) == [5]
    assert state_geometry(found, min_count=5)["outlier_dims"] == "5"
    for plant in (None, "constant"):  # nothing planted; a large dimension position does not predict
        statistics = planted_statistics(plant)[0]
        assert outlier_dimensions(*statistics.dimension_numbers()) == [], plant
        row = state_geometry(statistics, min_count=5, n_stress_draws=3)
        assert row["n_outlier_dims"] == 0 and row["outlier_dims"] == ""


def test_position_statistics_give_the_per_position_means_and_the_position_share():
    statistics, states, positions = planted_statistics("position")
    table, kept = statistics.means()
    expected, expected_kept = per_position_mean(states, positions)
    np.testing.assert_allclose(table, expected)
    np.testing.assert_array_equal(kept, expected_kept)
    share, chance = statistics.position_share()
    centred = states - states.mean(axis=0)
    between = sum(((positions == p).sum() * (expected[p] - states.mean(axis=0)) ** 2).sum() for p in kept)
    assert share == pytest.approx(between / (centred**2).sum())
    assert chance == pytest.approx(31 / (len(positions) - 1))
    with pytest.raises(ValueError, match="positions must lie"):
        statistics.add(states[:2], [0, 99])
    with pytest.raises(ValueError, match="only 0 positions"):
        state_geometry(statistics, min_count=10_000)


def test_layer_statistics_sum_the_states_of_one_forward_pass():
    """The storeless sums equal the per-position means of the states themselves ([CLS] / [SEP] left out), and the
    DSTG embedding's AP stream is its table: position explains all of it."""
    models, documents = tiny_zoo(["dstg"], n_docs=12)
    encoder = open_encoder(models["dstg"])
    sequences = probing_sequences(encoder, documents)
    statistics = layer_statistics(encoder, sequences, layers=[0, 2], subspaces=["ap", "full"], batch_size=5)
    assert set(statistics) == {(0, "ap"), (0, "full"), (2, "ap"), (2, "full")}
    ids = [sequences[i]["input_ids"] for i in range(len(sequences))]
    special = np.concatenate([sequences[i]["is_special"] for i in range(len(sequences))])
    rows = [encoder.states(torch.as_tensor(row)[None], [2], ["full"])[(2, "full")][0] for row in ids]
    states = torch.cat(rows).double().numpy()
    positions = np.concatenate([np.arange(len(row)) for row in ids])
    expected, kept = per_position_mean(states[~special], positions[~special])
    table, got_kept = statistics[(2, "full")].means()
    np.testing.assert_array_equal(got_kept, kept)
    np.testing.assert_allclose(table, expected, atol=1e-5)
    assert statistics[(2, "full")].n_tokens == int((~special).sum())
    ap_share = statistics[(0, "ap")].position_share()[0]
    assert ap_share == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(statistics[(0, "ap")].means()[0],
                               models["dstg"].ap_table.detach().double().numpy()[kept], atol=1e-5)


def test_a_balanced_selection_holds_every_position_by_the_same_sequences():
    """The longest length min_count sequences reach, those sequences, and the positions below it where each holds a
    content token: the summed counts are then equal at every kept position, which they are not over all sequences."""
    from dstg_interp.analysis.geometry import balanced_selection
    chosen, below = balanced_selection([5, 9, 9, 7, 3], min_count=2)
    assert chosen.tolist() == [1, 2] and below == 8
    chosen, below = balanced_selection([5, 9, 9, 7, 3], min_count=3)
    assert chosen.tolist() == [1, 2, 3] and below == 6
    with pytest.raises(ValueError, match="fewer than the 6 each position must be held by"):
        balanced_selection([5, 9, 9, 7, 3], min_count=6)
    models, documents = tiny_zoo(["nope"], n_docs=12)
    encoder = open_encoder(models["nope"])
    sequences = encoder.structured_sequences(documents, max_length=64, windows=True)  # the last windows are shorter
    assert len(set(sequences.lengths.tolist())) > 1
    chosen, below = balanced_selection(sequences.lengths, min_count=4)
    balanced = layer_statistics(encoder, sequences.select(chosen), layers=[1], subspaces=["full"],
                                positions_below=below)[(1, "full")]
    _, kept = balanced.means()
    assert kept.tolist() == list(range(1, below)) and set(balanced.counts[kept]) == {len(chosen)}
    everything = layer_statistics(encoder, sequences, layers=[1], subspaces=["full"])[(1, "full")]
    assert len(set(everything.counts[everything.kept()])) > 1  # over all sequences, late positions are held by fewer


def _documents(n=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 20, (n,), generator=generator)
    return [torch.randint(5, 97, (int(length),), generator=generator).tolist() for length in lengths]


def test_the_start_end_bias_is_zero_for_a_model_without_positions_and_read_against_its_interval():
    from conftest import tiny_model
    from dstg_interp.analysis.geometry import start_end_bias
    from dstg_interp.encoders import open_encoder
    # NoPE attends to a set: the filler first or last gives the same pooled embedding, so the bias is 0
    nope = start_end_bias(open_encoder(tiny_model("nope", init_std=0.2).eval()), _documents(), [7, 8, 9, 10])
    assert nope["change_start"] > 0.01 and abs(nope["bias"]) < 1e-6
    assert nope["change_start"] == pytest.approx(nope["change_end"], abs=1e-6)
    assert nope["bias_low"] <= nope["bias"] <= nope["bias_high"] and nope["n_documents"] == 12
    # a model with positions moves differently each way, and the interval is over documents
    dstg = start_end_bias(open_encoder(tiny_model("dstg", init_std=0.2).eval()), _documents(), [7, 8, 9, 10])
    assert abs(dstg["bias"]) > 1e-3 and dstg["bias_low"] <= dstg["bias"] <= dstg["bias_high"]
    assert 0 <= dstg["share_start_larger"] <= 1


def test_the_start_end_bias_refuses_what_it_cannot_read():
    from conftest import tiny_model
    from dstg_interp.analysis.geometry import start_end_bias
    from dstg_interp.encoders import open_encoder
    encoder = open_encoder(tiny_model("dstg").eval())
    with pytest.raises(ValueError, match="at least 2 non-empty documents"):
        start_end_bias(encoder, [[5, 6], []], [7])
    with pytest.raises(ValueError, match="leave room for a document"):
        start_end_bias(encoder, _documents(), list(range(5, 5 + encoder.max_positions)))
    with pytest.raises(ValueError, match="non-empty"):
        start_end_bias(encoder, _documents(), [])
