"""From tidy per-seed results to Holmes tables: per-dataset scores, winning rates, A-vs-B counts.

    from probes.holmes.aggregate import dataset_scores, winning_rates, area_table, a_vs_b
    scores = dataset_scores(results)                 # seed mean per model x dataset x layer x subspace
    rates = winning_rates(scores)                    # per-dataset winning rate in the model pool
    area_table(rates)                                # mean winning rate (x100) per area + overall
    a_vs_b(scores, "dstg", ["rope", "ap", "rp"])     # phenomena won / tied / lost

Winning rate (holmes-tools, row-wise as in the March-2024 `tools` repo): within each
dataset, rank the pool's entries by score with ties taking the *max* rank, then min-max normalise the
ranks to [0, 1]. A dataset on which every entry ties carries no ranking information: its rates are NaN
and it drops out of the means. Areas, phenomena and the overall score are means over *datasets*, so a
phenomenon with many datasets weighs more, as in the leaderboard.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from probes.holmes.registry import AREAS, DATASETS

__all__ = ["dataset_scores", "winning_rates", "area_table", "phenomenon_table", "a_vs_b", "entry_name"]

TASK_METRICS = ("f1_macro", "pearson")


def entry_name(model: str, subspace: str) -> str:
    """A pool entry: the model, or `model:subspace` for a DSTG part (AP / sem) probed on its own."""
    return model if subspace == "full" else f"{model}:{subspace}"


def dataset_scores(results: pd.DataFrame) -> pd.DataFrame:
    """Seed-mean task score per (model, dataset, layer, subspace), with the randomised-label score,
    selectivity (= score - randomised score) and the random-init encoder's score when present."""
    task = results[results["metric"].isin(TASK_METRICS)]
    keys = ["model", "dataset", "layer", "subspace"] + (["protocol"] if "protocol" in results else [])
    wide = task.pivot_table(index=keys + ["metric"], columns="control", values="score", aggfunc="mean")
    wide = wide.reset_index().rename(columns={"none": "score", "randomization": "score_randomized",
                                             "random-init": "score_random_init"})
    if "score_randomized" in wide:
        wide["selectivity"] = wide["score"] - wide["score_randomized"]
    spread = task[task["control"] == "none"].groupby(keys)["score"].std().rename("score_std").reset_index()
    wide = wide.merge(spread, on=keys, how="left")
    wide["area"] = wide["dataset"].map(lambda d: DATASETS.get(d, (None, None))[0])
    wide["phenomenon"] = wide["dataset"].map(lambda d: DATASETS.get(d, (None, None))[1])
    wide["entry"] = [entry_name(m, s) for m, s in zip(wide["model"], wide["subspace"])]
    wide.columns.name = None
    return wide


def winning_rates(scores: pd.DataFrame, entries: list[str] | None = None) -> pd.DataFrame:
    """Per-dataset winning rate of each pool entry. `scores` needs dataset, entry, score (one layer:
    filter it first); `entries` restricts the pool (default: every entry present)."""
    table = scores.pivot_table(index="dataset", columns="entry", values="score", aggfunc="mean")
    if entries is not None:
        table = table[list(entries)]
    table = table.dropna()  # identical datasets for every entry, or the ranks mean nothing
    ranks = table.rank(axis=1, method="max")
    low, high = ranks.min(axis=1), ranks.max(axis=1)
    rates = ranks.sub(low, axis=0).div((high - low).replace(0, np.nan), axis=0)
    out = rates.reset_index().melt(id_vars="dataset", var_name="entry", value_name="winning_rate")
    out["area"] = out["dataset"].map(lambda d: DATASETS.get(d, (None, None))[0])
    out["phenomenon"] = out["dataset"].map(lambda d: DATASETS.get(d, (None, None))[1])
    return out


def area_table(rates: pd.DataFrame) -> pd.DataFrame:
    """Mean winning rate x 100 per entry: one column per area plus `overall` (means over datasets)."""
    per_area = rates.pivot_table(index="entry", columns="area", values="winning_rate", aggfunc="mean") * 100
    per_area = per_area[[a for a in AREAS if a in per_area.columns]]
    per_area["overall"] = rates.groupby("entry")["winning_rate"].mean() * 100
    per_area["n_datasets"] = rates.dropna(subset=["winning_rate"]).groupby("entry")["dataset"].nunique()
    per_area.columns.name = None
    return per_area.sort_values("overall", ascending=False)


def phenomenon_table(rates: pd.DataFrame) -> pd.DataFrame:
    """Mean winning rate x 100 per (area, phenomenon) and entry."""
    table = rates.pivot_table(index=["area", "phenomenon"], columns="entry", values="winning_rate",
                              aggfunc="mean") * 100
    table.columns.name = None
    return table


A_VS_B_COLUMNS = ["a", "b", "area", "wins", "ties", "losses", "n_phenomena"]


def a_vs_b(scores: pd.DataFrame, model_a: str, others: list[str], tie_tolerance: float = 0.0) -> pd.DataFrame:
    """The paper's statistic: on how many phenomena does A's mean score beat B's (per area and overall).

    A phenomenon's score is the mean over its datasets present for both entries; |A - B| <=
    `tie_tolerance` is a tie. A phenomenon listed in two areas counts once overall (65 names max).
    """
    rows = []
    for model_b in others:
        pair = scores[scores["entry"].isin([model_a, model_b])]
        per_dataset = pair.pivot_table(index=["area", "phenomenon", "dataset"], columns="entry",
                                       values="score", aggfunc="mean").dropna()
        if per_dataset.empty or model_a not in per_dataset or model_b not in per_dataset:
            continue
        def outcomes(levels):
            mean = per_dataset.groupby(level=levels).mean()  # noqa: B023 (called in this iteration)
            diff = mean[model_a] - mean[model_b]  # noqa: B023
            outcome = np.where(diff > tie_tolerance, "win", np.where(diff < -tie_tolerance, "loss", "tie"))
            return pd.Series(outcome, index=diff.index)

        by_area = outcomes(["area", "phenomenon"])
        groups = [(area, by_area.xs(area, level="area")) for area in by_area.index.unique("area")]
        groups.append(("overall", outcomes(["phenomenon"])))  # a two-area phenomenon: all its datasets
        for area, group in groups:
            counts = group.value_counts()
            rows.append({"a": model_a, "b": model_b, "area": area, "wins": int(counts.get("win", 0)),
                         "ties": int(counts.get("tie", 0)), "losses": int(counts.get("loss", 0)),
                         "n_phenomena": int(len(group))})
    out = pd.DataFrame(rows, columns=A_VS_B_COLUMNS)  # the header also when no pair could be compared
    if not out.empty:
        order = {a: i for i, a in enumerate(AREAS + ("overall",))}
        out = out.sort_values(["b", "area"], key=lambda c: c.map(order) if c.name == "area" else c)
    return out.reset_index(drop=True)
