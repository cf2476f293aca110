"""dstg-erase: erase position inside the forward pass and measure what the model loses (a dstg-probe sibling).

    dstg-erase --model dstg --out results/erasure-dstg                      # every layer x subspace, token position
    dstg-erase --model ap --layers 2,4 --methods leace,random --target sentence_index --out results/erase-ap
    dstg-erase --model dstg --store runs/store-dstg --layers 3 --subspaces ap --save-erasers --out results/e3
    dstg-erase --model path/to/all-MiniLM-L6-v2 --corpus en-mix --out results/erasure-minilm

For each layer x subspace: LEACE, INLP and a same-rank random eraser of the position target are fitted on a
store of the model (``probes.erasure``); the position probe is scored before and after erasure on held-out
store documents; each eraser then runs inside the forward pass while masked-token loss / accuracy, the
output change and the attention patterns are measured on documents the store does not hold
(``probes.erasure_effects``).  Writes ``results.csv`` (one row per layer x subspace x method), ``heads.csv``
(attention change per block x head) and ``results.json`` (config, versions, rows) into --out, and with
--save-erasers one folder per eraser under ``erasers/``.  Bad input -- a --store of another model, a layer or
subspace the store lacks, an --out that holds anything but an earlier dstg-erase result -- is one line on
stderr, exit code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dstg_interp.config import ConfigIO, device_field, model_field, model_name_field, tokenizer_mismatch_field, out_field, quiet_field, threads_field
from dstg_interp.encoders.naming import model_label
from dstg_interp.encoders.selection import check_device
from dstg_interp.io import (OutputError, check_output_location, folder_entries, foreign_entries, output_lock,
                            written_atomically)
from dstg_interp.store import ActivationStore
from dstg_interp.store.manifest import versions
from probes.erasure_effects import ErasureConfig, erase_positions

from .config_args import add_config_arguments, run_command
from .flags import one_model

RESULT_FILES = ("results.csv", "heads.csv", "results.json", "config.json", "erasers")


@dataclass
class EraseCommand(ConfigIO):
    """dstg-erase's flags beside the ErasureConfig's: which model and store, where the tables go; saved as
    config.json beside them (``EraseCommand.from_json(out / "config.json")`` is the run again)."""

    model: list = model_field(required=True)

    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    name: str | None = model_name_field("how the table and results.json name the model")
    store: str | None = field(default=None, metadata={
        "help": "an activation store of --model to fit the erasers on",
        "shown": "one extracted from the corpus's probing documents, cached"})
    out: str | None = out_field(required=True, help="a folder for results.csv, heads.csv, results.json and config.json")
    save_erasers: bool = field(default=False, metadata={"help": "also write every eraser under --out/erasers/"})
    device: str = device_field()
    threads: int | None = threads_field()
    progress: bool = quiet_field()
    erasure: ErasureConfig = field(default_factory=ErasureConfig)

    def __post_init__(self) -> None:
        if isinstance(self.erasure, dict):  # from_json
            self.erasure = ErasureConfig.from_dict(self.erasure)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-erase", description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, EraseCommand)
    return parser


def erase_foreign_entries(out: Path) -> list[str]:
    """What makes ``out`` not an earlier dstg-erase result (all of it without its results.json); empty if it is one."""
    try:
        ours = json.loads((out / "results.json").read_text()).get("command") == "dstg-erase"
    except (OSError, ValueError, AttributeError):
        ours = False
    return foreign_entries(out, RESULT_FILES) if ours else folder_entries(out)


def check_out(out: Path) -> None:
    """Before any work: --out is new, empty, or an earlier dstg-erase result (replaced)."""
    check_output_location(out)
    if not out.exists() or not folder_entries(out):
        return
    if erase_foreign_entries(out):
        raise OutputError(f"--out {out} is not empty and not an earlier dstg-erase result; it is never replaced: "
                          "choose another --out")


def _main(command: EraseCommand) -> int:
    out = Path(str(command.out))
    check_out(out)
    check_device(command.device)
    if command.threads:
        torch.set_num_threads(command.threads)
    model = one_model(command.model, "dstg-erase")
    config = command.erasure
    started = time.time()
    with ExitStack() as held, output_lock(out, "dstg-erase " + " ".join(sys.argv[1:])):
        # the store is held for reading throughout: no dstg-cache --overwrite replaces it under the erasure (X5)
        store = held.enter_context(ActivationStore(command.store)) if command.store else None
        name = command.name or model_label(model)
        result = erase_positions(model, config, store=store, model_name=name, device=command.device,
                                 progress=command.progress)
        record = dict(command="dstg-erase", config=config.to_dict(), model=model, model_name=name, store=command.store,
                      versions=versions(), seconds=round(time.time() - started, 1),
                      results=result.table.to_dict(orient="records"))
        with written_atomically(out, erase_foreign_entries, "dstg-erase result") as tmp:
            result.table.to_csv(tmp / "results.csv", index=False)
            result.heads.to_csv(tmp / "heads.csv", index=False)
            (tmp / "results.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
            command.to_json(tmp / "config.json")
            if command.save_erasers:
                for (layer, subspace, method), eraser in result.erasers.items():
                    eraser.save(tmp / "erasers" / f"layer{layer}-{subspace}-{method}")
    shown = result.table[["layer", "subspace", "method", "rank", "r2_before", "r2_after", "loss_increase",
                          "accuracy_drop", "output_change", "attention_js"]]
    print(f"{name}: erasing {config.target} ({config.encoding})")
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    print(f"wrote {out / 'results.csv'}, {out / 'heads.csv'}, {out / 'results.json'} and {out / 'config.json'}")
    return 0


def main(argv=None) -> int:
    return run_command(build_parser(), EraseCommand, _main, argv, interrupted=lambda _: "no results were written")


if __name__ == "__main__":
    sys.exit(main())
