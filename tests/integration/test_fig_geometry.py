"""fig_geometry (``dstg-figures geometry``) end to end on the tiny zoo, and a model list it cannot read."""

import json

import numpy as np
import pandas as pd
import torch

from experiments import fig_geometry
from experiments.figures import main as figures_main
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)


def test_the_geometry_table_of_the_tiny_zoo(tmp_path):
    """A row per model x layer x subspace and one table row per model, the NoPE floor among them as a reference: the
    numbers where a table exists, "does not apply" with its reason for RoPE, RP and NoPE; no store is written (the
    statistics are summed in the forward pass)."""
    out, stores = tmp_path / "out", tmp_path / "stores"
    fig_geometry.main(["--tiny", "--quiet", "--out", str(out), "--store-root", str(stores), "--model-seeds", "0",
                       "--stress-draws", "5"])
    table = pd.read_csv(out / "geometry.csv", keep_default_na=False, na_values=[""])
    layers = table[table.source == "layer"]
    expected = {("dstg", s) for s in ("ap", "sem", "full")} | {(m, "full") for m in ("rope", "ap", "rp", "nope")}
    assert set(zip(layers.model, layers.subspace)) == expected
    assert len(layers) == 3 * len(expected) and set(layers.layer) == {0, 1, 2} and layers.applies.all()
    assert set(layers.sequences) == {"balanced"}  # every position's mean over the same sequences
    tables = table[table.source == "table"].set_index("model")
    assert tables.applies.to_dict() == {"dstg": True, "rope": False, "ap": True, "rp": False, "nope": False}
    for model in ("rope", "rp", "nope"):
        assert "no learned position table" in tables.notes[model] and pd.isna(tables.pc1_pc2[model])
    assert tables.width["dstg"] == 8 and tables.width["ap"] == 32  # DSTG's AP table; AP-NeoBERT's entangled one
    numbers = ["pc1_pc2", "walk_pc1_pc2", "walk_pc1_pc2_q95", "pcs_95", "participation_ratio", "low_freq_share",
               "mds_stress", "walk_mds_stress", "smoothed_mds_stress_q95", "n_outlier_dims", "position_share"]
    assert not layers[numbers].isna().any().any()
    assert ((layers.mds_stress >= 0) & (layers.mds_stress <= 1)).all()
    # the embedding's AP stream is DSTG's table, read at the positions the documents reach: position is all of it
    ap0 = layers[(layers.model == "dstg") & (layers.subspace == "ap") & (layers.layer == 0)].iloc[0]
    assert ap0.position_share > 0.999 and ap0.max_position_r2 > 0.999
    assert not stores.exists()  # storeless: nothing extracted
    for stem in ("geometry_leaderboard", "geometry_by_layer", "head_split_sweep"):
        for kind in ("png", "pdf", "json"):
            assert (out / f"{stem}.{kind}").stat().st_size > 1000
    record = json.loads((out / "geometry.json").read_text())
    assert record["route"] == "storeless" and "left_out" not in record
    # the token-position probe on every layer row, beside its random-init and shuffled-target controls
    assert not layers[["token_probe_r2", "token_probe_random_init_r2", "token_probe_shuffled_r2"]].isna().any().any()
    assert (layers.token_probe_r2 <= 1).all() and (layers.token_probe_n_test_docs >= 2).all()
    # DSTG's AP stream holds the table: its probe reads position far above the semantic stream's
    dstg0 = layers[(layers.model == "dstg") & (layers.layer == 0)].set_index("subspace")
    assert dstg0.token_probe_r2["ap"] > dstg0.token_probe_r2["sem"] + 0.1
    # head classes on the full-state row of the layer each block reads; the last layer and DSTG's streams say why not
    heads = ["n_heads", "heads_positional", "heads_semantic", "heads_mixed", "head_share_position",
             "heads_positional_control", "head_share_position_control"]
    read = layers[(layers.subspace == "full") & (layers.layer < 2)]
    assert len(read) == 2 * 5 and not read[heads].isna().any().any() and (read.n_heads == 4).all()
    assert np.allclose(read[["heads_positional", "heads_semantic", "heads_mixed"]].sum(axis=1), 1.0)
    unread = layers[~layers.index.isin(read.index)]
    assert unread[heads].isna().all().all() and (unread.heads_note != "").all()
    last = unread[(unread.layer == 2) & (unread.subspace == "full")]
    assert set(last.heads_note) == {"no block reads the last layer (the last block's heads are on the row of the "
                                    "layer it reads)"}
    split = pd.read_csv(out / "head_split.csv")
    assert len(split) == 5 * 2 * 4 and set(split.label) <= {"positional", "semantic", "mixed"}
    assert set(pd.read_csv(out / "head_split_sweep.csv").threshold) >= {0.4, 0.6, 0.9}
    check = record["head_split_check"]["dstg"]  # DSTG's split beside its own logit terms, on the same windows
    assert check["n_heads"] == 8 and 0 <= check["class_agreement"] <= 1
    assert len(pd.read_csv(out / "head_split_check.csv")) == 8
    assert record["notes"]["rope table"].startswith("no table row")
    assert json.loads((out / "config.json").read_text())["min_count_used"] == fig_geometry.TINY_MIN_COUNT
    # the start-vs-end bias: one row per model, its interval around it
    bias = pd.read_csv(out / "start_end.csv").set_index("model")
    assert set(bias.index) == {"dstg", "rope", "ap", "rp", "nope"} and (bias.n_documents >= 2).all()
    assert abs(bias.bias["nope"]) < 1e-6  # the floor attends to a set: the filler first or last pools the same
    assert ((bias.bias_low <= bias.bias) & (bias.bias <= bias.bias_high)).all()
    assert ((bias.change_start > 0) & (bias.change_end > 0)).all()
    # Frequency Entropy: the rotary model alone, one row per block x head x rotation plane, each in [0, 1]
    entropy = pd.read_csv(out / "frequency_entropy.csv")
    assert set(entropy.model) == {"rope"} and set(entropy.seed) == {0} and set(entropy.layer) == {0, 1}
    assert len(entropy) == entropy.groupby(["layer", "head"]).ngroups * entropy.plane.nunique()
    assert entropy.frequency_entropy.between(0, 1).all()
    assert (entropy.groupby(["layer", "head"]).norm_rank.min() == 0).all()


def test_a_model_list_with_no_readable_model_is_one_line_and_writes_nothing(tiny, tmp_path, capsys):
    checkpoint, _ = tiny
    out = tmp_path / "geometry"
    code, _, err = run_main(capsys, figures_main, "geometry", "--tiny", "--quiet", "--model", checkpoint,
                            "--min-count", "100000", "--out", out, "--store-root", tmp_path / "stores")
    assert_one_line_error(code, err, "fig_geometry needs a layer whose position basis has 3 positions",
                          "fewer than the 100000 each position must be held by", prog="dstg-figures geometry")
    assert not out.exists()


def test_the_store_route_reads_the_numbers_of_the_storeless_route(tiny, tmp_path):
    """--store reads dstg-probe's store (float16 states) instead of summing the forward pass: the same rows, the
    same numbers to float16 rounding."""
    checkpoint, _ = tiny
    common = ["--tiny", "--quiet", "--model", str(checkpoint), "--stress-draws", "3", "--store-root", str(tmp_path / "s")]
    storeless = fig_geometry.main([*common, "--out", str(tmp_path / "a")])["geometry"]
    stored = fig_geometry.main([*common, "--store", "--out", str(tmp_path / "b")])["geometry"]
    assert (tmp_path / "s").is_dir()
    keys = ["source", "layer", "subspace"]
    pairs = storeless.merge(stored, on=keys, suffixes=("", "_store"))
    assert len(pairs) == len(storeless) == len(stored) == 1 + 3 * 3  # the table, layers 0-2 x ap / sem / full
    layers = pairs[pairs.source == "layer"]
    for column in ("pc1_pc2", "participation_ratio", "mds_stress", "position_share"):
        diff = (layers[column].astype(float) - layers[f"{column}_store"].astype(float)).abs().max()
        assert diff < 1e-3, (column, diff)  # measured ~1e-5
    assert (layers.n_tokens == layers.n_tokens_store).all()
