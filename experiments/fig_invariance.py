"""Figure: position-free semantic states -- how much a passage's states change at another offset or in
another context, per layer and subspace, and what that does to nearest-neighbour retrieval.

    python experiments/fig_invariance.py                        # the zoo, 400 passages: 46 s on 2 cores
                                                                # (134 s while another job shared them)
    python experiments/fig_invariance.py --tiny --out /tmp/fig  # tiny random models, seconds

Passages (``dstg_interp.invariance.select_passages``): runs of whole sentences of 16-48 tokens with >= 24
tokens of preceding text, at most one per held-out en-mix document, drawn with ``--seed``.  Every zoo model
shares one tokenizer, so every model reads the same passages; the models are the reference four and
``dstg-offset`` (DSTG trained with random_offset: does it lean less on absolute position?).  Each passage is encoded alone
([CLS] passage [SEP]) and under four conditions with the same offset o (its in-context offset, capped to
fit 128 positions): ``shift`` (o masked pads first: only absolute positions move), ``prefix`` (o tokens of
another document first), ``inside`` (embedded in another document: that text before and after it) and
``context`` (its own o preceding tokens first and its following tokens after).

Writes into ``--out`` (default figures/invariance/): invariance.csv (one row per model x subspace x
condition x layer: token/pooled cosine and rel. L2 to the alone encoding), retrieval.csv (one row per
model x subspace x condition x layer x k: recall@k of the alone database), invariance_by_layer and
recall_by_layer (PNG + PDF + JSON) and config.json; prints the final-layer summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figure_inputs import FIGURES_DIR, load_figure_inputs, with_offset_model, write_config  # noqa: E402

from dstg_interp.invariance import CONDITIONS, measure_invariance, select_passages  # noqa: E402
from dstg_interp.plots import plot_invariance_by_layer, plot_recall_by_layer  # noqa: E402

OUT = FIGURES_DIR / "invariance"
ZOO_PASSAGES = 400


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tiny", action="store_true", help="tiny random models on a synthetic corpus (smoke run)")
    parser.add_argument("--n-passages", type=int, default=None,
                        help=f"passages drawn (default {ZOO_PASSAGES} on the zoo, all found with --tiny)")
    parser.add_argument("--min-tokens", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--min-context", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="passage choice and prefix donor documents")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    progress = not args.quiet
    inputs = load_figure_inputs(tiny=args.tiny, n_docs=None, seed=args.seed)
    n_passages = args.n_passages if args.n_passages is not None else (None if args.tiny else ZOO_PASSAGES)

    tables, passage_counts = {"invariance": [], "retrieval": []}, {}
    models = with_offset_model(inputs)
    length = min(model.config.max_positions for model in models.values())  # the training length, for every model
    for name, model in models.items():
        try:
            passages = select_passages(inputs.documents, model.tokenizer, n_passages, min_tokens=args.min_tokens,
                                       max_tokens=args.max_tokens, min_context=args.min_context, seed=args.seed)
            invariance, retrieval = measure_invariance(model, passages, name=name, seed=args.seed, max_positions=length,
                                                       batch_size=args.batch_size, progress=progress)
        except ValueError as err:
            raise SystemExit(f"fig_invariance: {name}: {err}") from None
        passage_counts[name] = len(passages)
        tables["invariance"].append(invariance)
        tables["retrieval"].append(retrieval)
    invariance = pd.concat(tables["invariance"], ignore_index=True)
    retrieval = pd.concat(tables["retrieval"], ignore_index=True)

    args.out.mkdir(parents=True, exist_ok=True)
    for stem, table in (("invariance", invariance), ("retrieval", retrieval)):
        temporary = args.out / f".{stem}.tmp.csv"
        table.to_csv(temporary, index=False)
        temporary.replace(args.out / f"{stem}.csv")
    plot_invariance_by_layer(invariance, args.out, stem="invariance_by_layer")
    plot_recall_by_layer(retrieval, args.out, stem="recall_by_layer", k=1)
    summary = final_layer_summary(invariance, retrieval)
    write_config(args.out, {"script": "experiments/fig_invariance.py", **vars(args), "n_passages": passage_counts,
                            "conditions": CONDITIONS, "mean_offset": float(invariance.mean_offset.mean()),
                            "inputs": inputs.description, "wall_s": round(time.perf_counter() - started, 1)})
    if progress:
        print(summary.to_string(float_format="%.3f"))
    return {"invariance": invariance, "retrieval": retrieval, "summary": summary}


def final_layer_summary(invariance: pd.DataFrame, retrieval: pd.DataFrame) -> pd.DataFrame:
    """Per (model, subspace) at each model's last layer: token cosine / rel. L2 and recall@1 per condition."""
    last = invariance.layer == invariance.groupby("model").layer.transform("max")
    states = invariance[last].pivot_table(index=["model", "subspace"], columns="condition",
                                          values=["token_cosine", "token_rel_l2"])
    ranked = retrieval[(retrieval.k == 1) & (retrieval.layer == retrieval.groupby("model").layer.transform("max"))]
    recall = ranked.pivot_table(index=["model", "subspace"], columns="condition", values="recall")
    recall.columns = pd.MultiIndex.from_product([["recall@1"], recall.columns])
    summary = states.join(recall)
    order = [c for c in CONDITIONS if c in set(invariance.condition)]
    summary = summary.reindex(columns=pd.MultiIndex.from_product([["token_cosine", "token_rel_l2", "recall@1"], order]))
    summary.columns = [f"{metric.replace('token_', '')}:{condition}" for metric, condition in summary.columns]
    return summary


if __name__ == "__main__":
    main()
