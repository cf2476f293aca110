"""The position-geometry figures (``analysis.geometry``; the rows of fig_geometry's geometry.csv).

    plot_geometry_leaderboard(table, "figures/geometry")   # models x numbers: each table and last layer, controls
    plot_geometry_by_layer(table, "figures/geometry")      # per model: PC1+PC2 and participation ratio by layer
    plot_head_split_sweep(sweep, "figures/geometry", 0.6)  # per head class: the share of heads as the threshold sweeps
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .output import caption, display_name, model_palette, require_columns, save_figure, shared_legend, subspace_name

# column -> what a panel's axis says; the order of the leaderboard's panels
LEADERBOARD_METRICS = {
    "pc1_pc2": "PC1+PC2",
    "pcs_95": "PCs to 95% variance",
    "participation_ratio": "participation ratio",
    "low_freq_share": "DCT share, bins 0-3",
    "mds_stress": "MDS stress (2-D)",
    "n_outlier_dims": "position-tied outlier dims",
}
BY_LAYER_METRICS = {"pc1_pc2": "PC1+PC2", "participation_ratio": "participation ratio"}
CONTROL_MARKERS = {"walk": ("D", "random walk"), "smoothed": ("s", "smoothed noise")}
SUBSPACE_STYLES = {"full": "-", "ap": "--", "sem": "-."}  # dotted is the learned table
COLUMNS = ("model", "seed", "source", "layer", "subspace", "applies", *LEADERBOARD_METRICS)


def leaderboard_entries(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the leaderboard draws: every learned table that applies, and each model's last layer (every
    subspace), with an ``entry`` label ("DSTG-NeoBERT, table", "RoPE-NeoBERT, L2 full state")."""
    applies = table[table.applies.astype(bool)]
    layers = applies[applies.source == "layer"]
    last = layers.groupby("model").layer.transform("max")
    chosen = pd.concat([applies[applies.source == "table"], layers[layers.layer == last]])
    labels = [f"{display_name(row.model)}, " + ("table" if row.source == "table" else
                                                 f"L{int(row.layer)} {subspace_name(row.subspace)}")
              for row in chosen.itertuples()]
    return chosen.assign(entry=labels)


def basis_words(table: pd.DataFrame) -> str:
    """How the layer rows' per-position means were taken (fig_geometry's ``sequences`` column), for a caption."""
    sets = set(table["sequences"].dropna()) if "sequences" in table else set()
    if sets == {"balanced"}:
        return "every position over the same sequences"
    return "each position over the sequences that reach it" if sets == {"all"} else "see the table's sequences column"


def plot_geometry_leaderboard(table: pd.DataFrame, out_dir, stem: str = "geometry_leaderboard") -> dict:
    """One panel per number (``LEADERBOARD_METRICS``), one line per entry (``leaderboard_entries``): a dot at the
    mean over training seeds, a bar from the lowest to the highest seed, and the smooth controls' means (grey
    diamond: random walks, open square: smoothed noise) where the number has a control."""
    require_columns(table, COLUMNS, "the geometry table")
    entries = leaderboard_entries(table)
    if not len(entries):
        raise ValueError("the geometry table has no row that applies: nothing to draw")
    order = list(dict.fromkeys(entries.entry))
    palette = model_palette(entries.model.unique())
    models = dict(zip(entries.entry, entries.model))
    fig, axes = plt.subplots(1, len(LEADERBOARD_METRICS), figsize=(2.3 * len(LEADERBOARD_METRICS) + 2.2,
                                                                    0.35 * len(order) + 1.4), sharey=True, squeeze=False)
    summary = []
    for ax, (metric, label) in zip(axes[0], LEADERBOARD_METRICS.items()):
        for y, entry in enumerate(order):
            rows = entries[entries.entry == entry]
            values = rows[metric].astype(float)
            mean, low, high = values.mean(), values.min(), values.max()
            ax.errorbar([mean], [y], xerr=[[mean - low], [high - mean]], fmt="o", ms=5, color=palette[models[entry]],
                        capsize=2, label="model (mean over seeds)")
            record = {"entry": entry, "metric": metric, "mean": mean, "low": low, "high": high,
                      "n_seeds": int(rows.seed.nunique())}
            for family, (marker, name) in CONTROL_MARKERS.items():
                column = f"{family}_{metric}"
                if column in rows and rows[column].notna().any():
                    control = float(rows[column].mean())
                    ax.plot([control], [y], marker=marker, ms=5, ls="none", color="#777777",
                            mfc="#777777" if family == "walk" else "none", label=f"{name} control (mean)")
                    record[f"{family}_control"] = control
            summary.append(record)
        ax.set_xlabel(label, fontsize=8)
        ax.grid(alpha=0.3, axis="x")
        ax.tick_params(labelsize=7)
    axes[0][0].set_yticks(range(len(order)))
    axes[0][0].set_yticklabels(order, fontsize=7)
    axes[0][0].invert_yaxis()
    shared_legend(fig, axes, top=0.86 if len(order) < 6 else 0.92)
    n_seeds = int(entries.seed.nunique())
    caption(fig, "Rows: each model's learned position table (where it has one) and the position basis of its last "
                 f"layer (per-position mean state over held-out documents, {basis_words(table)}). Dots: the mean "
                 "over "
                 f"{n_seeds} training seed(s); bars: lowest to highest seed. Grey diamonds: random walks of the same "
                 "shape; open squares: white noise smoothed to the table's own row-to-row correlation (means over "
                 "seeded draws). A number beyond both controls says more than 'smooth'. Stress: Kruskal stress-1 of "
                 "the 2-D classical MDS of the positions (0 = a plane). Outliers: dims > 3 sd above the mean "
                 "magnitude with position R² >= 0.5.", y=-0.04)
    return save_figure(fig, out_dir, stem, {"entries": pd.DataFrame(summary), "rows": entries})


CONTROL_GREYS = ("#555555", "#999999", "#BBBBBB", "#DDDDDD")  # the controls of a panel's widths, narrowest first


def plot_geometry_by_layer(table: pd.DataFrame, out_dir, stem: str = "geometry_by_layer") -> dict:
    """Small multiples, one column per model and one row per number (``BY_LAYER_METRICS``): the layer rows by
    layer, one line per subspace (mean over training seeds, band lowest to highest seed), the random-walk
    control of each width in the panel (grey dashed: mean, grey band: up to its q95) and the learned table's
    value (dotted) where there is one."""
    require_columns(table, (*COLUMNS, "width"), "the geometry table")
    applies = table[table.applies.astype(bool)]
    layers = applies[applies.source == "layer"]
    if not len(layers):
        raise ValueError("the geometry table has no layer row: nothing to draw")
    models = list(dict.fromkeys(layers.model))
    palette = model_palette(models)
    fig, axes = plt.subplots(len(BY_LAYER_METRICS), len(models), figsize=(3.0 * len(models) + 0.6, 5.4),
                             squeeze=False, sharex="col")
    for column, model in enumerate(models):
        rows = layers[layers.model == model]
        tables = applies[(applies.model == model) & (applies.source == "table")]
        for row, (metric, label) in enumerate(BY_LAYER_METRICS.items()):
            ax = axes[row][column]
            for subspace in dict.fromkeys(rows.subspace):
                line = rows[rows.subspace == subspace].groupby("layer")[metric].agg(["mean", "min", "max"])
                ax.plot(line.index, line["mean"], marker="o", ms=3, color=palette[model],
                        ls=SUBSPACE_STYLES.get(subspace, "-"), label=subspace_name(subspace))
                ax.fill_between(line.index, line["min"], line["max"], color=palette[model], alpha=0.15, lw=0)
            widths = sorted(rows.width.unique())  # a control is of one shape: DSTG's 16-wide AP stream has its own
            for shade, width in zip(CONTROL_GREYS, widths):
                control = rows[rows.width == width].groupby("layer")[[f"walk_{metric}", f"walk_{metric}_q95"]].mean()
                ax.plot(control.index, control[f"walk_{metric}"], color=shade, ls="--", lw=0.9,
                        label=f"random walks, {int(width)} wide (mean)")
                ax.fill_between(control.index, control[f"walk_{metric}"], control[f"walk_{metric}_q95"],
                                color=shade, alpha=0.15, lw=0, label=f"random walks, {int(width)} wide, up to q95")
            if len(tables):
                ax.axhline(float(tables[metric].mean()), color=palette[model], ls=":", lw=1.6,
                           label="learned table")
            ax.set_xticks(np.unique(rows.layer))
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(display_name(model), fontsize=9)
            if row == len(BY_LAYER_METRICS) - 1:
                ax.set_xlabel("layer (0 = embeddings)", fontsize=8)
    shared_legend(fig, axes, max_columns=4, top=0.88)
    caption(fig, "Each layer's position basis (the per-position mean state over held-out documents, "
                 f"{basis_words(table)}). Lines: mean "
                 f"over {int(layers.seed.nunique())} training seed(s), one per subspace; coloured bands: lowest to "
                 "highest seed. Grey dashed: random walks of the basis's shape, one per width (a smooth curve with no "
                 "structure; DSTG's AP stream is narrower than its other states), grey band: up to their 95% quantile "
                 "-- a PC1+PC2 inside it reads only 'smooth'. Dotted: the "
                 "model's learned position table, where it has one.", y=-0.03)
    controls = (layers.groupby(["model", "width", "layer"])[[f"walk_{m}" for m in BY_LAYER_METRICS]
                               + [f"walk_{m}_q95" for m in BY_LAYER_METRICS]].mean().reset_index())
    return save_figure(fig, out_dir, stem, {"layers": layers, "controls": controls})


HEAD_CLASSES = ("positional", "semantic", "mixed")  # analysis.head_split's labels, one panel each


def plot_head_split_sweep(sweep: pd.DataFrame, out_dir, threshold: float, stem: str = "head_split_sweep") -> dict:
    """One panel per head class of the position / context split of the heads' q.k (``analysis.head_split``): the
    share of a model's heads in the class as the dominant-share threshold sweeps (``heads.threshold_sweep``), mean
    over training seeds, band lowest to highest seed; dashed: the threshold the geometry table's classes use."""
    require_columns(sweep, ("model", "seed", "member", "threshold", "label", "n_heads", "n_total"),
                    "the head-split sweep")
    if not len(sweep):
        raise ValueError("the head-split sweep is empty: nothing to draw")
    counts = sweep.pivot_table(index=["model", "seed", "member", "threshold", "n_total"], columns="label",
                               values="n_heads", fill_value=0).reset_index()
    models = list(dict.fromkeys(sweep.model))
    palette = model_palette(models)
    fig, axes = plt.subplots(1, len(HEAD_CLASSES), figsize=(3.3 * len(HEAD_CLASSES), 3.4), squeeze=False, sharey=True)
    shares = []
    for ax, label in zip(axes[0], HEAD_CLASSES):
        share = counts.assign(share=(counts[label] if label in counts else 0) / counts.n_total)
        shares.append(share[["model", "seed", "member", "threshold", "share"]].assign(label=label))
        for model in models:
            line = share[share.model == model].groupby("threshold").share.agg(["mean", "min", "max"])
            ax.plot(line.index, line["mean"], marker="o", ms=3, color=palette[model], label=display_name(model))
            ax.fill_between(line.index, line["min"], line["max"], color=palette[model], alpha=0.15, lw=0)
        ax.axvline(threshold, color="black", ls="--", lw=0.9)
        ax.set(title=f"{label} heads", xlabel="dominant-share threshold", ylim=(-0.03, 1.03))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of the model's heads")
    shared_legend(fig, axes, max_columns=6, top=0.88)
    caption(fig, "Each head's q.k split by the per-position mean of its queries and keys into position, context and "
                 "cross terms; a head is named after a term carrying at least the threshold's share of the "
                 "within-query variance whose removal changes its pattern most (DSTG's rule), else mixed. Lines: "
                 f"mean over {int(sweep.seed.nunique())} training seed(s); bands: lowest to highest seed; dashed: "
                 "the threshold of the geometry table's head columns (beside them, the control with positions "
                 "shuffled within each window).", y=-0.04)
    return save_figure(fig, out_dir, stem, {"shares": pd.concat(shares, ignore_index=True)})
