"""Figure: the AP manifold -- PCA and DCT of learned position tables and of per-position mean layer states.

    python -m experiments.fig_ap_manifold                 # the zoo + MiniLM (no store: sums in the forward pass)
    python -m experiments.fig_ap_manifold --tiny --out /tmp/fig   # tiny random models, seconds
    python -m experiments.fig_ap_manifold --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM   # your models

Two families of position tables (rows = positions), each analysed by ``dstg_interp.analysis.spectra.analyze_table``
(PCA centred over positions, DCT-II of PC1/PC2, share of power in the first 4 bins, Gaussian control):
1. learned tables: DSTG's AP table, AP-NeoBERT's entangled table and MiniLM's 512x384 table as a real-world
   reference, each next to one Gaussian table of the same shape ("random PxD") drawn with the seed;
   RoPE/RP have no table -- the script says so and covers them in 2.
2. layer states: the position basis (``dstg_interp.analysis.position_basis``: the per-position mean of the
   non-special tokens' states) of every zoo model (DSTG ap/sem/full, baselines full) over the held-out documents
   (the probes' sequences; the sums taken during one forward pass per model, no store written unless ``--store``,
   which reads the stores dstg-probe keeps: the same numbers to float16 rounding), and of all-MiniLM-L6-v2 as a
   real-world reference (not with --no-minilm), at every
   layer; the spectra figures show the last layer, ``layers_position_share``
   every layer: the share of the layer's variance the basis explains, against its chance level.  By default
   (``--sequences balanced``) each position is averaged over the same sequences: those of the longest length
   ``--min-count`` documents reach, below it (over every sequence, ``--sequences all``, position p is averaged over
   the longer sequences only, and a model without position input reads as a smooth curve: REPORT §13).

With ``--model`` the models are those given, under their names (``--name``), without the MiniLM reference (give
it as one of them): each learned table (DSTG's AP table, an entangled model's or a Hugging Face encoder's
position table) in part 1, every model in part 2; a model with no table (RoPE, RP) is said in one line, and so
is an entangled one (its layer states are read whole, with no AP / semantic split).

Tables of different widths (DSTG's 16-wide AP table, AP-NeoBERT's 128-wide one, per-position means of
16 to 128 dims) are compared width-matched: every table is also projected onto ``--projections`` random
subspaces of the narrowest learned table's width (``spectra.width_matched``), with the Gaussian control of
that shape, and each number's excess over its control is reported (``matched_*``, ``excess_*``).

Writes into ``--out`` (default dstg-results/figures/ap_manifold/; the committed gallery: --out figures/ap_manifold): tables_{scree,pc_curves,dct}, layers_{scree,pc_curves,
dct}, layers_position_share as PNG + PDF + JSON, spectra.csv (one row per analysed table: PC1+PC2, participation ratio,
low-frequency share pooled and per PC, with the control next to each, the excess over it, and the same
width-matched with its spread over projections) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from dstg_interp.progress import progress_bar

from dstg_interp import load_hf_encoder, open_encoder
from dstg_interp.analysis.geometry import SEQUENCE_SETS, layer_statistics, sequence_lengths_of, sequence_selection
from dstg_interp.analysis.position_basis import basis_from_statistics, position_basis
from dstg_interp.analysis.spectra import DEFAULT_PROJECTIONS, analyze_table, position_table, spectra_table
from dstg_interp.encoders import fetch_minilm
from dstg_interp.store.config import ALL_SUBSPACES
from dstg_interp.plots import measurements, plot_by_layer, plot_dct_power, plot_pc_curves, plot_scree
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, inputs_for, model_store, figure_config, run_as_command,
                                       sample_docs_field, save_config, say_not_applicable, stream_notes)
from probes.positions import probing_sequences

TABLE_NAMES = {"dstg": "dstg AP table", "ap": "ap table (entangled)"}
MINILM = "all-MiniLM-L6-v2"  # the real-world reference: its learned table and its layers' position basis
# what the position basis adds to each layer row of spectra.csv
BASIS_COLUMNS = ("position_share", "chance_share", "n_tokens", "mean_standard_error", "mean_spread_of_means")


@dataclass
class ApManifoldConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "ap_manifold"
    n_docs: int | None = sample_docs_field()
    min_count: int = field(default=20, metadata={"help": "drop positions held by fewer documents (layer states)"})
    sequences: str = field(default="balanced", metadata={"choices": SEQUENCE_SETS, "help": (
        "the sequences a layer's position basis averages: balanced (the --min-count or more sequences of the longest "
        "common length, read below it: every position held by the same sequences) or all (every sequence, as "
        "dstg-probe; a position's mean then also moves with which sequences reach it)")})
    control_draws: int = field(default=20, metadata={"help": "Gaussian tables averaged for each control"})
    no_minilm: bool = field(default=False, metadata={"help": "skip the MiniLM reference table (always with --model)"})
    projections: int = field(default=DEFAULT_PROJECTIONS, metadata={
        "help": "random subspaces of the narrowest table's width, for the width-matched numbers"})
    store: bool = field(default=False, metadata={"help": "read the layer states from the activation store dstg-probe "
                                                         "keeps (extracted if absent) instead of summing them "
                                                         "during the forward pass"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_count < 1 or self.control_draws < 0 or self.projections < 1:
            raise ValueError("min_count and projections must be >= 1 and control_draws >= 0")
        if self.sequences not in SEQUENCE_SETS:
            raise ValueError(f"--sequences must be one of {', '.join(SEQUENCE_SETS)}, got {self.sequences!r}")


def learned_table_spectra(inputs, seed: int, n_control_draws: int, with_minilm: bool,
                          n_projections: int = DEFAULT_PROJECTIONS, progress: bool = False) -> tuple[list, list, dict]:
    """Spectra of every learned position table (+ one random table of each shape), width-matched to the
    narrowest zoo table; notes on what was skipped."""
    spectra, random_spectra, notes = [], [], {}
    tables, members = {}, {}
    for name, model in inputs.models.items():
        variant, model_seed = inputs.member(name)
        try:
            label = table_label(inputs, name)
            tables[label] = position_table(model)
            members[label] = (variant, model_seed, table_label(inputs, name, with_seed=False))
        except ValueError as err:  # RoPE / RP: no table; their layer-state version is in part 2
            notes[variant] = (NO_TABLE if inputs.given else str(err).split(" -- ")[0] + " (layers_* below)")
    if with_minilm:
        try:
            tables[f"MiniLM table ({MINILM})"] = load_hf_encoder(fetch_minilm()).ap_table.detach().double().numpy()
        except Exception as err:  # a reference point only: the figures still make sense without it
            notes["minilm"] = f"MiniLM reference skipped: {err}"
    rng = np.random.default_rng(seed)
    first = min((s for _, s, _ in members.values()), default=0)
    width = match_width(tables[name] for name in members)
    for name, table in progress_bar(tables.items(), desc="table spectra", total=len(tables), disable=not progress):
        spectrum = analyze_table(table, name=name, n_control_draws=n_control_draws, seed=seed, match_width=width,
                                 n_projections=n_projections)
        if name in members:
            spectrum.summary.update(model=members[name][0], seed=members[name][1], group=members[name][2])
        spectra.append(spectrum)
        if name in members and members[name][1] != first:
            continue  # one random table per shape is enough
        shape = table.shape
        random_table = rng.standard_normal(shape)
        random_spectra.append(analyze_table(random_table, name=f"random {shape[0]}x{shape[1]}",
                                            n_control_draws=0, seed=seed))
    return spectra, random_spectra, notes


NO_TABLE = ("no learned position table (position enters inside attention): its spectra come from the position "
            "basis of its hidden states (layers_* figures)")


def table_label(inputs, name: str, with_seed: bool = True) -> str:
    """How the tables figures title a member's learned table: the zoo's by variant (``dstg AP table``, later
    seeds ``dstg AP table (seed 1)``; ``with_seed=False``: the name the seeds share, which the figures group by), a
    --model member by its name (``mine AP table``, ``MiniLM position table (entangled)``)."""
    variant, model_seed = inputs.member(name)
    if not inputs.given:
        seed = f" (seed {model_seed})" if model_seed and with_seed else ""
        return TABLE_NAMES.get(variant, f"{variant} table") + seed
    streams = "sem" in inputs.encoder(name).subspaces
    return f"{name} AP table" if streams else f"{name} position table (entangled)"


def match_width(tables) -> int | None:
    """The width every table is projected to: the narrowest one's (None without tables)."""
    return min((table.shape[1] for table in tables), default=None)


def member_bases(inputs, name: str, path, min_count: int, sequences: str, store: bool, progress: bool) -> dict:
    """{(layer, subspace): PositionBasis} of one member (``path``: a model outside the zoo, e.g. MiniLM): summed
    during one forward pass (``geometry.layer_statistics``), or read from its store with ``store``."""
    if store:
        source = model_store(inputs, name, progress=progress, model=path)
        chosen, below = sequence_selection(sequence_lengths_of(source.labels), sequences, min_count)
        return {(layer, subspace): position_basis(source, layer, subspace, max_positions=below,
                                                  min_documents=min_count, sequences=chosen, control_draws=0)
                for layer in source.layers if isinstance(layer, int) for subspace in source.subspaces}
    encoder = open_encoder(inputs.models[name] if path is None else path)
    every = probing_sequences(encoder, inputs.documents)  # the sequences dstg-probe's store holds
    chosen, below = sequence_selection(every.lengths, sequences, min_count)
    layers = [layer for layer in encoder.layers if isinstance(layer, int)]
    subspaces = [subspace for subspace in ALL_SUBSPACES if subspace in encoder.subspaces]  # a store's order
    statistics = layer_statistics(encoder, every if chosen is None else every.select(chosen), layers, subspaces,
                                  progress=progress, desc=f"sum states {name}", positions_below=below)
    return {(layer, subspace): basis_from_statistics(statistics[(layer, subspace)], min_count, f"layer {layer} {subspace}",
                                                     control_draws=0)  # the spectra below carry the controls
            for layer in layers for subspace in subspaces}


def layer_state_spectra(inputs, min_count: int, seed: int, n_control_draws: int, progress: bool,
                        width: int | None = None, n_projections: int = DEFAULT_PROJECTIONS,
                        references: dict | None = None, sequences: str = "balanced", store: bool = False) -> list:
    """Spectra of the position basis (``analysis.position_basis``: per-position means of the non-special
    tokens, positions held by at least ``min_count`` documents; ``sequences`` "balanced": over the sequences of
    the longest length ``min_count`` of them reach, below it, ``analysis.geometry.balanced_selection``) of every
    model x layer x subspace (the last layer is what the figures show), width-matched to ``width`` (None: each
    table at its own width), with the basis's position share of the layer's variance, its chance level and the
    means' standard error; ``references``: name -> path of models outside the zoo (MiniLM) read the same way, as
    seed 0; ``store``: from the activation stores instead of the forward pass (``member_bases``)."""
    spectra = []
    members = [(name, None, *inputs.member(name)) for name in inputs.models]
    members += [(name, path, name, 0) for name, path in (references or {}).items()]
    for name, path, variant, model_seed in progress_bar(members, desc="layer spectra", disable=not progress):
        bases = member_bases(inputs, name, path, min_count, sequences, store, progress)
        layers = sorted({layer for layer, _ in bases})
        for layer, subspace in progress_bar(sorted(bases, key=lambda key: key[0]), desc=f"spectra {name}", leave=False,
                                    disable=not progress):  # by layer, each layer's subspaces in their order
            basis = bases[(layer, subspace)]
            spectrum = analyze_table(basis.means, name=f"{name} L{layer} {subspace}", positions=basis.positions,
                                     n_control_draws=n_control_draws, seed=seed,
                                     match_width=min(width or basis.means.shape[1], basis.means.shape[1]),
                                     n_projections=n_projections)
            spectrum.summary.update(model=variant, seed=model_seed, layer=int(layer), subspace=subspace,
                                    last_layer=layer == layers[-1], group=f"{variant} L{layer} {subspace}",
                                    sequences=sequences,
                                    **{key: basis.summary[key] for key in BASIS_COLUMNS})
            spectra.append(spectrum)
    return spectra


def plot_position_share(layers: pd.DataFrame, out) -> dict:
    """layers_position_share: the share of each layer's variance that its position basis explains (the
    between-position variance), by layer: the mean over each model's seeds, the band their lowest to highest,
    against its chance level (``layers``: the layer-state rows of spectra.csv)."""
    keys = ["model", "subspace", "layer"]
    over_seeds = (layers.groupby(keys, sort=False).position_share.agg(["mean", "min", "max", "count"])
                  .reset_index().rename(columns={"mean": "position_share", "count": "n_seeds"}))
    long = measurements(over_seeds, ["position_share"], intervals={"position_share": ("min", "max")})
    chance = float(layers.chance_share.max())
    seeds = sorted(layers.seed.unique())
    return plot_by_layer(long, out, stem="layers_position_share", ylabel="position share of variance",
                         reference=chance, bands=f"lines: the mean over each model's seeds ({len(seeds)} at most); "
                         "bands: their lowest to highest", reference_label=f"chance, (P - 1) / (n - 1) = {chance:.4f} "
                         "(the largest); position share: between-position over total variance of the layer's states",
                         numbers={"seeds": seeds, "per_seed": layers[["model", "seed", "layer", "subspace", "position_share"]],
                                  "chance_share": layers[["model", "seed", "layer", "subspace", "chance_share"]]})


SPECTRA_STEMS = ("scree", "pc_curves", "dct")  # the figures of one set of spectra (draw_spectra), for tables and layers


def draw_spectra(drawing, prefix: str, spectra: list, curves: list, out) -> None:
    """``<prefix>_scree``, ``_pc_curves`` (of ``curves``) and ``_dct``, each named on the ``drawing`` bar as it is
    drawn and counted on it when written."""
    for stem, plot, drawn in zip(SPECTRA_STEMS, (plot_scree, plot_pc_curves, plot_dct_power), (spectra, curves, spectra)):
        drawing.set_postfix_str(f"{prefix}_{stem}")
        plot(drawn, out, stem=f"{prefix}_{stem}")
        drawing.update()


def run(config: ApManifoldConfig) -> dict:
    started = time.perf_counter()
    progress = not config.quiet
    min_count = min(config.min_count, 3) if config.tiny else config.min_count  # the tiny corpus has 40 documents
    inputs = inputs_for(config, n_docs=config.n_docs)

    with_minilm = not (config.no_minilm or config.tiny or inputs.given)
    tables, random_tables, notes = learned_table_spectra(inputs, config.seed, config.control_draws,
                                                        with_minilm=with_minilm, n_projections=config.projections,
                                                        progress=progress)
    width = min((s.summary["matched_width"] for s in tables if "matched_width" in s.summary), default=None)
    entangled = stream_notes(inputs)
    say_not_applicable("fig_ap_manifold", notes, entangled, quiet=config.quiet)
    drawing = progress_bar(total=len(SPECTRA_STEMS) * (2 if tables else 1) + 1, desc="figures",  # each PNG + PDF
                           disable=not progress)
    if tables:  # every seed drawn: the figures group a table's seeds (summary "group")
        draw_spectra(drawing, "tables", tables + random_tables, tables, config.out)

    references = {MINILM: fetch_minilm()} if with_minilm and "minilm" not in notes else {}
    layers = layer_state_spectra(inputs, min_count, config.seed, config.control_draws, progress, width,
                                 config.projections, references, config.sequences, config.store)
    last = [s for s in layers if s.summary["last_layer"]]
    draw_spectra(drawing, "layers", last, last, config.out)

    summary = spectra_table(tables + random_tables + layers)
    summary.insert(0, "source", ["learned table"] * len(tables) + ["random table"] * len(random_tables)
                   + ["layer states"] * len(layers))
    summary.to_csv(config.out / "spectra.csv", index=False)
    drawing.set_postfix_str("layers_position_share")
    plot_position_share(summary[summary.source == "layer states"], config.out)
    drawing.update()
    drawing.close()
    save_config(config, "experiments/fig_ap_manifold.py", min_count_used=min_count, inputs=inputs.description,
                notes=notes, **({"stream_notes": entangled} if entangled else {}), wall_s=round(time.perf_counter() - started, 1))
    if progress:
        columns = ["source", "name", "pc1_pc2", "control_pc1_pc2", "matched_pc1_pc2", "matched_control_pc1_pc2",
                   "participation_ratio", "matched_participation_ratio", "low_freq_share", "pc2_low_freq_share"]
        print(summary[summary.source != "layer states"][columns].to_string(index=False, float_format="%.3f"))
    return {"spectra": summary, "notes": notes}


def main(argv=None) -> dict:
    return run(figure_config(ApManifoldConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_ap_manifold"))
