"""Figure: linear position probes by layer -- token, segment and intra-segment position, all models and subspaces.

    python -m experiments.fig_probes                        # the zoo, ~3 min on 2 cores (stores reused)
    python -m experiments.fig_probes --tiny --out /tmp/fig  # tiny random models, seconds

For each zoo model and each probe -- token position; segment index (sentence, paragraph); intra-segment
position (sentence, paragraph) -- ``probes.positions.probe_store`` fits a ridge probe per layer x subspace
on the model's store (held-out documents): penalty by grouped 5-fold CV on the training documents, R² on
held-out documents with a bootstrap CI over documents, and two controls (a random-init twin's store, and
the target shuffled within each document).  DSTG has ap / sem / full subspaces, the entangled baselines
only full.  Stores, documents and probe settings are ``dstg-probe``'s, so its tables and this figure
agree to the last digit (``dstg-probe --model dstg rope ap rp --task segment`` is the segment/sentence
block of probes.csv).

Writes into ``--out`` (default figures/probes/): probes.csv (one row per model x task x segment x layer x
subspace, the columns of ``probes.positions.RESULT_COLUMNS``), r2_by_layer (PNG + PDF + JSON) and config.json.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from dstg_interp.plots import plot_r2_by_layer
from experiments.figure_inputs import (FIGURES_DIR, FigureConfig, load_figure_inputs, model_store, parse_config,
                                       random_init_store, save_config)
from probes.positions import PositionProbeConfig, probe_store

# token position is the same target whatever the segment: probed once
PROBES = (("token", "sentence"), ("segment", "sentence"), ("segment", "paragraph"),
          ("intra", "sentence"), ("intra", "paragraph"))
PROBE_DEFAULTS = PositionProbeConfig()  # dstg-probe's settings: the same numbers in every table


@dataclass
class ProbesFigureConfig(FigureConfig):
    out: Path = FIGURES_DIR / "probes"
    n_docs: int | None = field(default=None, metadata={"help": "a seeded sample of the held-out documents "
                                                                "(default: all of them, as dstg-probe)"})
    max_tokens: int | None = field(default=PROBE_DEFAULTS.max_tokens, metadata={
        "help": "a seeded subsample of tokens per probe (default: every token of the store, as dstg-probe)"})
    n_boot: int = field(default=PROBE_DEFAULTS.n_boot, metadata={"help": "bootstrap resamples of test documents"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_docs is not None and self.n_docs < 10:
            raise ValueError(f"n_docs must be at least 10 (grouped CV needs documents), got {self.n_docs}")


def probe_all(inputs, config: ProbesFigureConfig) -> pd.DataFrame:
    """Every probe of PROBES on every model, all layers and subspaces, with both controls."""
    progress = not config.quiet
    tables = []
    for name in inputs.models:
        store = model_store(inputs, name, progress=progress)
        control = random_init_store(inputs, name, progress=progress)
        for task, segment in tqdm(PROBES, desc=f"probes {name}", disable=not progress):
            probe = PositionProbeConfig(task=task, segment=segment, max_tokens=config.max_tokens, n_boot=config.n_boot,
                                        seed=config.seed)
            tables.append(probe_store(store, probe, model_name=name, control_store=control))
    return pd.concat(tables, ignore_index=True)


def run(config: ProbesFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = load_figure_inputs(tiny=config.tiny, n_docs=config.n_docs, seed=config.seed, store_root=config.store_root)
    results = probe_all(inputs, config)
    config.out.mkdir(parents=True, exist_ok=True)
    results.to_csv(config.out / "probes.csv", index=False)
    plot_r2_by_layer(results, config.out, stem="r2_by_layer")
    save_config(config, "experiments/fig_probes.py", probes=PROBES, inputs=inputs.description,
                wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        last = results[results.layer == results.groupby("model").layer.transform("max")]
        print(last.pivot_table(index=["model", "subspace"], columns=["task", "segment"], values="r2")
              .to_string(float_format="%.3f"))
    return {"results": results}


def main(argv=None) -> dict:
    return run(parse_config(ProbesFigureConfig, argv, __doc__))


if __name__ == "__main__":
    main()
