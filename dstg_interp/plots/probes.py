"""R² of the position probes by layer (input: the tidy table of ``probes.positions``, e.g. probes.csv).

    from dstg_interp.plots import plot_r2_by_layer
    plot_r2_by_layer(results, "figures/", stem="probes_r2")   # results: the dstg-probe / fig_probes table
"""

from __future__ import annotations

import pandas as pd

from ..variants import variants_where
from .output import require_columns
from .tidy import measurements, plot_by_layer

TASK_ORDER = {"token": 0, "segment": 1, "intra": 2}  # rows: from the coarsest position code to the finest
SEGMENT_ORDER = {"sentence": 0, "paragraph": 1}
PROBE_TITLES = {("token", "sentence"): "token position", ("token", "paragraph"): "token position",
                ("segment", "sentence"): "sentence index", ("segment", "paragraph"): "paragraph index",
                ("intra", "sentence"): "position in its sentence", ("intra", "paragraph"): "position in its paragraph"}


def plot_r2_by_layer(results: pd.DataFrame, out_dir, stem: str = "r2_by_layer", value: str = "r2", low: str = "ci_low",
                     high: str = "ci_high", ylabel: str = "held-out R²") -> dict:
    """One grid: rows = probe (task, and segment), columns = subspace; in each panel R² by layer, one line per
    model with its bootstrap CI as a band.  Entangled models only have ``full``; DSTG has all three.
    ``value`` / ``low`` / ``high`` pick another reading with its interval (e.g. ``partial_r2``)."""
    require_columns(results, ["model", "task", "segment", "layer", "subspace", value, low, high],
                    "the probe results")
    results = results.assign(probe=[PROBE_TITLES.get((task, segment), f"{task} ({segment})")
                                    for task, segment in zip(results.task, results.segment.astype(str))])
    reading_order = results.task.map(TASK_ORDER).fillna(len(TASK_ORDER)) * 10 + results.segment.map(SEGMENT_ORDER).fillna(9)
    results = results.assign(_order=reading_order).sort_values("_order", kind="stable").drop(columns="_order")
    long = measurements(results, [value], keys=["task", "segment", "probe"], intervals={value: (low, high)})
    if "n_seeds" in results.columns and results.n_seeds.max() > 1:
        bands = (f"lines: mean over {int(results.n_seeds.max())} training seeds; bands: from the lowest seed's 95% "
                 "bootstrap CI low to the highest seed's CI high (held-out documents)")
    else:
        bands = "bands: 95% bootstrap CI over the held-out test documents"
    if results.model.isin(variants_where(role="floor")).any():
        bands += "; grey: NoPE-NeoBERT, no positional input (the floor: what content alone recovers)"
    return plot_by_layer(long, out_dir, stem, row="probe", col="subspace", ylabel=ylabel, reference=0.0,
                         bands=bands, reference_label="0, what predicting the mean gets")
