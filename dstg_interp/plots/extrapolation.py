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
import seaborn as sns

from .output import figure_title, model_color, ordered_models, require_columns, save_figure

METHOD_STYLES = {"chunked": ":", "native": "-", "curve": "-", "repeat": "--", "stretch": "-."}
# the random_offset DSTG shares DSTG's name prefix (and so its zoo colour): give it its own
OFFSET_COLOR = "#56B4E9"


def arm_color(model: str, models: list[str]) -> str:
    return OFFSET_COLOR if str(model).endswith("-offset") else model_color(model, models)
METHOD_MARKERS = {"chunked": "", "native": "o", "curve": "s", "repeat": "v", "stretch": "^"}
METHOD_DASHES = {"chunked": (1, 2), "native": "", "curve": "", "repeat": (4, 2), "stretch": (4, 1, 1, 1)}


def arm_label(model: str, method: str) -> str:
    return f"{model} {method}"


def _arms(frame: pd.DataFrame) -> list[tuple[str, str]]:
    models = ordered_models(frame.model)
    methods = [m for m in METHOD_STYLES if m in set(frame.method)] + sorted(set(frame.method) - set(METHOD_STYLES))
    present = set(zip(frame.model, frame.method))
    return [(model, method) for model in models for method in methods if (model, method) in present]


def plot_mlm_by_position(mlm: pd.DataFrame, out_dir, trained_length: int, stem: str = "mlm_by_position",
                         title: str | None = None) -> dict:
    """Columns = lengths; rows = accuracy, loss; one line per (model, method) over position buckets (the model's
    colour, the method's dashes); the grey line is the trained length."""
    require_columns(mlm, ["model", "method", "length", "bucket_start", "bucket_end", "loss", "accuracy"], "the MLM table")
    models = ordered_models(mlm.model)
    arms = _arms(mlm)
    frame = mlm.assign(arm=[arm_label(m, k) for m, k in zip(mlm.model, mlm.method)],
                       position=(mlm.bucket_start + mlm.bucket_end) / 2)
    long = frame.melt(id_vars=["arm", "model", "method", "length", "position"], value_vars=["accuracy", "loss"],
                      var_name="metric", value_name="value")
    long["metric"] = long.metric.map({"accuracy": "MLM accuracy (masked tokens)", "loss": "MLM loss (nats)"})
    labels = [arm_label(*arm) for arm in arms]
    grid = sns.relplot(data=long, x="position", y="value", hue="arm", hue_order=labels,
                       palette={arm_label(m, k): arm_color(m, models) for m, k in arms},
                       style="arm", style_order=labels, dashes={arm_label(m, k): METHOD_DASHES.get(k, "") for m, k in arms},
                       markers={arm_label(m, k): METHOD_MARKERS.get(k, ".") or "." for m, k in arms},
                       row="metric", col="length", kind="line", errorbar=None, height=3.0, aspect=1.5, markersize=4,
                       linewidth=1.3, facet_kws={"sharey": "row", "sharex": "col"})
    for ax in grid.axes.flat:
        ax.axvline(trained_length, color="#777777", linewidth=0.8)
        ax.grid(alpha=0.3)
    grid.set_axis_labels("position in the window", "")
    grid.set_titles(row_template="{row_name}", col_template="{col_name}-token windows")
    if grid.legend is not None:
        grid.legend.set_title(None)
    figure_title(grid.figure, title)
    return save_figure(grid.figure, out_dir, stem, {"trained_length": trained_length, "rows": mlm})


def at_last_layer(ranges: pd.DataFrame) -> pd.Series:
    """Which rows of a probe-range table are at their model's own last layer (models of different depths
    share the table: the shipped dstg-offset has 4 layers beside the zoo's 6)."""
    return ranges.layer == ranges.groupby("model").layer.transform("max")


def plot_probe_ranges(ranges: pd.DataFrame, out_dir, trained_length: int, layer=None, fit_on: str = "all",
                      metric: str = "mae", stem: str = "probe_ranges", title: str | None = None) -> dict:
    """Bars of a held-out probe metric inside vs beyond the trained range at ``layer`` (default: each model's last),
    per arm; panels = targets x lengths.  Every model's full state (DSTG: [sem, ap]).  ``metric``: ``mae``
    (mean absolute error in positions / sentences; lower is better) or ``r2`` (within each range)."""
    require_columns(ranges, ["model", "method", "length", "layer", "subspace", "target", "fit_on", "range", metric],
                    "the probe-range table")
    chosen = at_last_layer(ranges) if layer is None else ranges.layer == layer
    rows = ranges[chosen & (ranges.subspace == "full") & (ranges.fit_on == fit_on)]
    if rows.empty:
        where = "each model's last layer" if layer is None else f"layer {layer}"
        raise ValueError(f"no full-subspace rows at {where} with fit_on={fit_on!r}")
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
            ax.set(ylabel=ylabel if j == 0 else None,
                   title=f"{target}: {length}-token windows, " + ("last layer" if layer is None else f"layer {layer}"))
            if metric == "r2":
                ax.set_ylim(-0.2, 1.0)
    axes[0, 0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    figure_title(fig, title)
    note = "R² within each range, below -0.2 drawn at -0.2" if metric == "r2" else "lower is better"
    return save_figure(fig, out_dir, stem, {"layer": layer, "fit_on": fit_on, "metric": metric,
                                            "trained_length": trained_length, "note": note, "rows": rows})


def plot_extended_tables(paths: pd.DataFrame, out_dir, trained_length: int, stem: str = "extended_tables",
                         title: str | None = None) -> dict:
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
    figure_title(fig, title)
    return save_figure(fig, out_dir, stem, {"trained_length": trained_length, "rows": paths})
