"""dstg-holmes: build the offline Holmes suite, or probe a Holmes-format folder on a pool of models.

    dstg-holmes build --out ~/.cache/dstg-interp/holmes-suite/v1                # offline suite
    dstg-holmes run --benchmark DIR --model dstg rope ap rp --out results/holmes  # = dstg-probe --task holmes
    python -m dstg_interp.cli.holmes run --benchmark DIR --model dstg            # the same, without the script

One Holmes command, two spellings: `dstg-probe --task holmes ...` and its alias `dstg-holmes run ...` build
their parsers with the same flags (``add_holmes_flags``), the same HolmesRunConfig (``config_from_args``)
and call the same runner (``probes.holmes.run.run_config``).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch

from dstg_interp.config import MAX_SEED
from probes.holmes.aggregate import dataset_scores
from probes.holmes.protocol import PROTOCOLS, ProbeConfig
from probes.holmes.run import HOLMES_THREADS, HolmesRunConfig, flash_fraction_for, run_config
from probes.holmes.suite import build_suite

from . import flags
from .flags import positive_int
from .shell import run_cli

HOLMES_OUT = "results/holmes"


def _seeds_arg(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated non-negative integers, got {text!r}") from None
    if not seeds or min(seeds) < 0 or max(seeds) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected comma-separated seeds from 0 to {MAX_SEED}, got {text!r}")
    return seeds


def _fraction_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def add_holmes_flags(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The Holmes-only flags (``prefix`` marks them in dstg-probe, where other tasks ignore them)."""
    parser.add_argument("--benchmark", "--holmes-dir", dest="benchmark", default=None,
                        help=prefix + "a Holmes-format folder (default: the offline suite, built on first use)")
    parser.add_argument("--full", action="store_true",
                        help=prefix + "the offline suite's whole train split instead of its Flash cut (1/32)")
    parser.add_argument("--flash-fraction", type=_fraction_arg, default=None,
                        help=prefix + "keep this fraction of every train split (default: a --benchmark folder as it "
                                      "is -- FlashHolmes files are already cut -- and 1/32 of the offline suite)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="reference",
                        help=prefix + "reference: holmes-evaluation's (raw features, its loss, hidden_states[-1]), "
                                      "comparable with the leaderboard; standardised: z-scored features, plain logits")
    parser.add_argument("--seeds", type=_seeds_arg, default=None,
                        help=prefix + "probe seeds, comma-separated (default: 5 seeds from --seed: S..S+4)")
    parser.add_argument("--random-init", action="store_true", help=prefix + "add the random-init encoder control")
    parser.add_argument("--mdl", action="store_true", help=prefix + "also compute online-code MDL (bits)")


def config_from_args(args: argparse.Namespace) -> HolmesRunConfig:
    """The HolmesRunConfig of a parsed `dstg-probe --task holmes` or `dstg-holmes run` command line."""
    seeds = args.seeds if args.seeds is not None else tuple(range(args.seed, args.seed + 5))
    probe = ProbeConfig(seeds=seeds, flash_fraction=flash_fraction_for(args.benchmark, args.flash_fraction, args.full),
                        mdl=args.mdl, protocol=args.protocol)
    layers = args.layers if args.layers is not None else "last"
    return HolmesRunConfig(benchmark_dir=args.benchmark, models=flags.models(args), layers=layers,
                           subspaces=list(args.subspaces) if args.subspaces else None,
                           random_init_control=args.random_init, probe=probe, device=args.device)


def report(results: pd.DataFrame, out) -> None:
    """What both spellings print: the per-dataset scores, then where the tables went."""
    if len(results):
        print(dataset_scores(results).to_string(index=False))
    print(f"{len(results)} result rows, {len(results.attrs.get('skipped', []))} skipped -> {out}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-holmes", description="Run a Holmes-format benchmark folder on a pool of models and write tidy results.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the offline suite in the Holmes format")
    flags.add_out(build, required=True, what="the suite folder to create")
    flags.add_seed(build)
    build.add_argument("--n-per-dataset", type=positive_int, default=None, help="rows per dataset (default: suite's)")
    flags.add_threads(build, default=HOLMES_THREADS)
    build.add_argument("--overwrite", action="store_true", help="replace a complete suite already in --out")
    run = sub.add_parser("run", help="probe a Holmes-format folder: an alias of `dstg-probe --task holmes`",
                         description="Probe a Holmes-format folder. An alias: `dstg-holmes run ARGS` is "
                                     "`dstg-probe --task holmes ARGS` (same flags, same runner, same tables).")
    flags.add_model(run, required=True)
    flags.add_layers(run, default="last")
    flags.add_subspaces(run)
    add_holmes_flags(run)
    flags.add_seed(run)
    flags.add_device(run)
    flags.add_threads(run, default=HOLMES_THREADS)
    flags.add_out(run, default=HOLMES_OUT, what="a folder for the Holmes tables and config.json")
    flags.add_quiet(run)
    return parser


def _main(args: argparse.Namespace) -> int:
    if args.command == "build":
        torch.set_num_threads(args.threads)
        kwargs = {} if args.n_per_dataset is None else {"n_per_dataset": args.n_per_dataset}
        built = build_suite(args.out, seed=args.seed, overwrite=args.overwrite, **kwargs)
        print(f"wrote {len(built)} datasets to {args.out}")
        return 0
    results = run_config(config_from_args(args), args.out, progress=not args.quiet, threads=args.threads)
    report(results, args.out)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return run_cli("dstg-holmes", lambda: _main(args),
                   interrupted=lambda: f"the tables in {args.out} are as they were" if args.command == "run"
                   else "no suite was written")


if __name__ == "__main__":
    sys.exit(main())
