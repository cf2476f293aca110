"""dstg-extend: extend a model's learned AP table past max_positions and save the longer model.

    dstg-extend --model dstg --factor 2 --method curve --out runs/dstg-x2

The methods are those of ``dstg_interp.analysis.extrapolate`` (curve, repeat, stretch).  --overwrite
replaces only a checkpoint dstg-extend wrote (its files and nothing else).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dstg_interp.analysis.extrapolate import (DEFAULT_COMPONENTS, DEFAULT_FREQUENCIES, EXTENSION_FILE, METHODS,
                                              extend_positions, save_extended)
from dstg_interp.io import OutputError, check_output_location, check_replaceable
from dstg_interp.model.checkpoint import load_model, resolve_checkpoint
from dstg_interp.model.saving import checkpoint_foreign_entries

from . import flags
from .shell import run_cli

def extended_foreign_entries(path: Path) -> list[str]:
    """What makes ``path`` not a checkpoint dstg-extend wrote (a user's notes, no weights); empty if it is one."""
    return checkpoint_foreign_entries(path, extra=frozenset({EXTENSION_FILE}))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-extend", description="Extend a model's learned AP table past "
                                     "max_positions and save the longer model as a checkpoint.")
    flags.add_model(parser, required=True)
    parser.add_argument("--factor", type=float, default=None, help="new length = factor x max_positions (> 1)")
    parser.add_argument("--new-length", type=int, default=None, help="new max_positions (instead of --factor)")
    parser.add_argument("--method", choices=METHODS, default="curve")
    parser.add_argument("--n-components", type=int, default=DEFAULT_COMPONENTS, help="PCs kept by --method curve")
    parser.add_argument("--n-frequencies", type=int, default=DEFAULT_FREQUENCIES, help="DCT terms per PC (curve)")
    flags.add_out(parser, required=True, what="the checkpoint folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace a checkpoint dstg-extend wrote in --out")
    return parser


def _extend(args: argparse.Namespace) -> int:
    args.model = flags.one_model(args, "dstg-extend")
    args.out = Path(args.out)
    if args.factor is None and args.new_length is None:
        args.factor = 2.0
    check_output_location(args.out)
    source = resolve_checkpoint(args.model)
    if source.resolve() == args.out.resolve():
        raise OutputError(f"--out {args.out} is the input checkpoint --model {args.model}; write the longer model "
                          "to another folder")
    check_replaceable(args.out, "a checkpoint", extended_foreign_entries, args.overwrite, inputs=[source],
                      suffix="extended")
    model = load_model(args.model)
    longer = extend_positions(model, args.factor, new_length=args.new_length, method=args.method,
                              n_components=args.n_components, n_frequencies=args.n_frequencies)
    save_extended(longer, args.out)
    fit = longer.extension.get("fit")
    detail = f"; curve fit: {fit['explained']:.1%} variance in {fit['n_components']} PCs, in-range error " \
             f"{fit['relative_error']:.3f}" if fit else ""
    print(f"{args.out}: {longer.config.variant} model, {model.config.max_positions} -> {longer.config.max_positions} "
          f"positions by {args.method}{detail}")
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return run_cli("dstg-extend", lambda: _extend(args))


if __name__ == "__main__":
    sys.exit(main())
