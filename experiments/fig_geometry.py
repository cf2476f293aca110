"""Figure: the position geometry of any encoder -- one command, one table (issue 63).

    dstg-figures geometry --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM --out my-figures/geometry
    python -m experiments.fig_geometry                            # the zoo's four variants at every --model-seeds, and the NoPE floor
    python -m experiments.fig_geometry --tiny --out /tmp/geometry  # tiny random models, seconds

For each model, one row per layer x subspace (DSTG: AP stream, semantic stream, full state; others: the full state)
and one for its learned position table, of geometry.csv.  A layer's input is its position basis: the mean of the
layer's states over the non-special tokens at each position of the held-out documents read from their start (the
probes' sequences), summed during one forward pass -- no activation store is written unless ``--store`` (then the
store ``dstg-probe`` keeps is extracted or reused, and read).  By default (``--sequences balanced``) the means are
over the sequences of the longest length that ``--min-count`` sequences reach, below that length, so every
position is held by the same sequences; over every sequence (``--sequences all``) position p is averaged over the
sequences longer than p only, and the NoPE floor, which has no position input, then reads as a smooth,
nearly one-dimensional curve (``analysis.geometry.balanced_selection``); each layer row's ``sequences`` column
says which.
Each row (``dstg_interp.analysis.geometry``, whose docstring defines every number exactly):

- PC1+PC2, PCs to 95% of the variance, participation ratio, DCT-II share of bins 0-3 (``low_freq_bins``) from
  ``spectra.analyze_table``, the spectra figures' code, each beside its smooth controls (``walk_*``: random walks
  of the same shape, ``smoothed_*``: noise smoothed to the table's own row-to-row correlation; mean and ``_q95``);
- ``mds_stress``: Kruskal stress-1 of the 2-D classical MDS of the positions (Euclidean distances between the
  rows; 0 = the positions lie on a plane), beside the same controls (``walk_mds_stress``, ``_q05``, ``_q95``).
  Not Cirrincione's Hellinger-distance stress (arXiv 2604.05217), which scores an encoding against the corpus's
  word distributions per position: see the analysis module;
- position-tied outlier dimensions (arXiv 2011.04393): mean magnitude > ``--outlier-sd`` sd above the mean over
  dimensions and position R² (between-position over total variance of that dimension) >= ``--min-position-r2``;
  ``n_outlier_dims`` and ``outlier_dims`` (space-separated indices);
- ``position_share`` (the between-position share of the layer's variance) and its ``chance_share``.
A model without a learned table (RoPE, RP, NoPE, most HF encoders) gets a table row with ``applies`` False and
``notes`` saying why; each such note is also one line on stderr (not with --quiet).  Left out: the token-position
probe R² (``dstg-probe`` fits it with its own folds and bootstrap, which this single pass does not sum).
start_end.csv, one row per model: the start-vs-end bias of the pooled embedding (``geometry.start_end_bias``: an
irrelevant sentence inserted at the start vs the end of 256 held-out documents read from their start; the mean
cosine change of the mean-pooled last layer each way, and their difference with a bootstrap interval over
documents; a model whose positions cannot hold the filler and a document has ``applies`` False and a note).
frequency_entropy.csv, for rotary models (RoPE-NeoBERT, ModernBERT): one row per layer x head x
rotation plane, the Frequency Entropy of the plane's query norm along the sequence
(``analysis.rope_bands.frequency_entropy``; 0 = one frequency, 1 = a flat spectrum) beside its frequency, its norm
rank in the head (0 = the high-norm band) and a white-noise control (mean, q05), on 64 full windows of 128 tokens.

Writes into ``--out`` (default dstg-results/figures/geometry/): geometry.csv (tidy, one row per model x seed x
source x layer x subspace), geometry.json (the rows, the notes, the definitions), geometry_leaderboard (models x
numbers: each learned table and last layer, dots = mean over seeds, bars = min-max, grey = controls) and
geometry_by_layer (per model: PC1+PC2 and participation ratio by layer beside the random-walk control) as PNG +
PDF + JSON, and config.json.  A model list of which no model gives 3 positions is one error line, exit 2, and
nothing is written.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from dstg_interp.analysis.geometry import (FILLER, MIN_POSITION_R2, OUTLIER_SD, SEQUENCE_SETS, STRESS_CONTROL_DRAWS,
                                           layer_statistics, sequence_lengths_of, sequence_selection, start_end_bias,
                                           state_geometry, store_statistics, table_geometry)
from dstg_interp.analysis.rope_bands import frequency_entropy, rotary_of
from dstg_interp.analysis.spectra import position_table
from dstg_interp.encoders import EncoderError
from dstg_interp.io import write_text_atomic
from dstg_interp.model.checkpoint import ZOO_FLOOR
from dstg_interp.plots.geometry import plot_geometry_by_layer, plot_geometry_leaderboard
from dstg_interp.plots.output import jsonable
from experiments.figure_inputs import (OUTPUT_DIR, FigureCannotRead, SeedsFigureConfig, figure_config, inputs_for,
                                       model_store, run_as_command, save_config, say_not_applicable,
                                       with_member_columns)
from experiments.fig_interventions import windows
from probes.positions import probing_sequences

MIN_COUNT, TINY_MIN_COUNT = 20, 3  # sequences a position must be held by (the tiny corpus has 40 documents)
COUNTS = ("layer", "n_positions", "width", "pcs_95", "n_outlier_dims", "n_tokens")
KEYS = ["model", "seed", "member", "source", "layer", "subspace", "applies"]
LEFT_OUT = {
    "token_position_probe_r2": "dstg-probe fits it with its own CV folds and bootstrap; this single pass sums "
                               "only per-position statistics (run dstg-probe --model ... for it)",
}
ENTROPY_WINDOWS, ENTROPY_LENGTH = 64, 128  # full windows each rotary model's query norms are averaged over
BIAS_DOCUMENTS = 256  # documents (from their start) the start-vs-end bias is read on


@dataclass
class GeometryConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "geometry"
    n_docs: int | None = field(default=None, metadata={"help": "a seeded sample of the held-out documents "
                                                                "(default: all of them, as the probes)"})
    min_count: int | None = field(default=None, metadata={
        "help": f"drop positions held by fewer sequences (layer rows; default {MIN_COUNT}, with --tiny "
                f"{TINY_MIN_COUNT}: its corpus has 40 documents)"})
    sequences: str = field(default="balanced", metadata={"choices": SEQUENCE_SETS, "help": (
        "the sequences a layer row averages: balanced (the --min-count or more sequences of the longest common "
        "length, read below it: every position held by the same sequences) or all (every sequence, as dstg-probe; "
        "a position's mean then also moves with which sequences reach it)")})
    stress_draws: int = field(default=STRESS_CONTROL_DRAWS, metadata={
        "help": "smooth tables drawn for each MDS-stress control"})
    outlier_sd: float = field(default=OUTLIER_SD, metadata={
        "help": "an outlier dimension's mean magnitude lies this many sd above the mean over dimensions"})
    min_position_r2: float = field(default=MIN_POSITION_R2, metadata={
        "help": "an outlier is position-tied when its per-position mean explains this share of its variance"})
    batch_size: int = field(default=32, metadata={"help": "sequences per forward pass"})
    store: bool = field(default=False, metadata={"help": "read the states from the activation store dstg-probe "
                                                         "keeps (extracted if absent) instead of summing them "
                                                         "during the forward pass"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_docs is not None and self.n_docs < 1:
            raise ValueError(f"--n-docs must be at least 1, got {self.n_docs}")
        if (self.min_count is not None and self.min_count < 1) or self.stress_draws < 1 or self.batch_size < 1:
            raise ValueError("--min-count, --stress-draws and --batch-size must be at least 1")
        if self.sequences not in SEQUENCE_SETS:
            raise ValueError(f"--sequences must be one of {', '.join(SEQUENCE_SETS)}, got {self.sequences!r}")
        if not self.outlier_sd > 0 or not 0 <= self.min_position_r2 <= 1:
            raise ValueError("--outlier-sd must be > 0 and --min-position-r2 within 0..1")


def table_row(model, config: GeometryConfig) -> dict:
    """The learned table's row of a model, or a row with ``applies`` False and the one-line reason."""
    try:
        table = position_table(model)
    except ValueError as err:  # RoPE / RP / NoPE / an HF encoder without a table
        why = str(err).split(" -- ")[0].rstrip(".")
        return {"applies": False, "notes": f"no table row: {why}"}
    row = table_geometry(table, "table", seed=config.seed, n_stress_draws=config.stress_draws,
                         n_sd=config.outlier_sd, min_r2=config.min_position_r2)
    return {"applies": True, **row}


def model_rows(inputs, name: str, encoder, config: GeometryConfig, min_count: int, progress: bool) -> list[dict]:
    """Every row of member ``name`` (opened as ``encoder``): its table row, then one per layer x subspace of its
    position basis."""
    variant, model_seed = inputs.member(name)
    member = {"model": variant, "seed": model_seed, "member": name}
    rows = [{**member, "source": "table", "layer": np.nan, "subspace": "table", **table_row(inputs.models[name], config)}]
    if config.store:
        store = model_store(inputs, name, progress=progress)
        lengths = sequence_lengths_of(store.labels)
    else:
        sequences = probing_sequences(encoder, inputs.documents)  # the sequences a store of dstg-probe's holds
        lengths = sequences.lengths
    try:
        chosen, below = sequence_selection(lengths, config.sequences, min_count)
    except ValueError as err:  # every layer row says so
        layers, subspaces = encoder.resolve(None, None)
        return rows + [{**member, "source": "layer", "layer": layer, "subspace": subspace, "applies": False,
                        "notes": f"no L{layer} {subspace} row: {err}"}
                       for layer in layers if isinstance(layer, int) for subspace in subspaces]
    if config.store:
        statistics = store_statistics(store, sequences=chosen, positions_below=below)
    else:
        statistics = layer_statistics(encoder, sequences if chosen is None else sequences.select(chosen),
                                      batch_size=config.batch_size, progress=progress, desc=f"sum states {name}",
                                      positions_below=below)
    for (layer, subspace), summed in statistics.items():
        try:
            row = {"applies": True, **state_geometry(summed, f"{name} L{layer} {subspace}", min_count, config.seed,
                                                     config.stress_draws, config.outlier_sd, config.min_position_r2)}
        except ValueError as err:
            row = {"applies": False, "notes": f"no L{layer} {subspace} row: {err}"}
        rows.append({**member, "source": "layer", "layer": layer, "subspace": subspace, "sequences": config.sequences,
                     **row})
    return rows


def entropy_rows(inputs, name: str, encoder, tiny: bool) -> pd.DataFrame | None:
    """Frequency Entropy of a rotary model's planes (``frequency_entropy``), or None for a model without rotary
    heads (every other position mechanism: nothing to read, nothing said)."""
    try:
        rotary_of(encoder, 0)
    except EncoderError:
        return None
    length = min(16 if tiny else ENTROPY_LENGTH, encoder.max_positions)
    tokens, mask = windows(encoder, inputs.documents, length, ENTROPY_WINDOWS)
    return with_member_columns(frequency_entropy(encoder, tokens, mask), inputs, name)


def bias_row(inputs, name: str, encoder, seed: int) -> dict:
    """``start_end_bias`` of a model on the first BIAS_DOCUMENTS held-out documents read from their start, with
    the member's model and seed columns; ``applies`` False and a note for a model whose positions cannot hold the
    filler and a document (a short tiny model)."""
    sequences = encoder.structured_sequences(inputs.documents[:BIAS_DOCUMENTS], max_length=encoder.max_positions,
                                             windows=False)
    special = {encoder.special.cls, encoder.special.sep}
    contents = [[t for t in sequences[i]["input_ids"] if t not in special] for i in range(len(sequences))]
    filler = encoder.tokenizer.encode(FILLER, add_special_tokens=False).ids
    variant, model_seed = inputs.member(name)
    member = {"model": variant, "seed": model_seed, "member": name}
    try:
        return {**member, "applies": True, **start_end_bias(encoder, contents, filler, seed=seed), "notes": ""}
    except ValueError as err:
        return {**member, "applies": False, "notes": f"no start-vs-end row: {err}"}


def run(config: GeometryConfig) -> dict:
    started = time.perf_counter()
    progress = not config.quiet
    min_count = config.min_count or (TINY_MIN_COUNT if config.tiny else MIN_COUNT)
    inputs = inputs_for(config, n_docs=config.n_docs, floor=config.model is None)  # the zoo's NoPE floor: a reference
    rows, entropies, biases = [], [], []
    for name in tqdm(list(inputs.models), desc="geometry", disable=not progress):
        encoder = inputs.encoder(name)  # opened once: the sums, the entropies and the bias all read it
        rows += model_rows(inputs, name, encoder, config, min_count, progress)
        entropies.append(entropy_rows(inputs, name, encoder, config.tiny))
        biases.append(bias_row(inputs, name, encoder, config.seed))
    table = pd.DataFrame(rows)
    layer_rows = table[table.source == "layer"]
    if not layer_rows.applies.any():
        first = layer_rows.groupby("member", sort=False).notes.first()  # one reason per model: its first layer's
        reasons = "; ".join(f"{member}: {why}" for member, why in first.items())
        raise FigureCannotRead(f"fig_geometry needs a layer whose position basis has 3 positions or more, and no "
                               f"model given has one ({reasons or 'no layer'})")
    table = table[KEYS + [c for c in table.columns if c not in KEYS]]
    table["notes"] = table["notes"].fillna("")
    for column in COUNTS:  # whole numbers stay whole beside the rows where they do not apply
        if column in table:
            table[column] = table[column].astype("Int64")
    notes = {f"{row.member} {row.source}" + ("" if row.source == "table" else f" L{int(row.layer)} {row.subspace}"):
             row.notes for row in table.itertuples() if row.notes}
    notes.update({f"{row['member']} start-vs-end": row["notes"] for row in biases if row["notes"]})
    if inputs.floor_note:
        notes[ZOO_FLOOR] = inputs.floor_note
    say_not_applicable("fig_geometry", notes, quiet=config.quiet)

    config.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(config.out / "geometry.csv", table.to_csv(index=False))
    write_text_atomic(config.out / "start_end.csv", pd.DataFrame(biases).to_csv(index=False))
    if any(frame is not None for frame in entropies):
        write_text_atomic(config.out / "frequency_entropy.csv",
                          pd.concat([f for f in entropies if f is not None], ignore_index=True).to_csv(index=False))
    definitions = {"input": "layer rows: per-position mean of the layer's non-special token states over the held-out "
                            f"documents ({config.sequences}: see the sequences flag), positions held by >= {min_count} "
                            "sequences; table rows: the learned table",
                   "mds_stress": "Kruskal stress-1 of the 2-D classical MDS of the positions' Euclidean distances",
                   "outlier_dims": f"mean |h| > mean + {config.outlier_sd} sd over dimensions and position R^2 >= "
                                   f"{config.min_position_r2}",
                   "controls": "walk_*: random walks of the same shape; smoothed_*: white noise smoothed to the "
                               "table's lag-1 autocorrelation (spectra.smooth_controls)"}
    record = {"rows": table, "notes": notes, "left_out": LEFT_OUT, "definitions": definitions,
              "route": "store" if config.store else "storeless"}
    write_text_atomic(config.out / "geometry.json", json.dumps(jsonable(record), indent=1) + "\n")
    plot_geometry_leaderboard(table, config.out)
    plot_geometry_by_layer(table, config.out)
    save_config(config, "experiments/fig_geometry.py", min_count_used=min_count, inputs=inputs.description,
                notes=notes, left_out=LEFT_OUT, wall_s=round(time.perf_counter() - started, 1))
    if progress:
        columns = ["member", "source", "layer", "subspace", "pc1_pc2", "walk_pc1_pc2_q95", "participation_ratio",
                   "low_freq_share", "mds_stress", "walk_mds_stress", "n_outlier_dims"]
        print(table[table.applies.astype(bool)][columns].to_string(index=False, float_format="%.3f"))
    return {"geometry": table, "notes": notes}


def main(argv=None) -> dict:
    return run(figure_config(GeometryConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_geometry"))
