"""Figure: position-free semantic states -- how much a passage's states change at another offset or in
another context, per layer and subspace, and what that does to nearest-neighbour retrieval.

    python -m experiments.fig_invariance                        # the zoo, 400 passages
                                                                # (134 s while another job shared them)
    python -m experiments.fig_invariance --tiny --out /tmp/fig  # tiny random models, seconds
    python -m experiments.fig_invariance --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM   # your models

Passages (``dstg_interp.analysis.invariance.select_passages``): runs of whole sentences of 16-48 tokens with >= 24
tokens of preceding text, at most one per held-out en-mix document, drawn with ``--seed``.  Every zoo model
shares one tokenizer, so every model reads the same passages; the models are the reference four and
``dstg-offset`` (DSTG trained with random_offset: does it lean less on absolute position?).  Each passage is encoded alone
([CLS] passage [SEP]) and under four conditions with the same offset o (its in-context offset, capped to
fit 128 positions): ``shift`` (o masked pads first: only absolute positions move), ``prefix`` (o tokens of
another document first), ``inside`` (embedded in another document: that text before and after it) and
``context`` (its own o preceding tokens first and its following tokens after).

With ``--model`` the models are those given, under their names (``--name``), each reading the passages its own
tokenizer finds, all at the shortest model's length; an entangled model is measured in its full state (said in
one line).

Writes into ``--out`` (default dstg-results/figures/invariance/; the committed gallery: --out figures/invariance): invariance.csv (one row per model x subspace x
condition x layer: token/pooled cosine and rel. L2 to the alone encoding), retrieval.csv (one row per
model x subspace x condition x layer x k: recall@k of the alone database), invariance_by_layer and
recall_by_layer (PNG + PDF + JSON) and config.json; prints the final-layer summary.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dstg_interp.analysis.invariance import CONDITIONS, measure_invariance, select_passages
from dstg_interp.plots import plot_invariance_by_layer, plot_recall_by_layer
from experiments.figure_inputs import (OUTPUT_DIR, FigureConfig, inputs_for, figure_config, one_seed_title, run_as_command, save_config,
                                       say_not_applicable, stream_notes, with_offset_model)

ZOO_PASSAGES = 400


@dataclass
class InvarianceFigureConfig(FigureConfig):
    out: Path = OUTPUT_DIR / "invariance"
    n_passages: int | None = field(default=None, metadata={
        "help": f"passages drawn (None: {ZOO_PASSAGES} on the zoo, all found with --tiny)"})
    min_tokens: int = field(default=16, metadata={"help": "shortest passage, tokens"})
    max_tokens: int = field(default=48, metadata={"help": "longest passage, tokens"})
    min_context: int = field(default=24, metadata={"help": "tokens of its document a passage needs before it"})
    batch_size: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.min_tokens <= self.max_tokens:
            raise ValueError(f"need 0 < min_tokens <= max_tokens, got {self.min_tokens} and {self.max_tokens}")
        if self.n_passages is None and not self.tiny:
            self.n_passages = ZOO_PASSAGES


def run(config: InvarianceFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = inputs_for(config)
    tables, passage_counts = {"invariance": [], "retrieval": []}, {}
    models = with_offset_model(inputs)
    say_not_applicable("fig_invariance", stream_notes(inputs), quiet=config.quiet)
    length = min(model.config.max_positions for model in models.values())  # the training length, for every model
    min_tokens, max_tokens = passage_bounds(config, length)
    if max_tokens != config.max_tokens:
        say_not_applicable("fig_invariance", {"passages": f"{min_tokens}-{max_tokens} tokens, to leave an offset in "
                                                          f"the shortest model's {length} positions"}, quiet=config.quiet)
    for name, model in models.items():
        try:
            passages = select_passages(inputs.documents, model.tokenizer, config.n_passages, min_tokens=min_tokens,
                                       max_tokens=max_tokens, min_context=config.min_context, seed=config.seed)
            invariance, retrieval = measure_invariance(model, passages, name=name, seed=config.seed, max_positions=length,
                                                       batch_size=config.batch_size, progress=not config.quiet)
        except ValueError as err:
            raise SystemExit(f"fig_invariance: {name}: {err}") from None
        passage_counts[name] = len(passages)
        tables["invariance"].append(invariance)
        tables["retrieval"].append(retrieval)
    invariance = pd.concat(tables["invariance"], ignore_index=True)
    retrieval = pd.concat(tables["retrieval"], ignore_index=True)

    config.out.mkdir(parents=True, exist_ok=True)
    for stem, table in (("invariance", invariance), ("retrieval", retrieval)):
        temporary = config.out / f".{stem}.tmp.csv"
        table.to_csv(temporary, index=False)
        temporary.replace(config.out / f"{stem}.csv")
    plot_invariance_by_layer(invariance, config.out, stem="invariance_by_layer", title=one_seed_title(inputs))
    plot_recall_by_layer(retrieval, config.out, stem="recall_by_layer", k=1, title=one_seed_title(inputs))
    summary = final_layer_summary(invariance, retrieval)
    save_config(config, "experiments/fig_invariance.py", passages_per_model=passage_counts, conditions=CONDITIONS,
                mean_offset=float(invariance.mean_offset.mean()), inputs=inputs.description,
                wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(summary.to_string(float_format="%.3f"))
    return {"invariance": invariance, "retrieval": retrieval, "summary": summary}


MIN_OFFSET_ROOM = 8  # positions a passage leaves for its offset (at least 1 is needed: shift, prefix, context)


def passage_bounds(config: InvarianceFigureConfig, length: int) -> tuple[int, int]:
    """--min-tokens / --max-tokens, the longest cut so that a passage leaves MIN_OFFSET_ROOM positions of
    ``length`` (models of 32 positions, as the authors' small checkpoints, read passages of 16-21 tokens)."""
    max_tokens = max(1, min(config.max_tokens, length - 3 - MIN_OFFSET_ROOM))
    return min(config.min_tokens, max_tokens), max_tokens


def main(argv=None) -> dict:
    return run(figure_config(InvarianceFigureConfig, argv, __doc__))


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
    sys.exit(run_as_command(main, "fig_invariance"))
