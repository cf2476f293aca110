"""Recipe study: which training levers take each variant off the unigram plateau soonest, at one budget.

    python -m experiments.recipe_study                                   # the committed study
    python -m experiments.recipe_study --variants ap --levers lr batch --steps 200 --out /tmp/recipe
    python -m experiments.recipe_study --corpus tests/fixtures/corpus --tiny --steps 20 --out /tmp/r  # seconds

Each run changes ONE lever of the base recipe (the zoo's former recipe, shrunk to the study's budget) and
trains for the same number of training tokens; a run per (variant, lever value) plus one base run per
variant.  Validation MLM loss is logged every ``--eval-every`` steps on the fixed validation batches, so
curves are comparable across runs.  Outputs in ``--out``: ``curves.csv`` (variant, lever, value, step,
tokens, val_loss, val_accuracy: one row a validation), ``summary.csv`` (per run: final loss, area under
the loss curve, the first step below ``unigram - 0.5``), ``study.json`` (this config, levers, versions), ``config.json``
(the whole config and wall time, as every experiment script writes), and the
figure ``recipe_curves`` (PNG + PDF + JSON).  Runs are resumable: a run whose checkpoint is complete is
read back, not retrained.

Levers (``LEVERS``): ``lr`` (peak learning rate), ``warmup`` (warm-up steps), ``schedule`` (cosine vs
constant with a final linear decay), ``batch`` (sequences per step, steps scaled to keep tokens fixed),
``tie`` (MLM head tied to the token embedding), ``pos_init`` (std of the learned position table's init),
``vocab`` (tokenizer size), ``d_ap`` (DSTG's AP width, DSTG only).
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp.plots.recipe import plot_recipe_curves
from dstg_interp.train import CHECKPOINT_DIR, LOG_FILE, STATE_FILE, TrainConfig, train
from experiments.figure_inputs import ScriptConfig, parse_config, save_config
from experiments.pretrain_zoo import unigram_baseline

ZOO_WIDTHS = {
    "dstg": dict(variant="dstg", d_sem=112, d_ap=16),
    "rope": dict(variant="rope", d_model=128),
    "ap": dict(variant="ap", d_model=128),
    "rp": dict(variant="rp", d_model=128),
}
TINY_WIDTHS = {
    "dstg": dict(variant="dstg", d_sem=24, d_ap=8),
    "rope": dict(variant="rope", d_model=32),
    "ap": dict(variant="ap", d_model=32),
    "rp": dict(variant="rp", d_model=32),
}
# lever -> the values tried (the base recipe's own value is not repeated here)
LEVERS = {
    "lr": [3e-3],
    "batch": [16],
    "pos_init": [0.2],
    "tie": [True],
    "schedule": ["constant"],
    "warmup": [10],
    "d_ap": [32],
    "vocab": [4096],
}
BASE_RECIPE = dict(lr=1e-3, warmup=None, schedule="cosine", batch=32, tie=False, pos_init=None, vocab=8192, d_ap=16)


@dataclass
class RecipeStudyConfig(ScriptConfig):
    """One study: the variants, the levers and the common budget; saved as ``config.json`` and in ``study.json``."""

    out: Path = field(default=Path("figures/recipe"), metadata={"help": "output folder"})
    runs: Path = field(default=Path("runs/recipe"), metadata={"help": "training folders (resumable)"})
    variants: list[str] = field(default_factory=lambda: ["dstg", "ap"])
    levers: list[str] = field(default_factory=lambda: list(LEVERS), metadata={"help": "one lever changed per run"})
    steps: int = field(default=300, metadata={"help": "steps of the base run (batch 32)"})
    eval_every: int = 50
    eval_batches: int = 8
    corpus: str = "en-mix"
    max_length: int = 128
    n_layers: int = 4
    n_heads: int = 4
    tiny: bool = field(default=False, metadata={"help": "tiny widths (d 32) for tests and smoke runs"})
    seed: int = 0
    threads: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.runs = Path(self.runs)
        unknown = [lever for lever in self.levers if lever not in LEVERS]
        if unknown:
            raise ValueError(f"unknown lever(s) {', '.join(unknown)}; choose from {', '.join(LEVERS)}")
        bad = [variant for variant in self.variants if variant not in ZOO_WIDTHS]
        if bad:
            raise ValueError(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(ZOO_WIDTHS)}")
        if len(set(self.variants)) != len(self.variants) or len(set(self.levers)) != len(self.levers):
            raise ValueError("--variants and --levers must not repeat a name")
        for name in ("steps", "eval_every", "eval_batches"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")


def run_config(study: RecipeStudyConfig, variant: str, lever: str | None, value) -> TrainConfig | None:
    """The TrainConfig of one run: the base recipe with ``lever`` set to ``value`` (None = the base run);
    None when the lever does not apply to the variant (d_ap for a baseline, pos_init without a table)."""
    recipe = dict(BASE_RECIPE, **({lever: value} if lever else {}))
    widths = dict((TINY_WIDTHS if study.tiny else ZOO_WIDTHS)[variant])
    if lever == "d_ap" and (variant != "dstg" or study.tiny):
        return None
    if lever == "pos_init" and variant not in ("dstg", "ap"):
        return None
    if variant == "dstg" and not study.tiny:
        widths.update(d_sem=128 - recipe["d_ap"], d_ap=recipe["d_ap"])
    model = dict(widths, n_layers=study.n_layers, n_heads=study.n_heads, tie_embeddings=recipe["tie"])
    if recipe["pos_init"] is not None:
        model["pos_init_std"] = recipe["pos_init"]
    steps = max(1, study.steps * BASE_RECIPE["batch"] // recipe["batch"])  # same training tokens (sequences)
    eval_every = max(1, study.eval_every * BASE_RECIPE["batch"] // recipe["batch"])
    warmup = recipe["warmup"] if recipe["warmup"] is not None else steps // 10
    name = "base" if lever is None else f"{lever}={value}"
    return TrainConfig(out_dir=str(Path(study.runs) / variant / name), model=model, corpus=study.corpus,
                       max_length=study.max_length, vocab_size=recipe["vocab"], batch_size=recipe["batch"],
                       max_steps=steps, lr=recipe["lr"], warmup_steps=min(warmup, steps - 1), schedule=recipe["schedule"],
                       seed=study.seed, eval_every=eval_every, eval_batches=study.eval_batches, save_every=steps,
                       log_every=math.gcd(eval_every, max(1, steps // 20)), threads=study.threads, progress=False)


def read_curve(cfg: TrainConfig) -> pd.DataFrame:
    """Validation rows of a run's log with the training tokens seen at that step (read from the training record
    of the same step; between two logged steps, interpolated linearly -- batches hold similar token counts)."""
    records = [json.loads(line) for line in (Path(cfg.out_dir) / LOG_FILE).read_text().splitlines() if line.strip()]
    logged = sorted((r["step"], r["tokens_seen"]) for r in records if "tokens_seen" in r)
    steps, tokens = np.array([0] + [s for s, _ in logged]), np.array([0] + [t for _, t in logged])
    rows = [dict(step=r["step"], tokens=int(round(float(np.interp(r["step"], steps, tokens)))), val_loss=r["val_loss"],
                 val_accuracy=r["val_accuracy"]) for r in records if "val_loss" in r]
    return pd.DataFrame(rows)


def run_study(study: RecipeStudyConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    curves = []
    plan = [(variant, None, None) for variant in study.variants]
    # lever-major: every variant's run of one lever lands before the next lever starts
    plan += [(variant, lever, value) for lever in study.levers for value in LEVERS[lever] for variant in study.variants]
    for number, (variant, lever, value) in enumerate(plan, 1):
        cfg = run_config(study, variant, lever, value)
        if cfg is None:
            continue
        label = "base" if lever is None else f"{lever}={value}"
        done = (Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE).is_file() and \
            json.loads((Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE).read_text())["step"] >= cfg.max_steps
        start = time.time()
        if not done:
            resume = (Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE).is_file()
            train(cfg, resume=resume)
        print(f"[{number}/{len(plan)}] {variant} {label}: {time.time() - start:.0f} s", file=sys.stderr, flush=True)
        # the unigram loss on the run's own validation batches and masks: a vocabulary or batch-size lever changes
        # what "validation loss" is measured on, the distance below unigram is comparable across runs
        unigram = unigram_baseline(cfg)
        curve = read_curve(cfg).assign(variant=variant, lever=lever or "base", value=str(value) if lever else "", run=label,
                                       unigram_loss=unigram["unigram_loss"])
        curves.append(curve)
    curves = pd.concat(curves, ignore_index=True)[["variant", "run", "lever", "value", "step", "tokens", "val_loss",
                                                   "val_accuracy", "unigram_loss"]]
    return curves, summarize(curves)


def summarize(curves: pd.DataFrame) -> pd.DataFrame:
    """Per run: final validation loss/accuracy, the mean loss over the curve (area, lower = left the plateau
    sooner), the final distance below the unigram loss on the same masked tokens (``below_unigram``: the
    comparable number when a lever changes the vocabulary or the validation batches), and its gain over the
    variant's base run."""
    rows = []
    for (variant, run), curve in curves.groupby(["variant", "run"], sort=False):
        curve = curve.sort_values("tokens")
        rows.append(dict(variant=variant, run=run, final_val_loss=curve.val_loss.iloc[-1],
                         below_unigram=curve.unigram_loss.iloc[-1] - curve.val_loss.iloc[-1],
                         final_val_accuracy=curve.val_accuracy.iloc[-1], mean_val_loss=float(np.mean(curve.val_loss)),
                         tokens=int(curve.tokens.iloc[-1])))
    table = pd.DataFrame(rows)
    base = table[table.run == "base"].set_index("variant").below_unigram
    table["gain_vs_base"] = table.below_unigram - table.variant.map(base)
    return table


def main(argv=None) -> int:
    start = time.time()
    try:
        study = parse_config(RecipeStudyConfig, argv, __doc__)
        curves, summary = run_study(study)
    except (ValueError, OSError) as err:
        print(f"recipe_study: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("recipe_study: interrupted; finished runs are kept and a rerun continues", file=sys.stderr)
        return 130
    out = study.out
    out.mkdir(parents=True, exist_ok=True)
    curves.to_csv(out / "curves.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    (out / "study.json").write_text(json.dumps(dict(config=study.to_dict(), levers=LEVERS, base_recipe=BASE_RECIPE,
                                                    torch=torch.__version__, python=platform.python_version()), indent=2) + "\n")
    plot_recipe_curves(curves, out)
    save_config(study, "experiments/recipe_study.py", wall_s=round(time.time() - start, 1))
    print(summary.sort_values(["variant", "below_unigram"], ascending=[True, False]).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
