"""dstg-verify: check that a store's files hold every byte they were written with.

    dstg-verify runs/store-dstg
    dstg-verify ~/.cache/dstg-interp/stores/*          # every cached store

Opening a store checks a sample of each file (about 1 MiB, ``dstg_interp.store.checksums``); this reads every
byte against the full checksums in its manifest.  A damaged store is one line naming the file, exit code 2;
a store written before checksums existed is said to have none (exit 0: nothing to compare).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from dstg_interp.config import ConfigIO
from dstg_interp.store import ActivationStore, StoreError

from .config_args import add_config_arguments, run_command
from .shell import EXIT_ERROR


@dataclass
class VerifyCommand(ConfigIO):
    """dstg-verify's arguments: the store folders."""

    stores: list = field(default_factory=list, metadata={"positional": True, "nargs": "+", "metavar": "STORE",
                                                         "help": "activation store folders (dstg-cache --out)"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-verify", description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, VerifyCommand)
    return parser


def verify_store(folder) -> str:
    """One store's line: every file's full checksum compared under the reader lock (no writer replaces the store
    while it is read), each byte read once; a damaged store raises StoreError."""
    store = ActivationStore(folder, verify="none")  # the manifest only: the bytes are read once, held, below
    store.verify = "full"
    with store:
        checksums = store.manifest.get("checksums") or {}
        if not checksums.get("files"):
            return f"{folder}: no checksums (written before dstg-interp recorded them); nothing to compare"
        return (f"{folder}: every file holds the bytes it was written with ({len(checksums['files'])} files, "
                f"{checksums['algorithm']})")


def _main(command: VerifyCommand) -> int:
    """Every store on the command line judged, the damaged ones each named on stderr; exit 2 if any was."""
    damaged = 0
    for folder in command.stores:
        try:
            print(verify_store(folder), flush=True)
        except StoreError as err:
            damaged += 1
            print(f"dstg-verify: error: {err}", file=sys.stderr, flush=True)
    if damaged and len(command.stores) > 1:
        print(f"dstg-verify: error: {damaged} of {len(command.stores)} stores damaged or unreadable (named above)",
              file=sys.stderr)
    return EXIT_ERROR if damaged else 0


def main(argv=None) -> int:
    return run_command(build_parser(), VerifyCommand, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
