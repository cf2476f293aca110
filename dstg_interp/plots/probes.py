"""Figures of probe results: R² by layer (position probes) and Holmes per-area scores and A-vs-B counts.

    from dstg_interp.plots import plot_r2_by_layer, plot_holmes_areas, plot_holmes_counts
    plot_r2_by_layer(results, "figures/", stem="probes_r2")   # results: the tidy dstg-probe table
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from .output import model_color, ordered_models, require_columns, save_figure, shared_legend

SUBSPACE_ORDER = ("ap", "sem", "full")
_SUBSPACE_STYLE = {"ap": "-", "sem": "--", "full": ":"}


def plot_r2_by_layer(results: pd.DataFrame, out_dir, stem: str = "r2_by_layer") -> dict:
    """One grid: rows = task (and segment), columns = subspace; in each panel R² by layer, one line per
    model with its CI band.  Entangled models only have ``full``; DSTG has all three."""
    columns = ["model", "task", "segment", "layer", "subspace", "r2", "ci_low", "ci_high"]
    require_columns(results, columns, "the probe results")
    results = results.copy()
    results["row"] = np.where(results.task == "token", "token", results.task + " (" + results.segment.astype(str) + ")")
    rows = list(dict.fromkeys(results.sort_values(["task", "segment"]).row))
    subspaces = [s for s in SUBSPACE_ORDER if s in set(results.subspace)]
    subspaces += sorted(set(results.subspace) - set(subspaces))
    models = ordered_models(results.model)
    fig, axes = plt.subplots(len(rows), len(subspaces), figsize=(3.4 * len(subspaces), 2.7 * len(rows)),
                             squeeze=False, sharex=True, sharey=True)
    for i, row_name in enumerate(rows):
        for j, subspace in enumerate(subspaces):
            ax = axes[i, j]
            panel = results[(results.row == row_name) & (results.subspace == subspace)]
            for model in models:
                line = panel[panel.model == model].sort_values("layer")
                if line.empty:
                    continue
                color = model_color(model, models)
                ax.plot(line.layer, line.r2, "o-", color=color, ms=3, label=str(model))
                ax.fill_between(line.layer, line.ci_low, line.ci_high, color=color, alpha=0.2, lw=0)
            ax.axhline(0, color="black", lw=0.5)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(f"subspace: {subspace}")
            if j == 0:
                ax.set_ylabel(f"{row_name}\nR²")
            if i == len(rows) - 1:
                ax.set_xlabel("layer")
    shared_legend(fig, axes)
    return save_figure(fig, out_dir, stem, {"results": results[columns]})


def plot_holmes_areas(scores: pd.DataFrame, out_dir, stem: str = "holmes_areas") -> dict:
    """Grouped bars: mean score per area (morphology, syntax, ...) for each model, with the number of
    phenomena averaged when ``scores`` has one row per phenomenon (column ``phenomenon``)."""
    require_columns(scores, ["model", "area", "score"], "the Holmes scores")
    per_area = scores.groupby(["model", "area"], sort=False).score.agg(["mean", "std", "count"]).reset_index()
    models = ordered_models(per_area.model)
    areas = list(dict.fromkeys(scores.area))
    fig, ax = plt.subplots(figsize=(max(5.0, 2.0 + 0.35 * len(areas) * len(models)), 3.6))
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        rows = per_area[per_area.model == model].set_index("area").reindex(areas)
        x = np.arange(len(areas)) + (i - (len(models) - 1) / 2) * width
        error = rows["std"] / np.sqrt(rows["count"]) if (rows["count"] > 1).any() else None
        ax.bar(x, rows["mean"], width=width, yerr=error, color=model_color(model, models), label=str(model),
               capsize=2)
    ax.set_xticks(np.arange(len(areas)), areas, rotation=20)
    ax.set(ylabel="score", title="Holmes: mean score per area")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out_dir, stem, {"per_area": per_area, "scores": scores})


def plot_holmes_counts(counts: pd.DataFrame, out_dir, stem: str = "holmes_counts") -> dict:
    """A-vs-B table: cell (A, B) shows A's wins/ties/losses against B over phenomena, coloured by the
    win share (wins - losses) / total."""
    require_columns(counts, ["model_a", "model_b", "wins", "ties", "losses"], "the Holmes A-vs-B counts")
    models_a = ordered_models(counts.model_a)
    models_b = ordered_models(counts.model_b)
    balance = np.full((len(models_a), len(models_b)), np.nan)  # [A, B]
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(models_b), 1.0 + 0.7 * len(models_a)))
    for _, row in counts.iterrows():
        i, j = models_a.index(row.model_a), models_b.index(row.model_b)
        total = row.wins + row.ties + row.losses
        balance[i, j] = (row.wins - row.losses) / total if total else 0.0
        ax.text(j, i, f"{int(row.wins)} / {int(row.ties)} / {int(row.losses)}", ha="center", va="center", fontsize=8)
    image = ax.imshow(np.ma.masked_invalid(balance), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    fig.colorbar(image, ax=ax, label="(wins - losses) / phenomena")
    ax.set_xticks(range(len(models_b)), [f"vs {m}" for m in models_b])
    ax.set_yticks(range(len(models_a)), models_a)
    ax.set_title("Holmes: A wins / ties / losses vs B")
    fig.tight_layout()
    return save_figure(fig, out_dir, stem, {"counts": counts[["model_a", "model_b", "wins", "ties", "losses"]]})
