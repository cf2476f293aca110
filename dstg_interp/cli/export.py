"""dstg-export: a store as a Hugging Face ``datasets`` folder (``datasets.load_from_disk`` opens it).

    dstg-export --store runs/store-dstg --out runs/store-dstg-hf                     # every layer x subspace
    dstg-export --store runs/store-dstg --out runs/store-dstg-ap6 --layers 4 --subspaces ap

One row per token; a fixed-length list column per state (``layer_4_ap``), the store's labels as the other
columns (``dstg_interp.store.export``).  The disk space it takes is printed before it starts, and it is refused
when the disk has less free.  Bad input -- a store that is not one, a layer or subspace it lacks, an --out that
exists and is not empty -- is one line on stderr, exit code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import sys

from dstg_interp.encoders.selection import resolve_layers
from dstg_interp.store import ActivationStore
from dstg_interp.store.export import export_store

from . import flags
from .shell import run_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the activation store folder (dstg-cache --out)")
    flags.add_out(parser, required=True, what="a new (or empty) folder for the datasets files")
    flags.add_layers(parser, default="all the store has")
    flags.add_subspaces(parser, default="all the store has")
    flags.add_quiet(parser)
    return parser


def _main(args: argparse.Namespace) -> int:
    store = ActivationStore(args.store)
    layers = None  # "all" or not given: every layer the store has
    if args.layers not in (None, "all"):
        n_layers = store.manifest["identity"]["model"]["config"].get("n_layers", 0)  # "last" = the model's last
        layers = resolve_layers(args.layers, n_layers)
    out = export_store(store, args.out, layers=layers, subspaces=args.subspaces, progress=not args.quiet)
    print(f"wrote {out} (datasets.load_from_disk({str(out)!r}))")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("dstg-export", lambda: _main(args), interrupted=lambda: "no dataset was written")


if __name__ == "__main__":
    sys.exit(main())
