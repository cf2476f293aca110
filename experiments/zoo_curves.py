"""Validation curves of an exported zoo beside earlier zoos', one panel per variant (recipe comparison), and
where each run leaves the unigram plateau.

    python -m experiments.pretrain_zoo --variants ap dstg --out runs/zoo-next --runs runs/zoo-next-runs
    python -m experiments.zoo_curves --zoo runs/zoo-next --out figures/recipe
    python -m experiments.zoo_curves --zoo dstg_interp/zoo --out figures/zoo --prefix training \
        --against figures/recipe/new_recipe_curves.csv --stem curves_by_recipe   # the shipped zoo beside the 4x128 one

Reads ``<zoo>/*/training.json`` and ``log.jsonl`` (what ``pretrain_zoo`` exports) and the earlier curves of
``--against`` (default: ``<out>/former_zoo_curves.csv``, kept from the checkpoints shipped before the recipe
study); writes ``<prefix>_curves.csv``, ``<prefix>_runs.json``, ``<prefix>_plateau_exits.csv`` (per variant,
recipe and seed: the first validation step and token count ``PLATEAU_MARGIN`` nats below the unigram loss, empty
where a run never gets there) and the figure ``<stem>`` (PNG + PDF + JSON).  A run is labelled by its recipe:
the name of ``pretrain_zoo.RECIPES`` it was trained with (``RECIPE_LABELS``; the earlier CSVs' ``NEW_RECIPE``
label, the recipe study's name for 4x128, is shown as 4x128's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from dstg_interp.io import RESULTS_DIR
from dstg_interp.plots.recipe import plot_zoo_curves
from experiments.pretrain_zoo import RECIPES, ZOO_WIDTHS, recipe_of, zoo_config
from experiments.recipe_readings import PLATEAU_MARGIN, plateau_exit

NEW_RECIPE = "new (lr 1e-3, batch 16, constant + decay)"  # the 4x128 recipe, as the recipe study's CSVs name it
RECIPE_LABELS = {"4x128": "4x128 (4 layers, en-mix, 4800 steps)", "6x128": "6x128 (6 layers, en-large, 8000 steps)",
                 "authors": "authors (6 layers, en-large document starts, cosine, 3900 steps)"}


def recipe_label(train_config: dict) -> str:
    """The label of the named recipe a run was trained with (``pretrain_zoo.RECIPES``), else its depth and steps."""
    variant = train_config.get("model", {}).get("variant")
    held = recipe_of(train_config)
    for name in RECIPES if variant in ZOO_WIDTHS else ():
        for precision in ("float32", "bf16"):  # a recipe is the same recipe whichever precision ran it
            if recipe_of(zoo_config(variant, Path("runs"), None, None, 0, name, precision).to_dict()) == held:
                return RECIPE_LABELS.get(name, name)
    return f"{train_config.get('model', {}).get('n_layers')} layers, {train_config.get('max_steps')} steps"


def plateau_exits(curves: pd.DataFrame, margin: float = PLATEAU_MARGIN) -> pd.DataFrame:
    """Per (variant, recipe, seed): the step and tokens at which validation loss first falls ``margin`` nats
    below the unigram loss (NaN where it never does), and the final validation loss and accuracy."""
    rows = []
    for (variant, recipe, seed), curve in curves.groupby(["variant", "recipe", "seed"], sort=False):
        step, tokens = plateau_exit(curve, margin) if "unigram_loss" in curve else (float("nan"), float("nan"))
        last = curve.sort_values("step").iloc[-1]
        rows.append(dict(variant=variant, recipe=recipe, seed=seed, margin=margin, exit_step=step, exit_tokens=tokens,
                         final_step=last.step, final_val_loss=last.val_loss, final_val_accuracy=last.get("val_accuracy")))
    return pd.DataFrame(rows)


def zoo_curves(zoo: Path) -> tuple[pd.DataFrame, list[dict]]:
    """Tidy validation rows (variant, recipe, seed, step, tokens, val_loss, val_accuracy, unigram_loss) and the
    per-run summaries of every exported run in ``zoo``."""
    rows, summaries = [], []
    for summary_file in sorted(Path(zoo).glob("*/training.json")):
        summary = json.loads(summary_file.read_text())
        recipe = json.loads((summary_file.parent / "train_config.json").read_text())
        if summary["variant"] not in ZOO_WIDTHS:
            continue  # an extra arm with a recipe of its own (dstg-offset): not this comparison
        summaries.append(summary)
        records = [json.loads(line) for line in (summary_file.parent / "log.jsonl").read_text().splitlines() if line.strip()]
        tokens = {r["step"]: r["tokens_seen"] for r in records if "tokens_seen" in r}
        label = recipe_label(recipe)
        rows += [dict(variant=summary["variant"], recipe=label, seed=summary["seed"], step=r["step"], tokens=tokens[r["step"]],
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
    parser.add_argument("--against", type=Path, nargs="*", default=None,
                        help="earlier curves CSVs drawn beside (default: <out>/former_zoo_curves.csv)")
    parser.add_argument("--prefix", default="new_recipe", help="output file prefix (default: %(default)s)")
    parser.add_argument("--stem", default="zoo_curves_by_recipe", help="figure file stem (default: %(default)s)")
    args = parser.parse_args(argv)
    against = args.against if args.against is not None else [args.out / "former_zoo_curves.csv"]
    try:
        new, summaries = zoo_curves(args.zoo)
        earlier = [pd.read_csv(path).replace({"recipe": {NEW_RECIPE: RECIPE_LABELS["4x128"]}}) for path in against]
    except (ValueError, OSError) as err:
        print(f"zoo_curves: error: {err}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    curves = pd.concat([*earlier, new], ignore_index=True)
    new.to_csv(args.out / f"{args.prefix}_curves.csv", index=False)
    (args.out / f"{args.prefix}_runs.json").write_text(json.dumps(summaries, indent=2) + "\n")
    exits = plateau_exits(curves)
    exits.to_csv(args.out / f"{args.prefix}_plateau_exits.csv", index=False)
    plot_zoo_curves(curves, args.out, stem=args.stem, exits=exits, margin=PLATEAU_MARGIN)
    print(pd.DataFrame(summaries)[["variant", "seed", "steps", "train_tokens", "train_seconds", "val_loss", "val_accuracy",
                                   "unigram_loss", "most_frequent_accuracy"]].to_string(index=False))
    print(exits.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
