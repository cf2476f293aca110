"""Validation curves of an exported zoo beside earlier zoos', one panel per variant (recipe comparison), and
where each run leaves the unigram plateau.

    python -m experiments.pretrain_zoo --variants ap dstg --out runs/zoo-next --runs runs/zoo-next-runs
    python -m experiments.zoo_curves --zoo runs/zoo-next --out figures/recipe
    python -m experiments.zoo_curves --zoo results/zoo-authors --out figures/zoo-authors/zoo --prefix training \
        --against figures/zoo/former-6x128/zoo/training_curves.csv --stem curves_by_recipe   # 14.2M beside the 6x128 zoo

Reads ``<zoo>/*/training.json`` and ``log.jsonl`` (what ``pretrain_zoo`` exports) and the earlier curves of
``--against`` (default: ``<out>/former_zoo_curves.csv``, kept from the checkpoints shipped before the recipe
study); writes ``<prefix>_curves.csv``, ``<prefix>_runs.json``, ``<prefix>_plateau_exits.csv`` (per variant,
recipe and seed: the first validation step and token count ``PLATEAU_MARGIN`` nats below the unigram loss, empty
where a run never gets there) and the figure ``<stem>`` (PNG + PDF + JSON).  A run is labelled by its recipe:
the name of ``pretrain_zoo.RECIPES`` it was trained with and its step count (``RECIPE_LABELS``; the earlier CSVs'
``NEW_RECIPE`` label, the recipe study's name for 4x128, is shown as 4x128's).

Where the members recorded their position table's spectrum during training (``table_curve`` in DSTG's and
AP-NeoBERT's ``training.json``), it also writes ``<prefix>_table_curves.csv`` and the figure ``<stem>_tables``:
PC1+PC2 and the DCT low-bin share of each table against training tokens, with the Gaussian table of the same
shape (chance), the paper's value and the claims table's "holds" thresholds, and each run's plateau exit marked.
``--against-zoo`` draws earlier exported zoos beside, validation and table curves both:

    python -m experiments.zoo_curves --zoo dstg_interp/zoo --against-zoo results/zoo-authors \
        --against figures/zoo/former-6x128/zoo/training_curves.csv --out figures/zoo --prefix training \
        --stem curves_by_recipe   # the shipped zoo (28.4M tokens) beside the same recipe at 14.2M and the 6x128 zoo
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from dstg_interp.analysis.spectra import random_control
from dstg_interp.cli.shell import EXIT_ERROR
from dstg_interp.io import RESULTS_DIR
from dstg_interp.plots.recipe import plot_table_curves, plot_zoo_curves
from experiments.claims import PAPER_DSTG_TABLE_PC1_PC2, RULES
from dstg_interp.variants import VARIANTS, variant_row
from experiments.pretrain_zoo import RECIPES, recipe_of, zoo_config
from experiments.recipe_readings import PLATEAU_MARGIN, plateau_exit

NEW_RECIPE = "new (lr 1e-3, batch 16, constant + decay)"  # the 4x128 recipe, as the recipe study's CSVs name it
RECIPE_LABELS = {"4x128": "4x128 (4 layers, en-mix, {steps} steps)", "6x128": "6x128 (6 layers, en-large, {steps} steps)",
                 "authors": "authors (6 layers, en-large document starts, cosine, {steps} steps)"}


def named_label(name: str, steps: int | None = None) -> str:
    """How a figure names the recipe ``name`` of ``pretrain_zoo.RECIPES`` run for ``steps`` (default: its own)."""
    return RECIPE_LABELS.get(name, name + " ({steps} steps)").format(steps=RECIPES[name]["steps"] if steps is None else steps)


def recipe_label(train_config: dict) -> str:
    """The label of the named recipe a run was trained with (``pretrain_zoo.RECIPES``, at the run's own step count:
    ``--steps`` changes the budget, not the recipe), else its depth and steps."""
    variant = train_config.get("model", {}).get("variant")
    held, steps = recipe_of(train_config), train_config.get("max_steps")
    for name in RECIPES if variant in VARIANTS else ():
        for precision in ("float32", "bf16"):  # a recipe is the same recipe whichever precision ran it
            if recipe_of(zoo_config(variant, Path("runs"), steps, None, 0, name, precision).to_dict()) == held:
                return named_label(name, steps)
    return f"{train_config.get('model', {}).get('n_layers')} layers, {steps} steps"


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


def zoo_curves(zoo: Path) -> tuple[pd.DataFrame, list[dict], pd.DataFrame]:
    """Tidy validation rows (variant, recipe, seed, step, tokens, val_loss, val_accuracy, unigram_loss), the
    per-run summaries of every exported run in ``zoo``, and the position tables' spectra recorded during training
    (variant, recipe, seed, n_positions, width, step, tokens, pc1_pc2, low_freq_share, ...; empty without any)."""
    rows, summaries, tables = [], [], []
    for summary_file in sorted(Path(zoo).glob("*/training.json")):
        summary = json.loads(summary_file.read_text())
        recipe = json.loads((summary_file.parent / "train_config.json").read_text())
        if summary["variant"] not in VARIANTS:
            continue  # an extra arm with a recipe of its own (dstg-offset): not this comparison
        summaries.append(summary)
        records = [json.loads(line) for line in (summary_file.parent / "log.jsonl").read_text().splitlines() if line.strip()]
        tokens = {r["step"]: r["tokens_seen"] for r in records if "tokens_seen" in r}
        label = recipe_label(recipe)
        rows += [dict(variant=summary["variant"], recipe=label, seed=summary["seed"], step=r["step"], tokens=tokens[r["step"]],
                      val_loss=r["val_loss"], val_accuracy=r["val_accuracy"], unigram_loss=summary["unigram_loss"])
                 for r in records if "val_loss" in r]
        if summary.get("table_curve"):
            model = json.loads((summary_file.parent / "config.json").read_text())  # the checkpoint's whole config
            width = model.get("d_ap") if variant_row(summary["variant"]).ap_stream else model.get("d_model")
            tables += [dict(variant=summary["variant"], recipe=label, seed=summary["seed"], n_positions=model.get("max_positions"),
                            width=width, **point) for point in summary["table_curve"]]
    if not summaries:
        raise ValueError(f"{zoo}: no exported runs (*/training.json); run experiments.pretrain_zoo --out {zoo} first")
    return pd.DataFrame(rows), summaries, pd.DataFrame(tables)


def with_chance(tables: pd.DataFrame) -> pd.DataFrame:
    """``tables`` with the Gaussian control of each table's shape (``control_pc1_pc2``, ``control_low_freq_share``:
    i.i.d. Gaussian tables of the same positions x width, ``analysis.spectra.random_control``)."""
    controls = {shape: random_control(shape) for shape in {(int(n), int(w)) for n, w in zip(tables.n_positions, tables.width)}}
    return tables.assign(**{f"control_{key}": [controls[(int(n), int(w))][key] for n, w in zip(tables.n_positions, tables.width)]
                            for key in ("pc1_pc2", "low_freq_share")})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zoo", type=Path, required=True, help="a folder pretrain_zoo exported into")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "figures" / "recipe",
                        help="output folder (the committed study: figures/recipe) (default: %(default)s)")
    parser.add_argument("--against", type=Path, nargs="*", default=None,
                        help="earlier curves CSVs drawn beside (default: <out>/former_zoo_curves.csv)")
    parser.add_argument("--against-zoo", type=Path, nargs="*", default=[],
                        help="earlier exported zoos drawn beside, validation and position-table curves both")
    parser.add_argument("--prefix", default="new_recipe", help="output file prefix (default: %(default)s)")
    parser.add_argument("--stem", default="zoo_curves_by_recipe", help="figure file stem (default: %(default)s)")
    args = parser.parse_args(argv)
    against = args.against if args.against is not None else [args.out / "former_zoo_curves.csv"]
    try:
        new, summaries, tables = zoo_curves(args.zoo)
        earlier = [pd.read_csv(path).replace({"recipe": {NEW_RECIPE: named_label("4x128")}}) for path in against]
        earlier_zoos = [zoo_curves(zoo) for zoo in args.against_zoo]
    except (ValueError, OSError) as err:
        print(f"zoo_curves: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    args.out.mkdir(parents=True, exist_ok=True)
    curves = pd.concat([*earlier, *(zoo[0] for zoo in earlier_zoos), new], ignore_index=True)  # earliest first: dashed
    new.to_csv(args.out / f"{args.prefix}_curves.csv", index=False)
    (args.out / f"{args.prefix}_runs.json").write_text(json.dumps(summaries, indent=2) + "\n")
    exits = plateau_exits(curves)
    exits.to_csv(args.out / f"{args.prefix}_plateau_exits.csv", index=False)
    plot_zoo_curves(curves, args.out, stem=args.stem, exits=exits, margin=PLATEAU_MARGIN)
    tables = pd.concat([*(zoo[2] for zoo in earlier_zoos), tables], ignore_index=True)
    if len(tables):
        tables = with_chance(tables)
        tables.to_csv(args.out / f"{args.prefix}_table_curves.csv", index=False)
        plot_table_curves(tables, args.out, stem=f"{args.stem}_tables", exits=exits, references=dict(
            paper_pc1_pc2=PAPER_DSTG_TABLE_PC1_PC2, holds_pc1_pc2=RULES["ap_pc1_pc2_dstg"].thresholds["holds_low"],
            holds_low_freq_share=RULES["ap_dct_low_bins"].thresholds["holds_low"]))
    print(pd.DataFrame(summaries)[["variant", "seed", "steps", "train_tokens", "train_seconds", "val_loss", "val_accuracy",
                                   "unigram_loss", "most_frequent_accuracy"]].to_string(index=False))
    print(exits.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
