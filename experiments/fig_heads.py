"""Figure: attention-head classification of the four zoo models (structure / semantic / RP / mixed heads).

    python -m experiments.fig_heads                        # the zoo (extracts the stores it lacks)
    python -m experiments.fig_heads --tiny --out /tmp/fig  # tiny random models, seconds
    python -m experiments.fig_heads --model runs/mine models/posneobert-dstg --name mine PosNeoBERT   # your models

With ``--model`` the members are those models under their names (``--name``).  Heads are classified from the
separate attention-logit terms of our model classes (DSTG, the RoPE / AP / RP baselines, the authors' formats):
a Hugging Face encoder exposes only its patterns, so it is left out with one line saying so (none left: exit 2);
``dstg-figures geometry`` classes any encoder's heads by the position / context split of their q.k instead
(``analysis.head_split``).

Per zoo member (variant x training seed, ``--model-seeds``), the attention summaries of its store (held-out documents, ``figure_inputs.attention_store``)
give each head's logit-term variances and the pattern change when a term is removed
(``dstg_interp.analysis.heads.head_stats_from_store``); ``classify_heads`` applies the rule documented in
``dstg_interp.analysis.heads``: DSTG heads are named after the term that carries >= 60% of the summed term variance
*and* whose removal changes the pattern most (sem -> semantic, ap -> structure, rp -> RP, else mixed);
entangled baselines are labelled by how much of their pattern relative offset alone explains
(positional / content / mixed, or RP when RP-NeoBERT's bias dominates).

Writes into ``--out`` (default dstg-results/figures/heads/; the committed gallery: --out figures/heads): heads.csv (one row per model x seed x layer x
head), label_counts.csv, head_map and head_shares (PNG + PDF + JSON, every seed; the map colours each head's class, a DSTG structure
head split into relative / absolute), head_sweep.csv and head_sweep (the share distributions and the labels for
dominant shares 0.40 to 0.90, every seed), head_tests.csv (DSTG's share of offset-driven heads against each other
model's, a permutation test that swaps whole (seed, layer) clusters: ``analysis.heads.layer_permutation_test``),
summary.json (per member) and config.json.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from dstg_interp.progress import progress_bar

from dstg_interp.analysis.heads import (DOMINANT_SHARE, classify_heads, head_stats_from_store, layer_permutation_test,
                                        threshold_sweep)
from dstg_interp.plots import plot_head_map, plot_head_sweep, plot_share_scatter
from dstg_interp.model.checkpoint import zoo_member
from dstg_interp.encoders import HFEncoder
from experiments.figure_inputs import (OUTPUT_DIR, SeedsFigureConfig, attention_store, inputs_for, figure_config, readable_members, run_as_command, print_summary, sample_docs_field, save_config, with_member_columns)

NEEDS = "separate attention-logit terms (DSTG, a RoPE / AP / RP baseline or the authors' formats)"


@dataclass
class HeadsFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "heads"
    n_docs: int | None = sample_docs_field()
    from_heads: Path | None = field(default=None, metadata={
        "help": "no store reading: relabel the head statistics of an earlier run's heads.csv (the stores are the "
                "same, so are the statistics) and write the tables and figures from them"})


def no_logit_terms(name: str, model) -> str | None:
    """Why a model's heads cannot be classified here (None: they can)."""
    if isinstance(model, HFEncoder):
        return ("a Hugging Face encoder exposes its attention patterns only, no logit terms: no head classification "
                "here (dstg-figures geometry classes its heads by the position / context split of their q.k)")
    return None


def head_labels(inputs, progress: bool, members: list | None = None) -> pd.DataFrame:
    """The classified head table of every zoo member (``model`` = variant, ``seed`` = training seed), from its
    store's attention summaries; ``members``: these only."""
    tables = []
    for name in progress_bar(list(inputs.models) if members is None else members, desc="heads", disable=not progress):
        store = attention_store(inputs, name, progress=progress)
        stats = head_stats_from_store(store, model_name=name)
        stats["n_documents"] = len(store.documents)
        tables.append(with_member_columns(classify_heads(stats), inputs, name))
    return pd.concat(tables, ignore_index=True)


def label_summary(heads: pd.DataFrame) -> dict:
    """Per zoo member (``<variant>`` or ``<variant>-seed<k>``): head count per label and the shares the claims
    table reads."""
    summary = {}
    for (model, model_seed), rows in heads.groupby(["model", "seed"], sort=False):
        counts = rows.label.value_counts().to_dict()
        summary[zoo_member(model, int(model_seed))] = {
            "n_heads": int(len(rows)),
            "label_counts": {label: int(n) for label, n in counts.items()},
            "structure_or_semantic_share": float(rows.label.isin(["structure", "semantic"]).mean()),
            "n_rp_heads": int((rows.label == "RP").sum()),
            "max_share_rp": float(rows.share_rp.max()) if rows.share_rp.notna().any() else None,
            "mean_positional_score": float(rows.positional_score.mean()) if rows.positional_score.notna().any() else None,
        }
    return summary


def offset_head_tests(heads: pd.DataFrame, n_permutations: int = 10_000) -> pd.DataFrame:
    """Does DSTG (else the first model) have a different share of offset-driven heads (the pattern explained
    by the offset j - i: the one head class defined alike for every model) than each other model?  One row per
    comparison: ``analysis.heads.layer_permutation_test``, swapping whole (seed, layer) clusters."""
    models = list(dict.fromkeys(heads.model))
    if len(models) < 2 or "offset_driven" not in heads.columns:
        return pd.DataFrame(columns=["model_a", "model_b", "class", "share_a", "share_b", "difference", "p_value"])
    reference = "dstg" if "dstg" in models else models[0]
    rows = []
    for other in models:
        if other == reference:
            continue
        try:
            rows.append(layer_permutation_test(heads, reference, other, "offset_driven", n_permutations))
        except ValueError as err:  # no (seed, layer) in common: said in the table, not a crash
            rows.append({"model_a": reference, "model_b": other, "class": "offset_driven", "note": str(err)})
    return pd.DataFrame(rows)


def run(config: HeadsFigureConfig) -> dict:
    started = time.perf_counter()
    if config.from_heads is not None:  # the statistics as the earlier run computed them, labelled again
        heads = classify_heads(pd.read_csv(config.from_heads))
        description: dict[str, Any] = {"from_heads": str(config.from_heads)}
        earlier = config.from_heads.parent / "config.json"  # the run that computed the statistics, if beside it
        if earlier.is_file():
            description["statistics_from"] = json.loads(earlier.read_text()).get("inputs")
    else:
        inputs = inputs_for(config, n_docs=config.n_docs)
        members, notes = readable_members(inputs, "fig_heads", NEEDS, no_logit_terms, config.quiet)
        heads = head_labels(inputs, progress=not config.quiet, members=members)
        description = dict(inputs.description, notes=notes) if notes else inputs.description
    config.out.mkdir(parents=True, exist_ok=True)
    heads.to_csv(config.out / "heads.csv", index=False)
    counts = heads.groupby(["model", "seed", "label"], sort=False).size().rename("n_heads").reset_index()
    counts.to_csv(config.out / "label_counts.csv", index=False)
    plot_head_map(heads, config.out, stem="head_map")  # every seed: a row of maps each
    plot_share_scatter(heads, config.out, stem="head_shares")
    tests = offset_head_tests(heads)
    tests.to_csv(config.out / "head_tests.csv", index=False)
    sweep = threshold_sweep(heads)  # the labels for a range of dominant shares, every seed
    sweep.to_csv(config.out / "head_sweep.csv", index=False)
    plot_head_sweep(sweep, heads, config.out, DOMINANT_SHARE, stem="head_sweep")
    summary = {"rule": {"dominant_share": DOMINANT_SHARE, "variance_over": "pair (store summaries)"},
               "models": label_summary(heads), "offset_head_tests": tests.to_dict(orient="records")}
    (config.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    save_config(config, "experiments/fig_heads.py", inputs=description,
                wall_s=round(time.perf_counter() - started, 1))
    print_summary(config, counts, index=["model", "seed"], columns="label", values="n_heads", fill_value=0)
    return {"heads": heads, "summary": summary}


def main(argv=None) -> dict:
    return run(figure_config(HeadsFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_heads"))
