"""Figures of the Holmes study, drawn from the tables ``probes.holmes.aggregate`` writes (and their CSVs).

    from dstg_interp.plots import plot_holmes_areas, plot_holmes_counts, plot_holmes_scores
    plot_holmes_areas(pd.read_csv("figures/holmes/full/winning_rates.csv"), "figures/holmes/full")
    plot_holmes_counts(pd.read_csv("figures/holmes/full/a_vs_b.csv"), "figures/holmes/full")
    plot_holmes_scores(pd.read_csv("figures/holmes/full/scores.csv"), "figures/holmes/full")

    winning_rates   dataset, entry, winning_rate, area         (aggregate.winning_rates)
    a_vs_b          a, b, area, wins, ties, losses, n_phenomena (aggregate.a_vs_b, or significance.seed_test_counts)
    scores          dataset, entry, score, area [, score_randomized] (aggregate.dataset_scores)

Chance: the winning-rate bars carry a line at 50 (an entry's expected rate when the pool's order is random);
the score map a "chance" column, the mean randomised-label score of the dataset (Hewitt & Liang's control,
what a probe gets from the features with the labels permuted).

An entry is a model, or ``model:subspace`` for a DSTG part probed on its own.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .output import caption, entry_name, model_palette, require_columns, save_figure

AREA_ORDER = ("morphology", "syntax", "semantics", "reasoning", "discourse")
OVERALL = "overall"
CHANCE = "chance (randomised labels)"


NO_AREA = "no area"  # a dataset outside the Holmes catalogue (a benchmark of one's own): drawn, under this name


def _with_areas(table: pd.DataFrame) -> pd.DataFrame:
    return table.assign(area=table.area.fillna(NO_AREA)) if table.area.isna().any() else table


def _areas(present) -> list[str]:
    present = list(dict.fromkeys(present))
    return [a for a in AREA_ORDER if a in present] + sorted(set(present) - set(AREA_ORDER) - {OVERALL})


def _entry_palette(entries) -> dict[str, str]:
    """An entry's colour is its model's; a DSTG part (``dstg:ap``) a lighter shade of it."""
    entries = list(dict.fromkeys(entries))
    models = model_palette(e.split(":")[0] for e in entries)
    palette = {}
    for entry in entries:
        model, _, part = entry.partition(":")
        palette[entry] = models[model] if not part else sns.light_palette(models[model], 4)[1 + (part == "sem")]
    return palette


def plot_holmes_areas(winning_rates: pd.DataFrame, out_dir, stem: str = "holmes_areas") -> dict:
    """Grouped bars: each entry's mean winning rate (x100) per area and overall, with ± one standard error
    over the area's datasets (a dataset on which every entry ties has no rate and is left out)."""
    require_columns(winning_rates, ["dataset", "entry", "area", "winning_rate"], "the Holmes winning rates")
    winning_rates = _with_areas(winning_rates)
    rates = winning_rates.dropna(subset=["winning_rate"])
    if rates.empty:
        raise ValueError("the Holmes winning rates are all empty (every dataset tied): nothing to plot")
    areas = _areas(rates.area)
    rows = pd.concat([rates, rates.assign(area=OVERALL)], ignore_index=True).assign(rate=lambda t: 100 * t.winning_rate)
    palette = _entry_palette(rows.entry)
    per_area = (rows.groupby(["entry", "area"]).rate.agg(mean="mean", sem="sem", n_datasets="count")
                .reset_index().rename(columns={"mean": "winning_rate", "sem": "standard_error"}))
    fig, ax = plt.subplots(figsize=(2.0 + 0.3 * (len(areas) + 1) * len(palette), 3.8))
    sns.barplot(data=rows, x="area", y="rate", hue="entry", order=areas + [OVERALL], hue_order=list(palette),
                palette=palette, errorbar="se", capsize=0.1, err_kws={"linewidth": 1}, ax=ax)
    ax.axvline(len(areas) - 0.5, color="grey", lw=0.8, ls=":")  # the areas | their mean over datasets
    ax.axhline(50, color="black", lw=0.9, ls="--", label="chance (pool in random order)")
    ax.set(xlabel=None, ylabel="winning rate x100 (mean over datasets)", ylim=(0, 105),
           title="Holmes: winning rate within the pool, per area")
    ax.grid(axis="y", alpha=0.3)
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles, [entry_name(n) for n in names], title=None, fontsize=7, ncol=min(len(palette), 3),
              loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    caption(fig, "Bars: mean winning rate over the area's datasets (an entry's share of won pairwise comparisons "
                 "within the pool); error bars: ± one standard error over those datasets.", y=-0.16)
    return save_figure(fig, out_dir, stem, {"per_area": per_area, "winning_rates": rates})


def plot_holmes_counts(counts: pd.DataFrame, out_dir, stem: str = "holmes_a_vs_b",
                       title: str = "Holmes: phenomena won / tied / lost") -> dict:
    """Heat map of A-vs-B: row "A vs B", column an area (and overall); each cell shows A's wins / ties /
    losses over that area's phenomena, coloured by (wins - losses) / phenomena (0 = as many wins as losses,
    what two equal models give)."""
    columns = ["a", "b", "area", "wins", "ties", "losses", "n_phenomena"]
    require_columns(counts, columns, "the Holmes A-vs-B counts")
    counts = counts.assign(pair=counts.a + " vs " + counts.b,
                           balance=(counts.wins - counts.losses) / counts.n_phenomena.where(counts.n_phenomena > 0),
                           cell=[f"{w}/{t}/{l}" for w, t, l in zip(counts.wins, counts.ties, counts.losses)])
    areas = _areas(counts.area) + ([OVERALL] if OVERALL in set(counts.area) else [])
    pairs = list(dict.fromkeys(counts.pair))
    balance = counts.pivot(index="pair", columns="area", values="balance").reindex(index=pairs, columns=areas)
    cells = counts.pivot(index="pair", columns="area", values="cell").reindex(index=pairs, columns=areas).fillna("")
    fig, ax = plt.subplots(figsize=(1.8 + 1.15 * len(areas), 1.3 + 0.5 * len(pairs)))
    sns.heatmap(balance.astype(float), annot=cells.to_numpy(), fmt="", cmap="RdBu", vmin=-1, vmax=1, center=0,
                linewidths=0.5, linecolor="white", cbar_kws={"label": "(wins - losses) / phenomena"},
                annot_kws={"fontsize": 8}, ax=ax)
    ax.set(xlabel=None, ylabel=None, title=title)
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return save_figure(fig, out_dir, stem, {"counts": counts[columns + ["balance"]]})


def plot_holmes_scores(scores: pd.DataFrame, out_dir, stem: str = "holmes_scores") -> dict:
    """Heat map of every entry's seed-mean score (macro-F1 or Pearson r) per dataset, datasets grouped by area."""
    require_columns(scores, ["dataset", "entry", "area", "score"], "the Holmes scores")
    scores = _with_areas(scores)
    entries = list(_entry_palette(sorted(set(scores.entry), key=lambda e: (e.split(":")[0] != "dstg", e))))
    areas = _areas(scores.area)
    datasets = (scores.drop_duplicates("dataset").assign(_area=lambda t: t.area.map(areas.index))
                .sort_values(["_area", "dataset"]).dataset.tolist())
    table = scores.pivot_table(index="dataset", columns="entry", values="score", aggfunc="mean")
    table = table.reindex(index=datasets, columns=entries)
    if "score_randomized" in scores:  # the chance column: labels permuted, same features and probe
        table.insert(0, CHANCE, scores.groupby("dataset").score_randomized.mean().reindex(datasets))
    area_of = scores.drop_duplicates("dataset").set_index("dataset").area
    labels = [f"{area_of[d]} | {str(d).removeprefix('offline-')}" for d in datasets]
    # one label per drawn column, the chance column included (labels from ``entries`` alone shifted every name
    # one column left and called the chance column DSTG-NeoBERT)
    column_labels = [CHANCE if column == CHANCE else entry_name(column) for column in table.columns]
    fig, ax = plt.subplots(figsize=(2.6 + 0.8 * len(entries), 0.8 + 0.24 * len(datasets)))
    sns.heatmap(table.astype(float), annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1,
                cbar_kws={"label": "score (macro-F1 or Pearson r)"}, annot_kws={"fontsize": 6}, ax=ax,
                yticklabels=labels, xticklabels=column_labels)
    ax.tick_params(axis="x", labelrotation=35, labelsize=7)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    ax.set(xlabel=None, ylabel=None, title="Holmes: score per dataset")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    caption(fig, "Cells: each entry's test score on the dataset, the mean over its probe seeds (macro-F1 for "
                 "classification, Pearson r for regression)"
                 + (f"; '{CHANCE}': the same probe on permuted labels, what chance scores." if CHANCE in table else "."),
            y=-0.01)
    numbers = table.reset_index().melt(id_vars="dataset", var_name="entry", value_name="score")
    return save_figure(fig, out_dir, stem, {"scores": numbers.assign(area=numbers.dataset.map(area_of)).dropna(),
                                            "columns": [{"entry": c, "label": label}
                                                        for c, label in zip(table.columns, column_labels)]})

