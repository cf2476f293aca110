"""Figures of activation patching (``analysis.patching``) and of RoPE heads by frequency band (``analysis.rope_bands``).

    plot_patching_map(exact, "figures/patching", stem="patching_map")          # layer x position, a panel per model x subspace
    plot_attribution_agreement(merged, curve, "figures/patching", stem="attribution")   # scatter + r by patch fraction
    plot_band_shares(heads, "figures/rope_bands", stem="band_shares")           # each head's band shares, labelled
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .output import caption, display_name, model_palette, require_columns, save_figure, subspace_name


def plot_patching_map(exact: pd.DataFrame, out_dir, stem: str = "patching_map", numbers: dict | None = None) -> dict:
    """Recovery of each (layer, position) patch as a heat map, one panel per (model, subspace); masked positions
    are marked under the x axis.  ``exact``: ``patch_states`` rows with a ``model`` column."""
    require_columns(exact, ["model", "layer", "subspace", "position", "masked", "recovery"], "the patching table")
    panels = list(exact.groupby(["model", "subspace"], sort=False))
    columns = min(3, len(panels))
    rows = int(np.ceil(len(panels) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.9 * rows), squeeze=False,
                             gridspec_kw={"hspace": 0.7})
    limit = 1.0  # recovery 1 = the whole clean output; larger effects (a broken position sequence) saturate
    for ax, ((model, subspace), panel) in zip(axes.ravel(), panels):
        grid = panel.pivot_table(index="layer", columns="position", values="recovery")
        image = ax.imshow(grid.to_numpy(), aspect="auto", origin="lower", cmap="RdBu_r", vmin=-limit, vmax=limit)
        masked = sorted(panel[panel.masked].position.unique())
        ax.set_xticks(masked)
        ax.set_xticklabels(["M"] * len(masked), fontsize=6)
        ax.set_yticks(range(len(grid.index)))
        ax.set_yticklabels(grid.index, fontsize=6)
        ax.set_title(f"{display_name(model)}, {subspace_name(subspace)}", fontsize=8)
        ax.set_xlabel("position (M = masked)", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, extend="both", label="recovery of the clean output")
    caption(fig, "Denoising patches: the corrupted input runs with one (layer, position) state of the clean input; "
                 "1 = the clean output comes back, 0 = no effect; colours saturate beyond +-1.", y=-0.01)
    return save_figure(fig, out_dir, stem, {**(numbers or {}), "patches": exact})


def plot_attribution_agreement(merged: pd.DataFrame, curve: pd.DataFrame, out_dir, stem: str = "attribution",
                               numbers: dict | None = None) -> dict:
    """Left: attribution against exact recovery per (layer, subspace, position), a colour per model; right: Pearson r
    against the patched fraction (``curve``: model, fraction, r), where the linear approximation breaks."""
    require_columns(merged, ["model", "recovery_exact", "recovery_attribution"], "the merged attribution table")
    require_columns(curve, ["model", "fraction", "r"], "the attribution curve")
    palette = model_palette(list(merged.model.unique()) + list(curve.model.unique()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.6, 3.2))
    for model, group in merged.groupby("model", sort=False):
        left.scatter(group.recovery_exact, group.recovery_attribution, s=6, alpha=0.6, color=palette[model],
                     label=display_name(model))
    low, high = left.get_xlim()
    left.plot([low, high], [low, high], color="black", lw=0.6)
    outside = int((merged[["recovery_exact", "recovery_attribution"]].abs() > 1.5).any(axis=1).sum())
    if outside:  # out-of-order position patches reach recovery -100: the frame keeps the bulk readable
        left.set_xlim(-1.5, 1.5)
        left.set_ylim(-1.5, 1.5)
        left.set_title(f"{outside} patch(es) beyond ±1.5 not shown", fontsize=7)
    left.set_xlabel("exact patch: recovery")
    left.set_ylabel("attribution: recovery")
    left.legend(fontsize=6)
    for model, group in curve.groupby("model", sort=False):
        group = group.sort_values("fraction")
        right.plot(group.fraction, group.r, marker="o", color=palette[model], label=display_name(model))
    right.axhline(0.9, color="black", lw=0.6)
    right.set_xscale("log")
    right.set_xlabel("patched fraction of (clean - corrupted)")
    right.set_ylabel("Pearson r, attribution vs exact")
    right.legend(fontsize=6)
    fig.tight_layout()
    caption(fig, "Right: r of attribution patching against exact patches of a fraction of the state difference "
                 "(recovery / fraction); thin line: the target r = 0.9.")
    return save_figure(fig, out_dir, stem, {**(numbers or {}), "points": merged, "curve": curve})


def plot_band_shares(heads: pd.DataFrame, out_dir, stem: str = "band_shares", numbers: dict | None = None) -> dict:
    """Each head's share of logit variance per frequency band (band 0 = fastest planes) as stacked bars, a panel per
    model, the head's label over its bar.  ``heads``: ``classify_band_heads`` rows with a ``model`` column."""
    bands = sorted(c for c in heads.columns if c.startswith("share_band"))
    require_columns(heads, ["model", "layer", "head", "label", *bands], "the band table")
    models = list(heads.model.unique())
    fig, axes = plt.subplots(len(models), 1, figsize=(7.2, 2.0 * len(models)), squeeze=False)
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(bands)))
    for ax, model in zip(axes[:, 0], models):
        panel = heads[heads.model == model].sort_values(["layer", "head"])
        x = np.arange(len(panel))
        bottom = np.zeros(len(panel))
        for band, color in zip(bands, colors):
            ax.bar(x, panel[band], bottom=bottom, color=color, width=0.85, label=band.replace("share_band", "band "))
            bottom += panel[band].fillna(0).to_numpy()
        for i, label in enumerate(panel.label):
            ax.text(i, 1.02, label[0].upper(), ha="center", fontsize=6)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{layer}.{head}" for layer, head in zip(panel["layer"], panel["head"])], fontsize=5, rotation=90)
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("share", fontsize=7)
        ax.set_title(display_name(model), fontsize=8)
    axes[0, 0].legend(fontsize=6, ncol=len(bands), loc="upper right", bbox_to_anchor=(1, 1.45))
    fig.tight_layout()
    caption(fig, "Bars: each RoPE head's (layer.head) share of within-query logit variance per frequency band, band 0 "
                 "the fastest planes; letters: P positional, S semantic, M mixed (high-half share >= 0.6 / <= 0.4).")
    return save_figure(fig, out_dir, stem, {**(numbers or {}), "heads": heads})
