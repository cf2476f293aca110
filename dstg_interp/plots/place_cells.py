"""The place-cell figures (``analysis.place_cells``): the receptive fields of an SAE's position-tuned latents, and
the latents tiling the position curve.

    plot_receptive_fields(cells, fields, "figures/place_cells")   # fig_place_cells' place_cells.csv, fields.csv
    plot_position_tiling(cells, curve, "figures/place_cells")     # ... and curve.csv

One panel per (model, layer, subspace) of the lowest training seed, its title giving the tuned count of every
seed (``_seed_counts``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from .output import MAX_COLUMNS, caption, display_name, require_columns, save_figure, subspace_name

PANEL_KEYS = ["model", "layer", "subspace"]
CELL_COLUMNS = ["model", "seed", "layer", "subspace", "latent", "peak", "width", "eta2", "tuned"]


CONTROL = "the 99th percentile of the same latents' eta² with positions shuffled among occurrences of the same token"


def plot_receptive_fields(cells: pd.DataFrame, fields: pd.DataFrame, out_dir, stem: str = "place_cells_fields",
                          numbers: dict | None = None, control: str = CONTROL) -> dict:
    """Per panel, a heatmap of the tuned latents (rows, sorted by peak) by position (columns): each latent's mean
    activation at each position divided by its largest one (``control``: the tuning bar, in words, for the
    caption)."""
    require_columns(cells, CELL_COLUMNS, "the place-cell table")
    require_columns(fields, ["model", "seed", "layer", "subspace", "latent", "position", "activation"],
                    "the receptive fields")
    every_seed, (cells, fields) = cells, (_first_seed(cells), _first_seed(fields))
    panels = list(cells.groupby(PANEL_KEYS, sort=False))
    fig, axes = _grid(len(panels), 3.6, 3.0)
    image = None
    for ax, (key, rows) in zip(axes, panels):
        tuned = rows[rows.tuned.astype(bool)].sort_values(["peak", "latent"])
        ax.set_title(_panel_title(key) + f"\n{len(tuned)} of {len(rows)} latents position-tuned"
                     + _seed_counts(every_seed, key), fontsize=8)
        ax.set_xlabel("token position", fontsize=8)
        ax.set_ylabel("tuned latents, by peak position", fontsize=8)
        if not len(tuned):
            ax.text(0.5, 0.5, "no position-tuned latent", ha="center", va="center", transform=ax.transAxes, fontsize=8)
            continue
        panel = fields.loc[(fields[PANEL_KEYS] == pd.Series(key, index=PANEL_KEYS)).all(axis=1)]
        grid = panel.pivot_table(index="latent", columns="position", values="activation").loc[tuned.latent]
        peak = grid.max(axis=1).to_numpy()
        matrix = grid.to_numpy() / np.where(peak > 0, peak, 1.0)[:, None]
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        positions = grid.columns.to_numpy()
        image = ax.imshow(matrix, aspect="auto", origin="lower", cmap="magma", vmin=0, vmax=1, interpolation="nearest",
                          extent=(positions[0] - 0.5, positions[-1] + 0.5, -0.5, len(matrix) - 0.5))
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8, label="mean activation / the latent's largest")
    caption(fig, "Each row is one position-tuned latent of a TopK SAE (its share of activation variance explained by "
                 f"position, eta², above {control}); its colour at each position is its mean activation over the "
                 "tokens there, divided by its largest. Rows are sorted by the position of that largest value (the "
                 "peak), so a diagonal band means the latents tile the positions.", y=-0.04)
    return save_figure(fig, out_dir, stem, {**(numbers or {}), "cells": cells})


def plot_position_tiling(cells: pd.DataFrame, curve: pd.DataFrame, out_dir, stem: str = "place_cells_tiling",
                         numbers: dict | None = None) -> dict:
    """Per panel, the per-position mean state in its top-2 principal plane (dots coloured by position, joined in
    order) with each tuned latent's point in that plane (crosses coloured by the latent's peak position)."""
    require_columns(cells, CELL_COLUMNS + ["pc1", "pc2"], "the place-cell table")
    require_columns(curve, ["model", "seed", "layer", "subspace", "position", "pc1", "pc2", "share"],
                    "the position curve")
    every_seed, (cells, curve) = cells, (_first_seed(cells), _first_seed(curve))
    panels = list(curve.groupby(PANEL_KEYS, sort=False))
    fig, axes = _grid(len(panels), 3.8, 3.4)
    top = max(float(curve.position.max()), float(cells.peak.max()) if cells.peak.notna().any() else 0.0)
    norm = plt.Normalize(float(curve.position.min()), top)
    dots = None
    for ax, (key, line) in zip(axes, panels):
        line = line.sort_values("position")
        ax.plot(line.pc1, line.pc2, color="#BBBBBB", lw=0.8, zorder=1)
        dots = ax.scatter(line.pc1, line.pc2, c=line.position, cmap="viridis", norm=norm, s=8, zorder=2)
        rows = cells.loc[(cells[PANEL_KEYS] == pd.Series(key, index=PANEL_KEYS)).all(axis=1)]
        tuned = rows[rows.tuned.astype(bool)]
        ax.scatter(tuned.pc1, tuned.pc2, c=tuned.peak, cmap="viridis", norm=norm, marker="x", s=36, linewidths=1.4,
                   zorder=3)
        ax.axhline(0, color="#DDDDDD", lw=0.5, zorder=0)
        ax.axvline(0, color="#DDDDDD", lw=0.5, zorder=0)
        ax.set_title(_panel_title(key) + f"\ntuned latents: {len(tuned)}{_seed_counts(every_seed, key)}; PC1-2: "
                                         f"{100 * float(line.share.iloc[0]):.0f}% of the means' variance", fontsize=7)
        ax.set_xlabel("PC1 of the per-position mean state", fontsize=8)
        ax.set_ylabel("PC2", fontsize=8)
    if dots is not None:
        fig.colorbar(dots, ax=list(axes), shrink=0.8, label="position (dots) / peak position (crosses)")
    caption(fig, "Dots joined by the grey line: the mean state at each token position, centred, in the plane of its "
                 "top two principal components (the position curve), coloured by position. Crosses: each "
                 "position-tuned SAE latent's share of the centred mean state at its peak position -- (its mean "
                 "activation at the peak minus its mean over all tokens) times its decoder direction -- in the same "
                 "plane, coloured by its peak position. Crosses lying along the curve where its colour matches "
                 "theirs mean the latents tile the position curve.", y=-0.04)
    return save_figure(fig, out_dir, stem, {**(numbers or {}), "cells": cells, "curve": curve})


def _first_seed(table: pd.DataFrame) -> pd.DataFrame:
    return table[table.seed == table.seed.min()] if len(table) else table


def _seed_counts(cells: pd.DataFrame, key) -> str:
    """" (seed 0; 54, 61 in seeds 1, 2)": the seed drawn and the tuned count of every other seed of the panel's
    (model, layer, subspace), or " (one seed: 0)"."""
    rows = cells.loc[(cells[PANEL_KEYS] == pd.Series(key, index=PANEL_KEYS)).all(axis=1)]
    counts = rows.groupby("seed").tuned.apply(lambda tuned: int(tuned.astype(bool).sum()))
    first, others = int(counts.index.min()), counts.iloc[1:]
    if others.empty:
        return f" (one seed: {first})"
    return (f" (seed {first}; {', '.join(str(int(n)) for n in others)} in seed{'s' if len(others) > 1 else ''} "
            f"{', '.join(str(int(s)) for s in others.index)})")


def _panel_title(key) -> str:
    model, layer, subspace = key
    return f"{display_name(model)}, {subspace_name(subspace)}, layer {layer}"


def _grid(n_panels: int, width: float, height: float):
    columns = min(max(n_panels, 1), MAX_COLUMNS)
    rows = -(-max(n_panels, 1) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False,
                             layout="constrained")
    for ax in axes.ravel()[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.ravel()[:max(n_panels, 1)])
