"""dstg-holmes: build the offline Holmes suite, or probe a Holmes-format folder on a pool of models.

    dstg-holmes build --out ~/.cache/dstg-interp/holmes-suite/v1                # offline suite
    dstg-holmes run --benchmark DIR --model dstg rope ap rp --out my-holmes  # = dstg-probe --task holmes
    python -m dstg_interp.cli.holmes run --benchmark DIR --model dstg            # the same, without the script

One Holmes command, two spellings: `dstg-probe --task holmes ...` and its alias `dstg-holmes run ...` hold
the same Holmes flags (``HolmesFlags``, nested in ``ProbeCommand`` and ``HolmesRun``), make the same
HolmesRunConfig (``holmes_run_config``) and call the same runner (``probes.holmes.run.run_config``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from dstg_interp.config import (MAX_SEED, ConfigIO, device_field, layers_field, model_field, model_name_field, tokenizer_mismatch_field, out_field, quiet_field,
                                seed_field, subspaces_field, threads_field)
from dstg_interp.encoders.selection import LayerSelection
from dstg_interp.io import RESULTS_DIR
from probes.holmes.aggregate import dataset_scores
from probes.holmes.encode import HOLMES_LAYERS
from probes.holmes.protocol import PROTOCOLS, HolmesProbeConfig
from probes.holmes.run import HOLMES_THREADS, HolmesRunConfig, flash_fraction_for, run_config
from probes.holmes.suite import build_suite

from .config_args import add_config_arguments, parse_config, run_command

HOLMES_OUT = str(RESULTS_DIR / "holmes")


def _seeds_arg(text: str) -> tuple[int, ...]:
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if not parts or not all(part.isdigit() and int(part) <= MAX_SEED for part in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated seeds from 0 to {MAX_SEED}, got {text!r}")
    repeated = sorted({int(part) for part in parts if [int(p) for p in parts].count(int(part)) > 1})
    if repeated:  # round 4, HO4: 0,0 ran each probe twice and reported score_std 0.0 as two agreeing seeds
        raise argparse.ArgumentTypeError(f"seed {repeated[0]} is given twice in {text!r}; each seed once")
    return tuple(int(part) for part in parts)


def _fraction_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


@dataclass
class HolmesFlags(ConfigIO):
    """The Holmes-only flags of both spellings; with the shared ones they make a HolmesRunConfig."""

    benchmark: str | None = field(default=None, metadata={
        "aliases": ("--holmes-dir",), "shown": "the offline suite, built on first use",
        "help": "a Holmes-format folder"})
    full: bool = field(default=False, metadata={
        "help": "the offline suite's whole train split instead of its Flash cut (1/32)"})
    flash_fraction: float | None = field(default=None, metadata={
        "parse": _fraction_arg, "help": "keep this fraction of every train split",
        "shown": "a --benchmark folder as it is -- FlashHolmes files are already cut -- and 1/32 of the offline suite"})
    protocol: str = field(default="reference", metadata={
        "choices": list(PROTOCOLS), "help": "reference: holmes-evaluation's (raw features, its loss, hidden_states[-1]), "
                                           "comparable with the leaderboard; standardised: z-scored features, plain logits"})
    seeds: tuple | None = field(default=None, metadata={
        "parse": _seeds_arg, "help": "probe seeds, comma-separated", "shown": "5 seeds from --seed: S..S+4"})
    random_init: bool = field(default=False, metadata={"help": "add the random-init encoder control"})
    mdl: bool = field(default=False, metadata={"help": "also compute online-code MDL (bits)"})


def holmes_run_config(holmes: HolmesFlags, models: list, names, layers: LayerSelection, subspaces, seed: int,
                      device: str) -> HolmesRunConfig:
    """The HolmesRunConfig of either spelling: its Holmes flags and the shared ones (seeds from --seed: S..S+4)."""
    seeds = holmes.seeds if holmes.seeds is not None else tuple(range(seed, seed + 5))
    probe = HolmesProbeConfig(seeds=seeds, flash_fraction=flash_fraction_for(holmes.benchmark, holmes.flash_fraction,
                                                                             holmes.full),
                              mdl=holmes.mdl, protocol=holmes.protocol)
    return HolmesRunConfig(benchmark_dir=holmes.benchmark, models=list(models), names=names,
                           layers=layers, subspaces=list(subspaces) if subspaces else None,
                           random_init_control=holmes.random_init, probe=probe, device=device)


def report(results: pd.DataFrame, out) -> None:
    """What both spellings print: the per-dataset scores, then where the tables went."""
    if len(results):
        print(dataset_scores(results).to_string(index=False))
    print(f"{len(results)} result rows, {len(results.attrs.get('skipped', []))} skipped -> {out}")


@dataclass
class HolmesBuild(ConfigIO):
    """dstg-holmes build: the offline suite, in the Holmes format."""

    out: str | None = out_field(required=True, help="the suite folder to create")
    seed: int = seed_field()
    n_per_dataset: int | None = field(default=None, metadata={"min": 1, "help": "rows per dataset", "shown": "suite's"})
    threads: int = threads_field(HOLMES_THREADS)
    overwrite: bool = field(default=False, metadata={"help": "replace a complete suite already in --out"})


@dataclass
class HolmesRun(ConfigIO):
    """dstg-holmes run (= dstg-probe --task holmes): the shared flags of a Holmes run, and its own."""

    model: list = model_field(required=True)

    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    name: list[str] | None = model_name_field("how the tables name each --model, in order")
    layers: LayerSelection = layers_field(HOLMES_LAYERS)
    subspaces: tuple | None = subspaces_field(shown="all the model has")
    holmes: HolmesFlags = field(default_factory=HolmesFlags)
    seed: int = seed_field()
    device: str = device_field()
    threads: int = threads_field(HOLMES_THREADS)
    out: str = out_field(HOLMES_OUT, help="a folder for the Holmes tables and config.json")
    progress: bool = quiet_field()

    def config(self) -> HolmesRunConfig:
        return holmes_run_config(self.holmes, self.model, self.name, self.layers, self.subspaces, self.seed, self.device)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-holmes", description="Run a Holmes-format benchmark folder on a pool of models and write tidy results.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the offline suite in the Holmes format")
    add_config_arguments(build, HolmesBuild)
    run = sub.add_parser("run", help="probe a Holmes-format folder: an alias of `dstg-probe --task holmes`",
                         description="Probe a Holmes-format folder. An alias: `dstg-holmes run ARGS` is "
                                     "`dstg-probe --task holmes ARGS` (same flags, same runner, same tables).")
    add_config_arguments(run, HolmesRun)
    return parser


SUBCOMMANDS = {"build": HolmesBuild, "run": HolmesRun}


def parse_args(argv=None) -> HolmesBuild | HolmesRun:
    return parse_config(SUBCOMMANDS, build_parser().parse_args(argv))


def _main(command: HolmesBuild | HolmesRun) -> int:
    if isinstance(command, HolmesBuild):
        torch.set_num_threads(command.threads)
        kwargs: dict[str, Any] = {} if command.n_per_dataset is None else {"n_per_dataset": command.n_per_dataset}
        built = build_suite(command.out, seed=command.seed, overwrite=command.overwrite, **kwargs)
        print(f"wrote {len(built)} datasets to {command.out}")
        return 0
    results = run_config(command.config(), command.out, progress=command.progress, threads=command.threads)
    report(results, command.out)
    return 0


def _interrupted(command: HolmesBuild | HolmesRun | None) -> str:
    if isinstance(command, HolmesBuild):
        return "no suite was written"
    return f"the tables in {command.out if command is not None else HOLMES_OUT} are as they were"


def main(argv=None) -> int:
    return run_command(build_parser(), SUBCOMMANDS, _main, argv, interrupted=_interrupted)


if __name__ == "__main__":
    sys.exit(main())
