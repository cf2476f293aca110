"""Figure: DSTG as ground truth -- each method's subspace for position scored against the AP stream, by layer.

    python -m experiments.fig_ground_truth                          # DSTG and AP-NeoBERT, every training seed
    python -m experiments.fig_ground_truth --tiny --out /tmp/fig    # tiny random models, seconds
    python -m experiments.fig_ground_truth --model runs/mine --name mine   # your DSTG models
    python -m experiments.fig_ground_truth --methods boundless_das sae     # some methods (the controls always)

DSTG's state at every layer is [semantic | AP], so the position subspace is known: the d_AP AP coordinates
(``dstg_interp.analysis.ground_truth``).  For every DSTG member (training seed) and layer 0..n_layers, on
``n_sequences`` held-out windows of ``length`` tokens -- the first half fits each method, the second half scores
its interchange -- each method gives a k = d_AP subspace:
    ap_coordinates      the truth itself (the reference: cos² 1; its interchange is the AP interchange)
    das                 distributed alignment search: a learned rotation (``das_steps`` Adam steps at ``das_lr``,
                        the best of ``das_restarts`` fits)
    boundless_das       boundless DAS: the rotation and the width learned together (``das_steps`` steps, each
                        direction priced ``width_cost``); DSTG members only, where its width reads against d_AP
    attribution         attribution patching's subspace: DAS to first order (one forward and backward pass)
    leace               the subspace LEACE edits to erase one-hot position
    inlp                the k directions iterative nullspace projection removes (one ridge of position per round)
    probe_span          the span of ridge weights predicting position features
    position_means_pcs  the top PCs of the per-position mean state
    sae                 the decoder directions of a TopK SAE's position-tuned latents (``sae_steps`` steps)
    random              a uniformly random subspace (seeded by ``--seed``): the control
scored by principal angles against the AP subspace (mean cos², share inside, chance k_AP / d) and by interchange:
the base window's state gets the subspace's coordinates from the same tokens read ``shift`` positions later,
against that shifted run's own MLM output (KL, top-1 agreement; and the same two with no interchange).
AP-NeoBERT has no known position subspace but a learned absolute table, so a shifted source changes its
output: its methods (k = ``--k``, default: the d_AP of the DSTG models in the run, else 16) are scored on
interchange alone, with DSTG's scores as each method's error bar.  RoPE and RP have neither (a relative model's
output does not change when every position shifts), nor do Hugging Face encoders here (the shifted source is
built with our models' ``position_offset``): said in one line and left out (none left: exit 2).  Each layer is
one ``ground_truth.score_method`` call (the methods as a dict, DAS closed over its layer): the call a method of
your own goes through (docs/ground-truth.md).

Writes into ``--out`` (default dstg-results/figures/ground_truth/): scores.csv (one row per model x seed x
layer x method), ground_truth (PNG + PDF + JSON) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from dstg_interp.progress import progress_bar

from dstg_interp.analysis import ground_truth as gt
from dstg_interp.encoders import EncoderError, open_encoder
from dstg_interp.plots import plot_ground_truth
from dstg_interp.plots.ground_truth import METHODS as PLOTTED_METHODS
from experiments.fig_interventions import fitted, windows
from experiments.figure_inputs import (OUTPUT_DIR, FigureCannotRead, SeedsFigureConfig, inputs_for, figure_config,
                                       readable_members, run_as_command, print_summary, save_config, with_member_columns)

NEEDS = ("an AP stream of its own (DSTG: scored against the truth) or a learned absolute-position table "
         "(AP-NeoBERT: scored on interchange alone)")
# the methods a run can score: the plot's table of methods (names, colours, legend order) less the two controls
METHODS = tuple(method for method in PLOTTED_METHODS if method not in gt.CONTROLS)
ZOO_K = 16  # the zoo's d_AP: what each method finds on a model with no AP stream unless --k says otherwise
SCORE_COLUMNS = ["model", "seed", *gt.SCORE_COLUMNS]


@dataclass
class GroundTruthFigureConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR / "ground_truth"
    n_sequences: int = field(default=32, metadata={"min": 4, "help": "held-out windows: the first half fits each "
                                                                     "method, the second half scores its interchange"})
    length: int = field(default=64, metadata={"min": 2, "help": "tokens per window"})
    shift: int = field(default=32, metadata={"min": 1, "help": "positions later the interchange's source is read"})
    das_steps: int = field(default=100, metadata={"min": 1, "help": "Adam steps of each DAS rotation"})
    das_lr: float = field(default=0.03, metadata={"help": "Adam learning rate of DAS"})
    das_restarts: int = field(default=1, metadata={"min": 1, "help": "DAS fits from successive seeds, the one with the "
                                                                     "lowest final loss kept (more where the output "
                                                                     "barely depends on position: a random model)"})
    methods: list[str] = field(default_factory=lambda: list(METHODS), metadata={
        "choices": METHODS, "help": "the methods to score (the two controls always: the AP coordinates and a random "
                                    "subspace); DAS and boundless DAS cost the most"})
    width_cost: float = field(default=0.5, metadata={"help": "boundless DAS: the price of interchanging every "
                                                              "axis, as a share of the loss with nothing "
                                                              "interchanged (each direction costs width_cost / d of "
                                                              "it)"})
    sae_steps: int = field(default=500, metadata={"min": 1, "help": "Adam steps of each layer's SAE"})
    k: int | None = field(default=None, metadata={"min": 1, "help": "directions each method finds (default: a DSTG "
                                                                   "model's d_AP, on the others the d_AP of the DSTG "
                                                                   f"models in the run, else {ZOO_K})"})

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown or not self.methods:
            raise ValueError(f"GroundTruthFigureConfig.methods: {', '.join(unknown) or 'none given'}; choose from "
                             f"{', '.join(METHODS)}")
        for name in ("das_lr", "width_cost"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"GroundTruthFigureConfig.{name} must be finite and > 0, got {getattr(self, name)}")


def not_scored(name: str, model) -> str | None:
    """Why a model can be scored neither against the truth nor on interchange (None: it can be)."""
    try:
        gt.known_position_basis(open_encoder(model, name=name))
    except EncoderError:
        return ("no AP stream and no learned absolute table of ours: no known position subspace, and no shifted "
                "source to interchange")
    return None


def member_scores(encoder, config: GroundTruthFigureConfig, documents, k_untrue: int = ZOO_K) -> pd.DataFrame:
    """The scores of every method at every layer of one encoder (rows of SCORE_COLUMNS but model, seed): against
    the truth on DSTG, on interchange alone on AP-NeoBERT (k = ``k_untrue`` unless ``--k`` says)."""
    truth = gt.known_position_basis(encoder)
    wanted = [m for m in config.methods if truth is not None or m != "boundless_das"]  # its width reads against d_AP
    if not wanted:  # boundless DAS alone, on a model without the truth
        return pd.DataFrame(columns=gt.SCORE_COLUMNS)
    length, shift = fitted(encoder, 24 if config.tiny else config.length, 8 if config.tiny else config.shift)
    tokens, mask = windows(encoder, documents, length, config.n_sequences)
    half = len(tokens) // 2
    if half < 1:
        raise FigureCannotRead(f"fig_ground_truth: {encoder.name}: fewer than 2 held-out windows of {length} tokens; "
                               "lower --length")
    fit, score = (tokens[:half], mask[:half]), (tokens[half:], mask[half:])
    steps = 60 if config.tiny else config.das_steps
    k = config.k or (k_untrue if truth is None else truth.shape[1])
    tables = []
    for layer in range(encoder.n_layers + 1):  # DAS reads the layer it fits at: one call per layer
        def das(X, p, k, layer=layer):
            return gt.das_subspace(encoder, layer, k, *fit, shift, steps, config.das_lr, config.seed,
                                   config.das_restarts)

        def attribution(X, p, k, layer=layer):
            return gt.attribution_subspace(encoder, layer, k, *fit, shift)

        def boundless_das(X, p, k, layer=layer):
            return gt.boundless_das_subspace(encoder, layer, *fit, shift, steps, config.das_lr, config.width_cost,
                                             config.seed)
        boundless_das.learns_width = True  # type: ignore[attr-defined]  # its basis is [d, w], w learned

        def sae(X, p, k):
            return gt.sae_position_subspace(X, p, k, steps=50 if config.tiny else config.sae_steps, seed=config.seed)
        every = {"das": das, "boundless_das": boundless_das, "attribution": attribution, "leace": gt.leace_subspace,
                 "inlp": gt.inlp_subspace, "probe_span": gt.probe_span, "position_means_pcs": gt.position_means_pcs,
                 "sae": sae}
        methods = {name: every[name] for name in METHODS if name in wanted}
        tables.append(gt.score_method(methods, encoder, *fit, layers=[layer], k=k, source_shift=shift,
                                      score_tokens=score[0], score_mask=score[1], seed=config.seed))
    return pd.concat(tables, ignore_index=True)


def run(config: GroundTruthFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = inputs_for(config)
    if inputs.given:
        members, notes = readable_members(inputs, "fig_ground_truth", NEEDS, not_scored, config.quiet)
    else:  # the zoo's relative-position baselines have neither by design: left out unsaid
        members, notes = [name for name in inputs.models if inputs.models[name].config.spec.position_table], {}
    encoders = {name: inputs.encoder(name) for name in members}
    # a model without an AP stream finds as many directions as the DSTG models beside it hold (the error bar)
    k_untrue = next((e.config.d_ap for e in encoders.values() if {"sem", "ap"} <= set(e.subspaces)), ZOO_K)
    tables = []
    for name in progress_bar(members, desc="ground truth", disable=config.quiet):
        table = member_scores(encoders[name], config, inputs.documents, k_untrue)
        if len(table):  # empty: boundless DAS alone on a model without the truth
            tables.append(with_member_columns(table, inputs, name))
    if not tables:
        raise FigureCannotRead(f"fig_ground_truth: no model of the list can be scored by {', '.join(config.methods)} "
                               "(boundless DAS needs a DSTG model)")
    scores = pd.concat(tables, ignore_index=True)[SCORE_COLUMNS]
    config.out.mkdir(parents=True, exist_ok=True)
    scores.to_csv(config.out / "scores.csv", index=False)
    plot_ground_truth(scores, config.out, stem="ground_truth")
    save_config(config, "experiments/fig_ground_truth.py", inputs=inputs.description,
                **({"notes": notes} if notes else {}), wall_s=round(time.perf_counter() - started, 1))
    print_summary(config, scores, "%.3f", index=["model", "layer"], columns="method", values="mean_cos2")
    return {"scores": scores, "notes": notes}


def main(argv=None) -> dict:
    return run(figure_config(GroundTruthFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_ground_truth"))
