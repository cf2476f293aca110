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
from dstg_interp.store import ActivationStore

from .config_args import add_config_arguments, run_command


@dataclass
class VerifyCommand(ConfigIO):
    """dstg-verify's arguments: the store folders."""

    stores: list = field(default_factory=list, metadata={"positional": True, "nargs": "+", "metavar": "STORE",
                                                         "help": "activation store folders (dstg-cache --out)"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-verify", description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, VerifyCommand)
    return parser


def _main(command: VerifyCommand) -> int:
    for folder in command.stores:
        with ActivationStore(folder, verify="full") as store:  # held: not replaced while it is read
            checksums = store.manifest.get("checksums") or {}
            if not checksums.get("files"):
                print(f"{folder}: no checksums (written before dstg-interp recorded them); nothing to compare")
                continue
            print(f"{folder}: every file holds the bytes it was written with ({len(checksums['files'])} files, "
                  f"{checksums['algorithm']})")
    return 0


def main(argv=None) -> int:
    return run_command(build_parser(), VerifyCommand, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
