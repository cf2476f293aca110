"""dstg-extend: extend a model's learned AP table past max_positions and save the longer model.

    dstg-extend --model dstg --factor 2 --method curve --out runs/dstg-x2

The methods are those of ``dstg_interp.analysis.extrapolate`` (curve, repeat, stretch).  --overwrite
replaces only a checkpoint dstg-extend wrote (its files and nothing else).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dstg_interp.analysis.extrapolate import (DEFAULT_COMPONENTS, DEFAULT_FREQUENCIES, EXTENSION_FILE, METHODS,
                                              extend_positions, save_extended)
from dstg_interp.config import ConfigIO, model_field, tokenizer_mismatch_field, out_field
from dstg_interp.io import OutputError, check_output_location, check_replaceable
from dstg_interp.model.checkpoint import load_model, resolve_checkpoint
from dstg_interp.model.saving import checkpoint_foreign_entries

from . import flags
from .config_args import add_config_arguments, run_command

def extended_foreign_entries(path: Path) -> list[str]:
    """What makes ``path`` not a checkpoint dstg-extend wrote (a user's notes, no weights); empty if it is one."""
    return checkpoint_foreign_entries(path, extra=frozenset({EXTENSION_FILE}))


@dataclass
class ExtendCommand(ConfigIO):
    """dstg-extend's flags: the model, how much longer, by which method, and where."""

    model: list = model_field(required=True)

    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    factor: float | None = field(default=None, metadata={"help": "new length = factor x max_positions (> 1)",
                                                         "shown": "2 unless --new-length"})
    new_length: int | None = field(default=None, metadata={"help": "new max_positions (instead of --factor)"})
    method: str = field(default="curve", metadata={"choices": list(METHODS), "help": "how the new rows are made"})
    n_components: int = field(default=DEFAULT_COMPONENTS, metadata={"help": "PCs kept by --method curve"})
    n_frequencies: int = field(default=DEFAULT_FREQUENCIES, metadata={"help": "DCT terms per PC (curve)"})
    out: str | None = out_field(required=True, help="the checkpoint folder to write")
    overwrite: bool = field(default=False, metadata={"help": "replace a checkpoint dstg-extend wrote in --out"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-extend", description="Extend a model's learned AP table past "
                                     "max_positions and save the longer model as a checkpoint.")
    add_config_arguments(parser, ExtendCommand)
    return parser


def _extend(command: ExtendCommand) -> int:
    model_name = flags.one_model(command.model, "dstg-extend")
    out = Path(command.out)
    factor = 2.0 if command.factor is None and command.new_length is None else command.factor
    check_output_location(out)
    source = resolve_checkpoint(model_name)
    if source.resolve() == out.resolve():
        raise OutputError(f"--out {out} is the input checkpoint --model {model_name}; write the longer model "
                          "to another folder")
    check_replaceable(out, "a checkpoint", extended_foreign_entries, command.overwrite, inputs=[source],
                      suffix="extended")
    model = load_model(model_name)
    longer = extend_positions(model, factor, new_length=command.new_length, method=command.method,
                              n_components=command.n_components, n_frequencies=command.n_frequencies)
    save_extended(longer, out)
    fit = longer.extension.get("fit")
    detail = f"; curve fit: {fit['explained']:.1%} variance in {fit['n_components']} PCs, in-range error " \
             f"{fit['relative_error']:.3f}" if fit else ""
    print(f"{out}: {longer.config.variant} model, {model.config.max_positions} -> {longer.config.max_positions} "
          f"positions by {command.method}{detail}")
    return 0


def main(argv=None) -> int:
    return run_command(build_parser(), ExtendCommand, _extend, argv)


if __name__ == "__main__":
    sys.exit(main())
