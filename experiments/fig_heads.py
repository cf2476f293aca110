"""Figure: attention-head classification of the four zoo models (structure / semantic / RP / mixed heads).

    python experiments/fig_heads.py                       # the zoo, seconds once the stores exist (~1 min if not)
    python experiments/fig_heads.py --tiny --out /tmp/fig # tiny random models, seconds

Per model, the attention summaries of its shared store (held-out documents, ``figure_inputs.model_store``)
give each head's logit-term variances and the pattern change when a term is removed
(``dstg_interp.heads.head_stats_from_store``); ``classify_heads`` applies the rule documented in
``dstg_interp.heads``: DSTG heads are named after the term that carries >= 60% of the summed term variance
*and* whose removal changes the pattern most (sem -> semantic, ap -> structure, rp -> RP, else mixed);
entangled baselines are labelled by how much of their pattern relative offset alone explains
(positional / content / mixed, or RP when RP-NeoBERT's bias dominates).

Writes into ``--out`` (default figures/heads/): heads.csv (one row per model x layer x head),
label_counts.csv, head_map and head_shares (PNG + PDF + JSON), summary.json and config.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figure_inputs import FIGURES_DIR, load_figure_inputs, model_store, write_config  # noqa: E402

from dstg_interp.heads import DOMINANT_SHARE, classify_heads, head_stats_from_store  # noqa: E402
from dstg_interp.plots import plot_head_map, plot_share_scatter  # noqa: E402

OUT = FIGURES_DIR / "heads"


def head_labels(inputs, progress: bool) -> pd.DataFrame:
    """The classified head table of every model, from its store's attention summaries."""
    tables = []
    for name in tqdm(list(inputs.models), desc="heads", disable=not progress):
        store = model_store(inputs, name, progress=progress)
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tiny", action="store_true", help="tiny random models on a synthetic corpus (smoke run)")
    parser.add_argument("--n-docs", type=int, default=300, help="held-out documents the summaries pool")
    parser.add_argument("--store-root", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0, help="which held-out documents are drawn")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    progress = not args.quiet
    inputs = load_figure_inputs(tiny=args.tiny, n_docs=args.n_docs, seed=args.seed, store_root=args.store_root)

    heads = head_labels(inputs, progress)
    args.out.mkdir(parents=True, exist_ok=True)
    heads.to_csv(args.out / "heads.csv", index=False)
    counts = heads.groupby(["model", "label"], sort=False).size().rename("n_heads").reset_index()
    counts.to_csv(args.out / "label_counts.csv", index=False)
    plot_head_map(heads, args.out, stem="head_map")
    plot_share_scatter(heads, args.out, stem="head_shares")
    summary = {"rule": {"dominant_share": DOMINANT_SHARE, "variance_over": "pair (store summaries)"},
               "models": label_summary(heads)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_config(args.out, {"script": "experiments/fig_heads.py", **vars(args), "inputs": inputs.description,
                            "wall_s": round(time.perf_counter() - started, 1)})
    if progress:
        print(counts.pivot(index="model", columns="label", values="n_heads").fillna(0).astype(int).to_string())
    return {"heads": heads, "summary": summary}


if __name__ == "__main__":
    main()
