"""Recipe study: which training levers take each variant off the unigram plateau, at one budget.

    # the diagnosis (issue 21): named arms over the zoo recipe, >= 2 seeds, one token budget per run
    nice -n 19 python -m experiments.recipe_study --arms ap:reimpl ap:zoo dstg:zoo dstg:mixed --seeds 0 1 \
        --tokens 4000000 --threads 1 --runs runs/recipe-diagnosis --resume
    python -m experiments.recipe_study --corpus tests/fixtures/corpus --tiny --arms zoo mixed --tokens 3000 --out /tmp/r
    # the one-lever screen of the former recipe (figures/recipe/README.md; no --arms)
    python -m experiments.recipe_study --variants dstg ap rp --steps 250 --eval-every 50 --threads 1

**Diagnosis** (``--arms``).  An arm is ``[variant:]arm[,lever=value...]``: a named arm of
``experiments/recipe_levers.py`` (``zoo``, ``reimpl`` = the minimal re-implementation's recipe, ``mixed``,
``no-rp``, ``tied``, ``doc-start``, ``vocab-4096``, ``batch-32``, ``cosine``) and/or lever values, over the
shipped zoo's recipe; without a variant it runs for every ``--variants`` it applies to.  Every run trains
``--tokens`` training tokens (steps = tokens / (batch x mean training-sequence length)), once per seed,
arm by arm in the order given; validation every ``--eval-tokens`` on ``--eval-sequences`` fixed sequences
with fixed masks.  After each run the readings of ``experiments/recipe_readings.py`` (plateau exit,
held-out gain over the most-frequent token, position-table PC1+PC2 against chance, token-position R^2 of
the position stream) are added and the outputs rewritten, so a partial grid is a valid result: in
``--out``, ``diagnosis_runs.csv`` (one row per run), ``diagnosis_arms.csv`` (mean and sd over seeds),
``diagnosis_curves.csv`` (one row per validation), ``diagnosis_table_curves.csv`` (the position table's
spectrum at every validation), ``diagnosis_study.json`` (config, arms, versions), ``diagnosis_config.json``
(the config and wall time), the figure ``diagnosis`` and, where the runs have a position table, the figure
``levers`` (each arm against the first arm given; PNG + PDF + JSON).  ``--out`` is also the study's ledger: with
``--resume`` a run recorded there is read back even when its training folder is gone (another session), and
the rows of arms not in this invocation are kept.  An arm's ``horizon`` plans its schedule past its budget
(``python -m experiments.recipe_study --arms dstg:reimpl-wiki "dstg:reimpl-wiki,windows=true" ...``, the
lever study of figures/recipe/LEVERS.md).

**Screen** (no ``--arms``): each run changes ONE lever of the former zoo recipe (``SCREEN_VALUES``) for
``--steps`` batch-32 steps' worth of sequences; outputs ``curves.csv``, ``summary.csv``, ``study.json``,
``recipe_curves``.

Runs already in ``--runs`` are refused unless ``--resume``, which reads finished runs back and continues
interrupted ones from their last checkpoint.  ``config.json`` holds the whole config and wall time.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from dstg_interp.cli.shell import EXIT_ERROR
from dstg_interp.io import RESULTS_DIR, write_text_atomic
from dstg_interp.variants import VARIANTS, variant_row
from dstg_interp.plots.recipe import plot_diagnosis, plot_lever_study, plot_recipe_curves
from dstg_interp.data.tokenizer import load_tokenizer
from dstg_interp.train import (CHECKPOINT_DIR, CONFIG_FILE, LOG_FILE, RESUMABLE_DIFFERENCES, STATE_FILE, TrainConfig,
                             prepare_training_data, train)
from experiments.figure_inputs import FIGURES_DIR, ZOO_DIR, ScriptConfig, parse_config, save_config
from experiments.pretrain_zoo import unigram_baseline
from experiments.recipe_levers import (ARMS, FORMER_RECIPE, LEVER_SPECS, SCREEN_VALUES, ZOO_RECIPE, Arm, applies,
                                       parse_arm, recipe_for)
from experiments.recipe_readings import (TABLE_CURVE_FILE, plateau_exit, read_table_curve, run_readings,
                                         shipped_zoo_curves, shipped_zoo_reference, summarize_arms, table_reading,
                                         zoo_member_readings, zoo_table_curves)

LEVERS = SCREEN_VALUES  # the screen's levers (kept under this name: figures/recipe/study.json records it)
BASE_RECIPE = FORMER_RECIPE


@dataclass
class RecipeStudyConfig(ScriptConfig):
    """One study: the variants, the arms (or screened levers) and the common budget; saved as ``config.json``."""

    out: Path = field(default=RESULTS_DIR / "figures" / "recipe", metadata={"help": "output folder (the committed study: figures/recipe)"})
    runs: Path = field(default=Path("runs/recipe"), metadata={"help": "training folders (see --resume)"})
    variants: list[str] = field(default_factory=lambda: ["dstg", "ap"])
    arms: list[str] = field(default_factory=list, metadata={
        "help": "diagnosis arms, [variant:]arm[,lever=value...] (arms: " + ", ".join(ARMS) + "); none = the screen"})
    levers: list[str] = field(default_factory=lambda: list(SCREEN_VALUES), metadata={"help": "screen: one lever changed per run"})
    seeds: list[int] = field(default_factory=lambda: [0], metadata={"help": "training seeds, each arm once per seed"})
    tokens: int = field(default=4_000_000, metadata={"help": "diagnosis: training tokens per run"})
    eval_tokens: int = field(default=250_000, metadata={"help": "diagnosis: training tokens between validations"})
    eval_sequences: int = field(default=256, metadata={"help": "diagnosis: validation sequences (fixed, fixed masks)"})
    steps: int = field(default=300, metadata={"help": "screen: steps of the base run (batch 32)"})
    eval_every: int = field(default=50, metadata={"help": "screen: steps between validations (batch 32)"})
    eval_batches: int = 8
    corpus: str = "en-mix"
    max_length: int = 128
    n_layers: int = 4
    n_heads: int = 4
    tiny: bool = field(default=False, metadata={"help": "tiny widths (d 32) for tests and smoke runs"})
    resume: bool = field(default=False, metadata={"help": "read finished runs back, continue interrupted ones"})
    collect: bool = field(default=False, metadata={
        "help": "diagnosis: train nothing; write the outputs from the finished runs of the grid and name the missing"})
    bf16: bool = field(default=False, metadata={"help": "train under bfloat16 autocast (the authors' precision; "
                                                        "1.5-1.8x faster on an AMX CPU)"})
    no_compile: bool = field(default=False, metadata={"help": "train eager (a cold torch.compile costs minutes on a busy machine)"})
    seed_major: bool = field(default=False, metadata={"help": "diagnosis: seed by seed over every arm (default: arm by arm)"})
    reference_zoo: Path | None = field(default=None, metadata={
        "help": "diagnosis: a zoo folder read as one more arm under the runs' own protocol (its --variants members: "
                "held-out gain, table spectrum, position R² on each member's training corpus), written as "
                "diagnosis_reference_zoo.csv; e.g. results/zoo-authors, the normed arm of the 6-layer test"})
    threads: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.runs = Path(self.runs)
        bad = [variant for variant in self.variants if variant not in VARIANTS]
        if bad:
            raise ValueError(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
        unknown = [lever for lever in self.levers if lever not in SCREEN_VALUES]
        if unknown:
            raise ValueError(f"unknown lever(s) {', '.join(unknown)}; choose from {', '.join(SCREEN_VALUES)}")
        for name in ("variants", "levers", "arms", "seeds"):
            values = [str(v) for v in getattr(self, name)]
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"--{name} repeats {' '.join(repeated)}; give each once")
        if any(int(seed) < 0 for seed in self.seeds) or not self.seeds:
            raise ValueError(f"--seeds must be non-negative integers, got {' '.join(map(str, self.seeds)) or 'none'}")
        self.parsed_arms = [parse_arm(spec) for spec in self.arms]  # unknown arm or lever: one line here
        if self.reference_zoo is not None:
            self.reference_zoo = Path(self.reference_zoo)
            if not (self.reference_zoo / "zoo.json").is_file():
                raise ValueError(f"--reference-zoo {self.reference_zoo}: no zoo.json there; give a zoo folder "
                                 "(pretrain_zoo --out)")
        for name in ("steps", "eval_every", "eval_batches", "tokens", "eval_tokens", "eval_sequences"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")


# --- one run's TrainConfig ---------------------------------------------------------------------------------
def train_config(study: RecipeStudyConfig, variant: str, recipe: dict, name: str, seed: int, steps: int,
                 eval_every: int, eval_batches: int) -> TrainConfig:
    """The TrainConfig of one run of ``recipe`` (lever values, ``recipe_levers.LEVER_SPECS``); ``steps`` is the
    schedule's length (a ``horizon`` run stops before it, ``run_once``)."""
    spec = variant_row(variant)
    widths = spec.widths(tiny=study.tiny)
    if spec.ap_stream and not study.tiny:
        widths.update(d_sem=128 - recipe["d_ap"], d_ap=recipe["d_ap"])
    model = dict(widths, n_layers=recipe.get("layers") or study.n_layers, n_heads=study.n_heads,
                 tie_embeddings=recipe["tie"])
    if spec.ap_stream:
        model.update(mlp_mode=recipe["mlp"], rp_bias=recipe["rp"])
        if recipe.get("normed"):
            model["residual_from_normed"] = True
    if recipe["pos_init"] is not None:
        model["pos_init_std"] = recipe["pos_init"]
    if recipe.get("rp_prior") is not None:
        model["rp_locality_init"] = recipe["rp_prior"]
    warmup = recipe["warmup"] if recipe["warmup"] is not None else steps // 10
    return TrainConfig(out_dir=str(Path(study.runs) / variant / name), model=model, corpus=recipe.get("corpus") or study.corpus,
                       max_length=recipe.get("window") or study.max_length, windows=recipe["windows"], vocab_size=recipe["vocab"],
                       batch_size=recipe["batch"], max_steps=steps, lr=recipe["lr"], warmup_steps=min(warmup, steps - 1),
                       schedule=recipe["schedule"], weight_decay=recipe.get("wd", 0.1),
                       betas=(0.9, recipe.get("beta2", 0.98)), seed=seed, eval_every=eval_every,
                       eval_batches=eval_batches, save_every=max(1, min(steps, 200)),
                       log_every=math.gcd(eval_every, max(1, steps // 20)), bf16=study.bf16,
                       threads=study.threads, progress=False, compile=False if study.no_compile else None)


def screen_config(study: RecipeStudyConfig, variant: str, lever: str | None, value, seed: int) -> TrainConfig | None:
    """The screen's run: the former recipe with ``lever`` set to ``value`` (None = the base run); None when
    the lever does not apply to the variant (d_ap for a baseline, pos_init without a table)."""
    if lever is not None and (not applies(lever, variant) or lever == "d_ap" and study.tiny):
        return None
    recipe = dict(FORMER_RECIPE, **({lever: value} if lever else {}))
    steps = max(1, study.steps * FORMER_RECIPE["batch"] // recipe["batch"])  # same training sequences
    eval_every = max(1, study.eval_every * FORMER_RECIPE["batch"] // recipe["batch"])
    name = "base" if lever is None else f"{lever}={value}"
    if len(study.seeds) > 1:
        name += f"/seed{seed}"
    return train_config(study, variant, recipe, name, seed, steps, eval_every, study.eval_batches)


STOP_FILE = "study_stop.json"  # a run's stop step when its schedule is planned past its budget (``horizon``)


def arm_config(study: RecipeStudyConfig, arm: Arm, variant: str, seed: int) -> TrainConfig | None:
    """The diagnosis's run of ``arm`` for ``variant`` and ``seed``: steps from the token budget and the
    training split's mean sequence length (the data are prepared, or read from the cache, here).  With a
    ``horizon`` lever the schedule's ``max_steps`` come from the horizon and the run stops at the budget's
    step (``stop_step``, kept in the run folder's ``study_stop.json``)."""
    recipe = recipe_for(arm, variant, ZOO_RECIPE)
    if recipe is None:
        return None
    name = f"{arm.label}/seed{seed}"
    probe = train_config(study, variant, recipe, name, seed, steps=2, eval_every=1, eval_batches=1)
    saved = Path(probe.out_dir) / CONFIG_FILE
    tokens = recipe.get("tokens") or study.tokens
    if saved.is_file():  # a started run keeps the step budget it started with (another tokenizer: other lengths)
        record = json.loads(saved.read_text())
        steps, eval_every, eval_batches = record["max_steps"], record["eval_every"], record["eval_batches"]
        stop_file = Path(probe.out_dir) / STOP_FILE
        stop = json.loads(stop_file.read_text())["stop_step"] if stop_file.is_file() else steps
    else:
        mean_length = float(np.mean(prepare_training_data(probe).train.lengths))
        per_step = recipe["batch"] * mean_length
        stop = max(2, round(tokens / per_step))
        horizon = recipe.get("horizon") or tokens
        if horizon < tokens:
            raise ValueError(f"arm {arm.label!r}: horizon={horizon} is shorter than the run's {tokens} tokens; a "
                             "schedule cannot end before its run")
        steps = max(stop, round(horizon / per_step))
        eval_every = max(1, round(study.eval_tokens / per_step))
        eval_batches = max(1, study.eval_sequences // recipe["batch"])
    cfg = train_config(study, variant, recipe, name, seed, steps, eval_every, eval_batches)
    cfg.stop_step = stop  # type: ignore[attr-defined]  # read by run_once and is_finished, not a TrainConfig field
    if saved.is_file():
        differing = sorted(k for k, v in json.loads(saved.read_text()).items()
                           if k not in RESUMABLE_DIFFERENCES and cfg.to_dict().get(k) != v and k != "betas")
        if differing:
            raise ValueError(f"{cfg.out_dir} holds a run of another recipe (different {', '.join(differing)}); "
                             "choose another --runs")
    return cfg


def stop_step(cfg: TrainConfig) -> int:
    return getattr(cfg, "stop_step", cfg.max_steps)


# --- running -----------------------------------------------------------------------------------------------
def run_once(cfg: TrainConfig, study: RecipeStudyConfig) -> None:
    """Train ``cfg`` to its stop step unless its checkpoint is there; an existing run needs ``--resume``.
    Every validation also reads the position table's spectrum into ``table_curve.jsonl`` (``table_reading``)."""
    state = Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE
    if state.is_file():
        if not (study.resume or study.collect):
            raise ValueError(f"{cfg.out_dir} already holds a run; pass --resume to read it back and continue the "
                             "study, or choose another --runs")
        if json.loads(state.read_text())["step"] >= stop_step(cfg):
            return
    stop = stop_step(cfg)
    if stop < cfg.max_steps:
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(cfg.out_dir) / STOP_FILE, json.dumps(dict(stop_step=stop, max_steps=cfg.max_steps)) + "\n")
    curve_file = Path(cfg.out_dir) / TABLE_CURVE_FILE

    def record_table(model, step: int, tokens_seen: int) -> None:
        reading = table_reading(model)
        if reading:
            with open(curve_file, "a") as out:
                out.write(json.dumps(dict(step=step, tokens=tokens_seen, **reading)) + "\n")

    train(cfg, resume=state.is_file(), stop_after_step=stop if stop < cfg.max_steps else None, on_eval=record_table)


def read_curve(cfg: TrainConfig) -> pd.DataFrame:
    """Validation rows of a run's log with the training tokens seen at that step (read from the training record
    of the same step; between two logged steps, interpolated linearly -- batches hold similar token counts)."""
    records = [json.loads(line) for line in (Path(cfg.out_dir) / LOG_FILE).read_text().splitlines() if line.strip()]
    logged = sorted((r["step"], r["tokens_seen"]) for r in records if "tokens_seen" in r)
    steps, tokens = np.array([0] + [s for s, _ in logged]), np.array([0] + [t for _, t in logged])
    rows = [dict(step=r["step"], tokens=int(round(float(np.interp(r["step"], steps, tokens)))), val_loss=r["val_loss"],
                 val_accuracy=r["val_accuracy"]) for r in records if "val_loss" in r]
    return pd.DataFrame(rows)


def diagnosis_plan(study: RecipeStudyConfig) -> list[tuple[Arm, str, int]]:
    """(arm, variant, seed) in the order they run: arm by arm with every seed (``--seed-major``: seed by seed,
    every arm), so a partial grid has whole arms (or one seed of every arm)."""
    plan = []
    for arm in study.parsed_arms:
        for variant in [arm.variant] if arm.variant else study.variants:
            plan += [(arm, variant, seed) for seed in study.seeds if recipe_for(arm, variant) is not None]
    if not plan:
        raise ValueError(f"no arm of {' '.join(study.arms)} applies to --variants {' '.join(study.variants)}")
    if study.seed_major:
        plan = sorted(plan, key=lambda item: study.seeds.index(item[2]))  # stable: arm order within a seed
    return plan


def is_finished(cfg: TrainConfig) -> bool:
    state = Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE
    return state.is_file() and json.loads(state.read_text())["step"] >= stop_step(cfg)


def run_key(cfg: TrainConfig) -> str:
    """What makes two runs the same run: the TrainConfig less what may differ on resume, and the stop step."""
    record = {k: v for k, v in cfg.to_dict().items() if k not in RESUMABLE_DIFFERENCES}
    text = json.dumps(dict(record, stop_step=stop_step(cfg)), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_record(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The runs, validation curves and table curves an earlier invocation wrote into ``out`` (committed, so a
    later session's ``--resume`` reuses a finished run whose training folder is gone: the ledger)."""
    tables = []
    for name in ("diagnosis_runs.csv", "diagnosis_curves.csv", "diagnosis_table_curves.csv"):
        path = Path(out) / name
        tables.append(pd.read_csv(path) if path.is_file() and path.stat().st_size else pd.DataFrame())
    runs = tables[0]
    if not runs.empty and "run_key" not in runs:
        runs = pd.DataFrame()  # written before the ledger existed: nothing to match a run by
    return runs, tables[1], tables[2]


def run_diagnosis(study: RecipeStudyConfig, start: float) -> pd.DataFrame:
    plan = [(item, arm_config(study, *item)) for item in diagnosis_plan(study)]
    reuse = study.resume or study.collect
    recorded_runs, recorded_curves, recorded_tables = read_record(study.out) if reuse else (pd.DataFrame(),) * 3
    recorded = set(recorded_runs.run_key) if not recorded_runs.empty else set()

    def done(cfg: TrainConfig) -> bool:
        return is_finished(cfg) or run_key(cfg) in recorded

    if reuse:  # finished runs are read back first, so every output below includes them
        plan = sorted(plan, key=lambda entry: not done(entry[1]))
    if study.collect:
        missing = [f"{variant}:{arm.label} seed {seed}" for (arm, variant, seed), cfg in plan if not done(cfg)]
        plan = [entry for entry in plan if done(entry[1])]
        if missing:
            print(f"recipe_study: --collect: {len(missing)} run(s) of the grid not finished, left out: "
                  f"{'; '.join(missing)}", file=sys.stderr)
        if not plan:
            raise ValueError("--collect: no run of the grid has finished in --runs; train them first (--resume)")
    # runs recorded in --out by earlier invocations with other arms stay in every output (the ledger accumulates)
    planned = {run_key(cfg) for _, cfg in plan}
    others = recorded_runs[~recorded_runs.run_key.isin(planned)] if not recorded_runs.empty else pd.DataFrame()
    runs, curves, tables = [row.to_dict() for _, row in others.iterrows()], [], []
    for table, store in ((recorded_curves, curves), (recorded_tables, tables)):
        if not table.empty and not others.empty:
            store.append(table.merge(others[["variant", "arm", "seed"]], on=["variant", "arm", "seed"]))
    if runs:
        print(f"recipe_study: {len(runs)} earlier run(s) of other arms kept from {study.out}", file=sys.stderr)
    for number, ((arm, variant, seed), cfg) in enumerate(plan, 1):
        began, key = time.time(), run_key(cfg)
        labels = dict(variant=variant, arm=arm.label, seed=seed)
        if not is_finished(cfg) and key in recorded:  # the ledger: finished in an earlier session
            runs.append(recorded_runs[recorded_runs.run_key == key].iloc[-1].to_dict())
            for table, store in ((recorded_curves, curves), (recorded_tables, tables)):
                if not table.empty:
                    store.append(table[(table.variant == variant) & (table.arm == arm.label) & (table.seed == seed)])
            print(f"[{number}/{len(plan)}] {variant} {arm.label} seed {seed}: read from {study.out} (run key {key})",
                  file=sys.stderr, flush=True)
        else:
            run_once(cfg, study)
            unigram = unigram_baseline(cfg, tokenizer=load_tokenizer(Path(cfg.out_dir) / CHECKPOINT_DIR / "tokenizer.json"))
            curve = read_curve(cfg).assign(**labels, unigram_loss=unigram["unigram_loss"])
            exit_step, exit_tokens = plateau_exit(curve)
            state = json.loads((Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE).read_text())
            runs.append(dict(labels, steps=state["step"], schedule_steps=cfg.max_steps, batch=cfg.batch_size,
                             train_tokens=state["tokens_seen"], train_seconds=round(state["train_seconds"], 1),
                             final_val_loss=curve.val_loss.iloc[-1], unigram_loss=unigram["unigram_loss"],
                             plateau_exit_step=exit_step, plateau_exit_tokens=exit_tokens, **run_readings(cfg),
                             run_dir=cfg.out_dir, run_key=key))
            curves.append(curve)
            tables.append(read_table_curve(Path(cfg.out_dir)).assign(**labels))
            print(f"[{number}/{len(plan)}] {variant} {arm.label} seed {seed}: {time.time() - began:.0f} s",
                  file=sys.stderr, flush=True)
        write_diagnosis(study, pd.DataFrame(runs), pd.concat(curves, ignore_index=True),
                        pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(), start,
                        finished=number == len(plan))
    return pd.DataFrame(runs)


REFERENCE_READINGS: dict = {}  # --reference-zoo folder -> its members' readings (this invocation's)


def write_diagnosis(study: RecipeStudyConfig, runs: pd.DataFrame, curves: pd.DataFrame, table_curves: pd.DataFrame,
                    start: float, finished: bool) -> None:
    """Rewrite every output from the runs so far (each file atomically): a partial grid is a valid result."""
    out = study.out
    out.mkdir(parents=True, exist_ok=True)
    arms = summarize_arms(runs)
    plotted_runs, plotted_curves = runs, curves
    lever_runs, lever_curves = runs, table_curves  # the lever figure: the runs, and a --reference-zoo's members
    if not study.tiny and study.corpus == "en-mix":  # the zoo recipe at its full budget, from committed files
        reference = shipped_zoo_reference(ZOO_DIR, FIGURES_DIR, variants=tuple(study.variants))
        arms = pd.concat([arms, summarize_arms(reference)], ignore_index=True)
        write_text_atomic(out / "diagnosis_shipped_zoo.csv", reference.to_csv(index=False))
        plotted_runs = pd.concat([runs, reference], ignore_index=True)
        plotted_curves = pd.concat([curves, shipped_zoo_curves(ZOO_DIR, tuple(study.variants))], ignore_index=True)
    if study.reference_zoo is not None:  # read once per invocation: a few minutes of probes per member
        reference = REFERENCE_READINGS.get(study.reference_zoo)
        if reference is None:
            reference = REFERENCE_READINGS[study.reference_zoo] = zoo_member_readings(
                study.reference_zoo, variants=tuple(study.variants))
        arms = pd.concat([arms, summarize_arms(reference)], ignore_index=True)
        write_text_atomic(out / "diagnosis_reference_zoo.csv", reference.to_csv(index=False))
        plotted_runs = pd.concat([plotted_runs, reference], ignore_index=True)
        plotted_curves = pd.concat([plotted_curves, shipped_zoo_curves(
            study.reference_zoo, tuple(study.variants), name=study.reference_zoo.name)], ignore_index=True)
        lever_runs = pd.concat([lever_runs, reference], ignore_index=True)
        lever_curves = pd.concat([lever_curves, zoo_table_curves(study.reference_zoo, tuple(study.variants))],
                                 ignore_index=True)
    for name, table in (("diagnosis_runs.csv", runs), ("diagnosis_arms.csv", arms), ("diagnosis_curves.csv", curves),
                        ("diagnosis_table_curves.csv", table_curves)):
        write_text_atomic(out / name, table.to_csv(index=False))
    arm_levers = {arm.label: dict(arm.levers) for arm in study.parsed_arms}
    write_text_atomic(out / "diagnosis_study.json", json.dumps(dict(
        config=study.to_dict(), finished=finished, runs_done=len(runs), base_recipe=ZOO_RECIPE, arms=arm_levers,
        levers={k: v[2] for k, v in LEVER_SPECS.items()}, torch=torch.__version__, python=platform.python_version()),
        indent=1, default=str) + "\n")
    plot_diagnosis(plotted_curves, plotted_runs, out)
    if not table_curves.empty and "pc1_pc2" in runs:  # the lever figure: every arm against the first one given
        plot_lever_study(lever_curves, lever_runs[lever_runs.pc1_pc2.notna()], out, base=study.parsed_arms[0].label)
    save_config(study, "experiments/recipe_study.py", "diagnosis_config.json", wall_s=round(time.time() - start, 1))


def run_screen(study: RecipeStudyConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    curves = []
    plan: list[tuple[str, str | None, Any]] = [(variant, None, None) for variant in study.variants]
    # lever-major: every variant's run of one lever lands before the next lever starts
    plan += [(variant, lever, value) for lever in study.levers for value in SCREEN_VALUES[lever] for variant in study.variants]
    for number, (variant, lever, value) in enumerate(plan, 1):
        for seed in study.seeds:
            cfg = screen_config(study, variant, lever, value, seed)
            if cfg is None:
                continue
            label = "base" if lever is None else f"{lever}={value}"
            start = time.time()
            run_once(cfg, study)
            print(f"[{number}/{len(plan)}] {variant} {label} seed {seed}: {time.time() - start:.0f} s", file=sys.stderr, flush=True)
            # the unigram loss on the run's own validation batches and masks: a vocabulary or batch-size lever changes
            # what "validation loss" is measured on, the distance below unigram is comparable across runs
            unigram = unigram_baseline(cfg)
            curve = read_curve(cfg).assign(variant=variant, lever=lever or "base", value=str(value) if lever else "", run=label,
                                           seed=seed, unigram_loss=unigram["unigram_loss"])
            curves.append(curve)
    curves = pd.concat(curves, ignore_index=True)[["variant", "run", "lever", "value", "seed", "step", "tokens", "val_loss",
                                                   "val_accuracy", "unigram_loss"]]
    return curves, summarize(curves)


def summarize(curves: pd.DataFrame) -> pd.DataFrame:
    """Per screen run (mean over seeds): final validation loss/accuracy, the mean loss over the curve (area,
    lower = left the plateau sooner), the final distance below the unigram loss on the same masked tokens
    (``below_unigram``: the comparable number when a lever changes the vocabulary or the validation batches),
    and its gain over the variant's base run."""
    rows = []
    for (variant, run, _seed), curve in curves.groupby(["variant", "run", "seed"], sort=False):
        curve = curve.sort_values("tokens")
        rows.append(dict(variant=variant, run=run, final_val_loss=curve.val_loss.iloc[-1],
                         below_unigram=curve.unigram_loss.iloc[-1] - curve.val_loss.iloc[-1],
                         final_val_accuracy=curve.val_accuracy.iloc[-1], mean_val_loss=float(np.mean(curve.val_loss)),
                         tokens=int(curve.tokens.iloc[-1])))
    table = pd.DataFrame(rows).groupby(["variant", "run"], sort=False).mean().reset_index()
    table["tokens"] = table.tokens.round().astype(int)
    base = table[table.run == "base"].set_index("variant").below_unigram
    table["gain_vs_base"] = table.below_unigram - table.variant.map(base)
    return table


def main(argv=None) -> int:
    start = time.time()
    try:
        study = parse_config(RecipeStudyConfig, argv, __doc__)
        if study.arms:
            runs = run_diagnosis(study, start)
            summary = summarize_arms(runs)
            columns = ["variant", "arm", "n_seeds", "seeds_off_plateau", "plateau_exit_tokens_mean", "heldout_gain_points_mean",
                       "heldout_gain_points_sd", "pc1_pc2_mean", "pc1_pc2_chance_mean", "position_r2_last_mean"]
            print(summary[[c for c in columns if c in summary]].to_string(index=False))
            return 0
        curves, summary = run_screen(study)
    except (ValueError, OSError) as err:
        print(f"recipe_study: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("recipe_study: interrupted; finished runs are kept and a rerun with --resume continues", file=sys.stderr)
        return 130
    out = study.out
    out.mkdir(parents=True, exist_ok=True)
    curves.to_csv(out / "curves.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    (out / "study.json").write_text(json.dumps(dict(config=study.to_dict(), levers=SCREEN_VALUES, base_recipe=FORMER_RECIPE,
                                                    torch=torch.__version__, python=platform.python_version()), indent=2) + "\n")
    plot_recipe_curves(curves, out)
    save_config(study, "experiments/recipe_study.py", wall_s=round(time.time() - start, 1))
    print(summary.sort_values(["variant", "below_unigram"], ascending=[True, False]).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
