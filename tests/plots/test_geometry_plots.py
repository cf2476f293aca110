"""plots.geometry: the leaderboard draws each model's table and last layer (mean over seeds, min-max bars) and the
by-layer figure every layer row; the head-split sweep each class's share of heads, a class no head holds at 0; a
table without the columns is refused."""

import json

import pandas as pd
import pytest

from dstg_interp.plots.geometry import (LEADERBOARD_METRICS, plot_geometry_by_layer, plot_geometry_leaderboard,
                                        plot_head_split_sweep)


def geometry_rows() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        for model, has_table in (("dstg", True), ("rope", False)):
            rows.append({"model": model, "seed": seed, "source": "table", "layer": None, "subspace": "table",
                         "applies": has_table, **{m: (0.5 + seed if has_table else None) for m in LEADERBOARD_METRICS}})
            for layer in (0, 1, 2):
                for subspace, width, walk in (("full", 32, 0.8), ("ap", 8, 0.7))[:2 if has_table else 1]:
                    rows.append({"model": model, "seed": seed, "source": "layer", "layer": layer, "subspace": subspace,
                                 "width": width, "applies": True, **{m: layer + seed for m in LEADERBOARD_METRICS},
                                 **{f"walk_{m}": walk for m in ("pc1_pc2", "participation_ratio")},
                                 **{f"walk_{m}_q95": walk + 0.1 for m in ("pc1_pc2", "participation_ratio")}})
    return pd.DataFrame(rows)


def test_the_leaderboard_draws_tables_and_last_layers_with_seed_intervals(tmp_path):
    paths = plot_geometry_leaderboard(geometry_rows(), tmp_path)
    entries = pd.DataFrame(json.loads(paths["json"].read_text())["entries"])
    assert set(entries.entry) == {"DSTG-NeoBERT, table", "DSTG-NeoBERT, L2 full state", "DSTG-NeoBERT, L2 AP stream",
                                  "RoPE-NeoBERT, L2 full state"}
    last = entries[(entries.entry == "RoPE-NeoBERT, L2 full state") & (entries.metric == "pc1_pc2")].iloc[0]
    assert (last["mean"], last["low"], last["high"], last["n_seeds"]) == (2.5, 2, 3, 2)
    assert last["walk_control"] == pytest.approx(0.8)
    assert paths["png"].stat().st_size > 1000 and paths["pdf"].is_file()


def test_the_by_layer_figure_reads_every_layer_row_and_refuses_a_bare_table(tmp_path):
    paths = plot_geometry_by_layer(geometry_rows(), tmp_path)
    drawn = json.loads(paths["json"].read_text())
    assert len(drawn["layers"]) == 2 * (2 + 1) * 3  # seeds x (DSTG's two subspaces + RoPE's one) x layers
    # one control per width: DSTG's 8-wide stream is read against 8-wide walks, not the mean of both widths
    controls = pd.DataFrame(drawn["controls"])
    assert sorted(controls[controls.model == "dstg"].width.unique()) == [8, 32]
    assert controls[(controls.model == "dstg") & (controls.width == 8)].walk_pc1_pc2.eq(0.7).all()
    with pytest.raises(ValueError, match="lacks the column"):
        plot_geometry_by_layer(geometry_rows().drop(columns="applies"), tmp_path)


def test_the_head_split_sweep_draws_each_class_share_with_absent_classes_at_zero(tmp_path):
    rows = []
    for seed, positional in ((0, 3), (1, 1)):  # of 4 heads; the rest semantic, none mixed
        for threshold in (0.5, 0.6):
            rows += [{"model": "dstg", "seed": seed, "member": f"dstg-{seed}", "threshold": threshold, "label": label,
                      "n_heads": n, "n_total": 4} for label, n in (("positional", positional), ("semantic", 4 - positional))]
    paths = plot_head_split_sweep(pd.DataFrame(rows), tmp_path, 0.6)
    shares = pd.DataFrame(json.loads(paths["json"].read_text())["shares"])
    positional = shares[(shares.label == "positional") & (shares.threshold == 0.6)].set_index("seed").share
    assert positional.to_dict() == {0: 0.75, 1: 0.25}
    assert shares[shares.label == "mixed"].share.eq(0).all() and len(shares) == 3 * 2 * 2
    assert paths["png"].stat().st_size > 1000
    with pytest.raises(ValueError, match="lacks the column"):
        plot_head_split_sweep(pd.DataFrame(rows).drop(columns="n_total"), tmp_path, 0.6)
