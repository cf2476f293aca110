"""Figure: linear position probes by layer -- token, segment and intra-segment position, all models and subspaces.

    python -m experiments.fig_probes                        # the zoo (stores reused)
    python -m experiments.fig_probes --tiny --out /tmp/fig  # tiny random models, seconds
    python -m experiments.fig_probes --variants dstg --model-seeds 1 --out /tmp/p/dstg1   # one part of the run ...
    python -m experiments.fig_probes --combine /tmp/p/dstg1 /tmp/p/ap0 ...                # ... and the parts merged
    python -m experiments.fig_probes --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM   # your models

With ``--model`` (any models ``dstg-probe --model`` takes, named by ``--name``) the members are those models, each
under its name; a model with one entangled stream is probed as its full state, and the script says so.

For each zoo member (variant x training seed, ``--model-seeds``) and each probe -- token position; segment index (sentence, paragraph); intra-segment
position (sentence, paragraph) -- ``probes.positions.probe_store`` fits a ridge probe per layer x subspace
on the model's store (held-out documents): penalty by grouped 5-fold CV on the training documents, R² on
held-out documents with a bootstrap CI over documents, and two controls (a random-init twin's store, and
the target shuffled within each document), and the position-only baseline (one-hot token position; the
partial R² of the states given it, ``probes.position_baseline``).  DSTG has ap / sem / full subspaces, the entangled baselines
only full.  Stores, documents and probe settings are ``dstg-probe``'s, so its tables and this figure
agree to the last digit (``dstg-probe --model dstg rope ap rp --task segment`` is the segment/sentence
block of probes.csv's seed-0 rows).

The floor.  Where the zoo holds it, NoPE-NeoBERT (``nope``: the same encoder with no positional input at all,
trained with the zoo's recipe) is probed too, as one more member (``model`` nope): what an MLM encoder recovers
of each target from content alone, the reading every model with position input is compared with
(``experiments.claims``, the ``floor_*`` rules).  Where the zoo lacks it, the run says so on stderr and in
config.json (``inputs.floor``) with the command that trains it, and the tables have no nope rows.

Paragraph-level probes read the paragraph-crossing windows of the same documents
(``probes.positions.probing_sequences``).

Writes into ``--out`` (default dstg-results/figures/probes/; the committed gallery: --out figures/probes): probes.csv (one row per model x seed x task x segment x layer
x subspace, the columns of ``probes.positions.RESULT_COLUMNS`` plus ``seed``), probes_over_seeds.csv (mean
over seeds, interval from the lowest seed's CI low to the highest seed's CI high, as the claims table), r2_by_layer (PNG + PDF + JSON, drawn from probes_over_seeds.csv),
partial_over_seeds.csv and partial_r2_by_layer (the partial R² given token position, the same way; with the
position-only R² beside it) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from dstg_interp.progress import progress_bar

from dstg_interp.plots import plot_r2_by_layer
from dstg_interp.model.checkpoint import ZOO_FLOOR, ZOO_NAMES
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, ZooIncomplete, inputs_for, model_store,
                                       over_seeds, figure_config, random_init_store, run_as_command, sample_docs_field, save_config,
                                       say_not_applicable, stream_notes, with_member_columns)
from probes.positions import PositionProbeConfig, probe_store, reads_paragraph_windows

# token position is the same target whatever the segment: probed once
PROBES = (("token", "sentence"), ("segment", "sentence"), ("segment", "paragraph"),
          ("intra", "sentence"), ("intra", "paragraph"))
PROBE_DEFAULTS = PositionProbeConfig()  # dstg-probe's settings: the same numbers in every table


@dataclass
class ProbesFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "probes"
    n_docs: int | None = sample_docs_field("dstg-probe")
    max_tokens: int | None = field(default=PROBE_DEFAULTS.max_tokens, metadata={
        "help": "a seeded subsample of tokens per probe (default: every token of the store, as dstg-probe)"})
    n_boot: int = field(default=PROBE_DEFAULTS.n_boot, metadata={"help": "bootstrap resamples of test documents"})
    variants: list[str] | None = field(default=None, metadata={
        "help": "probe only these zoo variants (with --model: these names) (default: all); with --model-seeds, a part "
                "of the run"})
    combine: list[Path] | None = field(default=None, metadata={
        "help": "no probing: merge the probes.csv of these earlier runs (parts of one run, the same settings) and "
                "write the tables and figures from them"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_docs is not None and self.n_docs < 10:
            raise ValueError(f"n_docs must be at least 10 (grouped CV needs documents), got {self.n_docs}")


def probe_all(inputs, config: ProbesFigureConfig) -> pd.DataFrame:
    """Every probe of PROBES on every zoo member (variant x training seed), all layers and subspaces, with both
    controls; ``model`` is the variant, ``seed`` the training seed."""
    progress = not config.quiet
    tables = []
    for name in inputs.models:
        if config.variants is not None and inputs.member(name)[0] not in config.variants:
            continue
        stores = {}  # paragraph_windows -> (store, control): two stores per member, opened once
        for task, segment in progress_bar(PROBES, desc=f"probes {name}", disable=not progress):
            windows = reads_paragraph_windows(task, segment)
            if windows not in stores:
                stores[windows] = (model_store(inputs, name, progress=progress, paragraph_windows=windows),
                                   random_init_store(inputs, name, progress=progress, paragraph_windows=windows))
            store, control = stores[windows]
            probe = PositionProbeConfig(task=task, segment=segment, max_tokens=config.max_tokens, n_boot=config.n_boot,
                                        seed=config.seed)
            tables.append(with_member_columns(probe_store(store, probe, model_name=name, control_store=control),
                                              inputs, name))
    return pd.concat(tables, ignore_index=True)


def run(config: ProbesFigureConfig) -> dict:
    started = time.perf_counter()
    if config.combine:  # parts of one run (e.g. one member per process): their rows, in the usual order
        results = pd.concat([pd.read_csv(Path(folder) / "probes.csv") for folder in config.combine], ignore_index=True)
        order = {variant: i for i, variant in enumerate((*ZOO_NAMES, ZOO_FLOOR))}
        results = results.sort_values(["model", "seed"], key=lambda c: c.map(order) if c.name == "model" else c,
                                      kind="stable").reset_index(drop=True)
        description: dict[str, Any] = {"combined": [str(folder) for folder in config.combine]}
    else:
        floor = config.model is None and (config.variants is None or ZOO_FLOOR in config.variants)
        inputs = inputs_for(config, n_docs=config.n_docs, floor=floor)
        if inputs.floor_note and config.variants is not None:  # asked for by name: its absence is an error
            raise ZooIncomplete(inputs.floor_note)
        notes = stream_notes(inputs)
        say_not_applicable("fig_probes", notes, {ZOO_FLOOR: inputs.floor_note} if inputs.floor_note else {},
                           quiet=config.quiet)
        results = probe_all(inputs, config)
        description = dict(inputs.description, notes=notes) if notes else inputs.description
    config.out.mkdir(parents=True, exist_ok=True)
    results.to_csv(config.out / "probes.csv", index=False)
    keys = ["model", "task", "segment", "layer", "subspace"]
    by_model = over_seeds(results, keys)
    by_model.to_csv(config.out / "probes_over_seeds.csv", index=False)
    plot_r2_by_layer(by_model, config.out, stem="r2_by_layer")
    if results.partial_r2.notna().any():  # beyond token position: the partial R² and its interval over seeds
        partial = over_seeds(results, keys, value="partial_r2", low="partial_ci_low", high="partial_ci_high",
                             means=("r2", "position_r2", "position_smooth_r2", "position_selectivity"))
        partial.to_csv(config.out / "partial_over_seeds.csv", index=False)
        plot_r2_by_layer(partial, config.out, stem="partial_r2_by_layer", value="partial_r2", low="partial_ci_low",
                         high="partial_ci_high", ylabel="partial R² given token position")
    save_config(config, "experiments/fig_probes.py", probes=PROBES, inputs=description,
                wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        last = results[results.layer == results.groupby("model").layer.transform("max")]  # mean over seeds
        print(last.pivot_table(index=["model", "subspace"], columns=["task", "segment"], values="r2")
              .to_string(float_format="%.3f"))
    return {"results": results}


def main(argv=None) -> dict:
    return run(figure_config(ProbesFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_probes"))
