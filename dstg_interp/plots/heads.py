"""Figures of the head classification (input: the tidy table of ``dstg_interp.analysis.heads.classify_heads``).

    from dstg_interp.plots import plot_head_map, plot_share_scatter
    plot_head_map(heads, "figures/", stem="heads_map")     # heads: rows of one or several models
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ..analysis.heads import CONTENT_SCORE_MAX_POSITIONAL, DOMINANT_SHARE, POSITIONAL_SCORE_MIN
from .output import LABEL_COLORS, caption, display_name, model_color, ordered_models, require_columns, save_figure

_SHARE_LETTERS = (("share_sem", "S"), ("share_ap", "A"), ("share_rp", "R"))
_NUMBER_COLUMNS = ["model", "layer", "head", "label", "head_class", "share_sem", "share_ap", "share_rp", "share_content",
                   "cov_share", "js_without_sem", "js_without_ap", "js_without_rp", "js_without_content",
                   "positional_score", "content_score"]


# What each label means (analysis.heads' rule), for the legends.
_DOMINATES = f"carries >= {DOMINANT_SHARE:g} of the head's logit-term variance and drives its pattern"
LABEL_KEY = {
    "structure-relative": f"structure-relative: the AP term {_DOMINATES}, and the offset j - i explains >= "
                          f"{POSITIONAL_SCORE_MIN:g} of its pattern (a locality head)",
    "structure-absolute": f"structure-absolute: the AP term {_DOMINATES}, and attends to absolute positions (offset "
                          f"explains < {POSITIONAL_SCORE_MIN:g} of its pattern)",
    "structure": f"structure: the AP term {_DOMINATES}",
    "semantic": f"semantic: the semantic term {_DOMINATES}",
    "RP": f"RP: the relative-position term {_DOMINATES}",
    "mixed": f"mixed: no term dominates (DSTG), or offset explains {CONTENT_SCORE_MAX_POSITIONAL:g}-{POSITIONAL_SCORE_MIN:g} "
             "of the pattern (entangled baselines)",
    "positional": f"positional: relative offset explains >= {POSITIONAL_SCORE_MIN:g} of the pattern (entangled baselines)",
    "content": f"content: offset explains < {CONTENT_SCORE_MAX_POSITIONAL:g} of the pattern, so tokens decide "
               "(entangled baselines, whose one q.k term mixes position and meaning)",
}
CELL_KEY = ("Cell text, DSTG heads: S / A / R = the semantic, AP and RP terms' shares of the head's summed logit-term "
            "variance (.38 = 0.38). Entangled baselines: pos = positional score, the share of the attention pattern's "
            "variance explained by relative offset; R = the RP term's share (RP-NeoBERT).")


def _cell_text(row: pd.Series) -> str:
    """Shares as 'S.82 A.10 R.08' for DSTG heads, 'pos .35' for entangled ones."""
    parts = [f"{letter}{row[col]:.2f}".replace("0.", ".") for col, letter in _SHARE_LETTERS
             if col in row and pd.notna(row[col])]
    if not parts or ("share_sem" not in row or pd.isna(row.get("share_sem"))):
        score = row.get("positional_score")
        parts = [f"pos{score:.2f}".replace("0.", ".")] if pd.notna(score) else []
        if pd.notna(row.get("share_rp")):
            parts.append(f"R{row['share_rp']:.2f}".replace("0.", "."))
    return "\n".join(parts)


def plot_head_map(heads: pd.DataFrame, out_dir, stem: str = "head_map") -> dict:
    """A layer x head grid per model (columns) and training seed (rows), coloured by head class (``head_class``:
    the label, a DSTG structure head split into relative / absolute; ``label`` for a table without it), each
    cell annotated with its shares."""
    require_columns(heads, ["model", "layer", "head", "label"], "the head table")
    heads = heads if "seed" in heads.columns else heads.assign(seed=0)
    column = "head_class" if "head_class" in heads.columns else "label"
    models = ordered_models(heads.model)
    seeds = sorted(heads.seed.unique())
    n_layers = int(heads.layer.max()) + 1
    n_heads = int(heads["head"].max()) + 1
    classes = list(LABEL_COLORS)
    unknown = sorted(set(heads[column]) - set(classes))
    if unknown:
        raise ValueError(f"unknown head class(es) {unknown}; expected {classes}")
    colormap = ListedColormap([LABEL_COLORS[c] for c in classes])
    fig, axes = plt.subplots(len(seeds), len(models), figsize=(1.0 + 0.9 * n_heads * len(models),
                                                               (0.65 * n_layers + 1.0) * len(seeds) + 0.6), squeeze=False)
    for row_axes, seed in zip(axes, seeds):
        for ax, model in zip(row_axes, models):
            rows = heads[(heads.model == model) & (heads.seed == seed)]
            grid = np.full((n_layers, n_heads), np.nan)  # [layer, head] class index
            for _, row in rows.iterrows():
                grid[int(row.layer), int(row["head"])] = classes.index(row[column])
                ax.text(row["head"], row.layer, _cell_text(row), ha="center", va="center", fontsize=6)
            ax.imshow(np.ma.masked_invalid(grid), cmap=colormap, vmin=-0.5, vmax=len(classes) - 0.5, aspect="auto")
            ax.set_xticks(range(n_heads))
            ax.set_yticks(range(n_layers))
            title = display_name(model) + (f", seed {seed}" if len(seeds) > 1 else f" (one seed: {seed})")
            ax.set(xlabel="head", ylabel="layer", title=title)
            ax.title.set_color(model_color(model, models))
    used = [c for c in classes if c in set(heads[column])]
    n_columns = 1 if len(models) < 3 else 2
    fig.legend(handles=[Patch(color=LABEL_COLORS[c], label=LABEL_KEY[c]) for c in used],
               loc="upper center", ncol=n_columns, fontsize=6, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout()
    legend_rows = -(-len(used) // n_columns)  # each about 0.14 in tall, under the figure
    caption(fig, CELL_KEY, y=-(0.12 + 0.14 * legend_rows) / fig.get_figheight())
    counts = heads.groupby(["model", "seed", column]).size().rename("n_heads").reset_index()
    numbers = {"heads": heads[[c for c in ["seed", *_NUMBER_COLUMNS] if c in heads.columns]], "class_counts": counts}
    return save_figure(fig, out_dir, stem, numbers)


def plot_share_scatter(heads: pd.DataFrame, out_dir, stem: str = "head_shares") -> dict:
    """Left: semantic share vs AP share of every DSTG-style head, coloured by head class (the diagonal
    share_sem + share_ap = 1 is "no RP").  Right: every model's positional score by layer.  Every training
    seed's heads are drawn (the title says how many seeds)."""
    require_columns(heads, ["model", "layer", "head", "label"], "the head table")
    column = "head_class" if "head_class" in heads.columns else "label"
    n_seeds = heads.seed.nunique() if "seed" in heads.columns else 1
    seeds_text = f"{n_seeds} seeds" if n_seeds > 1 else "one seed"
    has_streams = heads[[c for c in ("share_sem", "share_ap") if c in heads.columns]].notna().all(axis=1) \
        if {"share_sem", "share_ap"} <= set(heads.columns) else pd.Series(False, index=heads.index)
    stream_heads = heads[has_streams]
    fig, (ax_shares, ax_positional) = plt.subplots(1, 2, figsize=(9, 4))
    for label, rows in stream_heads.groupby(column):
        ax_shares.scatter(rows.share_sem, rows.share_ap, color=LABEL_COLORS.get(label, "grey"), label=label,
                          s=22, edgecolor="black", linewidth=0.3, alpha=0.85)
    ax_shares.plot([0, 1], [1, 0], color="grey", lw=0.8, ls="--")
    ax_shares.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03), xlabel="semantic share of logit variance",
                  ylabel="AP share of logit variance", title=f"DSTG heads ({seeds_text})" if len(stream_heads) else "no DSTG heads")
    if len(stream_heads):
        ax_shares.legend(fontsize=7)
    models = ordered_models(heads.model)
    if "positional_score" in heads.columns:
        for i, model in enumerate(models):
            rows = heads[heads.model == model]
            jitter = (i - (len(models) - 1) / 2) * 0.08  # keep overlapping models visible
            ax_positional.scatter(rows.layer + jitter, rows.positional_score, color=model_color(model, models),
                                  label=display_name(model), s=16)
        ax_positional.legend(fontsize=7)
        ax_positional.set_xticks(range(int(heads.layer.max()) + 1))  # layers are blocks: whole numbers
    ax_positional.set(xlabel="layer (block)", ylabel="positional score (R² on offset)", ylim=(-0.03, 1.03),
                      title=f"pattern explained by relative offset ({seeds_text})")
    for ax in (ax_shares, ax_positional):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    caption(fig, "Left: each DSTG head's semantic and AP shares of its summed logit-term variance, coloured by class "
                 f"(structure / semantic / RP: that term carries >= {DOMINANT_SHARE:g} of the variance and drives the "
                 "pattern; mixed: none does; a structure head is relative when the offset explains >= "
                 f"{POSITIONAL_SCORE_MIN:g} of its pattern, else absolute); the dashed diagonal is a head with no RP "
                 "share. A dot per head and training seed. Right: every head's "
                 "positional score, the share of its attention pattern's variance explained by relative offset, by "
                 "block (models side by side within a block).")
    numbers = {"heads": heads[[c for c in _NUMBER_COLUMNS if c in heads.columns]]}
    return save_figure(fig, out_dir, stem, numbers)


def plot_head_sweep(sweep: pd.DataFrame, heads: pd.DataFrame, out_dir, threshold: float, stem: str = "head_sweep") -> dict:
    """Left: the distribution of every DSTG head's sem / AP / RP share of the logit variance, all training seeds
    (a dot per head and seed; the dashed line is the threshold the labels use).  Right: heads per label as the
    threshold sweeps (``analysis.heads.threshold_sweep``): mean over training seeds, band = min to max seed."""
    require_columns(sweep, ["model", "threshold", "label", "n_heads"], "the head threshold sweep")
    stream_heads = heads[heads[[c for c in ("share_sem", "share_ap") if c in heads]].notna().all(axis=1)] \
        if {"share_sem", "share_ap"} <= set(heads.columns) else heads.iloc[:0]
    # the zoo's DSTG; for a list of other models, the first one with DSTG's streams
    swept = "dstg" if (sweep.model == "dstg").any() else next(iter(stream_heads.model.unique()), None)
    dstg_sweep = sweep[sweep.model == swept]
    fig, (ax_shares, ax_sweep) = plt.subplots(1, 2, figsize=(9, 3.8))
    terms = [("share_sem", "semantic"), ("share_ap", "structure"), ("share_rp", "RP")]
    rng = np.random.default_rng(0)
    for i, (column, label) in enumerate(terms):
        if column in stream_heads:
            values = stream_heads[column].dropna().to_numpy()
            ax_shares.scatter(i + rng.uniform(-0.2, 0.2, len(values)), values, s=14, color=LABEL_COLORS.get(label, "grey"),
                              edgecolor="black", linewidth=0.3)
    ax_shares.axhline(threshold, color="black", lw=0.9, ls="--", label=f"threshold {threshold:g}")
    ax_shares.set(xticks=range(len(terms)), xticklabels=[f"{label}\n({column})" for column, label in terms],
                  ylim=(-0.03, 1.03), ylabel="share of summed logit-term variance",
                  title="DSTG heads, every training seed")
    ax_shares.legend(fontsize=7)
    if "seed" not in dstg_sweep:
        dstg_sweep = dstg_sweep.assign(seed=0)
    grid = (dstg_sweep.pivot_table(index=["seed", "threshold"], columns="label", values="n_heads", fill_value=0)
            .reset_index().melt(id_vars=["seed", "threshold"], var_name="label", value_name="n_heads"))
    bands = grid.groupby(["label", "threshold"]).n_heads.agg(["mean", "min", "max"]).reset_index()
    for label, rows in bands.groupby("label"):
        color = LABEL_COLORS.get(label, "grey")
        ax_sweep.plot(rows.threshold, rows["mean"], color=color, marker="o", ms=3, label=label)
        ax_sweep.fill_between(rows.threshold, rows["min"], rows["max"], color=color, alpha=0.2)
    ax_sweep.axvline(threshold, color="black", lw=0.9, ls="--")
    ax_sweep.set(xlabel="dominant-share threshold", ylabel=f"{display_name(swept or 'dstg')} heads (mean over seeds; band: min-max)",
                 title="labels as the threshold sweeps")
    if len(bands):
        ax_sweep.legend(fontsize=7)
    for ax in (ax_shares, ax_sweep):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out_dir, stem, {"sweep": sweep, "bands": bands})
