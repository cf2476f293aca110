"""Win / tie / loss per phenomenon over training seeds: does model A score above model B on a phenomenon by
more than the seed-to-seed spread?

    from probes.holmes.aggregate import dataset_scores
    from probes.holmes.significance import seed_test, seed_test_counts
    tests = seed_test(dataset_scores(results), "dstg", ["rope", "ap", "rp"])   # one row per (B, phenomenon)
    seed_test_counts(tests)                                                   # wins / ties / losses per area

The paper's statistic (``aggregate.a_vs_b``) calls any positive difference of one model's mean score a win.
With one training seed a 12-of-24 split is a coin flip; here each variant is read over its training seeds
(zoo members ``dstg``, ``dstg-seed1``, ... are seeds 0, 1, ... of variant ``dstg``: ``variant_of``).

Per phenomenon and training seed, the score is the mean over the phenomenon's datasets (those both
variants have) of the probe-seed mean score, at each model's last layer, full subspace.  The difference of
the two variants' means over their training seeds gets Welch's t interval (``level``, default 95%; the
seeds of A and B are independent runs).  Rule, with the margin stated (``margin``, default 0.01 = one
point of macro-F1 or Pearson r):

    win   difference > margin and interval low > 0
    loss  difference < -margin and interval high < 0
    tie   otherwise (inside the seed noise, or too small to matter)

A variant with fewer than 2 training seeds cannot be tested: ValueError.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["variant_of", "seed_test", "seed_test_counts", "DEFAULT_MARGIN", "DEFAULT_LEVEL", "MIN_SEEDS"]

DEFAULT_MARGIN = 0.01
DEFAULT_LEVEL = 0.95
MIN_SEEDS = 2
_SEED_SUFFIX = re.compile(r"^(?P<variant>.+)-seed(?P<seed>\d+)$")


def variant_of(model: str) -> tuple[str, int]:
    """(variant, training seed) of a zoo member name: ``dstg-seed2`` -> (``dstg``, 2), ``dstg`` -> (``dstg``, 0)."""
    match = _SEED_SUFFIX.match(str(model))
    return (match["variant"], int(match["seed"])) if match else (str(model), 0)


def _per_seed(scores: pd.DataFrame) -> pd.DataFrame:
    """Last-layer, full-subspace seed-mean scores with variant and training-seed columns."""
    last = scores.groupby("model")["layer"].transform("max")
    full = scores[(scores["layer"] == last) & (scores["subspace"] == "full")]
    members = full["model"].map(variant_of)
    return full.assign(variant=[m[0] for m in members], training_seed=[m[1] for m in members])


def _welch(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, float, float]:
    """(difference of means, interval low, high): Welch's t interval of mean(a) - mean(b)."""
    diff = float(a.mean() - b.mean())
    var_a, var_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = float(np.sqrt(var_a + var_b))
    if se == 0.0:
        return diff, diff, diff
    dof = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return diff, diff - half, diff + half


def _outcome(diff: float, low: float, high: float, margin: float) -> str:
    if diff > margin and low > 0:
        return "win"
    if diff < -margin and high < 0:
        return "loss"
    return "tie"


def seed_test(scores: pd.DataFrame, variant_a: str, others: list[str], margin: float = DEFAULT_MARGIN,
              level: float = DEFAULT_LEVEL) -> pd.DataFrame:
    """One row per (B, area, phenomenon) -- and per (B, "overall", phenomenon), counting a phenomenon listed
    in two areas once -- with each variant's mean and spread over training seeds, the difference, its
    interval and the outcome of the rule in the module docstring.

    ``scores``: ``aggregate.dataset_scores`` of a pool holding several training seeds of each variant.
    """
    if margin < 0 or not 0 < level < 1:
        raise ValueError(f"margin must be >= 0 and level in (0, 1), got {margin} and {level}")
    table = _per_seed(scores)
    seeds = table.groupby("variant")["training_seed"].unique()
    for variant in [variant_a, *others]:
        found = sorted(int(s) for s in seeds.get(variant, []))
        if len(found) < MIN_SEEDS:
            raise ValueError(f"the seed test needs at least {MIN_SEEDS} training seeds of every variant; {variant!r} has "
                             f"{len(found)} ({', '.join(map(str, found)) or 'none'}): add its seeds to the pool "
                             f"(zoo members {variant}-seed1, ...), or read the one-seed a_vs_b counts")
    rows = []
    for variant_b in others:
        pair = table[table["variant"].isin([variant_a, variant_b])]
        per_dataset = pair.pivot_table(index=["area", "phenomenon", "dataset"], columns=["variant", "training_seed"],
                                       values="score", aggfunc="mean")
        both = per_dataset[variant_a].notna().all(axis=1) & per_dataset[variant_b].notna().all(axis=1)
        per_dataset = per_dataset[both]
        for area, levels in [(None, ["area", "phenomenon"]), ("overall", ["phenomenon"])]:
            for key, group in per_dataset.groupby(level=levels):
                key = key if isinstance(key, tuple) else (key,)
                a = group[variant_a].mean(axis=0).to_numpy(dtype=float)  # one value per training seed
                b = group[variant_b].mean(axis=0).to_numpy(dtype=float)
                diff, low, high = _welch(a, b, level)
                rows.append({"a": variant_a, "b": variant_b, "area": area or key[0], "phenomenon": key[-1],
                             "n_datasets": len(group), "seeds_a": len(a), "seeds_b": len(b),
                             "mean_a": float(a.mean()), "mean_b": float(b.mean()), "sd_a": float(a.std(ddof=1)),
                             "sd_b": float(b.std(ddof=1)), "difference": diff, "ci_low": low, "ci_high": high,
                             "outcome": _outcome(diff, low, high, margin), "margin": margin, "level": level})
    return pd.DataFrame(rows)


def seed_test_counts(tests: pd.DataFrame) -> pd.DataFrame:
    """Wins / ties / losses of A per (B, area) and overall, in the columns of ``aggregate.a_vs_b``."""
    rows = []
    for (a, b, area), group in tests.groupby(["a", "b", "area"], sort=False):
        counts = group["outcome"].value_counts()
        rows.append({"a": a, "b": b, "area": area, "wins": int(counts.get("win", 0)), "ties": int(counts.get("tie", 0)),
                     "losses": int(counts.get("loss", 0)), "n_phenomena": len(group),
                     "margin": float(group["margin"].iloc[0]), "level": float(group["level"].iloc[0]),
                     "seeds_a": int(group["seeds_a"].min()), "seeds_b": int(group["seeds_b"].min())})
    return pd.DataFrame(rows)
