"""The ground-truth figure (``analysis.ground_truth``): how close each method's position subspace comes to DSTG's AP
stream, by geometry and by interchange, layer by layer.

    plot_ground_truth(scores, "figures/ground_truth", stem="ground_truth")   # scores: fig_ground_truth's scores.csv
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .output import caption, display_name, require_columns, save_figure

# method -> (what a reader sees, colour); the order of the legend
METHODS = {
    "ap_coordinates": ("AP coordinates (the truth)", "#000000"),
    "das": ("DAS (learned rotation)", "#D55E00"),
    "boundless_das": ("boundless DAS (learned width)", "#882255"),
    "attribution": ("attribution patching (DAS to first order)", "#E69F00"),
    "leace": ("LEACE subspace", "#0072B2"),
    "inlp": ("INLP subspace", "#56B4E9"),
    "probe_span": ("ridge probe span", "#009E73"),
    "position_means_pcs": ("per-position mean PCs", "#CC79A7"),
    "sae": ("SAE position-tuned latents", "#44AA99"),
    "random": ("random subspace", "#999999"),
}
# (column, axis label) of each panel
PANELS = (("mean_cos2", "mean cos² of the principal angles\nwith the AP subspace"),
          ("top1_agreement", "interchange accuracy\n(top-1 = counterfactual's)"))


def method_name(method: str) -> str:
    """A method's name in words (an unknown method as it is)."""
    return METHODS.get(method, (method, None))[0]


def plot_ground_truth(scores: pd.DataFrame, out_dir, stem: str = "ground_truth", numbers: dict | None = None) -> dict:
    """One row of panels per model: mean cos² of each method's subspace with the AP subspace, and the top-1 agreement
    of its interchange with the counterfactual, by layer; lines are the mean over training seeds, bands min-max."""
    require_columns(scores, ["model", "seed", "layer", "method", "mean_cos2", "chance", "top1_agreement",
                             "top1_unedited"], "the ground-truth scores")
    models = list(dict.fromkeys(scores.model))
    fig, axes = plt.subplots(len(models), len(PANELS), figsize=(3.6 * len(PANELS), 2.8 * len(models)), squeeze=False)
    methods = [m for m in METHODS if m in set(scores.method)] + sorted(set(scores.method) - set(METHODS))
    for row, model in zip(axes, models):
        rows = scores[scores.model == model]
        for ax, (column, label) in zip(row, PANELS):
            for method in methods:
                line = rows[rows.method == method].groupby("layer")[column].agg(["mean", "min", "max"]).reset_index()
                if not len(line):
                    continue
                color = METHODS.get(method, (None, "#555555"))[1]
                ax.plot(line.layer, line["mean"], marker="o", ms=3, color=color, label=method_name(method))
                ax.fill_between(line.layer, line["min"], line["max"], color=color, alpha=0.15, lw=0)
            geometry = column == "mean_cos2"
            ax.set_title(display_name(model), fontsize=9)
            if geometry and rows[column].isna().all():  # a model with no AP stream: interchange alone
                ax.text(0.5, 0.5, "no known position subspace:\nscored on interchange alone", ha="center",
                        va="center", fontsize=8, transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            reference = rows.groupby("layer")["chance" if geometry else "top1_unedited"].mean()
            ax.plot(reference.index, reference.to_numpy(), color="black", lw=0.8, ls="--" if geometry else ":",
                    label="chance (k_AP / d)" if geometry else "no interchange")
            ax.set_ylim(-0.02, 1.02)
            ax.set_xticks(np.unique(rows.layer))
            ax.set_xlabel("layer (0 = embeddings)", fontsize=8)
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes.ravel():
        for handle, text in zip(*ax.get_legend_handles_labels()):
            if text not in labels:
                handles.append(handle)
                labels.append(text)
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=7, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.88 if len(models) == 1 else 0.91))
    n_seeds = int(scores.seed.nunique())
    caption(fig, "Each method's k-dimensional subspace for position (k = the AP width; boundless DAS: the width it "
                 "learns), fitted on held-out windows, "
                 "against the AP coordinates of DSTG's state. Left: 1 = the AP subspace, dashed: a random subspace's "
                 "expected value. Right: the base window's state gets the subspace's coordinates from the same tokens "
                 "read later; share of tokens whose top-1 prediction is that shifted run's; dotted: no interchange. "
                 "A model with no AP stream (AP-NeoBERT) has no truth to compare with: its methods' interchange "
                 f"is read beside a random subspace's. Lines: mean over {n_seeds} training seed(s); bands: min-max "
                 "over them.")
    return save_figure(fig, out_dir, stem, {**(numbers or {}), "scores": scores})
