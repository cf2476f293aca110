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
- ``position_share`` (the between-position share of the layer's variance) and its ``chance_share``;
- the token-position probe (``token_probe_*``): dstg-probe's ridge probe of token position, its protocol and default
  storeless route (``probes.positions.probe_sequences``: fig_probes' token-position numbers), over every
  layer x subspace on the probes' sequences: held-out R² (``token_probe_r2``) with its bootstrap interval over
  documents (``_ci_low``, ``_ci_high``; undefined under 10 held-out documents), beside the random-init twin's R²
  (``token_probe_random_init_r2``, kept in the cache's controls/ as dstg-probe keeps it) and the shuffled-target
  R² (``token_probe_shuffled_r2``);
- head classes for any encoder (``analysis.head_split``), on the full-state row of the layer a block reads (block l
  reads layer l): each head's q.k over ``--head-windows`` held-out windows of 64 tokens split by the per-position
  mean of its queries and keys into a position, a context and two cross terms, the heads named by DSTG's rule
  (positional / semantic / mixed: a term with >= 60% of the within-query variance whose removal changes the
  pattern most): ``n_heads``, the share of the block's heads in each class (``heads_positional``,
  ``heads_semantic``, ``heads_mixed``), the mean term shares (``head_share_position`` / ``_context`` / ``_cross``)
  and the control (``heads_positional_control``, ``head_share_position_control``: the means over positions
  shuffled within each window).  ``heads_note`` says why a layer row has none (the last layer, DSTG's stream rows,
  a sliding-window block, an HF family whose queries and keys the adapter does not read).
A model without a learned table (RoPE, RP, NoPE, most HF encoders) gets a table row with ``applies`` False and
``notes`` saying why; each such note is also one line on stderr (not with --quiet).
start_end.csv, one row per model: the start-vs-end bias of the pooled embedding (``geometry.start_end_bias``: an
irrelevant sentence inserted at the start vs the end of 256 held-out documents read from their start; the mean
cosine change of the mean-pooled last layer each way, and their difference with a bootstrap interval over
documents; a model whose positions cannot hold the filler and a document has ``applies`` False and a note).
frequency_entropy.csv, for rotary models (RoPE-NeoBERT, ModernBERT): one row per layer x head x
rotation plane, the Frequency Entropy of the plane's query norm along the sequence
(``analysis.rope_bands.frequency_entropy``; 0 = one frequency, 1 = a flat spectrum) beside its frequency, its norm
rank in the head (0 = the high-norm band) and a white-noise control (mean, q05), on 64 full windows of 128 tokens.

head_split.csv: one row per model x seed x block x head, its term shares, label and the control's; head_split_sweep.csv
and head_split_sweep (PNG + PDF + JSON): the labels for dominant shares 0.40 to 0.90 (``heads.threshold_sweep``), one
panel per class; head_split_check.csv, for DSTG: each head's
split beside its own logit terms on the same windows (``head_split.term_agreement``; its summary -- Pearson r of
the position share with the AP + RP share, class agreement -- in geometry.json under ``head_split_check``).

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
from dstg_interp.progress import progress_bar

from dstg_interp.analysis.geometry import (FILLER, MIN_POSITION_R2, OUTLIER_SD, SEQUENCE_SETS, STRESS_CONTROL_DRAWS,
                                           layer_statistics, sequence_lengths_of, sequence_selection, start_end_bias,
                                           state_geometry, store_statistics, table_geometry)
from dstg_interp.analysis.head_split import (classify_split_heads, head_split_stats, layer_class_shares,
                                             term_agreement, unread_blocks)
from dstg_interp.analysis.heads import DOMINANT_SHARE, classify_heads, head_summaries_from_cache, threshold_sweep
from dstg_interp.analysis.rope_bands import frequency_entropy, rotary_of
from dstg_interp.analysis.spectra import position_table
from dstg_interp.data import default_cache_dir
from dstg_interp.encoders import EncoderError
from dstg_interp.io import write_text_atomic
from dstg_interp.model.checkpoint import ZOO_FLOOR
from dstg_interp.plots.geometry import plot_geometry_by_layer, plot_geometry_leaderboard, plot_head_split_sweep
from dstg_interp.plots.output import jsonable
from experiments.figure_inputs import (OUTPUT_DIR, FigureCannotRead, SeedsFigureConfig, figure_config, inputs_for,
                                       model_store, run_as_command, sample_docs_field, save_config, say_not_applicable,
                                       with_member_columns)
from experiments.fig_interventions import windows
from probes.positions import CONTROLS_FOLDER, PositionProbeConfig, probe_sequences, probing_sequences

MIN_COUNT, TINY_MIN_COUNT = 20, 3  # sequences a position must be held by (the tiny corpus has 40 documents)
COUNTS = ("layer", "n_positions", "width", "pcs_95", "n_outlier_dims", "n_tokens", "n_heads", "token_probe_n_test_docs")
KEYS = ["model", "seed", "member", "source", "layer", "subspace", "applies"]
HEAD_LENGTH, TINY_HEAD_LENGTH = 64, 16  # tokens per window the heads' q.k is split over (fig_decomposition's 64)
# the token-position probe's columns of a layer row (dstg-probe's result columns, renamed)
PROBE_COLUMNS = {"r2": "token_probe_r2", "ci_low": "token_probe_ci_low", "ci_high": "token_probe_ci_high",
                 "random_init_r2": "token_probe_random_init_r2", "shuffled_r2": "token_probe_shuffled_r2",
                 "n_test_docs": "token_probe_n_test_docs"}
ENTROPY_WINDOWS, ENTROPY_LENGTH = 64, 128  # full windows each rotary model's query norms are averaged over
BIAS_DOCUMENTS = 256  # documents (from their start) the start-vs-end bias is read on


@dataclass
class GeometryConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "geometry"
    n_docs: int | None = sample_docs_field()
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
    head_windows: int = field(default=128, metadata={
        "help": f"held-out windows of {HEAD_LENGTH} tokens (--tiny: {TINY_HEAD_LENGTH}) whose per-position mean "
                "splits each head's q.k into position and context terms"})
    store: bool = field(default=False, metadata={"help": "read the states from the activation store dstg-probe "
                                                         "keeps (extracted if absent) instead of summing them "
                                                         "during the forward pass"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_docs is not None and self.n_docs < 1:
            raise ValueError(f"--n-docs must be at least 1, got {self.n_docs}")
        if (self.min_count is not None and self.min_count < 1) or self.stress_draws < 1 or self.batch_size < 1:
            raise ValueError("--min-count, --stress-draws and --batch-size must be at least 1")
        if self.head_windows < 2:
            raise ValueError(f"--head-windows must be at least 2 (a per-position mean over windows), got {self.head_windows}")
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


def member_first(table: pd.DataFrame) -> pd.DataFrame:
    return table[["model", "seed", "member"] + [c for c in table.columns if c not in ("model", "seed", "member")]]


def head_classes(inputs, name: str, encoder, config: GeometryConfig) -> dict:
    """The heads of member ``name`` split into position / context terms (``analysis.head_split``) on
    ``--head-windows`` held-out windows: {"heads": one row per head (its shares and label, the shuffled-position
    control's beside), "blocks": one row per block (``layer_class_shares`` and the control's positional share),
    "check": DSTG's agreement with its own logit terms (None for another model), "unread": {block: why},
    "why": one line when no head could be read (else None)}."""
    length = min(TINY_HEAD_LENGTH if config.tiny else HEAD_LENGTH, encoder.max_positions)
    try:
        tokens, _ = windows(encoder, inputs.documents, length, config.head_windows)
        split = classify_split_heads(head_split_stats(encoder, tokens, model_name=name, seed=config.seed))
        control = classify_split_heads(head_split_stats(encoder, tokens, model_name=name, seed=config.seed,
                                                        shuffle_positions=True))
    except (EncoderError, FigureCannotRead) as err:
        return {"heads": None, "blocks": None, "check": None, "unread": {}, "why": f"no head classes: {err}"}
    keys = ["layer", "head"]
    heads = split.merge(control[keys + ["share_position", "label"]].rename(
        columns={"share_position": "share_position_control", "label": "label_control"}), on=keys)
    blocks = layer_class_shares(heads).merge(
        layer_class_shares(control)[["layer", "heads_positional", "head_share_position"]].rename(
            columns={"heads_positional": "heads_positional_control",
                     "head_share_position": "head_share_position_control"}), on="layer")
    check = None
    if encoder.kind != "hf" and {"sem", "ap"} <= set(encoder.logit_terms):  # DSTG: its own terms on the same pairs
        terms = classify_heads(head_summaries_from_cache(encoder, tokens, model_name=name, drop_ends=True))
        merged, summary = term_agreement(split, terms)
        check = {"heads": member_first(with_member_columns(merged.drop(columns="model"), inputs, name).assign(member=name)),
                 "summary": summary}
    return {"heads": member_first(with_member_columns(heads.drop(columns="model"), inputs, name).assign(member=name)),
            "blocks": blocks.assign(member=name, n_windows=len(tokens), window_tokens=length), "check": check,
            "unread": unread_blocks(encoder, length), "why": None}


def head_columns(table: pd.DataFrame, found: dict) -> pd.DataFrame:
    """The layer rows of ``table`` with each block's head classes on the full-state row of the layer it reads
    (block l reads layer l) and ``heads_note`` saying why a layer row has none."""
    blocks = pd.concat([f["blocks"] for f in found.values() if f["blocks"] is not None], ignore_index=True) \
        if any(f["blocks"] is not None for f in found.values()) else pd.DataFrame(columns=["member", "layer"])
    blocks = blocks.assign(source="layer", subspace="full")
    table = table.merge(blocks, on=["member", "source", "layer", "subspace"], how="left")
    last = table[table.source == "layer"].groupby("member").layer.max()

    def note(row) -> str:
        if row.source != "layer" or pd.notna(row.n_heads):
            return ""
        member = found.get(row.member, {})
        if member.get("why"):
            return member["why"]
        if row.subspace != "full":
            return "head classes are per block: on the layer's full-state row"
        if row.layer == last[row.member]:
            return "no block reads the last layer (the last block's heads are on the row of the layer it reads)"
        return member.get("unread", {}).get(int(row.layer), "")
    return table.assign(heads_note=[note(row) for row in table.itertuples()])


def probe_columns(inputs, name: str, encoder, config: GeometryConfig) -> pd.DataFrame:
    """The token-position probe of every layer x subspace of member ``name`` (``probes.positions.probe_sequences``:
    dstg-probe's protocol and its default, storeless route, on the probes' sequences of the held-out documents):
    held-out R² and its bootstrap interval over documents, the random-init twin's R² and the shuffled-target
    control's, under ``PROBE_COLUMNS``' names."""
    probe = PositionProbeConfig(task="token", position_baseline=False, seed=config.seed)
    table = probe_sequences(encoder, probing_sequences(encoder, inputs.documents), probe, model_name=name,
                            progress=not config.quiet, batch_size=config.batch_size,
                            control_cache=default_cache_dir() / CONTROLS_FOLDER)
    table = table[["layer", "subspace", *PROBE_COLUMNS]].rename(columns=PROBE_COLUMNS)
    return table.assign(member=name, source="layer")


def run(config: GeometryConfig) -> dict:
    started = time.perf_counter()
    progress = not config.quiet
    min_count = config.min_count or (TINY_MIN_COUNT if config.tiny else MIN_COUNT)
    inputs = inputs_for(config, n_docs=config.n_docs, floor=config.model is None)  # the zoo's NoPE floor: a reference
    rows, entropies, biases, found, probes = [], [], [], {}, []
    for name in progress_bar(list(inputs.models), desc="geometry", disable=not progress):
        encoder = inputs.encoder(name)  # opened once: every number of the model reads it
        rows += model_rows(inputs, name, encoder, config, min_count, progress)
        entropies.append(entropy_rows(inputs, name, encoder, config.tiny))
        biases.append(bias_row(inputs, name, encoder, config.seed))
        found[name] = head_classes(inputs, name, encoder, config)
        probes.append(probe_columns(inputs, name, encoder, config))
    table = pd.DataFrame(rows)
    table = head_columns(table.merge(pd.concat(probes, ignore_index=True), on=["member", "source", "layer", "subspace"],
                                     how="left"), found)
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
    notes.update({f"{member} heads": f["why"] for member, f in found.items() if f["why"]})
    if inputs.floor_note:
        notes[ZOO_FLOOR] = inputs.floor_note
    say_not_applicable("fig_geometry", notes, quiet=config.quiet)

    config.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(config.out / "geometry.csv", table.to_csv(index=False))
    write_text_atomic(config.out / "start_end.csv", pd.DataFrame(biases).to_csv(index=False))
    heads = [f["heads"] for f in found.values() if f["heads"] is not None]
    checks = {member: f["check"] for member, f in found.items() if f["check"] is not None}
    if heads:
        heads_table = pd.concat(heads, ignore_index=True)
        write_text_atomic(config.out / "head_split.csv", heads_table.to_csv(index=False))
        sweep = threshold_sweep(heads_table, by=("model", "seed", "member"), classify=classify_split_heads)
        write_text_atomic(config.out / "head_split_sweep.csv", sweep.to_csv(index=False))
        plot_head_split_sweep(sweep, config.out, DOMINANT_SHARE)
    if checks:
        write_text_atomic(config.out / "head_split_check.csv", pd.concat(
            [c["heads"] for c in checks.values()], ignore_index=True).to_csv(index=False))
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
                               "table's lag-1 autocorrelation (spectra.smooth_controls)",
                   "heads": f"block l's heads on layer l's full-state row: each head's q.k over {config.head_windows} "
                            "held-out windows split by the per-position mean of its queries and keys into position, "
                            "context and two cross terms (analysis.head_split); heads_<class>: share of the block's "
                            "heads named positional / semantic / mixed by DSTG's rule (a term with >= "
                            f"{DOMINANT_SHARE} of the within-query variance whose removal changes the pattern most); "
                            "*_control: the same with the means over positions shuffled within each window",
                   "token_probe": "dstg-probe's token-position ridge probe (storeless route): held-out R² with a "
                                  "bootstrap interval over documents, beside the random-init twin's and the "
                                  "shuffled-target R²"}
    record = {"rows": table, "notes": notes, "definitions": definitions,
              "head_split_check": {member: c["summary"] for member, c in checks.items()},
              "route": "store" if config.store else "storeless"}
    write_text_atomic(config.out / "geometry.json", json.dumps(jsonable(record), indent=1) + "\n")
    plot_geometry_leaderboard(table, config.out)
    plot_geometry_by_layer(table, config.out)
    save_config(config, "experiments/fig_geometry.py", min_count_used=min_count, inputs=inputs.description,
                notes=notes, wall_s=round(time.perf_counter() - started, 1))
    if progress:
        columns = ["member", "source", "layer", "subspace", "pc1_pc2", "walk_pc1_pc2_q95", "participation_ratio",
                   "low_freq_share", "mds_stress", "walk_mds_stress", "n_outlier_dims", "token_probe_r2",
                   "token_probe_random_init_r2", "heads_positional", "heads_positional_control"]
        print(table[table.applies.astype(bool)][columns].to_string(index=False, float_format="%.3f"))
    return {"geometry": table, "notes": notes, "head_split_check": {m: c["summary"] for m, c in checks.items()}}


def main(argv=None) -> dict:
    return run(figure_config(GeometryConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_geometry"))
