"""Pretrain the reference zoo -- DSTG-, RoPE-, AP- and RP-NeoBERT, and the NoPE floor -- with identical data, seed and
hyper-parameters, and ship each as a half-precision checkpoint in ``dstg_interp/zoo/<variant>/``.

    python -m experiments.pretrain_zoo --precision float32     # all four, seed 0 (the shipped zoo's precision)
    python -m experiments.pretrain_zoo --variants dstg --steps 200 --runs runs/zoo-small --out /tmp/zoo
    python -m experiments.pretrain_zoo --variants dstg-offset   # DSTG with random_offset, 512-row AP table
    python -m experiments.pretrain_zoo --seeds 0 1 2 --precision float32   # seed-major; seed k > 0 ships as <variant>-seed<k>
    python -m experiments.pretrain_zoo --variants nope --seeds 0 --out dstg_interp/zoo --threads 1 \
        --precision float32                                    # the floor
    python -m experiments.pretrain_zoo --steps 3900 --out results/zoo-authors   # the same recipe at half the budget
    python -m experiments.pretrain_zoo --recipe 6x128          # the former shipped zoo's recipe (figures/zoo/former-6x128/)

``nope`` (NoPE-NeoBERT: the same block with no positional input at all) is the floor of the probe tables and
claims; it is not one of the reference four (the default ``--variants``) but is trained with exactly their
recipe (``check_zoo_recipe`` refuses it otherwise), one seed so far.  Rerunning the same command continues an
interrupted run from its last checkpoint (there is no --resume flag: resuming is the default) and leaves alone a
member the --out folder already holds whose run folder is gone (one committed by an earlier session), so one
command, rerun session after session, trains a zoo member by member.

Sizes: 6 layers, 4 heads, d_model 128 (DSTG: d_sem 112 + d_ap 16, 1:7 rather than the authors' 1:15
so each head keeps 4 AP value dims), SwiGLU hidden 344, 128 positions, vocab 8192.  The shipped zoo is the
``authors`` recipe (the default; each choice, its source in the authors' code and each CPU-scale departure:
figures/recipe/AUTHORS_RECIPE.md): one document per sequence from its start, batch 32, AdamW lr 1e-3 (betas
0.9/0.95, weight decay 0.01), cosine decay to 10% after 200 warm-up steps, DSTG's normed residual, 7,800 steps:
28.4M tokens, 5.4 epochs of en-large's document starts, at seeds 0, 1, 2 (``--seeds 0 1 2``), trained in
float32 (``--precision float32``: the members of one zoo share a precision, and these CPUs differ in native
bf16).  Why 7,800 steps: at 3,900 (14.2M tokens, ``results/zoo-authors/``) AP- and RP-NeoBERT miss the
8-point held-out target (they leave the unigram plateau at 7-12M tokens).  The former shipped zoo (recipe
``6x128``: sentence windows, batch 16, constant rate with a linear tail, weight decay 0.1, 8,000 steps, 14.2M
tokens) left the tree at commit da43ed7 (its tables: figures/zoo/former-6x128/); ``4x128`` is the zoo before
it.  dstg-offset is still the first zoo's model (4 layers, en-mix, batch 32, cosine over 2,400 steps: an extra
arm keeps a recipe of its own).  Several processes can share one zoo (``zoo.json`` is updated under a lock),
e.g. one per core with ``--threads 1`` and their own seeds.  Why 128 positions and not the paper's 256 or 512:
the budget (a member takes 60-110 minutes on one core); the paper's depth is kept.
Data: en-large (en-mix -- Wikipedia leads, Austen chapters, Treasury of David -- plus the registry pieces
of ``dstg_interp.data.en_large``), one document per sequence from its start, truncated (``6x128`` adds
further windows of long documents starting at sentence boundaries).
Tokenizer: the shipped zoo's (``ZOO_TOKENIZER``), so a member trained now shares the shipped members' ids.
A zoo holds one recipe: a member is refused (one line, before any training) where the --out folder holds a
member of the reference four (or of the same extra arm) trained otherwise.
Each run is resumable (rerunning this script continues unfinished runs); the export writes, per variant,
the checkpoint (float16), its ``train_config.json``, ``log.jsonl`` and ``training.json`` (validation MLM
loss/accuracy, unigram baseline on the same masked tokens, training tokens and wall time; for DSTG and
AP-NeoBERT the position table's spectrum at every validation, ``table_curve``), plus
``dstg_interp/zoo/zoo.json`` collecting all of them.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dstg_interp import ModelConfig, load_model
from dstg_interp.cli.shell import EXIT_ERROR
from dstg_interp.config import MAX_SEED, VALIDATION_MASK_SEED
from dstg_interp.evaluation import Unigram
from dstg_interp.io import RESULTS_DIR, check_replaceable, write_text_atomic
from dstg_interp.model.checkpoint import ZOO_NAMES, ZOO_TOKENIZER, ZOO_WIDTHS, zoo_architecture, zoo_member
from dstg_interp.model.files import WEIGHTS_FILE
from dstg_interp.model.saving import checkpoint_foreign_entries, save_checkpoint
from dstg_interp.train import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    LOG_FILE,
    STATE_FILE,
    TrainConfig,
    evaluate,
    masked_batch,
    portable_train_config,
    prepare_training_data,
    bf16_is_native,
    read_train_config,
    train,
    validation_batches,
)
from experiments.figure_inputs import ScriptConfig, parse_config
from experiments.recipe_readings import TABLE_CURVE_FILE, read_table_curve, table_reading

# The architecture is the library's (dstg_interp.model.checkpoint.zoo_architecture).  Beyond the reference
# four: DSTG trained with the authors' random_offset option on a 512-row AP table
# (sequences stay 128 tokens; each reads the table from a random start), the extrapolation study's extra arm
VARIANT_OPTIONS: dict[str, dict[str, Any]] = {"dstg-offset": dict(max_positions=512, random_offset=True)}
VARIANT_WIDTHS = {"dstg-offset": "dstg"}  # an extra arm -> the zoo variant whose architecture it has
VARIANTS = (*ZOO_WIDTHS, *VARIANT_WIDTHS)
# The recipe chosen by the recipe study (figures/recipe/README.md): the same for all four variants.
ZOO_STEPS = 4800
SHARED = dict(corpus="en-mix", max_length=128, windows=True, vocab_size=8192, batch_size=16, lr=1e-3, warmup_steps=200,
              schedule="constant", decay_fraction=0.2, min_lr_ratio=0.1, weight_decay=0.1, grad_clip=1.0, mask_prob=0.2,
              seed=0, eval_every=400, eval_batches=32, save_every=200, log_every=20)


# Named recipes: the former 4-layer zoo's, and the 6-layer one the recipe diagnosis recommends (the shipped zoo)
# (figures/recipe/DIAGNOSIS.md: AP-NeoBERT leaves the unigram plateau at ~7.5M en-mix tokens under a high
# learning rate, so the budget is twice that, on en-large, about one epoch of it, without repeating text).
# ``authors``: the choices of the authors' public code as far as they are known, scaled to a CPU budget; each
# choice, its source and each departure with its reason: figures/recipe/AUTHORS_RECIPE.md.  ``model``: the
# architecture choices per variant, where they apply (the normed residual exists in DSTG only).  Of the authors'
# choices, nope takes every one that is not an architecture choice (corpus, document starts, batch, schedule,
# AdamW, bf16); none of their architecture choices applies to it: it has no relative bias, no AP table (so no
# random_offset or table init) and one stream (so no split FFN, no normed-residual quirk).
RECIPES: dict[str, dict[str, Any]] = {
    "4x128": dict(depth=dict(n_layers=4), steps=ZOO_STEPS, shared={}),
    "6x128": dict(depth=dict(n_layers=6), steps=8000, shared=dict(corpus="en-large")),
    # authors (the shipped zoo): 7,800 steps of 32 sequences = 28.4M tokens, 5.4 epochs of en-large's 46,316
    # training documents (5.27M tokens as document starts of <= 128 tokens); at 3,900 steps (14.2M tokens, the
    # former zoo's budget: results/zoo-authors) AP- and RP-NeoBERT miss the 8-point held-out target
    "authors": dict(depth=dict(n_layers=6), steps=7800, model=dict(dstg=dict(residual_from_normed=True)),
                    shared=dict(corpus="en-large", windows=False, batch_size=32, schedule="cosine", min_lr_ratio=0.1,
                                weight_decay=0.01, betas=(0.9, 0.95), bf16=True)),
}
DEFAULT_RECIPE = "authors"  # the shipped zoo
# How a recipe that asks for bf16 runs: ``auto`` in bf16 where this machine has it natively (a GPU, a CPU with
# AVX512-BF16 or AMX), in float32 where autocast would emulate it (17x slower than float32 on an AVX2 EPYC,
# dstg_interp.train.bf16_emulation_note); ``bf16`` / ``float32`` force one.  The precision is part of a zoo's
# recipe (``check_zoo_recipe``): the members of one zoo share it, whichever machine trained them.
PRECISIONS = ("auto", "bf16", "float32")


def run_precision(recipe_bf16: bool, precision: str) -> bool:
    """Whether a run of a recipe (``recipe_bf16``: whether it asks for bf16) trains under bf16 autocast."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    if precision == "auto":
        return recipe_bf16 and bf16_is_native(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return precision == "bf16"


def zoo_config(variant: str, runs: Path, steps: int | None, threads: int | None, seed: int = 0,
               recipe: str = DEFAULT_RECIPE, precision: str = "auto") -> TrainConfig:
    """The zoo recipe for one (variant, seed): ``seed`` changes the initialisation, data order and masks; the
    train/validation split and tokenizer (``data_seed``) are the same for every seed; ``recipe``: a name of
    ``RECIPES`` (its depth, corpus and steps; ``steps`` overrides the latter); ``precision``: how a recipe's
    bf16 runs on this machine (``PRECISIONS``)."""
    named = RECIPES[recipe]
    steps = named["steps"] if steps is None else steps
    architecture = VARIANT_WIDTHS.get(variant, variant)
    model = dict(zoo_architecture(architecture), **named["depth"], **named.get("model", {}).get(architecture, {}))
    shared = dict(SHARED, **named["shared"])
    shared["warmup_steps"] = min(shared["warmup_steps"], steps // 10)  # short smoke runs
    shared["bf16"] = run_precision(shared.get("bf16", False), precision)
    return TrainConfig(out_dir=str(runs / zoo_member(variant, seed)), model=model, max_steps=steps, threads=threads,
                       tokenizer=str(ZOO_TOKENIZER), **dict(shared, seed=seed), **VARIANT_OPTIONS.get(variant, {}))


# TrainConfig fields that do not make a recipe: where a run goes, how it is run and logged, its seed; the widths
# (the variant's own) and the tokenizer (the shipped members trained the one every later member reads)
NOT_RECIPE = frozenset({"out_dir", "seed", "tokenizer", "threads", "progress", "device", "compile", "save_every",
                        "log_every", "eval_every", "eval_batches", "save_dtype", "model"})


def recipe_of(train_config: dict) -> dict:
    """The recipe of a run, from its train_config.json: every field that changes what is trained, plus the depth."""
    train_config = {**TrainConfig().to_dict(), **train_config}  # fields added since a run: their defaults then and now
    recipe = {key: value for key, value in train_config.items() if key not in NOT_RECIPE}
    recipe.update({key: train_config["model"].get(key) for key in ("n_layers", "n_heads")})
    return json.loads(json.dumps(recipe))  # tuples as lists, as read back from disk


def model_recipe(train_config: dict) -> dict:
    """Every architecture field of a run's model but its seed, with ModelConfig's defaults for the fields its
    train_config.json leaves out (the file records what differs from them): the normed residual, the FFN
    mode, the RP bias, the tied head... -- what two seeds of one variant must share."""
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name not in ("seed", "source")}
    model = {**defaults, **{k: v for k, v in train_config.get("model", {}).items() if k not in ("seed", "source")}}
    return json.loads(json.dumps(model))


def shares_recipe(member: str, variant: str) -> bool:
    """Whether a member of the zoo must have ``variant``'s recipe: the reference four share one; an extra arm
    (dstg-offset) has its own, so it is compared only with its own seeds."""
    base = member.split("-seed")[0]
    return base == variant or base in ZOO_WIDTHS and variant in ZOO_WIDTHS


def check_zoo_recipe(zoo_dir: Path, variant: str, cfg: TrainConfig) -> None:
    """Refuse to add a member of another recipe to a zoo: every member of the reference four (and each extra
    arm's seeds) must have been trained the same way, or the zoo's seeds do not measure one thing."""
    if not zoo_dir.is_dir():
        return
    wanted = recipe_of(cfg.to_dict())
    architecture = {f"model.{k}": v for k, v in model_recipe(cfg.to_dict()).items()}
    for folder in sorted(zoo_dir.iterdir()):
        saved = folder / CONFIG_FILE
        if not saved.is_file() or not shares_recipe(folder.name, variant):
            continue
        held_config = json.loads(saved.read_text())
        held, wanted_here = recipe_of(held_config), wanted
        if folder.name.split("-seed")[0] == variant:  # another seed of this variant: its architecture too
            held = held | {f"model.{k}": v for k, v in model_recipe(held_config).items()}
            wanted_here = wanted | architecture
        differ = sorted(key for key in wanted_here.keys() | held.keys() if wanted_here.get(key) != held.get(key))
        if differ:
            shown = ", ".join(f"{key} {held.get(key)} here vs {wanted_here.get(key)}" for key in differ[:4])
            more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
            raise ValueError(f"{zoo_dir} holds {folder.name}, trained with another recipe ({shown}{more}); "
                             f"train {zoo_member(variant, cfg.seed)} into a new --out")


def in_zoo(zoo_dir: Path, variant: str, seed: int) -> bool:
    """Whether ``zoo_dir`` holds the exported member (weights, ``train_config.json`` and ``training.json``)."""
    folder = zoo_dir / zoo_member(variant, seed)
    return all((folder / name).is_file() for name in (WEIGHTS_FILE, CONFIG_FILE, "training.json"))


def check_seeds(seeds: list[int]) -> list[int]:
    if any(not 0 <= seed <= MAX_SEED for seed in seeds):
        raise ValueError(f"--seeds must be integers from 0 to {MAX_SEED}, got {' '.join(map(str, seeds))}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds repeats a seed: {' '.join(map(str, seeds))}")
    return seeds


def unigram_baseline(cfg: TrainConfig, tokenizer=None) -> dict:
    """Cross-entropy and accuracy of predicting every masked token from training-set token frequencies
    (``dstg_interp.evaluation.Unigram``), on exactly the validation batches and masks ``evaluate`` uses;
    ``tokenizer``: a trained run's own, so the data are the ones it trained on."""
    prepared = prepare_training_data(cfg, tokenizer=tokenizer)
    unigram = Unigram.from_sequences(prepared.train, prepared.tokenizer.get_vocab_size())
    nll, correct, count = 0.0, 0, 0
    validation = prepared.validation
    for b, indices in enumerate(validation_batches(len(validation), cfg)):
        _, _, labels = masked_batch(validation, indices, cfg, len(unigram.counts), generator_seed=VALIDATION_MASK_SEED + b)
        targets = labels[labels != -100].numpy()
        batch_nll, batch_correct = unigram.score(targets)
        nll, correct, count = nll + batch_nll, correct + batch_correct, count + targets.size
    return dict(unigram_loss=nll / count, most_frequent_accuracy=correct / count)


MEMBER_FILES = frozenset({CONFIG_FILE, LOG_FILE, "training.json"})  # beside the checkpoint's own files


def member_foreign_entries(path: Path) -> list[str]:
    """What makes ``path`` not a zoo member this script exported (empty when it is one)."""
    return checkpoint_foreign_entries(path, extra=MEMBER_FILES)


def table_recorder(run_dir: Path):
    """An ``on_eval`` for ``train``: the position table's spectrum (PC1+PC2, participation ratio, DCT low-bin
    shares, row norm: ``recipe_readings.table_reading``) at every validation into the run's
    ``table_curve.jsonl``, so a member's collapse is a curve against tokens (exported into ``training.json``);
    nothing for a variant without a table."""

    def record(model, step: int, tokens_seen: int) -> None:
        reading = table_reading(model)
        if reading:
            with open(run_dir / TABLE_CURVE_FILE, "a") as out:
                out.write(json.dumps(dict(step=step, tokens=tokens_seen, **reading)) + "\n")

    return record


def export(variant: str, cfg: TrainConfig, zoo_dir: Path) -> dict:
    """Write the float16 checkpoint, its train_config.json, log.jsonl and training.json into the zoo."""
    run = Path(cfg.out_dir)
    name = zoo_member(variant, cfg.seed)
    model = load_model(run / CHECKPOINT_DIR)
    metrics = evaluate(model, prepare_training_data(cfg).validation, cfg, torch.device("cpu"))
    state = json.loads((run / CHECKPOINT_DIR / STATE_FILE).read_text())
    summary = dict(variant=variant, seed=cfg.seed, params=model.n_params(), steps=state["step"], train_tokens=state["tokens_seen"],
                   train_seconds=round(state["train_seconds"], 1), **{k: round(v, 4) for k, v in metrics.items()},
                   **{k: round(v, 4) for k, v in unigram_baseline(cfg).items()})
    curve = read_table_curve(run)  # the table's spectrum at every validation (DSTG, AP-NeoBERT); empty otherwise
    if not curve.empty:
        summary["table_curve"] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
                                  for row in curve.to_dict("records")]
    # the replacement rule: a member folder this script wrote is replaced, a folder with anything else never
    check_replaceable(zoo_dir / name, "a zoo member", member_foreign_entries, overwrite=True, suffix="new")
    save_checkpoint(model, zoo_dir / name, dtype=torch.float16, tokenizer=model.tokenizer, owned=member_foreign_entries)
    saved = read_train_config(run / CONFIG_FILE)  # no absolute path of this machine in the shipped zoo (N71)
    (zoo_dir / name / CONFIG_FILE).write_text(json.dumps(portable_train_config(saved, zoo_dir / name), indent=2) + "\n")
    shutil.copy(run / LOG_FILE, zoo_dir / name / LOG_FILE)
    (zoo_dir / name / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def record_summary(collected: Path, name: str, summary: dict) -> None:
    """Add one run's summary to ``zoo.json`` under a blocking lock and replace the file atomically, so
    several ``pretrain_zoo`` processes (say one per core, each on its own seeds) can share one zoo."""
    collected.parent.mkdir(parents=True, exist_ok=True)
    with open(collected.with_name(f".{collected.name}.update-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = json.loads(collected.read_text()) if collected.exists() else {}
        previous[name] = summary
        write_text_atomic(collected, json.dumps(dict(sorted(previous.items())), indent=2) + "\n")


@dataclass
class PretrainZooConfig(ScriptConfig):
    out: Path = field(default=RESULTS_DIR / "zoo", metadata={"help": "where the float16 checkpoints and zoo.json go (the shipped zoo: --out dstg_interp/zoo)"})
    variants: list[str] = field(default_factory=lambda: list(ZOO_NAMES), metadata={
        "help": "default: the reference four; nope is the no-position floor (same recipe); dstg-offset is the "
                "random_offset DSTG"})
    seeds: list[int] = field(default_factory=lambda: [0], metadata={
        "help": "training seeds (init, data order, masks); seed k > 0 is exported as <variant>-seed<k>"})
    recipe: str = field(default=DEFAULT_RECIPE, metadata={
        "choices": list(RECIPES), "help": "authors: the shipped zoo, the authors' public code at CPU scale (6 layers, en-large "
                                          "document starts, 7800 steps of 32, figures/recipe/AUTHORS_RECIPE.md); "
                                          "6x128: the former shipped zoo (sentence windows, 8000 steps of 16, "
                                          "figures/recipe/DIAGNOSIS.md); 4x128: the zoo before it (4 layers, en-mix)"})
    steps: int | None = field(default=None, metadata={"help": "training steps (default: the recipe's)"})
    runs: Path = field(default=Path("runs/zoo"), metadata={"help": "training folders (checkpoints, logs)"})
    threads: int | None = None
    precision: str = field(default="auto", metadata={
        "choices": list(PRECISIONS), "help": "how a recipe's bf16 (authors) runs: auto = bf16 where this machine has "
                                             "it natively (a GPU, AVX512-BF16/AMX), else float32; bf16 / float32 "
                                             "force one (the members of one zoo share one; the shipped zoo: float32)"})

    def __post_init__(self) -> None:
        check_seeds(self.seeds)  # before the generic check, for its message listing every seed
        super().__post_init__()
        self.runs = Path(self.runs)
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown:
            raise ValueError(f"unknown variant(s) {' '.join(unknown)}; choose from {', '.join(VARIANTS)}")


def run(config: PretrainZooConfig) -> dict:
    """Train (or resume) and export every (seed, variant); returns name -> training summary.  Raises
    KeyboardInterrupt through: a rerun of the same command continues from the last checkpoint."""
    summaries = {}
    collected = config.out / "zoo.json"
    for seed in config.seeds:  # every member is checked before any training starts
        for variant in config.variants:
            check_zoo_recipe(config.out, variant, zoo_config(variant, config.runs, config.steps, config.threads, seed,
                                                             config.recipe, config.precision))
    # seed-major: every variant's seed 0 lands (and is exported) before any second seed starts
    for seed in config.seeds:
        for variant in config.variants:
            cfg = zoo_config(variant, config.runs, config.steps, config.threads, seed, config.recipe, config.precision)
            state_file = Path(cfg.out_dir) / CHECKPOINT_DIR / STATE_FILE
            if not state_file.is_file() and in_zoo(config.out, variant, seed):
                # a member committed by an earlier session whose run folder is gone (runs/ is not committed):
                # check_zoo_recipe above found it of this recipe, so it is not trained again
                print(f"{zoo_member(variant, seed)}: already in {config.out} (no run folder to resume); not retrained",
                      file=sys.stderr)
                continue
            state = json.loads(state_file.read_text()) if state_file.is_file() else {"step": 0}
            if state["step"] < cfg.max_steps:
                start = time.time()
                train(cfg, resume=state_file.is_file(), on_eval=table_recorder(Path(cfg.out_dir)))
                print(f"{zoo_member(variant, seed)}: trained to step {cfg.max_steps} in {time.time() - start:.0f} s",
                      file=sys.stderr)
            summary = summaries[zoo_member(variant, seed)] = export(variant, cfg, config.out)
            print(json.dumps(summary), file=sys.stderr)
            # zoo.json: one flat row per member (its table curve stays in the member's training.json)
            record_summary(collected, zoo_member(variant, seed), {k: v for k, v in summary.items() if k != "table_curve"})
    return summaries


def main(argv=None) -> int:
    try:
        config = parse_config(PretrainZooConfig, argv, __doc__)
    except ValueError as err:
        print(f"pretrain_zoo: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    try:
        run(config)
    except ValueError as err:  # a zoo of another recipe, found before anything was trained
        print(f"pretrain_zoo: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("pretrain_zoo: interrupted; rerun the same command to continue from the last checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
