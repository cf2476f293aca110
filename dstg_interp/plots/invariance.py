"""Figures of passage invariance (``dstg_interp.invariance``): state change and retrieval recall by layer.

    from dstg_interp.plots import plot_invariance_by_layer, plot_recall_by_layer
    plot_invariance_by_layer(invariance, "figures/invariance/")          # cosine and rel. L2, per condition
    plot_recall_by_layer(retrieval, "figures/invariance/", k=1)         # recall@1, per condition

One panel per condition (shift, prefix, inside, context), one line per (model, subspace): the zoo colour of the
model, the line style of the subspace (DSTG's sem dashed, ap dotted, full and the baselines solid).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from .output import model_color, ordered_models, require_columns, save_figure, shared_legend

CONDITION_ORDER = ("shift", "prefix", "inside", "context")
SUBSPACE_STYLE = {"full": "-", "sem": "--", "ap": ":"}
METRIC_LABELS = {"token_cosine": "cosine to alone (tokens)", "token_rel_l2": "rel. L2 change (tokens)",
                 "pooled_cosine": "cosine to alone (pooled)", "pooled_rel_l2": "rel. L2 change (pooled)"}


def plot_invariance_by_layer(invariance: pd.DataFrame, out_dir, stem: str = "invariance_by_layer",
                             metrics=("token_cosine", "token_rel_l2")) -> dict:
    """Grid: rows = metric, columns = condition; each panel the metric by layer, one line per (model, subspace)."""
    require_columns(invariance, ["model", "subspace", "condition", "layer", *metrics], "the invariance table")
    frame = _numeric_layers(invariance)
    conditions = _conditions(frame)
    fig, axes = plt.subplots(len(metrics), len(conditions), figsize=(3.4 * len(conditions), 2.8 * len(metrics)),
                             squeeze=False, sharex=True, sharey="row")
    for i, metric in enumerate(metrics):
        for j, condition in enumerate(conditions):
            ax = axes[i, j]
            _lines(ax, frame[frame.condition == condition], metric)
            reference = 1.0 if "cosine" in metric else 0.0  # what a perfectly invariant state gives
            ax.axhline(reference, color="black", lw=0.5)
            if i == 0:
                ax.set_title(f"condition: {condition}")
            if j == 0:
                ax.set_ylabel(METRIC_LABELS.get(metric, metric))
            if i == len(metrics) - 1:
                ax.set_xlabel("layer")
    _legend(fig, axes)
    columns = ["model", "subspace", "condition", "layer", *metrics]
    return save_figure(fig, out_dir, stem, {"metrics": list(metrics), "invariance": invariance[columns]})


def plot_recall_by_layer(retrieval: pd.DataFrame, out_dir, stem: str = "recall_by_layer", k: int = 1) -> dict:
    """One panel per condition: recall@k by layer (database = the passages encoded alone), one line per
    (model, subspace); the dotted grey line is chance (k / number of passages)."""
    require_columns(retrieval, ["model", "subspace", "condition", "layer", "k", "recall", "n_passages"],
                    "the retrieval table")
    frame = _numeric_layers(retrieval[retrieval.k == k])
    if frame.empty:
        raise ValueError(f"the retrieval table has no rows with k={k}; it has k in {sorted(set(retrieval.k))}")
    conditions = _conditions(frame)
    fig, axes = plt.subplots(1, len(conditions), figsize=(3.4 * len(conditions), 3.0), squeeze=False,
                             sharey=True)
    for j, condition in enumerate(conditions):
        ax = axes[0, j]
        _lines(ax, frame[frame.condition == condition], "recall")
        ax.axhline(k / frame.n_passages.max(), color="grey", lw=0.8, ls=":")
        ax.set(title=f"condition: {condition}", xlabel="layer", ylim=(-0.03, 1.03))
        if j == 0:
            ax.set_ylabel(f"recall@{k}")
    _legend(fig, axes)
    columns = ["model", "subspace", "condition", "layer", "k", "recall", "n_passages"]
    return save_figure(fig, out_dir, stem, {"k": k, "retrieval": frame[columns]})


def _numeric_layers(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer layers only ("final" is the normed last state, not a point on the layer axis)."""
    numeric = frame[pd.to_numeric(frame.layer, errors="coerce").notna()].copy()
    if numeric.empty:
        raise ValueError("the table has no integer layers to plot (only 'final'?)")
    numeric["layer"] = numeric.layer.astype(int)
    return numeric


def _conditions(frame: pd.DataFrame) -> list[str]:
    present = set(frame.condition)
    return [c for c in CONDITION_ORDER if c in present] + sorted(present - set(CONDITION_ORDER))


def _lines(ax, panel: pd.DataFrame, value: str) -> None:
    models = ordered_models(panel.model)
    for model in models:
        for subspace in [s for s in SUBSPACE_STYLE if s in set(panel.subspace)] + \
                        sorted(set(panel.subspace) - set(SUBSPACE_STYLE)):
            line = panel[(panel.model == model) & (panel.subspace == subspace)].sort_values("layer")
            if line.empty:
                continue
            label = str(model) if subspace == "full" and set(panel[panel.model == model].subspace) == {"full"} \
                else f"{model} {subspace}"
            ax.plot(line.layer, line[value], marker="o", ms=3, color=model_color(model, models),
                    ls=SUBSPACE_STYLE.get(subspace, "-."), label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def _legend(fig, axes) -> None:
    shared_legend(fig, axes, max_columns=6, anchor=1.06, top=0.97)
