"""dstg-probe: the main command -- position (or Holmes) probes of one or more models, as one table.

    dstg-probe --task segment                                 # shipped DSTG model, default corpus (en-mix)
    dstg-probe --model dstg rope ap rp --task segment --segment paragraph --out my-results
    dstg-probe --model runs/dstg/checkpoint --task intra --layers 0,3,last --subspaces sem,ap
    dstg-probe --model path/to/all-MiniLM-L6-v2 --task token  # any local HF encoder folder
    dstg-probe --model dstg --model rope --task holmes --layers 1  # Holmes (alias: dstg-holmes run), layer 1 only

The shared flags (--model, --layers, --subspaces, --out, --device, --seed, --threads, --quiet) mean what
they mean in every dstg-* command (``dstg_interp/cli/flags.py``).

Prints a compact table (layer rows; model/subspace columns; held-out R² ± half the 95% CI), then per
model x layer x subspace the R², the position-only R², the partial R² given token position and the
selectivity over position, each with its interval (``probes.position_baseline``), and writes
``results.csv`` (tidy, one row per model x layer x subspace) and ``results.json`` (config, versions,
results) into ``--out`` (default ``dstg-results/<task>`` in the working directory, git-ignored), written atomically.  The probes'
statistics are summed during the forward pass and no activations are written (``probes.storeless``; under
``dstg-launch``/torchrun the ranks share the passes); the random-init control's R² are kept in the cache
(``<cache>/controls/random-init-<key>.json``, ``probes.control_cache``), so a rerun skips the twin's forward
pass (``--no-control-cache``: always run it); ``--store`` extracts stores into the cache instead,
reused by later runs, for the same results.  Bad input: one line on stderr, exit code 2, nothing written; an unusable --out is refused
before any work, and --out may hold earlier dstg-probe results (replaced) but no other results.csv/json.
Intervals resting on fewer than 10 held-out documents print as "n/a", with a warning.
``--task holmes`` runs ``probes.holmes.run.run_config`` and writes the Holmes tables instead (results.csv,
scores.csv, ..., config.json), exactly as its alias ``dstg-holmes run`` does.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from dstg_interp.config import ConfigIO, device_field, model_field, model_name_field, tokenizer_mismatch_field, out_field, quiet_field, threads_field
from dstg_interp.encoders.selection import check_device
from dstg_interp.io import RESULTS_DIR, OutputError, check_output_location, created_folder, output_lock, write_text_atomic
from dstg_interp.store.distributed import Ranks, torchrun_ranks
from dstg_interp.store.manifest import versions
from dstg_interp.torchrun_env import torchrun_environment
from probes.holmes.run import HOLMES_THREADS, run_config
from dstg_interp.encoders.naming import table_names
from probes.positions import DEFAULT_MODEL, PositionProbeConfig, probe_positions

from .config_args import add_config_arguments, config_from_args, flag_values, run_command
from .holmes import HOLMES_OUT, HolmesFlags, holmes_run_config, report

TASKS = ("token", "segment", "intra", "holmes")


@dataclass
class ProbeCommand(ConfigIO):
    """dstg-probe's flags: which models and text, where the table goes; the probe's own settings are the
    PositionProbeConfig's, and --task holmes adds the Holmes flags."""

    model: list = model_field(DEFAULT_MODEL)

    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    task: str | None = field(default=None, metadata={
        "required": True, "choices": list(TASKS), "help": "token / segment / intra: position probes; holmes: the Holmes benchmark"})
    corpus: str = field(default="en-mix", metadata={"help": "en-mix (held-out documents), a folder of *.txt, a .jsonl, hf:..."})
    name: list[str] | None = model_name_field("how the tables name each --model, in order")
    out: str | None = out_field(help="a folder for results.csv and results.json (Holmes: its tables)",
                                shown="dstg-results/<task>, or dstg-results/<task>-<model folders> for other models")
    device: str = device_field(help="the ridge probes' Gram sums run there too (torch on a GPU)")
    threads: int | None = threads_field(shown=f"{HOLMES_THREADS} for --task holmes, else PyTorch's")
    progress: bool = quiet_field()
    max_docs: int | None = field(default=None, metadata={"min": 1, "help": "the first N held-out documents only"})
    store: bool = field(default=False, metadata={"exclusive": ("route", False), "help": (
        "extract (or reuse) activation stores in the cache and probe them; default: the probes' statistics are "
        "summed during the forward pass and no store is written (the same results, probes.storeless)")})
    no_store: bool = field(default=False, metadata={"flag": "--no-store", "exclusive": ("route", False),
                                                   "help": "the default route, asked for by name"})
    probe: PositionProbeConfig = field(default_factory=PositionProbeConfig)
    holmes: HolmesFlags = field(default_factory=HolmesFlags, metadata={"prefix": "--task holmes: "})

    def holmes_config(self):
        """The HolmesRunConfig of ``--task holmes`` (the same as its alias ``dstg-holmes run`` makes)."""
        return holmes_run_config(self.holmes, self.model, self.name, self.probe.layers, self.probe.subspaces,
                                 self.probe.seed, self.device)


LEGEND = ("layer 0 = embeddings, l = after block l; ap / sem = DSTG's position / semantic stream, full = the whole "
          "state; cell = held-out R² ± half its 95% bootstrap CI over test documents")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-probe", description=__doc__.split("\n\n")[0],
                                     epilog="`dstg-holmes run ARGS` is an alias of `dstg-probe --task holmes ARGS`.")
    add_config_arguments(parser, ProbeCommand)
    return parser


def parse_args(argv=None) -> ProbeCommand:
    return config_from_args(ProbeCommand, build_parser().parse_args(argv))


TABLE_WIDTH = 120  # where the compact table wraps when the terminal says nothing


def compact_table(results: pd.DataFrame) -> str:
    """Layer rows, subspace (model/subspace) columns, 'R² ± half-CI' cells; a table wider than the terminal is
    printed in blocks of columns, each with its layer rows."""
    cells = results.assign(cell=[
        f"{r:.3f} ± {(hi - lo) / 2:.3f}" if pd.notna(lo) else f"{r:.3f} ± n/a"
        for r, lo, hi in zip(results.r2, results.ci_low, results.ci_high)
    ])
    several_models = results.model.nunique() > 1
    header = "model/subspace" if several_models else "subspace"
    cells[header] = [f"{m}/{s}" if several_models else s for m, s in zip(cells.model, cells.subspace)]
    order = list(dict.fromkeys(cells[header]))
    table = cells.pivot(index="layer", columns=header, values="cell")[order]
    return table.to_string(line_width=max(80, shutil.get_terminal_size((TABLE_WIDTH, 24)).columns))  # wrapped


def _with_ci(value, low, high) -> str:
    return f"{value:.3f} [{low:.2f}, {high:.2f}]" if pd.notna(low) else f"{value:.3f} [n/a]"


def position_table(results: pd.DataFrame) -> str:
    """One line per model x layer x subspace: R², the position-only R² (one-hot token position; the same
    tokens, so the same value on every line of a model), the partial R² given token position and the
    selectivity over position, each with its 95% CI."""
    rows = pd.DataFrame({
        "model": results.model, "layer": results.layer, "subspace": results.subspace,
        "R²": [_with_ci(*v) for v in zip(results.r2, results.ci_low, results.ci_high)],
        "position-only R²": [_with_ci(*v) for v in zip(results.position_r2, results.position_ci_low,
                                                       results.position_ci_high)],
        "partial R² | position": [_with_ci(*v) for v in zip(results.partial_r2, results.partial_ci_low,
                                                            results.partial_ci_high)],
        "R² - position-only": [_with_ci(*v) for v in zip(results.position_selectivity,
                                                         results.position_selectivity_ci_low,
                                                         results.position_selectivity_ci_high)],
    })
    return rows.to_string(index=False)


RESULT_FILES = ("results.csv", "results.json")


def check_results_folder(out: Path) -> None:
    """Before any work: ``out`` must be a writable folder whose results files, if any, dstg-probe wrote."""
    check_output_location(out)
    if not any((out / name).exists() for name in RESULT_FILES):
        return
    try:
        ours = json.loads((out / "results.json").read_text()).get("command") == "dstg-probe"
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise OutputError(f"--out {out} holds a results.csv or results.json that dstg-probe did not write; "
                          "it is never replaced: choose another --out")


def write_results(out: Path, results: pd.DataFrame, record: dict) -> None:
    """results.csv + results.json, each written under a temporary name and renamed; a failure (a full disk)
    removes the temporary files and leaves the previous results as they were."""
    csv_tmp = out / f".results.csv.tmp-{os.getpid()}"
    with created_folder(out):  # a failure leaves no empty --out behind either (old #93)
        try:
            results.to_csv(csv_tmp, index=False)
            write_text_atomic(out / "results.json", json.dumps(record, indent=2, default=str) + "\n")
            os.replace(csv_tmp, out / "results.csv")
        finally:
            csv_tmp.unlink(missing_ok=True)


def run(command: ProbeCommand, ranks: Ranks | None = None) -> tuple[pd.DataFrame, dict]:
    """Position probes of every --model, as one table, and the record saved beside it.  ``ranks``: under
    torchrun, the ranks share the forward passes of the storeless route (every rank gets the table)."""
    check_device(command.device)
    if ranks is not None and ranks.grouped and command.store:
        raise ValueError("--store under torchrun: the store route runs in one process; extract the stores with "
                         "dstg-cache under torchrun, or drop --store (the storeless route shares the forward passes)")
    if command.threads:
        torch.set_num_threads(command.threads)
    started = time.time()
    config = dataclasses.replace(command.probe, task=command.task)
    tables = []
    names = table_names(command.model, command.name)
    for spec, name in zip(command.model, names):
        tables.append(probe_positions(spec, config, corpus=command.corpus, max_docs=command.max_docs,
                                      model_name=name, progress=command.progress and (ranks is None or ranks.first),
                                      device=str(ranks.device) if ranks is not None and ranks.grouped else command.device,
                                      store=command.store, ranks=ranks))
    results = pd.concat(tables, ignore_index=True)
    record = dict(command="dstg-probe", arguments=flag_values(command), models=dict(zip(names, map(str, command.model))),
                  route="store" if command.store else "storeless", versions=versions(), seconds=round(time.time() - started, 1),
                  results=results.to_dict(orient="records"))
    return results, record


def default_out(task: str, models: list) -> Path:
    """Where a run without ``--out`` writes: ``dstg-results/<task>`` for the default models (the README's main
    job), ``dstg-results/<task>-<model folders>`` for any other list, so a run on another model never replaces
    the main job's table (round 5, the first hour)."""
    if list(models) == [DEFAULT_MODEL]:
        return RESULTS_DIR / task
    names = "+".join(re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(m).rstrip("/")).name or str(m)) for m in models)
    if len(names) > 80:
        names = names[:60] + "-" + hashlib.sha256(names.encode()).hexdigest()[:8]
    return RESULTS_DIR / f"{task}-{names}"


def _main(command: ProbeCommand) -> int:
    if command.task == "holmes":  # the Holmes runner, shared with its alias `dstg-holmes run`
        if torchrun_environment() is not None:
            raise ValueError("--task holmes does not share its work between ranks (each would run it whole): "
                             "run it without torchrun / dstg-launch")
        holmes_out = command.out or HOLMES_OUT
        results = run_config(command.holmes_config(), holmes_out, progress=command.progress,
                             threads=command.threads or HOLMES_THREADS)
        report(results, holmes_out)
        return 0
    out = Path(command.out or default_out(command.task, command.model))
    check_results_folder(out)  # a file, an unwritable place or foreign results: refused before the probe runs
    with ExitStack() as held:
        ranks = held.enter_context(torchrun_ranks("cuda" if str(command.device or "").startswith("cuda") else "cpu")) \
            if torchrun_environment() is not None else Ranks()
        if ranks.first:  # a second run on --out stops, naming this one
            held.enter_context(output_lock(out, "dstg-probe " + " ".join(sys.argv[1:])))
        results, record = run(command, ranks)
        if not ranks.first:  # rank 0 prints and writes the table every rank computed
            return 0
        task, segment = command.task, command.probe.segment
        title = f"held-out R² ({task}" + (f", {segment}" if task != "token" else "") + ") ± half the 95% CI"
        print(title)
        print(compact_table(results))
        print(LEGEND)
        if results.position_r2.notna().any():
            print("\nbeyond token position (position-only: a probe on one-hot token position, same tokens and folds; "
                  "partial R²: share of the variance left after token position that the states explain) [95% CI]")
            print(position_table(results))
        write_results(out, results, record)
    print(f"wrote {out / 'results.csv'} (the full table: {len(results.columns)} columns, controls and selectivity "
          f"included) and {out / 'results.json'}")
    return 0


def main(argv=None) -> int:
    return run_command(build_parser(), ProbeCommand, _main, argv, interrupted=lambda _: "no results were written")


if __name__ == "__main__":
    sys.exit(main())
