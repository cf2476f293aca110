"""The place-cell figures: both write PNG + PDF + JSON from fig_place_cells' tables (a panel without a tuned latent
says so), and a table lacking a column is one clear error."""

import json

import numpy as np
import pandas as pd
import pytest

from dstg_interp.plots import plot_position_tiling, plot_receptive_fields


def tables():
    positions = np.arange(12)
    cells, fields, curve = [], [], []
    for model, tuned in (("dstg", True), ("rope", False)):
        for latent in range(4):
            peak = 2 + 3 * latent
            cells.append({"model": model, "seed": 0, "layer": 0, "subspace": "ap" if model == "dstg" else "full",
                          "latent": latent, "peak": peak, "width": 2.4, "eta2": 0.9 if tuned else 0.01,
                          "tuned": tuned, "pc1": np.cos(peak / 2), "pc2": np.sin(peak / 2)})
            fields += [{"model": model, "seed": 0, "layer": 0, "subspace": cells[-1]["subspace"], "latent": latent,
                        "position": t, "activation": float(np.exp(-(t - peak) ** 2 / 2))} for t in positions]
        curve += [{"model": model, "seed": 0, "layer": 0, "subspace": cells[-1]["subspace"], "position": t,
                   "pc1": np.cos(t / 2), "pc2": np.sin(t / 2), "share": 0.8} for t in positions]
    return pd.DataFrame(cells), pd.DataFrame(fields), pd.DataFrame(curve)


def test_both_figures_write_their_three_files(tmp_path):
    cells, fields, curve = tables()
    written = plot_receptive_fields(cells, fields, tmp_path)
    assert all(path.stat().st_size > 1000 for kind, path in written.items() if kind != "json")
    assert len(json.loads(written["json"].read_text())["cells"]) == 8
    written = plot_position_tiling(cells, curve, tmp_path)
    numbers = json.loads(written["json"].read_text())
    assert len(numbers["curve"]) == 24 and written["png"].stat().st_size > 1000


def test_a_missing_column_is_one_clear_error(tmp_path):
    cells, fields, curve = tables()
    with pytest.raises(ValueError, match=r"the place-cell table lacks the column\(s\) \['eta2'\]"):
        plot_receptive_fields(cells.drop(columns="eta2"), fields, tmp_path)
    with pytest.raises(ValueError, match=r"the position curve lacks the column\(s\) \['share'\]"):
        plot_position_tiling(cells, curve.drop(columns="share"), tmp_path)
