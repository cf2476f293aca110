"""Validation curves of an exported zoo beside the former zoo's, one panel per variant (recipe comparison).

    python -m experiments.pretrain_zoo --variants ap dstg --out runs/zoo-next --runs runs/zoo-next-runs
    python -m experiments.zoo_curves --zoo runs/zoo-next --out figures/recipe

Reads ``<zoo>/*/training.json`` and ``log.jsonl`` (what ``pretrain_zoo`` exports) and the former zoo's curves
(``figures/recipe/former_zoo_curves.csv``, kept from the checkpoints shipped before the recipe study); writes
``new_recipe_curves.csv``, ``new_recipe_runs.json`` and the figure ``zoo_curves_by_recipe`` (PNG + PDF + JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from dstg_interp.io import RESULTS_DIR
from dstg_interp.plots.recipe import plot_zoo_curves

NEW_RECIPE = "new (lr 1e-3, batch 16, constant + decay)"


def zoo_curves(zoo: Path) -> tuple[pd.DataFrame, list[dict]]:
    """Tidy validation rows (variant, recipe, seed, step, tokens, val_loss, val_accuracy, unigram_loss) and the
    per-run summaries of every exported run in ``zoo``."""
    rows, summaries = [], []
    for summary_file in sorted(Path(zoo).glob("*/training.json")):
        summary = json.loads(summary_file.read_text())
        recipe = json.loads((summary_file.parent / "train_config.json").read_text())
        if recipe.get("schedule") != "constant" or "offset" in summary_file.parent.name:
            continue  # a member of the former recipe (dstg-offset) or another arm: not this comparison
        summaries.append(summary)
        records = [json.loads(line) for line in (summary_file.parent / "log.jsonl").read_text().splitlines() if line.strip()]
        tokens = {r["step"]: r["tokens_seen"] for r in records if "tokens_seen" in r}
        rows += [dict(variant=summary["variant"], recipe=NEW_RECIPE, seed=summary["seed"], step=r["step"], tokens=tokens[r["step"]],
                      val_loss=r["val_loss"], val_accuracy=r["val_accuracy"], unigram_loss=summary["unigram_loss"])
                 for r in records if "val_loss" in r]
    if not summaries:
        raise ValueError(f"{zoo}: no exported runs (*/training.json); run experiments.pretrain_zoo --out {zoo} first")
    return pd.DataFrame(rows), summaries


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zoo", type=Path, required=True, help="a folder pretrain_zoo exported into")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "figures" / "recipe",
                        help="output folder (the committed study: figures/recipe) (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        new, summaries = zoo_curves(args.zoo)
        former = pd.read_csv(args.out / "former_zoo_curves.csv")
    except (ValueError, OSError) as err:
        print(f"zoo_curves: error: {err}", file=sys.stderr)
        return 2
    new.to_csv(args.out / "new_recipe_curves.csv", index=False)
    (args.out / "new_recipe_runs.json").write_text(json.dumps(summaries, indent=2) + "\n")
    plot_zoo_curves(pd.concat([former, new], ignore_index=True), args.out, stem="zoo_curves_by_recipe")
    print(pd.DataFrame(summaries)[["variant", "seed", "steps", "train_tokens", "train_seconds", "val_loss", "val_accuracy",
                                   "unigram_loss", "most_frequent_accuracy"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
