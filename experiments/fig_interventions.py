"""Figure: AP-stream interventions -- move a token's position state and watch the MLM output and the AP term.

    python -m experiments.fig_interventions                          # DSTG and AP-NeoBERT, every training seed
    python -m experiments.fig_interventions --tiny --out /tmp/fig    # tiny random models, seconds

For DSTG's AP stream at every layer, and AP-NeoBERT's position embedding (layer 0, the only place it is a state
of its own; RoPE and RP have none), ``dstg_interp.analysis.interventions.intervene`` on ``n_sequences``
held-out windows of ``length`` tokens:
    interchange   every token gets the position state of the mirrored position (T - 1 - i) of its own sequence
    shift         the state the same tokens have when read ``shift`` positions later
    mean          the per-position mean of the state over the model's store (DSTG; AP-NeoBERT's layer-0 state
                  *is* the per-position table, so the mean intervention changes nothing there and is skipped)
Measured: KL(clean || intervened) of the MLM distributions over real tokens (nats) and their top-1 agreement;
per block x head x logit term the relative change of the term (heads.csv).

Writes into ``--out`` (default dstg-results/figures/interventions/; the committed figures: --out figures/interventions): interventions.csv, heads.csv, mlm_kl_by_layer
(PNG + PDF + JSON; lines: mean over seeds, bands: min-max) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp import open_encoder
from dstg_interp.analysis.interventions import intervene
from dstg_interp.analysis.position_basis import position_basis
from dstg_interp.encoders.inputs import pad_batch
from dstg_interp.plots import measurements, plot_by_layer
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, inputs_for, model_store, parse_config,
                                       run_as_command, save_config, with_member_columns)


@dataclass
class InterventionsFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "interventions"  # the committed figures: --out figures/interventions
    n_sequences: int = field(default=32, metadata={"help": "held-out windows measured"})
    length: int = field(default=96, metadata={"help": "tokens per window"})
    shift: int = field(default=32, metadata={"help": "positions the 'shift' intervention moves"})


def windows(encoder, documents, length: int, n: int):
    """The first ``n`` full windows of ``length`` tokens of the documents: [n, length] tokens and mask."""
    sequences = encoder.structured_sequences(documents, max_length=length, windows=True)
    full = [sequences[i]["input_ids"] for i in range(len(sequences)) if len(sequences[i]["input_ids"]) == length][:n]
    return pad_batch(full, encoder.special.pad)


def intervene_all(config: InterventionsFigureConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    inputs = inputs_for(config)
    length, shift = (24, 8) if config.tiny else (config.length, config.shift)
    rows, heads = [], []
    for name in inputs.models:
        variant, _ = inputs.member(name)
        if variant not in ("dstg", "ap"):
            continue
        encoder = open_encoder(inputs.models[name])
        tokens, mask = windows(encoder, inputs.documents, length, config.n_sequences)
        mirror = torch.arange(length).flip(0)
        store = model_store(inputs, name, progress=not config.quiet) if variant == "dstg" else None
        layers = [layer for layer in encoder.layers if layer != "final"] if variant == "dstg" else [0]
        for layer in layers:
            plans = {"interchange": {"position_map": mirror}, "shift": {"shift": shift}}
            if store is not None:
                basis = position_basis(store, layer, "ap")
                means = np.zeros((encoder.max_positions, basis.means.shape[1]))
                means[basis.positions] = basis.means
                plans["mean"] = {"position_means": means}
            for kind, options in plans.items():
                result = intervene(encoder, tokens, mask, layer, kind, **options)
                subspace = "ap" if variant == "dstg" else "full"
                rows.append(with_member_columns(pd.DataFrame([{"model": name, "layer": layer, "subspace": subspace,
                                                               "kind": kind, **result.summary}]), inputs, name))
                heads.append(with_member_columns(result.heads.assign(model=name, layer=layer, kind=kind), inputs, name))
    return pd.concat(rows, ignore_index=True), pd.concat(heads, ignore_index=True)


def run(config: InterventionsFigureConfig) -> dict:
    started = time.perf_counter()
    table, heads = intervene_all(config)
    config.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(config.out / "interventions.csv", index=False)
    heads.to_csv(config.out / "heads.csv", index=False)
    grouped = table.groupby(["model", "layer", "subspace", "kind"], sort=False)
    summary = grouped.agg(mlm_kl=("mlm_kl", "mean"), low=("mlm_kl", "min"), high=("mlm_kl", "max"),
                          n_seeds=("seed", "nunique")).reset_index()
    long = measurements(summary, ["mlm_kl"], keys=["kind"], intervals={"mlm_kl": ("low", "high")})
    plot_by_layer(long, config.out, stem="mlm_kl_by_layer", col="kind", ylabel="KL(clean || intervened), nats",
                  numbers={"bands": "min-max over training seeds"})
    save_config(config, "experiments/fig_interventions.py", wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(summary.pivot_table(index=["model", "layer"], columns="kind", values="mlm_kl").to_string(float_format="%.4f"))
    return {"results": table, "heads": heads}


def main(argv=None) -> dict:
    return run(parse_config(InterventionsFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_interventions"))
