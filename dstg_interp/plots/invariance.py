"""Figures of passage invariance (``dstg_interp.analysis.invariance``): state change and retrieval recall by layer.

    from dstg_interp.plots import plot_invariance_by_layer, plot_recall_by_layer
    plot_invariance_by_layer(invariance, "figures/invariance/")          # cosine and rel. L2, per condition
    plot_recall_by_layer(retrieval, "figures/invariance/", k=1)         # recall@1, per condition

One panel per condition (shift, prefix, inside, context), one line per (model, subspace): the zoo colour of the
model, the line style of the subspace (DSTG's sem dashed, ap dotted, full and the baselines solid).
"""

from __future__ import annotations

import pandas as pd

from .output import require_columns
from .tidy import measurements, plot_by_layer

CONDITION_ORDER = ("shift", "prefix", "inside", "context")
METRIC_LABELS = {"token_cosine": "cosine to alone (tokens)", "token_rel_l2": "rel. L2 change (tokens)",
                 "pooled_cosine": "cosine to alone (pooled)", "pooled_rel_l2": "rel. L2 change (pooled)"}


def plot_invariance_by_layer(invariance: pd.DataFrame, out_dir, stem: str = "invariance_by_layer",
                             metrics=("token_cosine", "token_rel_l2"), title: str | None = None) -> dict:
    """Grid: rows = metric, columns = condition; each panel the metric by layer, one line per (model, subspace).
    The black line is what a perfectly invariant state gives (cosine 1, change 0)."""
    require_columns(invariance, ["model", "subspace", "condition", "layer", *metrics], "the invariance table")
    long = measurements(_by_condition(invariance), metrics, keys=["condition"])
    long["metric"] = long.metric.map(lambda m: METRIC_LABELS.get(m, m))
    reference = {METRIC_LABELS.get(m, m): 1.0 if "cosine" in m else 0.0 for m in metrics}
    return plot_by_layer(long, out_dir, stem, row="metric", col="condition", ylabel="", reference=reference, share_y="row",
                         numbers={"metrics": list(metrics)}, title=title)


def plot_recall_by_layer(retrieval: pd.DataFrame, out_dir, stem: str = "recall_by_layer", k: int = 1,
                         title: str | None = None) -> dict:
    """One panel per condition: recall@k by layer (database = the passages encoded alone), one line per
    (model, subspace); the black line is chance (k / number of passages)."""
    require_columns(retrieval, ["model", "subspace", "condition", "layer", "k", "recall", "n_passages"],
                    "the retrieval table")
    chosen = retrieval[retrieval.k == k]
    if chosen.empty:
        raise ValueError(f"the retrieval table has no rows with k={k}; it has k in {sorted(set(retrieval.k))}")
    long = measurements(_by_condition(chosen), ["recall"], keys=["condition"])
    chance = k / chosen.n_passages.max()
    return plot_by_layer(long, out_dir, stem, col="condition", ylabel=f"recall@{k}", reference=chance,
                         numbers={"k": k, "chance": chance}, title=title)


def _by_condition(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the conditions' reading order (facets follow first appearance)."""
    present = list(dict.fromkeys(frame.condition))
    order = [c for c in CONDITION_ORDER if c in present] + sorted(set(present) - set(CONDITION_ORDER))
    return frame.assign(_order=frame.condition.map(order.index)).sort_values("_order", kind="stable").drop(columns="_order")
