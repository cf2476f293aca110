"""dstg-convert: write another author's checkpoint in dstg-interp's own (canonical) format.

    dstg-convert path/to/fulldecoding-PosBERT runs/posbert --tokenizer path/to/tokenizer.json
    dstg-convert path/to/NeoBERT runs/neobert            # its folder ships tokenizer.json / vocab.txt

The conversion is ``dstg_interp.model.convert.convert_checkpoint`` (see its docstring for what SRC may be
and what OUT gets).  Bad input: one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
import json
import sys

from dstg_interp.config import ConfigIO, tokenizer_mismatch_field
from dstg_interp.model.convert import DTYPES, convert_checkpoint

from .config_args import add_config_arguments, config_from_args, run_command


@dataclass
class ConvertCommand(ConfigIO):
    """dstg-convert's arguments: the source checkpoint, where ours goes, and its tokenizer."""

    source: str = field(metadata={"positional": True, "metavar": "SRC",
                                  "help": "checkpoint folder (the authors' PosNeoBERT / NeoBERT, or ours) or zoo name"})
    out: str = field(metadata={"positional": True, "metavar": "OUT", "help": "output folder (dstg-interp format)"})
    tokenizer: str | None = field(default=None, metadata={
        "help": "tokenizer.json, vocab.txt or a folder with one", "shown": "the one in SRC"})
    require_tokenizer: bool = field(default=True, metadata={
        "flag": "--no-tokenizer", "invert": True, "help": "convert without a tokenizer (no probing from text)"})
    dtype: str = field(default="float32", metadata={"choices": sorted(DTYPES), "help": "weights dtype in OUT"})
    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    overwrite: bool = field(default=False, metadata={
        "help": "replace OUT if it is a checkpoint folder dstg-interp wrote (a folder with anything else in it is "
                "never replaced)"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-convert", description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, ConvertCommand)
    return parser


def parse_args(argv=None) -> ConvertCommand:
    return config_from_args(ConvertCommand, build_parser().parse_args(argv))


def _main(command: ConvertCommand) -> int:
    out = convert_checkpoint(command.source, command.out, tokenizer=command.tokenizer,
                             require_tokenizer=command.require_tokenizer, overwrite=command.overwrite,
                             dtype=DTYPES[command.dtype])
    config = json.loads((out / "config.json").read_text())  # what was written (the weights were checked on load)
    print(f"wrote {out}: {config['source']['format']} -> variant {config['variant']!r}"
          + (" (encoder only)" if config.get("encoder_only") else ""))
    return 0


def main(argv=None) -> int:
    return run_command(build_parser(), ConvertCommand, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
