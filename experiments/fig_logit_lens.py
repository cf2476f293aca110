"""Figure: an MLM logit lens on the zoo -- when does the masked-token prediction form, and in which stream (issue 40,
item 2).

    python -m experiments.fig_logit_lens --out figures/logit_lens       # the zoo, every training seed
    python -m experiments.fig_logit_lens --tiny --out /tmp/fig           # tiny random models, seconds
    python -m experiments.fig_logit_lens --model path/to/mlm --out /tmp/fig   # your masked LMs (--model, --name)

Per zoo member (``--model-seeds``), ``n_sequences`` held-out en-mix windows of ``length`` tokens with ``n_masked``
masked positions each; ``dstg_interp.analysis.mlm_lens.logit_lens`` decodes every layer's state through the
model's own final norm and MLM head (DSTG: its semantic stream, the one its head reads): top-1 accuracy on the
masked tokens, top-1 agreement with the model's final answer and KL(final || lens).  Controls: the random-init twin
of each member read the same way, and chance (always the batch's most frequent masked token).  The lens at the
last layer is the model's output (agreement 1, KL 0: the check each run repeats).  With ``--model``, the models with
a masked-LM head are read; a model without one is left out in one line, and a list with none is refused in one
line (exit 2, nothing written).

Writes into ``--out`` (default dstg-results/figures/logit_lens/): logit_lens.csv (one row per model x seed x
layer x subspace, ``control`` = trained / random init), lens_by_layer (PNG + PDF + JSON: accuracy, agreement,
KL; lines: mean over seeds, bands: min-max), config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dstg_interp import open_encoder
from dstg_interp.analysis.mlm_lens import logit_lens
from dstg_interp.plots import measurements, plot_by_layer
from experiments.fig_interventions import windows
from experiments.figure_inputs import (MLM_HEAD, OUTPUT_DIR, SeedsFigureConfig, inputs_for, figure_config, readable_members, run_as_command, print_summary, save_config, with_member_columns,
                                       without_mlm_head)

METRICS = ("top1_accuracy", "top1_agreement", "kl_to_final")


@dataclass
class LensFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "logit_lens"
    n_sequences: int = field(default=32, metadata={"help": "held-out windows"})
    length: int = field(default=64, metadata={"help": "tokens per window"})
    n_masked: int = field(default=8, metadata={"help": "masked positions per window (the same in every window)"})


def run(config: LensFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = inputs_for(config, n_docs=None if config.tiny else 200)
    length = min(config.length, 24) if config.tiny else config.length
    members, notes = (readable_members(inputs, "fig_logit_lens", MLM_HEAD, without_mlm_head, config.quiet)
                      if inputs.given else (list(inputs.models), {}))
    tables = []
    for name in members:
        encoder = open_encoder(inputs.models[name])
        tokens, mask = windows(encoder, inputs.documents, length, config.n_sequences)
        for control, reader in (("trained", encoder), ("random init", encoder.random_init())):
            table = logit_lens(reader, tokens, mask, n_masked=config.n_masked, seed=config.seed)
            tables.append(with_member_columns(table.assign(model=name, control=control), inputs, name))
    table = pd.concat(tables, ignore_index=True)
    config.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(config.out / "logit_lens.csv", index=False)
    trained = table[table.control == "trained"]
    over_seeds = trained.groupby(["model", "subspace", "layer"], sort=False).agg(
        **{m: (m, "mean") for m in METRICS}, **{f"{m}_low": (m, "min") for m in METRICS},
        **{f"{m}_high": (m, "max") for m in METRICS}, chance_accuracy=("chance_accuracy", "mean")).reset_index()
    long = measurements(over_seeds, list(METRICS), intervals={m: (f"{m}_low", f"{m}_high") for m in METRICS})
    plot_by_layer(long, config.out, stem="lens_by_layer", col="metric", share_y=False, ylabel="value",
                  bands="bands: min-max over training seeds",
                  numbers={"chance_accuracy": float(trained.chance_accuracy.mean()),
                           "random_init": table[table.control == "random init"]})
    save_config(config, "experiments/fig_logit_lens.py", **({"notes": notes} if notes else {}),
                wall_s=round(time.perf_counter() - started, 1))
    print_summary(config, over_seeds, "%.3f", index="layer", columns="model", values="top1_accuracy")
    return {"lens": table}


def main(argv=None) -> dict:
    return run(figure_config(LensFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_logit_lens"))
