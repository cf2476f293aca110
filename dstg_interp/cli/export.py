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
from dataclasses import dataclass, field

from dstg_interp.config import ConfigIO, layers_field, out_field, quiet_field, subspaces_field
from dstg_interp.encoders.selection import ALL, LayerSelection, resolve_layers
from dstg_interp.store import ActivationStore
from dstg_interp.store.export import export_store

from .config_args import add_config_arguments, run_command


@dataclass
class ExportCommand(ConfigIO):
    """dstg-export's flags; saved as config.json in the exported folder."""

    store: str | None = field(default=None, metadata={
        "required": True, "help": "the activation store folder (dstg-cache --out)"})
    out: str | None = out_field(required=True, help="a new (or empty) folder for the datasets files")
    layers: LayerSelection = layers_field(shown="all the store has")
    subspaces: tuple | None = subspaces_field(shown="all the store has")
    progress: bool = quiet_field()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-export", description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, ExportCommand)
    return parser


def _main(command: ExportCommand) -> int:
    with ActivationStore(command.store) as store:  # held: a dstg-cache --overwrite waits for nobody, it is refused
        out = _export(command, store)
    print(f"wrote {out} (datasets.load_from_disk({str(out)!r}))")
    return 0


def _export(command: ExportCommand, store: ActivationStore):
    layers = None  # "all" or not given: every layer the store has
    if command.layers not in (None, ALL):
        n_layers = store.manifest["identity"]["model"]["config"].get("n_layers", 0)  # "last" = the model's last
        layers = resolve_layers(command.layers, n_layers)
    return export_store(store, command.out, layers=layers, subspaces=command.subspaces, progress=command.progress,
                        config=command.to_dict())


def main(argv=None) -> int:
    return run_command(build_parser(), ExportCommand, _main, argv, interrupted=lambda _: "no dataset was written")


if __name__ == "__main__":
    sys.exit(main())
