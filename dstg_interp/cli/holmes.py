"""dstg-holmes: build the offline Holmes suite, or probe a Holmes-format folder on a pool of models.

    dstg-holmes build --out ~/.cache/dstg-interp/holmes-suite/v1                # offline suite
    dstg-holmes run --benchmark DIR --model dstg rope ap rp --out my-holmes  # = dstg-probe --task holmes
    python -m dstg_interp.cli.holmes run --benchmark DIR --model dstg            # the same, without the script

One Holmes command, two spellings: `dstg-probe --task holmes ...` and its alias `dstg-holmes run ...` build
their parsers with the same flags (``add_holmes_flags``), the same HolmesRunConfig (``config_from_args``)
and call the same runner (``probes.holmes.run.run_config``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import pandas as pd
import torch

from dstg_interp.config import MAX_SEED
from dstg_interp.io import RESULTS_DIR
from probes.holmes.aggregate import dataset_scores
from probes.holmes.protocol import PROTOCOLS, HolmesProbeConfig
from probes.holmes.run import HOLMES_THREADS, HolmesRunConfig, flash_fraction_for, run_config
from probes.holmes.suite import build_suite

from . import flags
from .config_args import add_config_arguments
from .config_args import config_from_args as build_config
from .shell import run_cli

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
class HolmesFlags:
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


def add_holmes_flags(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The Holmes-only flags (``prefix`` marks them in dstg-probe, where other tasks ignore them)."""
    add_config_arguments(parser, HolmesFlags, prefix=prefix)


def config_from_args(args: argparse.Namespace) -> HolmesRunConfig:
    """The HolmesRunConfig of a parsed `dstg-probe --task holmes` or `dstg-holmes run` command line."""
    holmes = build_config(HolmesFlags, args)
    seed = args.seed if args.seed is not None else 0
    seeds = holmes.seeds if holmes.seeds is not None else tuple(range(seed, seed + 5))
    probe = HolmesProbeConfig(seeds=seeds, flash_fraction=flash_fraction_for(holmes.benchmark, holmes.flash_fraction,
                                                                       holmes.full),
                        mdl=holmes.mdl, protocol=holmes.protocol)
    layers = args.layers if args.layers is not None else "last"
    return HolmesRunConfig(benchmark_dir=holmes.benchmark, models=flags.models(args), names=getattr(args, "name", None),
                           layers=layers,
                           subspaces=list(args.subspaces) if args.subspaces else None,
                           random_init_control=holmes.random_init, probe=probe, device=args.device or "cpu")


def report(results: pd.DataFrame, out) -> None:
    """What both spellings print: the per-dataset scores, then where the tables went."""
    if len(results):
        print(dataset_scores(results).to_string(index=False))
    print(f"{len(results)} result rows, {len(results.attrs.get('skipped', []))} skipped -> {out}")


@dataclass
class HolmesBuild:
    """dstg-holmes build: the offline suite, in the Holmes format."""

    out: str | None = field(default=None, metadata={"required": True, "help": "the suite folder to create"})
    seed: int = 0
    n_per_dataset: int | None = field(default=None, metadata={"min": 1, "help": "rows per dataset", "shown": "suite's"})
    threads: int = HOLMES_THREADS
    overwrite: bool = field(default=False, metadata={"help": "replace a complete suite already in --out"})


@dataclass
class HolmesRun:
    """dstg-holmes run (= dstg-probe --task holmes): the shared flags of a Holmes run, and its own."""

    model: list = field(default_factory=list, metadata={"required": True})
    name: list[str] | None = field(default=None, metadata={
        "help": "how the tables name each --model, in order", "shown": "the zoo name, hub id, model-card title or "
        "folder name (dstg_interp.encoders.naming)"})
    layers: str | tuple = field(default="last")
    subspaces: tuple | None = field(default=None, metadata={"shown": "all the model has"})
    holmes: HolmesFlags = field(default_factory=HolmesFlags)
    seed: int = 0
    device: str = "cpu"
    threads: int = HOLMES_THREADS
    out: str = field(default=HOLMES_OUT, metadata={"help": "a folder for the Holmes tables and config.json"})
    progress: bool = field(default=True, metadata={"flag": "--quiet", "invert": True})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-holmes", description="Run a Holmes-format benchmark folder on a pool of models and write tidy results.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the offline suite in the Holmes format")
    add_config_arguments(build, HolmesBuild)
    run = sub.add_parser("run", help="probe a Holmes-format folder: an alias of `dstg-probe --task holmes`",
                         description="Probe a Holmes-format folder. An alias: `dstg-holmes run ARGS` is "
                                     "`dstg-probe --task holmes ARGS` (same flags, same runner, same tables).")
    add_config_arguments(run, HolmesRun)
    return parser


def _main(args: argparse.Namespace) -> int:
    if args.command == "build":
        command = build_config(HolmesBuild, args)
        torch.set_num_threads(command.threads)
        kwargs = {} if command.n_per_dataset is None else {"n_per_dataset": command.n_per_dataset}
        built = build_suite(command.out, seed=command.seed, overwrite=command.overwrite, **kwargs)
        print(f"wrote {len(built)} datasets to {command.out}")
        return 0
    run = build_config(HolmesRun, args)
    results = run_config(config_from_args(args), run.out, progress=run.progress, threads=run.threads)
    report(results, run.out)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out = args.out or HOLMES_OUT
    return run_cli("dstg-holmes", lambda: _main(args),
                   interrupted=lambda: f"the tables in {out} are as they were" if args.command == "run"
                   else "no suite was written")


if __name__ == "__main__":
    sys.exit(main())
