"""Length extrapolation: the AP-table curve fit, extended checkpoints, long-window evaluation, bad input."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_model

from dstg_interp import extract, load_model
from dstg_interp.cli.extend import main as extend_main
from dstg_interp.analysis.extrapolate import (
    EXTENSION_FILE,
    extend_positions,
    extend_table,
    fit_ap_curve,
    save_extended,
    with_max_positions,
)
from dstg_interp.analysis.length_eval import long_windows, mlm_by_position
from dstg_interp.data import train_tokenizer
from dstg_interp.data.corpora import make_document
from probes.by_range import probe_by_range

torch.set_num_threads(1)


def smooth_table(n_positions=64, width=12, seed=0):
    """A rank-3 table whose PC curves are low-frequency cosines of position, plus a constant row offset."""
    rng = np.random.default_rng(seed)
    n = np.arange(n_positions)
    curves = np.stack([np.cos(np.pi * k * (n + 0.5) / n_positions) for k in (1, 2, 3)], axis=1)  # [P, 3]
    return rng.normal(size=width) + curves @ rng.normal(size=(3, width))


def test_curve_fit_reproduces_a_smooth_table():
    table = smooth_table()
    fit = fit_ap_curve(table, n_components=3, n_frequencies=4)
    # stated tolerance: a table made of the first DCT frequencies is reproduced to float precision
    assert fit.relative_error < 1e-10 and fit.curve_error < 1e-10
    assert fit.explained == pytest.approx(1.0)
    np.testing.assert_allclose(fit.evaluate(np.arange(64)), table, atol=1e-9)
    # too few frequencies for the curves: a real, measured error (so the check above can fail)
    assert fit_ap_curve(table, n_components=3, n_frequencies=2).relative_error > 0.1


def test_curve_fit_of_noisy_table_reports_its_error():
    table = smooth_table() + np.random.default_rng(1).normal(scale=0.05, size=(64, 12))
    fit = fit_ap_curve(table, n_components=3, n_frequencies=4)
    assert 0.005 < fit.relative_error < 0.2


def test_curve_extension_is_the_even_continuation():
    table = smooth_table()
    extended, info = extend_table(table, 128, method="curve", n_components=3, n_frequencies=4)
    np.testing.assert_array_equal(extended[:64], table)  # learned rows untouched
    np.testing.assert_allclose(extended[64:], table[::-1], atol=1e-9)  # DCT basis: mirror about the table's end
    assert info["fit"]["n_components"] == 3


def test_repeat_and_stretch():
    table = np.arange(8, dtype=float)[:, None] * np.array([[1.0, -2.0]])
    repeated, _ = extend_table(table, 12, method="repeat")
    np.testing.assert_array_equal(repeated[8:], np.repeat(table[-1:], 4, axis=0))
    stretched, _ = extend_table(table, 15, method="stretch")
    np.testing.assert_allclose(stretched[:, 0], np.arange(15) * 7 / 14)  # a linear table stays linear
    np.testing.assert_allclose(stretched[[0, -1]], table[[0, -1]])


@pytest.mark.parametrize("variant", ["dstg", "ap"])
@pytest.mark.parametrize("method", ["curve", "repeat", "stretch"])
def test_extended_checkpoint_reloads_and_runs_longer(tmp_path, variant, method):
    model = tiny_model(variant).eval()
    longer = extend_positions(model, 2, method=method)
    assert longer.config.max_positions == 80 and longer.ap_table.shape[0] == 80
    tokens = torch.randint(5, 97, (2, 80))
    with pytest.raises(ValueError, match="exceeds max_positions=40"):
        model(tokens)
    save_extended(longer, tmp_path / "long")
    reloaded = load_model(tmp_path / "long")
    assert reloaded.config.max_positions == 80
    with torch.inference_mode():
        torch.testing.assert_close(reloaded(tokens), longer(tokens))
    extension = json.loads((tmp_path / "long" / EXTENSION_FILE).read_text())
    assert extension["method"] == method and extension["to_positions"] == 80 and extension["factor"] == 2
    if method != "stretch":  # learned rows kept: a sequence inside the trained range gives the same output
        short = tokens[:, :40]
        with torch.inference_mode():
            torch.testing.assert_close(reloaded(short), model(short))


@pytest.mark.parametrize("variant", ["rope", "rp"])
def test_relative_models_run_longer_without_a_table(variant):
    model = tiny_model(variant).eval()
    longer = with_max_positions(model, 100)
    tokens = torch.randint(5, 97, (1, 40))
    with torch.inference_mode():
        torch.testing.assert_close(longer(tokens), model(tokens))
        assert longer(torch.randint(5, 97, (1, 100))).shape == (1, 100, 97)


def test_bad_input_messages():
    model = tiny_model("dstg")
    for factor in (1, 0.5):
        with pytest.raises(ValueError, match="extension factor must be > 1"):
            extend_positions(model, factor)
    with pytest.raises(ValueError, match="new_length must exceed"):
        extend_positions(model, new_length=40)
    with pytest.raises(ValueError, match="no learned AP table to extend.*with_max_positions"):
        extend_positions(tiny_model("rope"), 2)
    with pytest.raises(ValueError, match="unknown extension method"):
        extend_positions(model, 2, method="mirror")
    with pytest.raises(ValueError, match="exactly one of factor"):
        extend_positions(model)


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    model = tiny_model("rope")
    model.save(tmp_path / "rope")
    assert extend_main(["--model", str(tmp_path / "rope"), "--factor", "2", "--out", str(tmp_path / "out")]) == 2
    assert "no learned AP table" in capsys.readouterr().err and not (tmp_path / "out").exists()
    tiny_model("dstg").save(tmp_path / "dstg")
    assert extend_main(["--model", str(tmp_path / "dstg"), "--factor", "1", "--out", str(tmp_path / "out")]) == 2
    assert "factor must be > 1" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert extend_main(["--model", str(tmp_path / "dstg"), "--factor", "3", "--out", str(tmp_path / "out")]) == 0
    assert load_model(tmp_path / "out").config.max_positions == 120


# --- evaluation on long windows -------------------------------------------------------------------
SENTENCES = ["The tall gardener watered the roses by the gate.", "A small dog barked at the passing cart.",
             "Rain fell softly on the slate roofs of the town.", "Her brother counted the coins twice before dinner."]


@pytest.fixture(scope="module")
def long_corpus():
    rng = np.random.default_rng(0)
    documents = [make_document(f"long/{i}", "test", [" ".join(SENTENCES[j] for j in rng.integers(0, 4, size=3))
                                                     for _ in range(12)]) for i in range(10)]
    documents.append(make_document("short/0", "test", [SENTENCES[0]]))
    return documents, train_tokenizer(documents, vocab_size=120)


def test_long_windows_are_full_length_and_reject_short_documents(long_corpus):
    documents, tokenizer = long_corpus
    windows = long_windows(documents, tokenizer, 80)
    assert len(windows) >= 10 and set(windows.lengths) == {80}
    assert "short/0" not in {windows.documents[i]["doc_id"] for i in np.unique(windows.arrays["doc_index"])}
    with pytest.raises(ValueError, match="needs documents longer than the training length"):
        long_windows(documents[-1:], tokenizer, 80)


def test_mlm_by_position_same_masks_and_chunked_reference(long_corpus):
    documents, tokenizer = long_corpus
    model = tiny_model("rp", vocab_size=tokenizer.get_vocab_size()).eval()
    windows = long_windows(documents, tokenizer, 80)
    with pytest.raises(ValueError, match="exceed the model's max_positions=40"):
        mlm_by_position(model, windows)
    longer = with_max_positions(model, 80)
    table = mlm_by_position(longer, windows, bucket_width=20, n_draws=2)
    assert list(table.bucket_start) == [0, 20, 40, 60] and table.n_masked.gt(0).all()
    assert table.accuracy.between(0, 1).all() and np.isfinite(table.loss).all()
    again = mlm_by_position(longer, windows, bucket_width=20, n_draws=2)
    pd.testing.assert_frame_equal(table, again)  # seeded masks
    chunked = mlm_by_position(model, windows, bucket_width=20, n_draws=2, chunk_length=40)
    # the same masked tokens are counted, whichever way the window is run
    np.testing.assert_array_equal(chunked.n_masked, table.n_masked)


def test_probe_by_range_splits_inside_and_beyond(long_corpus, tmp_path):
    documents, tokenizer = long_corpus
    model = tiny_model("dstg", vocab_size=tokenizer.get_vocab_size()).eval()
    with torch.no_grad():  # an AP table linear in position along its first dimension
        model.ap_embed.weight[:, 0] = torch.linspace(-1, 1, 40)
    windows = long_windows(documents, tokenizer, 80)
    beyond = {}
    for method in ("stretch", "repeat"):
        longer = extend_positions(model, 2, method=method)
        store = extract(longer, windows, tmp_path / method, layers=[0, 2], progress=False)
        ranges = probe_by_range(store, trained_length=40, n_splits=3, test_fraction=0.3)
        assert set(ranges.range) == {"inside", "beyond"} and set(ranges.fit_on) == {"all", "inside"}
        assert set(ranges.subspace) == {"sem", "ap", "full"} and set(ranges.layer) == {0, 2}
        layer0 = ranges[(ranges.layer == 0) & (ranges.target == "token_position")].set_index(["subspace", "fit_on", "range"]).r2
        assert layer0["sem"].max() < 0.3  # the token embedding knows no position
        beyond[method] = layer0["ap"].xs("beyond", level="range")
        assert layer0[("ap", "inside", "inside")] > 0.95  # an in-range probe on the learned rows
    # stretched, the table stays linear: position is decodable beyond the range, even by an in-range probe;
    # repeated, every position beyond looks the same: nothing to decode there
    assert beyond["stretch"].min() > 0.95
    assert beyond["repeat"].max() <= 0.0
    with pytest.raises(ValueError, match="no token of the store lies beyond"):
        probe_by_range(store, trained_length=80)


def test_extrapolation_summary_and_figure_read_each_model_at_its_own_last_layer(tmp_path):
    """A 4-layer model beside 6-layer ones (the shipped dstg-offset beside the zoo): its final-layer probe is
    its layer 4, not a missing layer 6 (the summary had NaN for it and its bars were not drawn)."""
    import pandas as pd

    from dstg_interp.plots import plot_probe_ranges
    from experiments.fig_extrapolation import summarize

    ranges = pd.DataFrame([dict(model=model, method="native", length=256, layer=layer, subspace="full",
                                target="token_position", fit_on="all", range=part, r2=0.1 * layer, mae=10.0 - layer)
                           for model, depth in (("dstg", 6), ("dstg-offset", 4)) for layer in range(depth + 1)
                           for part in ("inside", "beyond")])
    mlm = pd.DataFrame([dict(model=model, method="native", length=256, bucket_start=start, accuracy=0.2, loss=5.0,
                             n_masked=10) for model in ("dstg", "dstg-offset") for start in (0, 128)])
    summary = summarize(mlm, ranges, trained=128).set_index("model")
    assert summary.loc["dstg", "mae_beyond_token_position_fit_all"] == 4.0
    assert summary.loc["dstg-offset", "mae_beyond_token_position_fit_all"] == 6.0
    drawn = plot_probe_ranges(ranges, tmp_path, trained_length=128)
    assert (tmp_path / "probe_ranges.png").is_file() and drawn
