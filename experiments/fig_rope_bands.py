"""Figure: RoPE-NeoBERT's heads classified by frequency band (Barbero et al.; issue 40, item 3).

    python -m experiments.fig_rope_bands --out figures/rope_bands       # the zoo's RoPE model, every training seed
    python -m experiments.fig_rope_bands --tiny --out /tmp/fig           # a tiny random RoPE model, seconds
    python -m experiments.fig_rope_bands --model path/to/neobert --out /tmp/fig   # your RoPE models (--model, --name)
    python -m experiments.fig_rope_bands --model path/to/ModernBERT-base --out /tmp/fig  # an HF RoPE encoder

Per RoPE member of the zoo (``--model-seeds``), ``n_sequences`` held-out en-mix windows of ``length`` tokens:
``dstg_interp.analysis.rope_bands.band_stats`` splits every head's q.k over its rotation planes, grouped into
``n_bands`` bands (band 0 the fastest), and measures each band's share of the head's within-query logit
variance; ``classify_band_heads`` labels a head positional when the faster half of its planes carries >= 60% of
that variance, semantic when the slower half does, mixed otherwise; ``band_sweep`` relabels for thresholds 0.5 to
0.9.  Control: the random-init twin of each member (no training: the shares its initial weights give).
With ``--model``, the models with rotary heads are read (each in windows cut to its positions where they are
fewer than ``length``): RoPE models of ours, the authors' NeoBERT and the Hugging Face families of
``dstg_interp.encoders.rotary`` (ModernBERT); a model without them, or an HF rotary family not in that table, is
left out in one line, and a list with none is refused in one line (exit 2, nothing written).

Writes into ``--out`` (default dstg-results/figures/rope_bands/): bands.csv (one row per model x seed x layer x head
x band, ``control``), heads.csv (one row per head, labelled), sweep.csv, band_shares (PNG + PDF + JSON, the first
seed and its random-init twin), config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dstg_interp import EncoderError, open_encoder
from dstg_interp.analysis.rope_bands import band_stats, band_sweep, classify_band_heads, hf_rope, rotary_of
from dstg_interp.encoders.rotary import families_read
from dstg_interp.plots import plot_band_shares
from experiments.fig_interventions import windows
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, inputs_for, load_figure_inputs, figure_config, readable_members, run_as_command, save_config, say_not_applicable,
                                       with_member_columns)

NEEDS = f"rotary (RoPE) heads (RoPE-NeoBERT, the authors' NeoBERT, Hugging Face {families_read()})"


@dataclass
class RopeBandsFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "rope_bands"
    n_sequences: int = field(default=16, metadata={"help": "held-out windows"})
    length: int = field(default=64, metadata={"help": "tokens per window"})
    n_bands: int = field(default=4, metadata={"help": "frequency bands per head"})


def no_rotary_heads(name: str, model) -> str | None:
    """Why a model's heads cannot be split by frequency band (None: they can)."""
    encoder = open_encoder(model, name=name)
    try:
        rotary_of(encoder, 0)
    except EncoderError:
        if hf_rope(encoder):
            return (f"a Hugging Face RoPE encoder of a family the band split does not read (it reads {families_read()}): "
                    "no frequency-band split")
        return "no rotary heads: no frequency-band split"
    return None


def run(config: RopeBandsFigureConfig) -> dict:
    started = time.perf_counter()
    n_docs = None if config.tiny else 200
    if config.model is not None:  # your models: those with rotary heads, the others said in one line each
        inputs = inputs_for(config, n_docs=n_docs)
        members, notes = readable_members(inputs, "fig_rope_bands", NEEDS, no_rotary_heads, config.quiet)
    else:
        inputs = load_figure_inputs(tiny=config.tiny, models=("rope",), n_docs=n_docs, seed=config.seed,
                                    store_root=config.store_root, zoo=config.zoo, model_seeds=config.model_seeds)
        members, notes = list(inputs.models), {}
    length = min(config.length, 32) if config.tiny else config.length
    tables, cut = [], {}
    for name in members:
        encoder = inputs.encoder(name)
        if encoder.max_positions < length:
            cut[name] = f"{encoder.max_positions} positions: windows of {encoder.max_positions} tokens"
        tokens, mask = windows(encoder, inputs.documents, min(length, encoder.max_positions), config.n_sequences)
        for control, reader in (("trained", encoder), ("random init", encoder.random_init())):
            stats = band_stats(reader, tokens, mask, n_bands=config.n_bands)
            tables.append(with_member_columns(stats.assign(model=name, control=control), inputs, name))
    say_not_applicable("fig_rope_bands", cut, quiet=config.quiet)
    bands = pd.concat(tables, ignore_index=True)
    bands["model"] = bands.model.where(bands.control == "trained", bands.model + "-random init")
    heads = classify_band_heads(bands)
    sweep = band_sweep(bands)
    config.out.mkdir(parents=True, exist_ok=True)
    bands.to_csv(config.out / "bands.csv", index=False)
    heads.to_csv(config.out / "heads.csv", index=False)
    sweep.to_csv(config.out / "sweep.csv", index=False)
    first = heads[heads.seed == heads.seed.min()]
    plot_band_shares(first, config.out, stem="band_shares", numbers={"sweep": sweep})
    save_config(config, "experiments/fig_rope_bands.py", **({"notes": notes} if notes else {}),
                wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(heads.groupby(["model", "seed", "label"]).size().unstack(fill_value=0).to_string())
    return {"bands": bands, "heads": heads, "sweep": sweep}


def main(argv=None) -> dict:
    return run(figure_config(RopeBandsFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_rope_bands"))
