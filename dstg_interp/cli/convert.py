"""dstg-convert: write another author's checkpoint in dstg-interp's own (canonical) format.

    dstg-convert path/to/fulldecoding-PosBERT runs/posbert --tokenizer path/to/tokenizer.json
    dstg-convert path/to/NeoBERT runs/neobert            # its folder ships tokenizer.json / vocab.txt

The conversion is ``dstg_interp.model.convert.convert_checkpoint`` (see its docstring for what SRC may be
and what OUT gets).  Bad input: one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys

from dstg_interp.model.checkpoint import load_model
from dstg_interp.model.convert import DTYPES, convert_checkpoint

from .shell import run_cli


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dstg-convert", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", metavar="SRC", help="checkpoint folder (the authors' PosNeoBERT / NeoBERT, or ours) or zoo name")
    parser.add_argument("out", metavar="OUT", help="output folder (dstg-interp format)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer.json, vocab.txt or a folder with one (default: the one in SRC)")
    parser.add_argument("--no-tokenizer", action="store_true", help="convert without a tokenizer (no probing from text)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="weights dtype in OUT (default float32)")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT if it is a checkpoint folder dstg-interp "
                        "wrote (a folder with anything else in it is never replaced)")
    return parser.parse_args(argv)


def _convert(args: argparse.Namespace) -> int:
    out = convert_checkpoint(args.source, args.out, tokenizer=args.tokenizer, require_tokenizer=not args.no_tokenizer,
                             overwrite=args.overwrite, dtype=DTYPES[args.dtype])
    config = load_model(out).config  # a NaN weight is reported here, as a "dstg-convert: warning:" line
    print(f"wrote {out}: {config.source['format']} -> variant {config.variant!r}"
          + (" (encoder only)" if config.encoder_only else ""))
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_cli("dstg-convert", lambda: _convert(args))


if __name__ == "__main__":
    sys.exit(main())
