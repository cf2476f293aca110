"""Activation patching per stream and attribution patching (analysis/patching.py) on tiny models: known answers
(an unused stream's patch changes nothing; the last layer's patches at the masked positions add up to the whole
recovery; attribution is the derivative of the exact patch), the authors' format, a tiny HF masked LM, bad input."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_model
from hf_writers import write_tiny_bert

from dstg_interp import EncoderError
from dstg_interp.analysis import attribution_patch, compare_attribution, patch_heads, patch_states, patching_pair
from dstg_interp.encoders import open_encoder
from dstg_interp.plots import plot_attribution_agreement, plot_band_shares, plot_patching_map
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
AUTHORS = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"


def batch(rows=4, length=12, seed=0):
    tokens = torch.randint(5, 97, (rows, length), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0], tokens[:, -1] = 2, 3
    return tokens


@pytest.fixture(scope="module")
def dstg():
    return open_encoder(tiny_model("dstg", init_std=0.2).eval(), dtype=torch.float64)


def test_an_unused_stream_changes_nothing_and_the_last_layer_recovers_exactly(dstg):
    pair = patching_pair(dstg, batch(), n_masked=3, seed=1)
    table = patch_states(dstg, pair)
    last = table[table.layer == dstg.n_layers]
    # the MLM head reads the semantic stream only: the last AP state is unused
    assert (last[last.subspace == "ap"].recovery == 0).all()
    # a shuffle moves no position: the layer-0 AP state (the table rows) is the same in both inputs
    assert (table[(table.layer == 0) & (table.subspace == "ap")].recovery == 0).all()
    # the head is position-wise: at the last layer only the masked positions matter, and together they are all of it
    for subspace in ("sem", "full"):
        rows = last[last.subspace == subspace]
        assert rows[rows.masked].recovery.sum() == pytest.approx(1.0, abs=1e-9)
        assert rows[~rows.masked].recovery.abs().max() < 1e-9
    assert set(table.columns) >= {"layer", "subspace", "position", "masked", "metric", "value", "recovery"}


def test_attribution_is_the_derivative_of_the_exact_patch(dstg):
    pair = patching_pair(dstg, batch(), n_masked=3, seed=1)
    approximate = attribution_patch(dstg, pair)
    small = patch_states(dstg, pair, fraction=1e-4)
    small["recovery"] /= 1e-4
    agreement, merged = compare_attribution(small, approximate)
    assert agreement["all"] > 0.999 and agreement["n"] == 3 * 3 * 12
    # full = sem + ap, as the patch is linear in the attribution
    wide = approximate.pivot_table(index=["layer", "position"], columns="subspace", values="recovery")
    np.testing.assert_allclose(wide["full"], wide["sem"] + wide["ap"])
    # the whole patch: reported, and lower on a random model (the curve in figures/patching)
    whole, _ = compare_attribution(patch_states(dstg, pair), approximate)
    assert whole["all"] < agreement["all"]


def test_kl_metric_heads_and_the_other_row_control(dstg):
    pair = patching_pair(dstg, batch(), n_masked=2, seed=2)
    kl = patch_states(dstg, pair, metric="kl", layers=[dstg.n_layers])
    rows = kl[(kl.subspace == "sem") & kl.masked]
    assert kl.clean.iloc[0] == 0.0 and kl.corrupted.iloc[0] < 0
    assert rows.recovery.sum() > 0.5  # KL is not additive over positions, but the clean answers come back
    heads = patch_heads(dstg, pair)
    assert len(heads) == dstg.n_layers * 2 * dstg.n_heads and set(heads.stream) == {"sem", "ap"}
    other = patch_states(dstg, pair, layers=[dstg.n_layers], subspaces=["sem"], source="other")
    assert other.source.iloc[0] == "other"
    assert other[other.masked].recovery.sum() != pytest.approx(1.0, abs=1e-3)  # another sentence's state


def test_offset_pairs_move_only_position_in_dstg_and_ap():
    for variant in ("dstg", "ap"):
        encoder = open_encoder(tiny_model(variant, init_std=0.2).eval(), dtype=torch.float64)
        pair = patching_pair(encoder, batch(length=10), corruption="offset", offset=8, n_masked=2)
        table = patch_states(encoder, pair, metric="kl", layers=[0])
        assert pair.offset == 8 and torch.equal(pair.corrupted, pair.clean.tokens)
        if variant == "dstg":  # the clean layer-0 semantic state is the corrupted one: nothing to recover
            assert (table[table.subspace == "sem"].recovery == 0).all()
            assert table[table.subspace == "ap"].recovery.abs().sum() > 0


def test_authors_format_and_tiny_hf_masked_lm(tmp_path):
    encoder = open_encoder(AUTHORS / "posneobert-dstg")
    ids = torch.from_numpy(np.load(AUTHORS / "inputs" / "input_ids_a.npy"))[:2, :16]
    pair = patching_pair(encoder, ids, n_masked=2)
    table = patch_states(encoder, pair, layers=[encoder.n_layers])
    assert (table[table.subspace == "ap"].recovery == 0).all()  # its head reads the semantic stream
    write_tiny_bert(tmp_path, tiny_documents(n_docs=6), mlm_head=True)
    # float64: a random BERT's output barely moves under a shuffle (|clean - corrupted| ~ 1e-4 in the metric),
    # so float32 rounding alone would be a few 1e-4 of the recovery
    bert = open_encoder(tmp_path, mlm_head=True, dtype=torch.float64)
    tokens = batch(rows=3, length=10) % bert.vocab_size
    pair = patching_pair(bert, tokens, n_masked=2)
    exact = patch_states(bert, pair)
    last = exact[exact.layer == bert.n_layers]
    assert set(exact.subspace) == {"full"} and last[last.masked].recovery.sum() == pytest.approx(1.0, abs=1e-9)
    assert last[~last.masked].recovery.abs().max() < 1e-9
    assert len(attribution_patch(bert, pair)) == len(exact)
    with pytest.raises(EncoderError, match="hook_z"):
        patch_heads(bert, pair)


def test_bad_input_is_one_clear_error(dstg, tmp_path):
    tokens = batch()
    with pytest.raises(EncoderError, match="must have the same batch and length"):
        patching_pair(dstg, tokens, corrupted_tokens=batch(length=11))
    with pytest.raises(EncoderError, match="has none"):
        patching_pair(open_encoder(tiny_model("rope").eval()), tokens, corruption="offset")
    with pytest.raises(EncoderError, match="unknown corruption"):
        patching_pair(dstg, tokens, corruption="reverse")
    pair = patching_pair(dstg, tokens)
    with pytest.raises(EncoderError, match="unknown metric"):
        patch_states(dstg, pair, metric="accuracy")
    with pytest.raises(EncoderError, match="masked-LM head"):
        patching_pair(open_encoder(AUTHORS / "posneobert-dstg-encoder"), tokens)
    same = patching_pair(dstg, tokens, corrupted_tokens=tokens)
    with pytest.raises(EncoderError, match="does not change"):
        patch_states(dstg, same)


def test_the_patching_and_band_figures_write_their_files(dstg, tmp_path):
    pair = patching_pair(dstg, batch(), n_masked=2)
    exact = patch_states(dstg, pair, layers=[1, 2]).assign(model="dstg")
    _, merged = compare_attribution(exact, attribution_patch(dstg, pair, layers=[1, 2]))
    curve = pd.DataFrame({"model": ["dstg"] * 2, "fraction": [0.01, 1.0], "r": [1.0, 0.5]})
    heads = pd.DataFrame({"model": "rope", "layer": [0, 0], "head": [0, 1], "label": ["positional", "semantic"],
                          "share_band0": [0.9, 0.1], "share_band1": [0.1, 0.9]})
    for paths in (plot_patching_map(exact, tmp_path, stem="map"),
                  plot_attribution_agreement(merged.assign(model="dstg"), curve, tmp_path, stem="agreement"),
                  plot_band_shares(heads, tmp_path, stem="bands")):
        assert all(path.stat().st_size > 0 for path in paths.values())
