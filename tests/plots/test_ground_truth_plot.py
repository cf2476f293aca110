"""plot_ground_truth: the three files from a scores table, methods in words, one clear error for a missing column."""

import json

import pandas as pd
import pytest

from dstg_interp.plots import plot_ground_truth
from dstg_interp.plots.ground_truth import method_name


def scores():
    return pd.DataFrame([dict(model="dstg", seed=seed, layer=layer, method=method, mean_cos2=cos2, chance=0.25,
                              top1_agreement=0.5 + 0.1 * seed, top1_unedited=0.2)
                         for seed in (0, 1) for layer in (0, 1, 2)
                         for method, cos2 in (("ap_coordinates", 1.0), ("das", 0.9), ("random", 0.25))])


def test_the_figure_writes_its_three_files_with_the_numbers(tmp_path):
    paths = plot_ground_truth(scores(), tmp_path, stem="gt")
    assert all(paths[kind].stat().st_size > 1000 for kind in ("png", "pdf"))
    drawn = json.loads(paths["json"].read_text())["scores"]
    assert len(drawn) == 18 and {row["method"] for row in drawn} == {"ap_coordinates", "das", "random"}
    assert method_name("das") == "DAS (learned rotation)" and method_name("mine") == "mine"


def test_a_table_without_a_score_column_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"ground-truth scores lacks the column\(s\) \['top1_agreement'\]"):
        plot_ground_truth(scores().drop(columns="top1_agreement"), tmp_path)
