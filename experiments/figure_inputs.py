"""What the figure scripts share: their config base, the zoo (or a tiny stand-in), the held-out documents and
the activation stores.

    from experiments.figure_inputs import load_figure_inputs, model_store
    inputs = load_figure_inputs(tiny=False, seed=0)     # the shipped zoo (seed 0) on en-mix's held-out documents
    store = model_store(inputs, "dstg")                  # every layer and subspace, the probes' store
    inputs = load_figure_inputs(model_seeds=[0, 1, 2])   # every training seed: members dstg, ..., rp-seed2

The stores come from the same path as ``dstg-probe`` (``probes.positions.cached_store``, and
``encoder.random_init()`` for the control), over the same documents (``dstg_interp.data.probing_documents``,
all held-out en-mix documents), in the same folder (``$DSTG_CACHE/stores`` by default): so a figure
and a ``dstg-probe`` run on the same model give the same numbers, and whichever runs first extracts
the store the other one reuses.  The head figure also needs attention summaries, which live in a
store of their own (``attention_store``).  Stores are never committed.

``tiny=True`` replaces the zoo by four random 2-layer models (d = 32) and en-mix by a synthetic corpus
(``dstg_interp.tiny_zoo``), so tests and smoke runs go through every script in seconds, offline.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from dstg_interp import ModelConfig, build_model, load_model, open_encoder
from dstg_interp.config import MAX_SEED, check_seed
from dstg_interp.cli.shell import run_cli
from dstg_interp.data import default_cache_dir, probing_documents
from dstg_interp.io import RESULTS_DIR, write_text_atomic
from dstg_interp.model.checkpoint import ZOO_DIR, ZOO_NAMES, ZOO_SEEDS, missing_zoo_members, zoo_member
from dstg_interp.store.cache import cached_extract
from dstg_interp.store.extract import as_sequences
from dstg_interp.tiny_zoo import tiny_config, tiny_zoo
from probes.positions import PROBE_MAX_LENGTH, cached_store

FIGURES_DIR = Path(__file__).resolve().parents[1] / "figures"  # the committed gallery: read, rewritten only when asked
OUTPUT_DIR = RESULTS_DIR / "figures"  # where a script writes without --out: the working directory, git-ignored
OFFSET_MODEL = "dstg-offset"  # DSTG trained with random_offset on a 512-row table (pretrain_zoo --variants dstg-offset)


# --- the config every figure script takes whole ----------------------------------------------------
@dataclass
class ScriptConfig:
    """What every experiment config has: where its outputs go, and its JSON form.

    A config is validated in ``__post_init__``, saved as ``config.json`` next to the script's outputs
    (``save_config``) and read back with ``from_dict``; ``parse_config`` turns a command line into one.
    """

    out: Path = field(default=OUTPUT_DIR, metadata={"help": "output folder"})

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        check_seeds_and_steps(self)

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict):
        """The config saved in a ``config.json`` (keys that are not fields, e.g. ``wall_s``, are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass
class FigureConfig(ScriptConfig):
    """Fields every figure script has; each script subclasses it with its own (and its own ``out``)."""

    tiny: bool = field(default=False, metadata={"help": "tiny random models on a synthetic corpus (smoke run)"})
    seed: int = field(default=0, metadata={"help": "documents, subsamples, splits and bootstrap seed"})
    store_root: Path | None = field(default=None, metadata={"help": "activation-store folder (default: the cache)"})
    quiet: bool = field(default=False, metadata={"help": "no progress bars or printed summary"})
    zoo: Path = field(default=ZOO_DIR, metadata={"help": "zoo folder: <variant>/ (seed 0) and <variant>-seed<k>/"})

    def __post_init__(self) -> None:
        super().__post_init__()
        self.store_root = Path(self.store_root) if self.store_root is not None else None
        self.zoo = Path(self.zoo)


@dataclass
class SeedsFigureConfig(FigureConfig):
    """A figure config that reads every training seed of the zoo (the paper-claim figures: AP manifold,
    heads, probes); the others read seed 0."""

    model_seeds: list[int] = field(default_factory=lambda: list(ZOO_SEEDS), metadata={
        "help": "training seeds of the zoo to read; tables get a seed column, claims a seed interval"})

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model_seeds = check_model_seeds(self.model_seeds)


def check_model_seeds(seeds) -> list[int]:
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("--model-seeds needs at least one seed")
    if any(not 0 <= s <= MAX_SEED for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--model-seeds must be distinct integers from 0 to {MAX_SEED}, got {' '.join(map(str, seeds))}")
    return seeds


def check_seeds_and_steps(config) -> None:
    """Every script's seeds (fields named ``seed``, ``*_seed``, ``seeds``, ``*_seeds``) in 0..MAX_SEED and its
    step counts (``steps``, ``*_steps``) positive, checked as the config is made: before any work."""
    for spec in dataclasses.fields(config):
        value, flag = getattr(config, spec.name), "--" + spec.name.replace("_", "-")
        if spec.name.endswith(("seed", "seeds")):
            for seed in value if isinstance(value, (list, tuple)) else [] if value is None else [value]:
                check_seed(seed, flag)
        elif spec.name == "steps" or spec.name.endswith("_steps") and "warmup" not in spec.name:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{flag}: expected a positive number of steps, got {value!r}")


class ZooIncomplete(ValueError):
    """The zoo folder lacks a (variant, seed) member the run asks for."""


def run_as_command(main, prog: str) -> int:
    """A script's command line: bad input (a config check, an incomplete zoo, a bad checkpoint) is one
    ``prog: error: ...`` line and exit code 2, Ctrl-C 130 (``dstg_interp.cli.shell.run_cli``, as every dstg-*
    command)."""
    return run_cli(prog, lambda: main() and 0)


def _plain(value):
    """JSON types: paths as strings, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def parse_config(config_class, argv=None, doc: str = ""):
    """One ``--flag`` per field of ``config_class`` (underscores become dashes; help from the field's
    metadata), parsed into an instance: every script's command line is its config, nothing else.
    ``doc``: the script's docstring, whose first paragraph describes the command."""
    parser = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))
    hints = typing.get_type_hints(config_class)
    for spec in dataclasses.fields(config_class):
        flag, hint = "--" + spec.name.replace("_", "-"), hints[spec.name]
        help_text = spec.metadata.get("help")
        default = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
        if hint is bool:
            parser.add_argument(flag, action="store_true", help=help_text)
            continue
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
        element = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint  # X | None -> X
        is_list = typing.get_origin(element) in (list, tuple)
        shown = " ".join(map(str, default)) if is_list and default is not None else default
        help_text = f"{help_text or ''}{f' (default: {shown})' if default is not None else ''}".strip()
        if is_list:
            parser.add_argument(flag, nargs="+", type=typing.get_args(element)[0], default=default, help=help_text)
        else:
            parser.add_argument(flag, type=element, default=default, help=help_text)
    return config_class(**vars(parser.parse_args(argv)))


def save_config(config: ScriptConfig, script: str, name: str = "config.json", **facts) -> Path:
    """``name`` in ``config.out``: the whole config plus what the run found (inputs, notes, wall time);
    written under a temporary name, then renamed."""
    config.out.mkdir(parents=True, exist_ok=True)
    record = {"script": script, **config.to_dict(), **facts}
    write_text_atomic(config.out / name, json.dumps(record, indent=1, default=str) + "\n")
    return config.out / name


# --- models, documents, stores ---------------------------------------------------------------------
@dataclass
class FigureInputs:
    """The models (member name -> model, each with its tokenizer), the documents they are read on, and where
    their stores go.  A member is one (variant, training seed) of the zoo: ``members`` maps its name
    (``dstg``, ``dstg-seed1``, ...) to that pair, in seed-major order."""

    models: dict
    documents: list
    store_root: Path
    tiny: bool
    description: dict = field(default_factory=dict)  # what was loaded, for the config files
    members: dict = field(default_factory=dict)
    zoo: Path = ZOO_DIR

    def member(self, name: str) -> tuple[str, int]:
        """(variant, training seed) of member ``name``."""
        return self.members.get(name, (name, 0))


def load_figure_inputs(tiny: bool = False, models=ZOO_NAMES, n_docs: int | None = None, seed: int = 0,
                       store_root=None, corpus: str = "en-mix", zoo=ZOO_DIR, model_seeds=(0,)) -> FigureInputs:
    """The zoo's members -- every variant of ``models`` at every training seed of ``model_seeds`` -- (or tiny
    stand-ins) and the held-out documents ``dstg-probe`` reads (``n_docs``: a seeded sample of them instead,
    for quick runs; a seeded draw keeps every en-mix source in it).  A member missing from ``zoo`` raises
    ZooIncomplete naming it and the command that trains it.

    Models and documents are loaded once per process and shared by every script run_all calls (the tiny
    tokenizer is not bit-reproducible across trainings, and another tokenizer would mean other stores).
    """
    model_seeds = check_model_seeds(model_seeds)
    members = {zoo_member(variant, s): (variant, s) for s in model_seeds for variant in models}
    if tiny:
        zoo_models, documents = _shared_tiny_zoo(tuple(models), seed, tuple(model_seeds))
        root = Path(store_root) if store_root is not None else default_cache_dir() / "stores" / "figures-tiny"
        return FigureInputs(zoo_models, documents, root, True,
                            {"models": "tiny random (dstg_interp.tiny_zoo)", "corpus": "synthetic", "n_docs": len(documents),
                             "model_seeds": model_seeds}, members)
    zoo = Path(zoo)
    missing = missing_zoo_members(zoo, models, model_seeds)
    if missing:
        seeds = sorted({members[name][1] for name in missing})
        raise ZooIncomplete(
            f"zoo folder {zoo} has no {', '.join(m + '/' for m in missing)}; train them with python -m "
            f"experiments.pretrain_zoo --seeds {' '.join(map(str, seeds))} --out {zoo}, or read fewer seeds "
            f"(--model-seeds) or pass --tiny for a smoke run")
    documents = _shared_probing_documents(corpus)
    if n_docs is not None and n_docs < len(documents):
        chosen = np.sort(np.random.default_rng(seed).choice(len(documents), size=n_docs, replace=False))
        documents = [documents[i] for i in chosen]
    zoo_models = {name: _shared_zoo_model(str(zoo / name)) for name in members}
    root = Path(store_root) if store_root is not None else default_cache_dir() / "stores"
    zoo_json = zoo / "zoo.json"
    description = {"models": {name: str(zoo / name) for name in members}, "corpus": corpus, "model_seeds": model_seeds,
                   "n_docs": len(documents), "zoo": json.loads(zoo_json.read_text()) if zoo_json.is_file() else None}
    return FigureInputs(zoo_models, documents, root, False, description, members, zoo)


def inputs_for(config: FigureConfig, n_docs: int | None = None) -> FigureInputs:
    """``load_figure_inputs`` with a figure config's fields (tiny, seed, store_root, zoo; model_seeds if it has
    them, else seed 0)."""
    return load_figure_inputs(tiny=config.tiny, n_docs=n_docs, seed=config.seed, store_root=config.store_root,
                              zoo=config.zoo, model_seeds=getattr(config, "model_seeds", [0]))


def with_member_columns(table: pd.DataFrame, inputs: FigureInputs, name: str) -> pd.DataFrame:
    """A model's result table with ``model`` = its variant and a ``seed`` column (its training seed)."""
    variant, model_seed = inputs.member(name)
    table = table.copy()
    table["model"] = variant
    table.insert(list(table.columns).index("model") + 1, "seed", model_seed)
    return table


def over_seeds(table: pd.DataFrame, keys: list[str], value: str = "r2", low: str = "ci_low",
               high: str = "ci_high", means=("control_r2", "random_init_r2", "shuffled_r2", "selectivity", "position_r2",
                                             "position_smooth_r2", "partial_r2", "position_selectivity")) -> pd.DataFrame:
    """One row per ``keys`` from one row per (keys, seed): ``value`` is the mean over training seeds and
    [``low``, ``high``] the interval from the lowest seed's ``low`` to the highest seed's ``high`` -- it covers
    the seed-to-seed spread and each seed's bootstrap CI (a seed without a CI contributes its value); the
    columns of ``means`` that the table has are averaged, ``value_sd`` is the standard deviation over seeds
    and ``n_seeds`` counts them.  This is the interval the claims table and the by-layer figures show."""
    lows = table[low].where(table[low].notna(), table[value])
    highs = table[high].where(table[high].notna(), table[value])
    grouped = table.assign(_low=lows, _high=highs).groupby(keys, sort=False, dropna=False)
    summary = grouped.agg(**{value: (value, "mean"), low: ("_low", "min"), high: ("_high", "max"),
                             f"{value}_sd": (value, "std"), "n_seeds": ("seed", "nunique"),
                             **{column: (column, "mean") for column in means if column in table}}).reset_index()
    return summary


def first_seed(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the lowest training seed: what the single-model figures (maps, curves) draw."""
    return table[table.seed == table.seed.min()] if "seed" in table and len(table) else table


@lru_cache(maxsize=None)
def _shared_tiny_zoo(models: tuple, seed: int, model_seeds: tuple = (0,)):
    zoo_models, documents = tiny_zoo(models, seed=seed)
    tokenizer = next(iter(zoo_models.values())).tokenizer
    members = {}
    for model_seed in model_seeds:  # other training seeds: other random weights, the same tokenizer
        for name in models:
            model = zoo_models[name] if model_seed == 0 else \
                build_model(tiny_config(name, tokenizer.get_vocab_size(), seed=seed + 1000 * model_seed)).eval()
            model.tokenizer = tokenizer
            members[zoo_member(name, model_seed)] = model
    return members, documents


@lru_cache(maxsize=None)
def _shared_probing_documents(corpus: str):
    return probing_documents(corpus)


@lru_cache(maxsize=None)
def _shared_zoo_model(path: str):
    return load_model(Path(path)).eval()


def with_offset_model(inputs: FigureInputs) -> dict:
    """The figure models plus the random_offset DSTG: shipped in the zoo, or for --tiny a random DSTG with a
    table four times the tiny models' length.  The studies beyond the paper read it; the paper figures do not."""
    models = dict(inputs.models)
    if inputs.tiny:
        reference = models["dstg"]
        config = ModelConfig.from_dict({**reference.config.to_dict(), "max_positions": 4 * reference.config.max_positions})
        models[OFFSET_MODEL] = build_model(config).eval()
        models[OFFSET_MODEL].tokenizer = reference.tokenizer
    elif (inputs.zoo / OFFSET_MODEL / "model.safetensors").is_file():
        models[OFFSET_MODEL] = _shared_zoo_model(str(inputs.zoo / OFFSET_MODEL))
    else:
        raise ZooIncomplete(f"zoo model {OFFSET_MODEL} not in {inputs.zoo}; train it with "
                            f"python -m experiments.pretrain_zoo --variants {OFFSET_MODEL}")
    return models


def model_store(inputs: FigureInputs, name: str, progress: bool = True, paragraph_windows: bool = False, model=None):
    """Every layer and subspace of model ``name`` on the inputs' documents: the store ``dstg-probe`` builds
    (``paragraph_windows``: its paragraph-crossing windows, what the paragraph-level probes read); ``model``:
    a model outside the inputs' zoo (a path or hub id, e.g. MiniLM) stored under ``name``."""
    return cached_store(open_encoder(inputs.models[name] if model is None else model), inputs.documents, None,
                        inputs.store_root, name, progress, paragraph_windows)


def random_init_store(inputs: FigureInputs, name: str, progress: bool = True, paragraph_windows: bool = False):
    """The store of a randomly initialised twin of ``name`` (same config and tokenizer): the probes' control,
    the one ``dstg-probe`` builds (``encoder.random_init()``)."""
    twin = open_encoder(inputs.models[name]).random_init()
    return cached_store(twin, inputs.documents, None, inputs.store_root, f"{name}-random-init", progress,
                        paragraph_windows)


def attention_store(inputs: FigureInputs, name: str, progress: bool = True):
    """Model ``name``'s store with attention summaries (logit-term statistics per layer x head), for the heads."""
    encoder = open_encoder(inputs.models[name])
    sequences = as_sequences(encoder, inputs.documents, min(PROBE_MAX_LENGTH, encoder.max_positions), windows=False)
    return cached_extract(encoder, sequences, inputs.store_root, f"{name}-attention", layers=None, dtype="float16",
                          attention_summaries=True, batch_size=16, progress=progress)
