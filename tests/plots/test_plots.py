"""Every figure function writes a non-empty PNG, a PDF and the JSON numbers; bad folders are refused."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny_model
from dstg_interp.analysis.heads import head_table
from dstg_interp.analysis.spectra import analyze_table, position_table
from dstg_interp.plots import (
    FigureOutputError,
    measurements,
    model_color,
    model_palette,
    plot_dct_power,
    plot_head_map,
    plot_holmes_areas,
    plot_holmes_counts,
    plot_holmes_scores,
    plot_invariance_by_layer,
    plot_pc_curves,
    plot_r2_by_layer,
    plot_recall_by_layer,
    plot_scree,
    plot_share_scatter,
)
from dstg_interp.plots.output import entry_name
from dstg_interp.plots.spectra import over_seeds, seed_groups
from probes.holmes.aggregate import a_vs_b, dataset_scores, winning_rates
from probes.holmes.registry import register_dataset

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def spectra():
    angle = np.pi * np.arange(30) / 30
    arc = np.stack([np.cos(angle), np.sin(angle)], axis=1) @ np.random.default_rng(0).standard_normal((2, 8))
    return [
        analyze_table(arc, name="dstg AP table", n_control_draws=3),
        analyze_table(position_table(tiny_model("ap")), name="ap table", n_control_draws=3),
        analyze_table(np.random.default_rng(1).standard_normal((30, 384)), name="minilm table", n_control_draws=0),
    ]


@pytest.fixture(scope="module")
def heads():
    tokens = torch.randint(5, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    return pd.concat([head_table(tiny_model(v), tokens) for v in ("dstg", "rope", "rp")], ignore_index=True)


@pytest.fixture
def probe_results():
    rows = []
    for model in ("dstg", "ap", "rope"):
        for task, segment in (("token", "sentence"), ("segment", "sentence"), ("intra", "paragraph")):
            for subspace in ("ap", "sem", "full") if model == "dstg" else ("full",):
                for layer in range(3):
                    r2 = 0.2 * layer + (0.3 if subspace == "ap" else 0.1)
                    rows.append(dict(model=model, task=task, segment=segment, layer=layer, subspace=subspace,
                                     r2=r2, ci_low=r2 - 0.05, ci_high=r2 + 0.05))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def holmes_results():
    """Per-seed Holmes results as ``run_holmes`` writes them (results.csv): 4 models, DSTG's parts, 6 datasets
    in 3 areas, 2 seeds, the randomised-label control; DSTG wins every dataset but one, which all tie."""
    datasets = {"plot-a": ("syntax", "bigram shift"), "plot-b": ("syntax", "sentence length"),
                "plot-c": ("semantics", "tense"), "plot-d": ("semantics", "passive"),
                "plot-e": ("morphology", "anaphor agreement"), "plot-tie": ("morphology", "irregular forms")}
    for name, (area, phenomenon) in datasets.items():
        register_dataset(name, area, phenomenon)
    strength = {("dstg", "full"): 0.9, ("dstg", "sem"): 0.8, ("dstg", "ap"): 0.4, ("rope", "full"): 0.7,
                ("ap", "full"): 0.5, ("rp", "full"): 0.6}
    rows = []
    for (model, subspace), base in strength.items():
        for i, dataset in enumerate(datasets):
            for seed in (0, 1):
                score = 0.5 if dataset == "plot-tie" else base - 0.02 * i + 0.01 * seed
                for control, value in (("none", score), ("randomization", 0.5)):
                    rows.append(dict(model=model, dataset=dataset, layer=4, subspace=subspace, control=control, seed=seed,
                                     metric="f1_macro", score=value))
    return pd.DataFrame(rows)


def _check_outputs(paths, folder, stem):
    assert set(paths) == {"png", "pdf", "json"}
    for kind, path in paths.items():
        assert path == folder / f"{stem}.{kind}" and path.stat().st_size > 0
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths["pdf"].read_bytes()[:5] == b"%PDF-"
    numbers = json.loads(paths["json"].read_text())
    assert numbers
    assert not list(folder.glob(".*tmp*"))  # no temporary files left behind
    return numbers


def test_spectrum_figures(spectra, tmp_path):
    folder = tmp_path / "new" / "figures"  # created on demand
    numbers = _check_outputs(plot_scree(spectra, folder, stem="scree"), folder, "scree")
    assert numbers["dstg AP table"]["tables"]["dstg AP table"]["summary"]["pc1_pc2"] == pytest.approx(1.0)
    assert numbers["dstg AP table"]["pc1_pc2"]["n_seeds"] == 1
    numbers = _check_outputs(plot_pc_curves(spectra[:2], folder, stem="curves"), folder, "curves")
    assert len(numbers["ap table"]["tables"]["ap table"]["curves"]) == 2 * 40
    numbers = _check_outputs(plot_dct_power(spectra[0], folder, stem="dct"), folder, "dct")
    assert numbers["dstg AP table"]["n_low_bins"] == 4


def test_spectrum_figures_draw_every_seed(tmp_path):
    """Spectra sharing a group are one table's seeds: each figure draws all of them under one entry whose
    numbers are the mean, lowest and highest over the seeds, and says 'one seed' for a group of one."""
    rng = np.random.default_rng(3)
    seeds = []
    for seed in range(3):
        spectrum = analyze_table(rng.standard_normal((24, 6)).cumsum(axis=0), name=f"dstg AP table (seed {seed})",
                                 n_control_draws=2)
        spectrum.summary.update(seed=seed, group="dstg AP table")
        seeds.append(spectrum)
    alone = analyze_table(rng.standard_normal((24, 6)), name="random 24x6", n_control_draws=0)
    values = [s.summary["pc1_pc2"] for s in seeds]
    assert list(seed_groups(seeds + [alone])) == ["dstg AP table", "random 24x6"]
    assert over_seeds(values) == (f"{np.mean(values):.1%} [{min(values):.1%}, {max(values):.1%}] over 3 seeds")
    assert over_seeds(values[:1]) == f"{values[0]:.1%} (one seed)"
    for plot, stem in ((plot_scree, "scree"), (plot_pc_curves, "curves"), (plot_dct_power, "dct")):
        numbers = _check_outputs(plot(seeds + [alone], tmp_path, stem=stem), tmp_path, stem)
        assert set(numbers) == {"dstg AP table", "random 24x6"}
        assert len(numbers["dstg AP table"]["tables"]) == 3 and len(numbers["random 24x6"]["tables"]) == 1
    key = "low_freq_share"
    assert numbers["dstg AP table"][key]["per_seed"] == pytest.approx([s.summary[key] for s in seeds])
    assert numbers["dstg AP table"][key]["high"] == pytest.approx(max(s.summary[key] for s in seeds))
    walk_q95 = seeds[0].summary["walk_low_freq_share_q95"]
    assert numbers["dstg AP table"]["smooth_control_low_freq_share_q95"] >= walk_q95


def test_head_figures(heads, tmp_path):
    numbers = _check_outputs(plot_head_map(heads, tmp_path, stem="map"), tmp_path, "map")
    assert len(numbers["heads"]) == len(heads) == 3 * 2 * 4
    assert numbers["heads"][0]["share_content"] is None  # NaN in the table -> null in the JSON
    _check_outputs(plot_share_scatter(heads, tmp_path, stem="shares"), tmp_path, "shares")
    baselines_only = heads[heads.model != "dstg"]
    _check_outputs(plot_share_scatter(baselines_only, tmp_path, stem="shares_baselines"), tmp_path, "shares_baselines")


def test_probe_figure_reads_the_measurement_layout(probe_results, tmp_path):
    numbers = _check_outputs(plot_r2_by_layer(probe_results, tmp_path, stem="r2"), tmp_path, "r2")
    drawn = pd.DataFrame(numbers["measurements"])
    assert len(drawn) == len(probe_results) and set(drawn.metric) == {"r2"}
    row = drawn[(drawn.model == "dstg") & (drawn.subspace == "ap") & (drawn.task == "segment") & (drawn.layer == 2)]
    assert row[["value", "ci_low", "ci_high"]].iloc[0].tolist() == pytest.approx([0.7, 0.65, 0.75])


def test_measurements_melt_metrics_and_drop_the_final_state():
    table = pd.DataFrame({"model": ["dstg"] * 3, "subspace": ["sem"] * 3, "layer": [0, 1, "final"],
                          "condition": ["shift"] * 3, "token_cosine": [0.9, 0.8, 0.7], "token_rel_l2": [0.1, 0.2, 0.3]})
    long = measurements(table, ["token_cosine", "token_rel_l2"], keys=["condition"])
    assert len(long) == 4 and long.layer.tolist() == [0, 1, 0, 1]  # "final" is not a point on the layer axis
    assert long[long.metric == "token_rel_l2"].value.tolist() == [0.1, 0.2] and long.ci_low.isna().all()
    with pytest.raises(ValueError, match="lacks the column"):
        measurements(table, ["recall"])


def test_invariance_figures(tmp_path):
    rows = [dict(model=m, subspace=s, condition=c, layer=layer, token_cosine=0.9 - 0.1 * layer, token_rel_l2=0.1 * layer,
                 k=1, recall=0.5 + 0.1 * layer, n_passages=40)
            for m, subspaces in (("dstg", ("sem", "ap", "full")), ("dstg-offset", ("sem",)), ("rope", ("full",)))
            for s in subspaces for c in ("shift", "prefix") for layer in range(3)]
    table = pd.DataFrame(rows)
    numbers = _check_outputs(plot_invariance_by_layer(table, tmp_path, stem="inv"), tmp_path, "inv")
    assert len(numbers["measurements"]) == 2 * len(table)
    numbers = _check_outputs(plot_recall_by_layer(table, tmp_path, stem="recall", k=1), tmp_path, "recall")
    assert numbers["chance"] == pytest.approx(1 / 40) and numbers["title"] is None
    # a figure of one training seed says so over its panels
    said = "One training seed (seed 0) of each zoo variant"
    numbers = _check_outputs(plot_recall_by_layer(table, tmp_path, stem="recall", k=1, title=said), tmp_path, "recall")
    assert numbers["title"] == said
    with pytest.raises(ValueError, match="no rows with k=5"):
        plot_recall_by_layer(table, tmp_path, k=5)
    # DSTG and the random_offset DSTG share the zoo colour; in one figure they must not
    assert len(set(model_palette(["dstg", "dstg-offset", "rope"]).values())) == 3


def test_holmes_figures_from_the_aggregation(holmes_results, tmp_path):
    scores = dataset_scores(holmes_results)
    pool = scores[scores.subspace == "full"]
    rates = winning_rates(pool)
    counts = a_vs_b(scores, "dstg", ["rope", "ap", "rp", "dstg:ap"])
    numbers = _check_outputs(plot_holmes_areas(rates, tmp_path, stem="areas"), tmp_path, "areas")
    per_area = pd.DataFrame(numbers["per_area"]).set_index(["entry", "area"])
    assert per_area.loc[("dstg", "syntax"), "winning_rate"] == pytest.approx(100.0)  # DSTG wins both syntax sets
    assert per_area.loc[("ap", "overall"), "winning_rate"] == pytest.approx(0.0)
    assert per_area.loc[("dstg", "morphology"), "n_datasets"] == 1  # the all-tie dataset has no rate
    numbers = _check_outputs(plot_holmes_counts(counts, tmp_path, stem="a_vs_b"), tmp_path, "a_vs_b")
    drawn = pd.DataFrame(numbers["counts"]).set_index(["b", "area"])
    assert drawn.loc[("rope", "overall"), ["wins", "ties", "losses"]].tolist() == [5, 1, 0]
    assert drawn.loc[("rope", "overall"), "balance"] == pytest.approx(5 / 6)
    numbers = _check_outputs(plot_holmes_scores(scores, tmp_path, stem="scores"), tmp_path, "scores")
    # entries (4 models + DSTG's ap and sem) x datasets, and the chance column (randomised labels) per dataset
    assert len(numbers["scores"]) == 7 * 6 and sum(row["entry"] == "chance (randomised labels)" for row in numbers["scores"]) == 6
    # every drawn column carries its own entry's name: the chance column first, then the entries in order
    columns = numbers["columns"]
    assert columns[0] == {"entry": "chance (randomised labels)", "label": "chance (randomised labels)"}
    assert [c["label"] for c in columns[1:]] == [entry_name(c["entry"]) for c in columns[1:]]
    assert {c["entry"] for c in columns[1:]} == {row["entry"] for row in numbers["scores"]} - {columns[0]["entry"]}
    assert "DSTG-NeoBERT, AP stream" in [c["label"] for c in columns]


def test_holmes_figures_read_the_written_csvs(holmes_results, tmp_path):
    """What experiments/fig_holmes draws: the CSVs of a Holmes run, read back."""
    scores = dataset_scores(holmes_results)
    rates = winning_rates(scores[scores.subspace == "full"])
    rates.to_csv(tmp_path / "winning_rates.csv", index=False)
    read_back = pd.read_csv(tmp_path / "winning_rates.csv")
    numbers = _check_outputs(plot_holmes_areas(read_back, tmp_path, stem="areas"), tmp_path, "areas")
    assert {r["area"] for r in numbers["per_area"]} == {"syntax", "semantics", "morphology", "overall"}


def test_unwritable_folder_gives_a_clear_error(spectra, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(FigureOutputError, match="cannot create the figure folder"):
        plot_scree(spectra, blocker / "figures")


def test_read_only_folder_gives_a_clear_error(spectra, tmp_path, monkeypatch):
    # Permission bits do not stop root (tests may run as root), so the write itself is made to fail
    # the way a read-only folder makes it fail.
    import tempfile

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(FigureOutputError, match="not writable"):
        plot_scree(spectra, tmp_path / "figures")


def test_missing_columns_and_colours(tmp_path):
    with pytest.raises(ValueError, match="lacks the column"):
        plot_r2_by_layer(pd.DataFrame({"model": ["dstg"], "r2": [0.5]}), tmp_path)
    with pytest.raises(ValueError, match="empty"):
        plot_holmes_counts(pd.DataFrame(columns=["a", "b", "area", "wins", "ties", "losses", "n_phenomena"]), tmp_path)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['a', 'b'"):
        plot_holmes_counts(pd.DataFrame({"model_a": ["dstg"], "model_b": ["rope"], "wins": [1]}), tmp_path)
    assert model_color("dstg") == model_color("dstg-seed1") != model_color("rope")
    assert model_color("minilm") not in {model_color(m) for m in ("dstg", "rope", "ap", "rp")}


def test_the_recipe_diagnosis_draws_more_arms_than_tab10_has_colours(tmp_path):
    """A lever study with eleven arms plus the shipped zoo: each arm keeps a colour of its own (it once stopped
    a 22-run study at its figure with a KeyError from tab10's ten)."""
    from dstg_interp.plots.recipe import distinct_colors, plot_diagnosis

    arms = [f"arm-{k}" for k in range(12)]
    curves = pd.DataFrame([dict(variant="dstg", arm=arm, seed=0, tokens=t, val_loss=6.0 - 0.1 * k - t / 1e7,
                                unigram_loss=6.5) for k, arm in enumerate(arms) for t in (1e5, 2e5)])
    runs = pd.DataFrame([dict(variant="dstg", arm=arm, seed=0, heldout_gain_points=1.0 + k, pc1_pc2_matched=0.5,
                              pc1_pc2_matched_chance=0.3, position_r2_last=0.5) for k, arm in enumerate(arms)])
    plot_diagnosis(curves, runs, tmp_path)
    assert (tmp_path / "diagnosis.png").is_file() and (tmp_path / "diagnosis.json").is_file()
    assert len(set(distinct_colors(arms).values())) == 12 and len(set(distinct_colors(arms[:3]).values())) == 3


def test_the_zoo_a_recipe_figure_is_about_is_drawn_solid():
    """``recipe_styles``: the last recipe (the zoo drawn) solid, whatever number of earlier ones beside it; more
    recipes than line styles are refused rather than drawn alike."""
    from dstg_interp.plots.recipe import recipe_styles

    assert recipe_styles(["6x128", "authors"]) == {"6x128": "--", "authors": "-"}
    assert recipe_styles(["6x128", "authors 3900", "authors 7800"]) == {"6x128": "--", "authors 3900": "-.",
                                                                       "authors 7800": "-"}
    assert recipe_styles(["one"]) == {"one": "-"} and recipe_styles([]) == {}
    with pytest.raises(ValueError, match="at most 4 recipes"):
        recipe_styles(["a", "b", "c", "d", "e"])


def test_the_lever_figure_draws_a_partial_grid_whose_base_arm_has_not_run(tmp_path):
    """A study invocation whose first (base) arm had no run yet, with earlier arms kept in the ledger, lost its
    figure to a KeyError (one colour short)."""
    import pandas as pd

    from dstg_interp.plots.recipe import plot_lever_study
    runs = pd.DataFrame([dict(arm=arm, seed=0, pc1_pc2=0.5, pc1_pc2_chance=0.2, low_freq_share=0.8,
                              participation_ratio=3.0, position_r2_first=0.9, position_r2_last=0.8,
                              heldout_gain_points=10.0) for arm in ("x", "y")])
    curves = pd.DataFrame([dict(arm=arm, seed=0, step=step, tokens=step * 100, pc1_pc2=0.1 * step)
                           for arm in ("x", "y") for step in (1, 2, 3)])
    paths = plot_lever_study(curves, runs, tmp_path, base="not run yet")
    assert paths["png"].stat().st_size > 0
