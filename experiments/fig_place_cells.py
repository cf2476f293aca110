"""Figure: place cells -- the latents of a sparse autoencoder on a layer's position state as receptive fields over
token position, and the latents tiling the position curve (the layer-0 GPT-2 SAE figure; Gurnee et al. 2026).

    python -m experiments.fig_place_cells                           # the zoo, every training seed, layer 0
    python -m experiments.fig_place_cells --tiny --out /tmp/fig     # tiny random models, seconds
    python -m experiments.fig_place_cells --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM

For every member (variant x training seed; ``--model``: any encoder) a TopK SAE (``analysis.sae.train_sae``,
EleutherAI's sparsify: ``num_latents`` latents, ``k`` active per token, ``steps`` Adam steps) is trained at
``--layer`` (0 = the embeddings) on the store ``dstg-probe`` builds (every held-out en-mix document, [CLS] / [SEP]
dropped): on DSTG's AP stream -- at layer 0 the AP table itself, position by construction -- and on every other
model's full state (AP-NeoBERT: token + position embedding; RoPE- and RP-NeoBERT: no position at layer 0, the
state holds no position at layer 0, so whatever tuning their latents show is the corpus's: the floor the
others are read against).  Then ``analysis.place_cells`` on every token the SAE saw (train and
held out): each latent's receptive field (mean activation per position), peak, width (full width at half
maximum, interpolated), eta² (the share of its activation variance explained by position) and whether it is
position-tuned (live on >= ``min_active`` tokens and eta² above the ``quantile`` of eta² over ``n_shuffles``
draws of the same codes with positions shuffled among the occurrences of each token: a latent that reads the
token, whose frequency varies with position in real text, stays below it; ``--shuffle document``: within each
document, ``global``: over all tokens), and
``tiling``: the per-position mean state's top-2 PC plane with each latent's share of the mean state at its peak.

Writes into ``--out`` (default dstg-results/figures/place_cells/): place_cells.csv (one row per model x seed x
layer x subspace x latent: peak, width, eta2, tuned, the tuning threshold, the latent's point pc1 / pc2, ...),
fields.csv (its mean activation per position), curve.csv (the position curve in the PC plane), saes.csv (each
SAE's held-out FVU beside rank-k PCA), place_cells_fields and place_cells_tiling (PNG + PDF + JSON), config.json.
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from dstg_interp.analysis.place_cells import place_cells, tiling
from dstg_interp.analysis.sae import SAEConfig, SAEError, train_sae
from dstg_interp.io import write_text_atomic
from dstg_interp.plots import plot_position_tiling, plot_receptive_fields
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, figure_config, inputs_for, model_store,
                                       run_as_command, save_config, with_member_columns)

CELL_COLUMNS = ["model", "seed", "layer", "subspace", "latent", "peak", "width", "eta2", "tuned", "threshold", "cut",
                "n_active", "mean_activation", "peak_activation", "pc1", "pc2"]

SHUFFLES = {"token": "among occurrences of the same token", "document": "within each document",
            "global": "over all tokens"}


@dataclass
class PlaceCellsFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "place_cells"
    layer: int = field(default=0, metadata={"min": 0, "help": "layer the SAEs read (0 = embeddings)"})
    num_latents: int = field(default=128, metadata={"min": 1, "help": "latents of each SAE"})
    k: int = field(default=4, metadata={"min": 1, "help": "latents active per token (TopK)"})
    steps: int = field(default=2000, metadata={"min": 1, "help": "Adam steps per SAE (--tiny: at most 200)"})
    batch_size: int = field(default=512, metadata={"min": 1, "help": "tokens per step"})
    n_shuffles: int = field(default=5, metadata={"min": 1, "help": "shuffled-position draws of the tuning control"})
    quantile: float = field(default=0.99, metadata={"help": "quantile of the shuffled eta² a tuned latent exceeds"})
    min_active: int = field(default=20, metadata={"min": 1, "help": "tokens a latent must fire on to be live"})
    shuffle: Literal["token", "document", "global"] = field(default="token", metadata={
        "choices": list(SHUFFLES), "help": "where the control permutes positions: among occurrences of the same "
                                           "token, within each document, or over all tokens"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.quantile < 1:
            raise ValueError(f"--quantile must lie in (0, 1), got {self.quantile}")
        if self.k > self.num_latents:
            raise ValueError(f"--k ({self.k}) cannot exceed --num-latents ({self.num_latents})")


def member_cells(inputs, name: str, config: PlaceCellsFigureConfig) -> tuple[pd.DataFrame, ...]:
    """One member's SAE and place cells: (cells, fields, curve, sae metrics) without the model / seed columns."""
    encoder = inputs.encoder(name)
    subspace = "ap" if {"sem", "ap"} <= set(encoder.subspaces) else "full"
    store = model_store(inputs, name, progress=not config.quiet)
    steps = min(config.steps, 200) if config.tiny else config.steps
    trained = train_sae(store, config.layer, subspace, SAEConfig(num_latents=config.num_latents, k=config.k,
                                                                 steps=steps, batch_size=config.batch_size,
                                                                 seed=config.seed))
    rows = np.sort(np.concatenate([trained.train_rows, trained.test_rows]))
    states = np.asarray(store.states(config.layer, subspace)[rows], dtype=np.float64)
    labels = store.labels
    positions = labels.token_position.to_numpy()[rows]
    groups = {"token": labels.input_ids, "document": labels.doc_index}.get(config.shuffle)
    groups = None if groups is None else groups.to_numpy()[rows]
    cells = place_cells(trained.encode(states), positions, groups, config.n_shuffles, config.quantile,
                        config.min_active, config.seed)
    decoder = trained.sae.W_dec.detach().double().numpy() / trained.scale  # directions in the states' units
    curve, points, share = tiling(decoder, cells, states, positions)
    where = {"layer": config.layer, "subspace": subspace}
    table = cells.table.assign(**where, threshold=cells.threshold, pc1=points[:, 0], pc2=points[:, 1])
    fields = pd.DataFrame({"latent": np.repeat(np.arange(len(cells.fields)), len(cells.positions)),
                           "position": np.tile(cells.positions, len(cells.fields)),
                           "activation": cells.fields.ravel()}).assign(**where)
    metrics = {key: value for key, value in trained.metrics().items() if key not in ("model", "store", "stream")}
    return (table, fields, curve.assign(**where, share=share),
            pd.DataFrame([{**metrics, "subspace": subspace, "n_tuned": int(table.tuned.sum()),
                           "threshold": cells.threshold}]))


def run(config: PlaceCellsFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = inputs_for(config)
    for name in inputs.models:  # every model checked before any work: a refusal writes nothing
        n_layers = inputs.encoder(name).n_layers
        if config.layer > n_layers:
            raise SAEError(f"model {name} has layers 0..{n_layers}; --layer asked for {config.layer}")
    parts: dict[str, list] = {"cells": [], "fields": [], "curve": [], "saes": []}
    for name in inputs.models:
        for key, table in zip(parts, member_cells(inputs, name, config)):
            parts[key].append(with_member_columns(table, inputs, name))
        if not config.quiet:
            last = parts["saes"][-1].iloc[0]
            print(f"[place-cells] {name} L{config.layer} {last.subspace}: {last.n_tuned} of {config.num_latents} "
                  f"latents tuned (eta² > {last.threshold:.3g}); SAE fvu {last.fvu:.3f} (pca {last.fvu_pca:.3f})",
                  file=sys.stderr, flush=True)
    cells = pd.concat(parts["cells"], ignore_index=True)[CELL_COLUMNS]
    fields = pd.concat(parts["fields"], ignore_index=True)[["model", "seed", "layer", "subspace", "latent", "position",
                                                            "activation"]]
    curve = pd.concat(parts["curve"], ignore_index=True)[["model", "seed", "layer", "subspace", "position", "pc1",
                                                          "pc2", "share"]]
    saes = pd.concat(parts["saes"], ignore_index=True)
    config.out.mkdir(parents=True, exist_ok=True)
    for table, stem in ((cells, "place_cells"), (fields, "fields"), (curve, "curve"), (saes, "saes")):
        write_text_atomic(config.out / f"{stem}.csv", table.to_csv(index=False, float_format="%.6g"))
    plot_receptive_fields(cells, fields, config.out, control=f"the {config.quantile:g} quantile of the same latents' "
                          f"eta² with positions shuffled {SHUFFLES[config.shuffle]}")
    plot_position_tiling(cells, curve, config.out)
    save_config(config, "experiments/fig_place_cells.py", inputs=inputs.description,
                wall_s=round(time.perf_counter() - started, 1),
                versions={package: importlib.metadata.version(package) for package in ("eai-sparsify", "torch")})
    if not config.quiet:
        summary = cells.groupby(["model", "seed", "subspace"], sort=False).agg(
            tuned=("tuned", "sum"), threshold=("threshold", "first"), median_width=("width", "median"))
        print(summary.to_string(float_format="%.3f"))
    return {"cells": cells, "fields": fields, "curve": curve, "saes": saes}


def main(argv=None) -> dict:
    return run(figure_config(PlaceCellsFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_place_cells"))
