"""The one results layout the figures read: one row per measurement.

    model  subspace  layer  metric  value  ci_low  ci_high   + the study's own keys (task, segment, condition, k, ...)

Every study writes its table with one row per (model, layer, subspace, ...) and one column per metric
(``probes.csv``, ``invariance.csv``, ``retrieval.csv``); ``measurements`` melts such a table into this
layout, and ``plot_by_layer`` draws any of it: one line per (model, subspace), the interval as a band
where the table has one, facets by any key.  The probe, invariance and retrieval figures are this one
function with different facets.

    from dstg_interp.plots.tidy import measurements, plot_by_layer
    long = measurements(results, ["r2"], keys=["task", "segment"], intervals={"r2": ("ci_low", "ci_high")})
    plot_by_layer(long, "figures/", stem="r2", row="task", col="subspace")
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from .output import (MAX_COLUMNS, caption, display_name, figure_title, model_palette, require_columns, save_figure,
                     subspace_name)

MEASUREMENT_COLUMNS = ["model", "subspace", "layer", "metric", "value", "ci_low", "ci_high"]
SUBSPACE_ORDER = ("full", "sem", "ap")
SUBSPACE_DASHES = {"full": "", "sem": (4, 2), "ap": (1, 2)}  # DSTG's parts dashed / dotted, whole states solid


def measurements(table: pd.DataFrame, metrics, keys=(), intervals: dict | None = None) -> pd.DataFrame:
    """``table`` (one column per metric) in the measurement layout: one row per (row of ``table``, metric).

    keys: the study's own columns kept beside model/subspace/layer.  intervals: metric -> (low column,
    high column) of its interval; metrics without one get NaN bounds (drawn without a band).  Rows whose
    layer is not an integer ("final", the normed last state) are not points on a layer axis and are dropped.
    """
    metrics, keys, intervals = list(metrics), list(keys), intervals or {}
    require_columns(table, ["model", "subspace", "layer", *keys, *metrics], "the results table")
    numeric = pd.to_numeric(table.layer, errors="coerce")
    table = table[numeric.notna()].assign(layer=numeric[numeric.notna()].astype(int))
    if table.empty:
        raise ValueError("the results table has no integer layers to plot (only 'final'?)")
    parts = []
    for metric in metrics:
        low, high = intervals.get(metric, (None, None))
        parts.append(table[["model", "subspace", "layer", *keys]].assign(
            metric=metric, value=table[metric].astype(float),
            ci_low=table[low].astype(float) if low else np.nan, ci_high=table[high].astype(float) if high else np.nan))
    return pd.concat(parts, ignore_index=True)[MEASUREMENT_COLUMNS + keys]


def plot_by_layer(long: pd.DataFrame, out_dir, stem: str, row: str | None = None, col: str | None = None,
                  ylabel: str = "value", reference: dict | float | None = None, share_y: bool | str = True,
                  numbers: dict | None = None, bands: str = "shaded bands: the interval of each line",
                  reference_label: str | None = None, title: str | None = None) -> dict:
    """Measurements by layer, one line per (model, subspace) coloured by model and dashed by subspace, with the
    interval as a band; facets ``row`` x ``col`` (columns of ``long``), wrapped after three columns when there
    are no rows.  Lines and titles use display names (DSTG-NeoBERT, "AP stream"); ``bands`` says in the caption
    what the bands are, ``reference_label`` what the horizontal ``reference`` line is (one value, or metric ->
    value when the rows are metrics), ``title`` a title over the whole figure (e.g. which seeds it reads).  Writes
    PNG + PDF + JSON (the rows drawn, with the internal names)."""
    require_columns(long, MEASUREMENT_COLUMNS + [c for c in (row, col) if c], "the measurements")
    long = long.assign(line=_line_names(long))
    if col == "subspace":
        long = long.assign(subspace_title=long.subspace.map(subspace_name))
    col_title = "subspace_title" if col == "subspace" else col
    columns = _facet_order(long, col)
    wrap = MAX_COLUMNS if row is None and columns is not None and len(columns) > MAX_COLUMNS else None
    palette = model_palette(long.model)
    lines = list(dict.fromkeys(long.sort_values(["model", "subspace"], key=_model_then_subspace).line))
    line_color = {name: palette[model] for name, model in zip(long.line, long.model)}
    line_dashes = {name: SUBSPACE_DASHES.get(sub, (3, 1, 1, 1)) for name, sub in zip(long.line, long.subspace)}
    grid = sns.relplot(data=long, x="layer", y="value", hue="line", hue_order=lines, palette=line_color,
                       style="line", style_order=lines, dashes=line_dashes, markers=["o"] * len(lines),
                       row=row, col=col_title, col_wrap=wrap, row_order=_facet_order(long, row),
                       col_order=[subspace_name(c) for c in columns] if col == "subspace" else columns,
                       kind="line", errorbar=None, height=2.6, aspect=1.25, markersize=4,
                       facet_kws={"sharey": share_y, "margin_titles": False})
    for (row_index, col_index, _), panel in grid.facet_data():
        ax = grid.facet_axis(row_index, col_index)
        for name, line in panel.groupby("line", sort=False):
            line = line.sort_values("layer")
            if line.ci_low.notna().any():
                ax.fill_between(line.layer, line.ci_low, line.ci_high, color=line_color[name], alpha=0.18, lw=0)
        level = reference.get(panel.metric.iloc[0]) if isinstance(reference, dict) and len(panel) else reference
        if level is not None:
            ax.axhline(level, color="black", lw=0.6)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    grid.set_axis_labels("layer (0 = embeddings, l = after block l)", ylabel)
    grid.set_titles(row_template="{row_name}", col_template="{col_name}")
    if grid.legend is not None:
        grid.legend.set_title(None)
    has_band = long.ci_low.notna().any()
    words = [bands if has_band else None, f"thin black line: {reference_label}" if reference is not None and reference_label
             else None, "dashed: DSTG-NeoBERT's semantic stream, dotted: its AP stream, solid: a whole state"]
    caption(grid.figure, "; ".join(w for w in words if w) + ".")
    figure_title(grid.figure, title)
    drawn = long.drop(columns=[c for c in ("line", "subspace_title") if c in long.columns])
    return save_figure(grid.figure, out_dir, stem, {**(numbers or {}), "title": title, "bands": bands if has_band else None,
                                                    "measurements": drawn})


def _line_names(long: pd.DataFrame) -> pd.Series:
    """'DSTG-NeoBERT, AP stream', 'DSTG-NeoBERT, semantic stream', ...; a model whose only subspace is 'full'
    is just its display name ('AP-NeoBERT'), so the AP-NeoBERT model is never confused with DSTG's AP stream."""
    only_full = long.groupby("model").subspace.transform(lambda s: set(s) == {"full"})
    models = long.model.map(display_name)
    return np.where(only_full, models, models + ", " + long.subspace.map(subspace_name))


def _model_then_subspace(column: pd.Series) -> pd.Series:
    if column.name == "subspace":
        return column.map({s: i for i, s in enumerate(SUBSPACE_ORDER)}).fillna(len(SUBSPACE_ORDER))
    order = {m: i for i, m in enumerate(model_palette(column))}
    return column.map(order)


def _facet_order(long: pd.DataFrame, name: str | None):
    if name is None:
        return None
    values = list(dict.fromkeys(long[name]))
    if name == "subspace":
        return [s for s in ("ap", "sem", "full") if s in values] + [v for v in values if v not in SUBSPACE_ORDER]
    return values
