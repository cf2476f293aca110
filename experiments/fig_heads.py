"""Figure: attention-head classification of the four zoo models (structure / semantic / RP / mixed heads).

    python -m experiments.fig_heads                        # the zoo, seconds once the stores exist (~1 min if not)
    python -m experiments.fig_heads --tiny --out /tmp/fig  # tiny random models, seconds

Per model, the attention summaries of its store (held-out documents, ``figure_inputs.attention_store``)
give each head's logit-term variances and the pattern change when a term is removed
(``dstg_interp.analysis.heads.head_stats_from_store``); ``classify_heads`` applies the rule documented in
``dstg_interp.analysis.heads``: DSTG heads are named after the term that carries >= 60% of the summed term variance
*and* whose removal changes the pattern most (sem -> semantic, ap -> structure, rp -> RP, else mixed);
entangled baselines are labelled by how much of their pattern relative offset alone explains
(positional / content / mixed, or RP when RP-NeoBERT's bias dominates).

Writes into ``--out`` (default figures/heads/): heads.csv (one row per model x layer x head),
label_counts.csv, head_map and head_shares (PNG + PDF + JSON), summary.json and config.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from dstg_interp.analysis.heads import DOMINANT_SHARE, classify_heads, head_stats_from_store
from dstg_interp.plots import plot_head_map, plot_share_scatter
from experiments.figure_inputs import (FIGURES_DIR, FigureConfig, attention_store, load_figure_inputs, parse_config,
                                       save_config)


@dataclass
class HeadsFigureConfig(FigureConfig):
    out: Path = FIGURES_DIR / "heads"
    n_docs: int | None = field(default=None, metadata={"help": "a seeded sample of the held-out documents "
                                                                "(default: all of them, as the probes)"})


def head_labels(inputs, progress: bool) -> pd.DataFrame:
    """The classified head table of every model, from its store's attention summaries."""
    tables = []
    for name in tqdm(list(inputs.models), desc="heads", disable=not progress):
        store = attention_store(inputs, name, progress=progress)
        stats = head_stats_from_store(store, model_name=name)
        stats["n_documents"] = len(store.documents)
        tables.append(classify_heads(stats))
    return pd.concat(tables, ignore_index=True)


def label_summary(heads: pd.DataFrame) -> dict:
    """Per model: head count per label and the shares the claims table reads."""
    summary = {}
    for model, rows in heads.groupby("model", sort=False):
        counts = rows.label.value_counts().to_dict()
        summary[model] = {
            "n_heads": int(len(rows)),
            "label_counts": {label: int(n) for label, n in counts.items()},
            "structure_or_semantic_share": float(rows.label.isin(["structure", "semantic"]).mean()),
            "n_rp_heads": int((rows.label == "RP").sum()),
            "max_share_rp": float(rows.share_rp.max()) if rows.share_rp.notna().any() else None,
            "mean_positional_score": float(rows.positional_score.mean()) if rows.positional_score.notna().any() else None,
        }
    return summary


def run(config: HeadsFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = load_figure_inputs(tiny=config.tiny, n_docs=config.n_docs, seed=config.seed, store_root=config.store_root)
    heads = head_labels(inputs, progress=not config.quiet)
    config.out.mkdir(parents=True, exist_ok=True)
    heads.to_csv(config.out / "heads.csv", index=False)
    counts = heads.groupby(["model", "label"], sort=False).size().rename("n_heads").reset_index()
    counts.to_csv(config.out / "label_counts.csv", index=False)
    plot_head_map(heads, config.out, stem="head_map")
    plot_share_scatter(heads, config.out, stem="head_shares")
    summary = {"rule": {"dominant_share": DOMINANT_SHARE, "variance_over": "pair (store summaries)"},
               "models": label_summary(heads)}
    (config.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    save_config(config, "experiments/fig_heads.py", inputs=inputs.description,
                wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(counts.pivot(index="model", columns="label", values="n_heads").fillna(0).astype(int).to_string())
    return {"heads": heads, "summary": summary}


def main(argv=None) -> dict:
    return run(parse_config(HeadsFigureConfig, argv, __doc__))


if __name__ == "__main__":
    main()
