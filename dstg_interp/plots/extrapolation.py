"""Figures of the length-extrapolation study (inputs: the tidy tables of ``experiments/fig_extrapolation.py``).

    plot_mlm_by_position(mlm, "figures/extrapolation", trained_length=128)   # accuracy + loss by position
    plot_probe_ranges(ranges, "figures/extrapolation", trained_length=128)   # probe error inside vs beyond
    plot_extended_tables(paths, "figures/extrapolation")                     # PC1-PC2 path of extended tables

``mlm``: rows (model, method, length, bucket_start, bucket_end, loss, accuracy); ``ranges``: rows (model,
method, length, layer, subspace, target, fit_on, range, r2, mae); ``paths``: rows (model, method, position, pc1,
pc2).  ``method`` is an extension method (curve, repeat, stretch), ``native`` (a relative model run at the
longer length) or ``chunked`` (the trained model on chunks of its trained length: the no-extrapolation
reference).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .output import model_color, ordered_models, require_columns, save_figure

METHOD_STYLES = {"chunked": ":", "native": "-", "curve": "-", "repeat": "--", "stretch": "-."}
# the random_offset DSTG shares DSTG's name prefix (and so its zoo colour): give it its own
OFFSET_COLOR = "#56B4E9"


def arm_color(model: str, models: list[str]) -> str:
    return OFFSET_COLOR if str(model).endswith("-offset") else model_color(model, models)
METHOD_MARKERS = {"chunked": "", "native": "o", "curve": "s", "repeat": "v", "stretch": "^"}


def arm_label(model: str, method: str) -> str:
    return f"{model} {method}"


def _arms(frame: pd.DataFrame) -> list[tuple[str, str]]:
    models = ordered_models(frame.model)
    methods = [m for m in METHOD_STYLES if m in set(frame.method)] + sorted(set(frame.method) - set(METHOD_STYLES))
    present = set(zip(frame.model, frame.method))
    return [(model, method) for model in models for method in methods if (model, method) in present]


def plot_mlm_by_position(mlm: pd.DataFrame, out_dir, trained_length: int, stem: str = "mlm_by_position") -> dict:
    """Columns = lengths; rows = accuracy, loss; one line per (model, method) over position buckets."""
    require_columns(mlm, ["model", "method", "length", "bucket_start", "bucket_end", "loss", "accuracy"], "the MLM table")
    lengths = sorted(mlm.length.unique())
    models = ordered_models(mlm.model)
    fig, axes = plt.subplots(2, len(lengths), figsize=(5.2 * len(lengths), 7.0), squeeze=False, sharey="row")
    for column, length in enumerate(lengths):
        rows = mlm[mlm.length == length]
        for model, method in _arms(rows):
            arm = rows[(rows.model == model) & (rows.method == method)].sort_values("bucket_start")
            centre = (arm.bucket_start + arm.bucket_end) / 2
            for row, metric in enumerate(("accuracy", "loss")):
                axes[row, column].plot(centre, arm[metric], color=arm_color(model, models),
                                       linestyle=METHOD_STYLES.get(method, "-"), marker=METHOD_MARKERS.get(method, "."),
                                       markersize=3, linewidth=1.3, label=arm_label(model, method))
        for row, metric in enumerate(("MLM accuracy (masked tokens)", "MLM loss (nats)")):
            ax = axes[row, column]
            ax.axvline(trained_length, color="#777777", linewidth=0.8)
            ax.set(xlabel="position in the window", ylabel=metric if column == 0 else None)
            ax.set_title(f"{length}-token windows ({length / trained_length:g}x the trained {trained_length})"
                         if row == 0 else None)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return save_figure(fig, out_dir, stem, {"trained_length": trained_length, "rows": mlm})


def plot_probe_ranges(ranges: pd.DataFrame, out_dir, trained_length: int, layer=None, fit_on: str = "all",
                      metric: str = "mae", stem: str = "probe_ranges") -> dict:
    """Bars of a held-out probe metric inside vs beyond the trained range at ``layer`` (default: the last),
    per arm; panels = targets x lengths.  Every model's full state (DSTG: [sem, ap]).  ``metric``: ``mae``
    (mean absolute error in positions / sentences; lower is better) or ``r2`` (within each range)."""
    require_columns(ranges, ["model", "method", "length", "layer", "subspace", "target", "fit_on", "range", metric],
                    "the probe-range table")
    layer = int(ranges.layer.max()) if layer is None else layer
    rows = ranges[(ranges.layer == layer) & (ranges.subspace == "full") & (ranges.fit_on == fit_on)]
    if rows.empty:
        raise ValueError(f"no full-subspace rows at layer {layer} with fit_on={fit_on!r}")
    targets, lengths = sorted(rows.target.unique()), sorted(rows.length.unique())
    models = ordered_models(rows.model)
    arms = _arms(rows)
    fig, axes = plt.subplots(len(targets), len(lengths), figsize=(0.55 * len(arms) * len(lengths) + 2, 3.2 * len(targets)),
                             squeeze=False)
    x = np.arange(len(arms))
    units = {"token_position": "positions", "sentence_index": "sentences"}
    for i, target in enumerate(targets):
        for j, length in enumerate(lengths):
            ax = axes[i, j]
            cell = rows[(rows.target == target) & (rows.length == length)].set_index(["model", "method", "range"])[metric]
            for k, (part, alpha) in enumerate((("inside", 0.45), ("beyond", 1.0))):
                values = np.array([cell.get((model, method, part), np.nan) for model, method in arms], dtype=float)
                if metric == "r2":
                    values = np.clip(values, -0.2, None)
                ax.bar(x + (k - 0.5) * 0.4, values, width=0.4, alpha=alpha,
                       color=[arm_color(model, models) for model, _ in arms],
                       label=f"{part} the trained {trained_length}" if i == 0 and j == 0 else None)
            ax.axhline(0, color="black", linewidth=0.6)
            ax.set_xticks(x, [arm_label(*arm) for arm in arms], rotation=60, ha="right", fontsize=7)
            ylabel = "R² within the range" if metric == "r2" else f"mean abs. error ({units.get(target, 'units')})"
            ax.set(ylabel=ylabel if j == 0 else None, title=f"{target}: {length}-token windows, layer {layer}")
            if metric == "r2":
                ax.set_ylim(-0.2, 1.0)
    axes[0, 0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    note = "R² within each range, below -0.2 drawn at -0.2" if metric == "r2" else "lower is better"
    return save_figure(fig, out_dir, stem, {"layer": layer, "fit_on": fit_on, "metric": metric,
                                            "trained_length": trained_length, "note": note, "rows": rows})


def plot_extended_tables(paths: pd.DataFrame, out_dir, trained_length: int, stem: str = "extended_tables") -> dict:
    """One panel per (model, method): the extended table's rows in the learned table's PC1-PC2 plane,
    coloured by position, the learned range in grey underneath."""
    require_columns(paths, ["model", "method", "position", "pc1", "pc2"], "the table-path table")
    arms = _arms(paths)
    fig, axes = plt.subplots(1, len(arms), figsize=(3.0 * len(arms), 3.2), squeeze=False)
    for ax, (model, method) in zip(axes[0], arms):
        arm = paths[(paths.model == model) & (paths.method == method)].sort_values("position")
        inside = arm[arm.position < trained_length]
        ax.plot(inside.pc1, inside.pc2, color="#BBBBBB", linewidth=2.5, zorder=1)
        points = ax.scatter(arm.pc1, arm.pc2, c=arm.position, cmap="viridis", s=6, zorder=2)
        ax.set(title=f"{model}: {method}", xlabel="PC1", ylabel="PC2")
    fig.colorbar(points, ax=axes[0].tolist(), label="position", shrink=0.8)
    return save_figure(fig, out_dir, stem, {"trained_length": trained_length, "rows": paths})
