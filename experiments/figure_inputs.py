"""What the figure scripts share: their config base, the zoo (or a tiny stand-in), the held-out documents and
the activation stores.

    from experiments.figure_inputs import load_figure_inputs, model_store
    inputs = load_figure_inputs(tiny=False, seed=0)     # the shipped zoo (seed 0) on en-mix's held-out documents
    store = model_store(inputs, "dstg")                  # every layer and subspace, the probes' store
    inputs = load_figure_inputs(model_seeds=[0, 1, 2])   # every training seed: members dstg, ..., rp-seed2
    inputs = load_figure_inputs(models=["runs/mine", "path/to/all-MiniLM-L6-v2"], names=["mine", "MiniLM"])
                                                         # any encoders (--model / --name), named as given

The stores come from the same path as ``dstg-probe`` (``probes.positions.cached_store``, and
``encoder.random_init()`` for the control), over the same documents (``dstg_interp.data.probing_documents``,
all held-out en-mix documents), in the same folder (``$DSTG_CACHE/stores`` by default): so a figure
and a ``dstg-probe`` run on the same model give the same numbers, and whichever runs first extracts
the store the other one reuses.  The head figure also needs attention summaries, which live in a
store of their own (``attention_store``).  Stores are never committed.

``tiny=True`` replaces the zoo by four random 2-layer models (d = 32) and en-mix by a synthetic corpus
(``dstg_interp.tiny_zoo``), so tests and smoke runs go through every script in seconds, offline.

Every figure script takes ``--model SPEC [SPEC ...]`` (and ``--name``) instead of the zoo: whatever
``open_encoder`` opens -- zoo names, checkpoint and ``dstg-train`` run folders, the authors' PosNeoBERT /
NeoBERT folders, Hugging Face folders and hub ids.  ``model_list`` resolves such a list in one place: each
member is named by ``--name`` or the naming rule (``dstg_interp.encoders.naming``), never by a variant slot,
and every table's ``model`` column holds that name.  What a study cannot read in a model is said by the
script in one line (``say_not_applicable``); a list of which no model can be read is one error line (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from dstg_interp import ModelConfig, build_model, load_model, open_encoder
from dstg_interp.cli.config_args import add_config_arguments, config_from_args
from dstg_interp.config import MAX_SEED, ConfigIO, check_seed, tokenizer_mismatch_field
from dstg_interp.cli.shell import run_cli
from dstg_interp.data import default_cache_dir, probing_documents
from dstg_interp.data.structure import DEFAULT_MAX_LENGTH
from dstg_interp.encoders import Encoder, EncoderError, HFEncoder
from dstg_interp.encoders.naming import table_names
from dstg_interp.io import RESULTS_DIR, OutputError, folder_entries, free_sibling, write_text_atomic
from dstg_interp.model.files import tokenizer_mismatch_allowed
from dstg_interp.model.checkpoint import (FLOOR_TRAIN_COMMAND, ZOO_DIR, ZOO_FLOOR, ZOO_FLOOR_SEEDS, ZOO_NAMES, ZOO_SEEDS,
                                          missing_tokenizer_message, missing_zoo_members, zoo_member)
from dstg_interp.store import as_sequences
from dstg_interp.store.cache import cached_extract
from dstg_interp.tiny_zoo import tiny_config, tiny_documents, tiny_zoo
from probes.positions import cached_store

FIGURES_DIR = Path(__file__).resolve().parents[1] / "figures"  # the committed gallery: read, rewritten only when asked
OUTPUT_DIR = RESULTS_DIR / "figures"  # where a script writes without --out: the working directory, git-ignored
OFFSET_MODEL = "dstg-offset"  # DSTG trained with random_offset on a 512-row table (pretrain_zoo --variants dstg-offset)


# --- the config every figure script takes whole ----------------------------------------------------
@dataclass
class ScriptConfig(ConfigIO):
    """What every experiment config has: where its outputs go, and its JSON form (``ConfigIO``, as every
    config of the library).

    A config is validated in ``__post_init__``, saved as ``config.json`` next to the script's outputs
    (``save_config``) and read back with ``from_dict``; ``parse_config`` turns a command line into one,
    with the flags every dstg-* command builds from its config (``dstg_interp.cli.config_args``).
    """

    out: Path = field(default=OUTPUT_DIR, metadata={"help": "output folder"})
    # fields a script inherits but does not offer on its command line (run_all draws the zoo's gallery only)
    FLAGS_LEFT_OUT: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        check_seeds_and_steps(self)

    @classmethod
    def from_dict(cls, values: dict):
        """The config saved in a ``config.json``, without the facts ``save_config`` writes beside it
        (``script``, ``wall_s``, ...: keys that are not fields)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return super().from_dict({k: v for k, v in values.items() if k in names})


@dataclass
class FigureConfig(ScriptConfig):
    """Fields every figure script has; each script subclasses it with its own (and its own ``out``)."""

    tiny: bool = field(default=False, metadata={"help": "tiny random models on a synthetic corpus (smoke run)"})
    seed: int = field(default=0, metadata={"help": "documents, subsamples, splits and bootstrap seed"})
    store_root: Path | None = field(default=None, metadata={"help": "activation-store folder (default: the cache)"})
    quiet: bool = field(default=False, metadata={"help": "no progress bars or printed summary"})
    zoo: Path = field(default=ZOO_DIR, metadata={"help": "zoo folder: <variant>/ (seed 0) and <variant>-seed<k>/"})
    model: list[str] | None = field(default=None, metadata={
        "help": "draw these models instead of the zoo: zoo names, checkpoint or dstg-train run folders, the authors' "
                "PosNeoBERT/NeoBERT folders, Hugging Face folders or hub ids (what dstg-probe --model takes); "
                "--zoo and --model-seeds are then not read"})
    name: list[str] | None = field(default=None, metadata={
        "help": "how tables and figures name each --model, in order (default: the zoo name, hub id, model-card "
                "title or folder name)"})
    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        self.store_root = Path(self.store_root) if self.store_root is not None else None
        self.zoo = Path(self.zoo)
        if self.model is not None:
            self.model = [str(spec) for spec in self.model]
        model_names(self.model, self.name)  # a --name list that does not fit is refused before any work


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


def parse_config(config_class, argv=None, doc: str = ""):
    """One ``--flag`` per field of ``config_class`` (underscores become dashes; help from the field's
    metadata), parsed into an instance: every script's command line is its config, nothing else, built as
    every dstg-* command's (``dstg_interp.cli.config_args``).  ``doc``: the script's docstring, whose first
    paragraph describes the command."""
    parser = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))
    add_config_arguments(parser, config_class)
    return config_from_args(config_class, parser.parse_args(argv))


FIGURE_RECORDS = ("config.json", "figure_config.json", "suite_config.json", "run_all.json")  # what save_config writes
RECORD_MAX_BYTES = 64 << 20


def is_figure_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a record ``save_config`` wrote (a plain JSON file whose ``script`` names an
    experiments script): the folders a figure script may write into again."""
    for name in FIGURE_RECORDS:
        path = Path(folder) / name
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= RECORD_MAX_BYTES:
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and str(record.get("script", "")).startswith("experiments/"):
                return True
    return False


def check_figure_out(out: Path | None, flag: str = "--out") -> None:
    """Refuse (OutputError, one line) an ``--out`` a figure would write into that holds files no figure script
    wrote: a user's folder, a model's, a store or a corpus keep every file (round 5, FO1-FO6).  Absent, empty
    and earlier figure folders (``is_figure_folder``) are written into."""
    if out is None:
        return
    out = Path(out)
    if not out.exists() and not out.is_symlink():
        return
    instead = f"choose another {flag}, such as {free_sibling(out, 'figures')}"
    if out.is_symlink() or not out.is_dir():
        raise OutputError(f"{flag} {out} is a {'link' if out.is_symlink() else 'file'}, not a folder of figures; "
                          f"it is never replaced: {instead}")
    entries = folder_entries(out)
    if entries and not is_figure_folder(out):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise OutputError(f"{flag} {out} holds files no figure script wrote ({shown}); nothing there is replaced: "
                          f"{instead}")


def figure_config(config_class, argv=None, doc: str = ""):
    """``parse_config`` for a script that writes figures into ``--out``: the folder is checked
    (``check_figure_out``) before anything is computed, so every registered figure refuses a foreign folder."""
    config = parse_config(config_class, argv, doc)
    check_figure_out(getattr(config, "out", None))
    return config


def sample_docs_field(like: str = "the probes") -> Any:
    """``--n-docs``: a seeded sample of the held-out documents; by default all of them, ``like`` the probes."""
    return field(default=None, metadata={"help": f"a seeded sample of the held-out documents (default: all of them, "
                                                 f"as {like})"})


def save_config(config: ScriptConfig, script: str, name: str = "config.json", /, **facts) -> Path:
    """``name`` (positional: every other keyword is a fact) in ``config.out``: the whole config plus what the run
    found (inputs, notes, wall time); written under a temporary name, then renamed."""
    config.out.mkdir(parents=True, exist_ok=True)
    record = {"script": script, **config.to_dict(), **facts}
    write_text_atomic(config.out / name, json.dumps(record, indent=1, default=str) + "\n")
    return config.out / name


def print_summary(config: FigureConfig, table: pd.DataFrame, float_format: str | None = None, **pivot) -> None:
    """The run's summary on stdout unless ``--quiet``: ``table.pivot_table(**pivot)``, numbers in ``float_format``."""
    if not config.quiet:
        print(table.pivot_table(**pivot).to_string(float_format=float_format))


# --- models, documents, stores ---------------------------------------------------------------------
@dataclass
class FigureInputs:
    """The models (member name -> model, each with its tokenizer), the documents they are read on, and where
    their stores go.  A member is one (variant, training seed) of the zoo: ``members`` maps its name
    (``dstg``, ``dstg-seed1``, ...) to that pair, in seed-major order.  With a model list (``--model``) a
    member is one model under its own name (``given``): ``members`` maps it to (its name, 0), and a model is
    one of ours (a torch module with ``.tokenizer``) or an ``HFEncoder``."""

    models: dict
    documents: list
    store_root: Path
    tiny: bool
    description: dict = field(default_factory=dict)  # what was loaded, for the config files
    members: dict = field(default_factory=dict)
    zoo: Path = ZOO_DIR
    given: bool = False  # the models of --model, not zoo members
    floor_note: str | None = None  # the floor was asked for and the zoo lacks it: what is missing, how to train it

    def member(self, name: str) -> tuple[str, int]:
        """(variant, training seed) of member ``name``; a --model member: (its name, 0)."""
        return self.members.get(name, (name, 0))

    def encoder(self, name: str) -> Encoder:
        """Member ``name`` as an encoder adapter, under its name."""
        return open_encoder(self.models[name], name=name)


def floor_members_of(model_seeds) -> dict:
    """The NoPE floor's members among ``model_seeds``: those at the seeds it is trained at (``ZOO_FLOOR_SEEDS``,
    seed 0 so far), so a run of seeds 0 1 2 reads the floor once and a run of seeds 1 2 does not read it."""
    return {zoo_member(ZOO_FLOOR, s): (ZOO_FLOOR, s) for s in model_seeds if s in ZOO_FLOOR_SEEDS}


def trained_floor(zoo: Path, wanted: dict) -> tuple[dict, str | None]:
    """The floor members of ``wanted`` that ``zoo`` holds, and None, or (where it lacks some) the one line a
    table says instead of their rows: what is missing and the command that trains it."""
    missing = missing_zoo_members(zoo, [ZOO_FLOOR], sorted({s for _, s in wanted.values()}))
    if not missing:
        return dict(wanted), None
    out = "" if Path(zoo).resolve() == ZOO_DIR.resolve() else f" (with --out {zoo} instead)"
    note = (f"{', '.join(m + '/' for m in missing)} (NoPE-NeoBERT, the floor) is not in {zoo}: no floor rows; "
            f"train it with {FLOOR_TRAIN_COMMAND}{out}")
    return {name: member for name, member in wanted.items() if name not in missing}, note


def load_figure_inputs(tiny: bool = False, models=ZOO_NAMES, n_docs: int | None = None, seed: int = 0,
                       store_root=None, corpus: str = "en-mix", zoo=ZOO_DIR, model_seeds=(0,),
                       names: list[str] | None = None, given: bool = False, floor: bool = False,
                       allow_tokenizer_mismatch: bool = False) -> FigureInputs:
    """The zoo's members -- every variant of ``models`` at every training seed of ``model_seeds`` -- (or tiny
    stand-ins) and the held-out documents ``dstg-probe`` reads (``n_docs``: a seeded sample of them instead,
    for quick runs; a seeded draw keeps every en-mix source in it).  A member missing from ``zoo`` raises
    ZooIncomplete naming it and the command that trains it.

    ``given``: ``models`` is a model list (``--model``: anything ``open_encoder`` takes) named by ``names``
    (``--name``; default: the naming rule), read on the same documents (``tiny``: on the synthetic corpus);
    ``allow_tokenizer_mismatch``: they are opened under ``model.files.tokenizer_mismatch_allowed``.

    ``floor``: also the NoPE floor (``ZOO_FLOOR``, at the seeds of ``model_seeds`` it is trained at,
    ``ZOO_FLOOR_SEEDS``) where the zoo holds it; where it does not, nothing is raised: ``floor_note`` says what
    is missing and the command that trains it, for the script to print and record.

    Models and documents are loaded once per process and shared by every script run_all calls (the tiny
    tokenizer is not bit-reproducible across trainings, and another tokenizer would mean other stores).
    """
    if given:
        return _given_models(list(models), names, tiny, n_docs, seed, store_root, corpus, allow_tokenizer_mismatch)
    model_seeds = check_model_seeds(model_seeds)
    members = {zoo_member(variant, s): (variant, s) for s in model_seeds for variant in models}
    floor_members = floor_members_of(model_seeds) if floor and ZOO_FLOOR not in models else {}
    if tiny:
        variants = tuple(models) + ((ZOO_FLOOR,) if floor_members else ())
        built, documents = _shared_tiny_zoo(variants, seed, tuple(model_seeds))
        members.update(floor_members)
        zoo_models = {name: model for name, model in built.items() if name in members}
        root = Path(store_root) if store_root is not None else default_cache_dir() / "stores" / "figures-tiny"
        return FigureInputs(zoo_models, documents, root, True,
                            {"models": "tiny random (dstg_interp.tiny_zoo)", "corpus": "synthetic", "n_docs": len(documents),
                             "model_seeds": model_seeds}, members)
    zoo = Path(zoo)
    floor_members, floor_note = trained_floor(zoo, floor_members)
    members.update(floor_members)
    missing = missing_zoo_members(zoo, models, model_seeds)
    if missing:
        seeds = sorted({members[name][1] for name in missing})
        raise ZooIncomplete(
            f"zoo folder {zoo} has no {', '.join(m + '/' for m in missing)}; train them with python -m "
            f"experiments.pretrain_zoo --seeds {' '.join(map(str, seeds))} --out {zoo}, or read fewer seeds "
            f"(--model-seeds) or pass --tiny for a smoke run; your own models: --model PATH ...")
    documents = _documents(corpus, n_docs, seed)
    zoo_models = {name: _shared_zoo_model(str(zoo / name)) for name in members}
    root = Path(store_root) if store_root is not None else default_cache_dir() / "stores"
    zoo_json = zoo / "zoo.json"
    description = {"models": {name: str(zoo / name) for name in members}, "corpus": corpus, "model_seeds": model_seeds,
                   "n_docs": len(documents), "zoo": json.loads(zoo_json.read_text()) if zoo_json.is_file() else None}
    if floor:
        description["floor"] = floor_note or [name for name in floor_members]
    return FigureInputs(zoo_models, documents, root, False, description, members, zoo, floor_note=floor_note)


def inputs_for(config: FigureConfig, n_docs: int | None = None, floor: bool = False) -> FigureInputs:
    """``load_figure_inputs`` with a figure config's fields (tiny, seed, store_root, zoo; model_seeds if it has
    them, else seed 0; the model list and its names when ``--model`` is given); ``floor``: the zoo's NoPE floor
    too, where it is trained (never with ``--model``)."""
    if config.model is not None:
        return load_figure_inputs(tiny=config.tiny, models=config.model, names=config.name, given=True, n_docs=n_docs,
                                  seed=config.seed, store_root=config.store_root,
                                  allow_tokenizer_mismatch=config.allow_tokenizer_mismatch)
    return load_figure_inputs(tiny=config.tiny, n_docs=n_docs, seed=config.seed, store_root=config.store_root,
                              zoo=config.zoo, model_seeds=getattr(config, "model_seeds", [0]), floor=floor)


# --- a model list (--model / --name) ----------------------------------------------------------------
def model_names(specs: list[str] | None, given: list[str] | None) -> list[str]:
    """The name of each --model in tables and figures (``naming.table_names``: --name, else the naming rule),
    or one clear error: --name without --model, a --name count that does not fit, one name twice."""
    if specs is None:
        if given is not None:
            raise ValueError("--name names the models of --model; give --model too (the zoo's members are named "
                             "after their variants)")
        return []
    if not specs:
        raise ValueError("--model needs at least one model")
    repeated = next((spec for spec in specs if specs.count(spec) > 1), None)
    if given is None and repeated is not None:
        raise ValueError(f"--model gives {repeated} twice; list each model once (or name each with --name)")
    names = table_names(specs, given)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"two --model entries are both named {twice[0]!r}; each model of one figure needs its own "
                         "name: give each once, or name them with --name")
    return names


def _given_models(specs: list[str], names, tiny: bool, n_docs, seed: int, store_root, corpus: str,
                  allow_tokenizer_mismatch: bool = False) -> FigureInputs:
    names = model_names(specs, names)
    models = {name: _shared_given_model(str(spec), allow_tokenizer_mismatch) for name, spec in zip(names, specs)}
    if tiny:
        documents = tiny_documents(40, seed)
        root = Path(store_root) if store_root is not None else default_cache_dir() / "stores" / "figures-tiny"
    else:
        documents = _documents(corpus, n_docs, seed)
        root = Path(store_root) if store_root is not None else default_cache_dir() / "stores"
    description = {"models": dict(zip(names, specs)), "corpus": "synthetic" if tiny else corpus,
                   "n_docs": len(documents)}
    return FigureInputs(models, documents, root, tiny, description, {name: (name, 0) for name in names}, given=True)


@lru_cache(maxsize=None)
def _shared_given_model(spec: str, mismatch_allowed: bool = False):
    """One --model, opened once per process: ours as the torch module (with its tokenizer), an HF encoder as
    its adapter -- with its masked-LM head where the checkpoint has one (the studies that read MLM
    outputs need it), else without; ``mismatch_allowed``: opened under ``tokenizer_mismatch_allowed`` (part of the
    cache key, so the rule a model was opened under is never reused past it)."""
    with tokenizer_mismatch_allowed(mismatch_allowed):
        try:
            encoder = open_encoder(spec, mlm_head=True)
        except EncoderError:
            encoder = open_encoder(spec)  # no head, or not openable at all: then this raises the reason
    if encoder.tokenizer is None:
        path = encoder.checkpoint_path
        raise EncoderError(missing_tokenizer_message(path) if path is not None else
                           f"{spec}: the model has no tokenizer; the figures tokenise documents with the model's own")
    return encoder if isinstance(encoder, HFEncoder) else encoder.model.eval()


def has_mlm_head(model) -> bool:
    """Whether a member can give masked-LM outputs: ours unless saved encoder-only, an HF encoder if it was
    loaded with its head."""
    if isinstance(model, HFEncoder):
        return model.has_mlm_head
    return not getattr(model.config, "encoder_only", False)


MLM_HEAD = "a masked-LM head (its measurements are read on the MLM output)"


def without_mlm_head(name: str, model) -> str | None:
    """``readable_members``' reason for the figures that score the MLM output: why ``model`` cannot be read."""
    return None if has_mlm_head(model) else "no masked-LM head: nothing to score"


class FigureCannotRead(ValueError):
    """No model of a figure's list holds what the figure draws (one line, exit 2, nothing written)."""


def readable_members(inputs: FigureInputs, figure: str, needs: str, reason, quiet: bool = False) -> tuple[list, dict]:
    """The members ``figure`` can read, and a note for each one it cannot: ``reason(name, model)`` says in a
    few words why a model does not apply (None: it does).  Each note is printed as one line; when no member
    applies, FigureCannotRead names the figure and what it ``needs``."""
    readable, notes = [], {}
    for name, model in inputs.models.items():
        why = reason(name, model)
        if why is None:
            readable.append(name)
        else:
            notes[name] = why
    if not readable:
        models = "; ".join(f"{name}: {why}" for name, why in notes.items())
        raise FigureCannotRead(f"{figure} needs {needs}, and no model given has it ({models})")
    say_not_applicable(figure, notes, quiet=quiet)
    return readable, notes


ENTANGLED = "one entangled stream: read as its full state, no AP / semantic split"


def stream_notes(inputs: FigureInputs) -> dict:
    """For a model list: the members without DSTG's separate streams, each with the ENTANGLED note (the zoo's
    baselines are entangled by design and go unsaid)."""
    if not inputs.given:
        return {}
    return {name: ENTANGLED for name in inputs.models if "sem" not in inputs.encoder(name).subspaces}


def say_not_applicable(figure: str, *notes: dict, quiet: bool = False) -> None:
    """One line per model: what of ``figure`` does not apply to it (stderr, unless quiet); several dicts of
    notes are joined per model."""
    joined: dict = {}
    for part in notes:
        for name, why in part.items():
            joined[name] = f"{joined[name]}; {why}" if name in joined else why
    if not quiet:
        for name, why in joined.items():
            print(f"[{figure}] {name}: {why}", file=sys.stderr, flush=True)


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


def _documents(corpus: str, n_docs: int | None, seed: int) -> list:
    documents = _shared_probing_documents(corpus)
    if n_docs is not None and n_docs < len(documents):
        chosen = np.sort(np.random.default_rng(seed).choice(len(documents), size=n_docs, replace=False))
        documents = [documents[i] for i in chosen]
    return documents


@lru_cache(maxsize=None)
def _shared_zoo_model(path: str):
    return load_model(Path(path)).eval()


def one_seed_title(inputs: FigureInputs) -> str | None:
    """The title of a figure that reads one training seed of the zoo (and the random_offset DSTG), saying so;
    None for a model list (drawn as given)."""
    if inputs.given:
        return None
    seeds = sorted({seed for _, seed in inputs.members.values()})
    return (f"One training seed ({', '.join(f'seed {s}' for s in seeds)}) of each zoo variant, and the random_offset "
            "DSTG: no interval over seeds")


def with_offset_model(inputs: FigureInputs) -> dict:
    """The figure models plus the random_offset DSTG: shipped in the zoo, or for --tiny a random DSTG with a
    table four times the tiny models' length.  The studies beyond the paper read it; the paper figures do not."""
    models = dict(inputs.models)
    if inputs.given:  # a model list is drawn as given
        return models
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
    sequences = as_sequences(encoder, inputs.documents, DEFAULT_MAX_LENGTH, windows=False)
    return cached_extract(encoder, sequences, inputs.store_root, f"{name}-attention", layers=None, dtype="float16",
                          attention_summaries=True, batch_size=16, progress=progress)
