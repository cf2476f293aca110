"""The claims table: each paper claim, the paper's number, ours (mean over the zoo's training seeds, with an
interval) and whether it holds at our scale -- computed from the numbers the figure scripts wrote, by the rules
in ``RULES`` (data: what is compared, with which control, against which named thresholds), never typed.

    python -m experiments.claims                     # reads figures/, writes figures/claims.json + claims.md
    python -m experiments.claims --figures /tmp/fig  # any folder laid out like figures/

Reads ap_manifold/spectra.csv, heads/heads.csv (+ head_sweep.csv), probes/probes.csv (each with a ``seed``
column: one row set per training seed of the zoo; a table without one is one seed) and the Holmes test over
training seeds (holmes/full/seed_test_counts.csv, the whole train split, else holmes/seed_test_counts.csv).

Over seeds.  ``ours`` is the mean over the training seeds.  The interval runs from the lowest seed's lower
end to the highest seed's upper end, where a seed's ends are its 95% bootstrap CI over documents (probes) or
its value (spectra, heads, counts): it covers the seed-to-seed spread and, where there is one, the bootstrap.
A rule "holds" only when the whole interval satisfies it (every seed, with its CI); comparisons between
models compare their intervals; "partly" rules read the means.  One seed: the interval is that seed's CI.
Spectra of a fixed table have no sampling CI; the Gaussian control of the same shape is shown instead, and
tables of different widths are compared width-matched (``dstg_interp.analysis.spectra.width_matched``).
A probe CI reaching above R² = 1 is impossible (resamples with a numerically constant target): it is shown
as undefined and cannot support a "holds".

The floor.  NoPE-NeoBERT (``nope``: the same encoder with no positional input, trained with the zoo's recipe)
is what an MLM encoder recovers of each probe target from content alone.  The ``floor_*`` rules compare every
model with position input (DSTG's subspace of the claim, every baseline's full state) with it at the last
layer: a reading above the floor needs the position input; one at the floor is content.  Until the zoo holds a
trained nope member (``FLOOR_TRAIN_COMMAND``) and fig_probes has probed it, those rows say so ("not
measured", with the command).  The floor is not a baseline of the paper's claims ("every baseline" means
RoPE, AP and RP).  Paragraph-level probes read paragraph-crossing windows
(``probes.positions.probing_sequences``).  MiniLM's table and the last-layer per-position means are
reference rows (no verdict).

The rules (built from ``RULES``; the same text is the table's "rule" column):

"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dstg_interp.analysis.heads import POSITIONAL_SCORE_MIN, layer_permutation_test
from dstg_interp.analysis.spectra import SMOOTH_FAMILIES, smooth_control
from dstg_interp.io import write_text_atomic
from dstg_interp.model.checkpoint import FLOOR_TRAIN_COMMAND, ZOO_DIR, ZOO_FLOOR
from dstg_interp.variants import variants_where
from experiments.figure_inputs import FIGURES_DIR

PAPER_DSTG_TABLE_PC1_PC2 = 0.941  # the paper's PC1+PC2 of DSTG-NeoBERT's learned AP table
SMOOTH_CONTROL_TEXT = ("the stronger of two structureless smooth tables of the same shape (random walks; white noise "
                       "smoothed to the table's own lag-1 autocorrelation), 95th percentile of 200 draws; the "
                       "Gaussian table in the detail")
BASELINES = variants_where(role="baseline")  # the paper's; the NoPE floor (ZOO_FLOOR) is compared in floor_* only
# the floor readings: (task, segment, the target in words, DSTG's subspace its claim reads)
FLOOR_READINGS = (("token", "sentence", "token position", "ap"), ("segment", "sentence", "sentence index", "ap"),
                  ("segment", "paragraph", "paragraph index", "ap"), ("intra", "sentence", "intra-sentence position", "sem"),
                  ("intra", "paragraph", "intra-paragraph position", "sem"))


def floor_id(task: str, segment: str) -> str:
    return f"floor_{task}" if task == "token" else f"floor_{task}_{segment}"

HOLDS, PARTLY, FAILS, NOT_MEASURED, REFERENCE = "holds", "partly", "does not hold", "not measured", "reference"
INCONCLUSIVE = "inconclusive"  # the test cannot separate the models on most of what it compares


@dataclass(frozen=True)
class Rule:
    """One claim's verdict rule: what is compared, with which control, and the named thresholds that the
    ``holds`` and ``partly`` conditions use ({name} placeholders); anything else does not hold."""

    claim_id: str
    compared: str
    control: str
    holds: str
    partly: str = ""
    thresholds: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.thresholds[name]

    def text(self) -> str:
        parts = [f"holds: {self.holds.format(**self.thresholds)}"]
        if self.partly:
            parts.append(f"partly: {self.partly.format(**self.thresholds)}")
        return "; ".join(parts) + "; else does not hold"


RULES = {rule.claim_id: rule for rule in (
    Rule("ap_pc1_pc2_dstg", "PC1+PC2 of DSTG's AP table, mean over seeds",
         SMOOTH_CONTROL_TEXT,
         "every seed above the smooth control's q95 and interval low >= {holds_low}",
         "mean above the smooth control's q95", dict(holds_low=0.80)),
    Rule("ap_pc1_pc2_entangled",
         "excess of PC1+PC2 over chance, AP-NeoBERT's table projected to DSTG's width (50 random subspaces) vs DSTG's",
         "Gaussian table of the projected shape (excess = value - control)",
         "AP-NeoBERT's excess interval high <= DSTG's excess interval low - {holds_gap}",
         "AP-NeoBERT's mean excess <= DSTG's mean excess - {partly_gap}",
         dict(holds_gap=0.20, partly_gap=0.05)),
    Rule("ap_dct_low_bins", "pooled PC1/PC2 DCT-II share in bins 0-3 of DSTG's table (bin 0 holds ~nothing after "
         "centring, so bins 1-3: up to 1.5 periods; per PC in the detail)",
         SMOOTH_CONTROL_TEXT + "; AP-NeoBERT's table width-matched",
         "interval low >= {holds_low} and every seed above the smooth control's q95",
         "mean >= {partly_mean}, above the smooth control's mean and above AP-NeoBERT's width-matched mean",
         dict(holds_low=0.90, partly_mean=0.50)),
    Rule("heads_structure_semantic", "share of DSTG heads labelled structure or semantic (threshold {threshold})",
         "the labels over a threshold sweep (detail)",
         ">= {holds_share:.0%} of heads and both kinds present, in every seed", "both kinds present in some seed",
         dict(threshold=0.6, holds_share=0.75)),
    Rule("heads_no_rp", "DSTG heads labelled RP, over seeds and the threshold sweep",
         "the labels at every swept threshold (head_sweep.csv)",
         "0 RP heads in every seed at every threshold >= {majority} (a majority share)",
         "0 RP heads in every seed at the house threshold {threshold} only",
         dict(majority=0.5, threshold=0.6)),
    *[Rule(f"final_{target}", f"partial R² given token position of {text} at the last layer: DSTG's AP subspace vs "
           "every baseline's full state", "position-only probe (one-hot token position), same tokens and folds",
           "DSTG's interval low > {holds_floor} and > every baseline's interval high",
           "DSTG's mean above every baseline's mean and above {holds_floor}",
           dict(holds_floor=0.0)) for target, text in (("segment_sentence", "sentence index"),
                                                        ("segment_paragraph", "paragraph index"))],
    Rule("final_token", "token-position R² at the last layer: DSTG's AP subspace vs every baseline's full state",
         "random-init model and within-document shuffle (control_r2)",
         "DSTG's interval low > every baseline's interval high", "DSTG's mean above every baseline's mean"),
    *[Rule(f"ap_loses_{segment}", f"AP-NeoBERT's partial R² of {segment} index given token position: best middle "
           "layer minus the last", "position-only probe; the seeds' bootstrap CIs",
           "drop >= {holds_drop} with disjoint CIs in every seed",
           "every seed drops and the mean drop >= {partly_drop}", dict(holds_drop=0.10, partly_drop=0.05))
      for segment in ("sentence", "paragraph")],
    *[Rule(f"intra_{segment}_semantic", f"intra-{segment} R² of DSTG's semantic subspace (and every baseline's full "
           "state) at the last layer", "the larger of control_r2 and the position-only R²",
           "interval low >= {holds_low} and R² - max(control, position-only) >= {holds_margin} in every seed, for "
           "DSTG sem and every baseline", "the same for DSTG sem only", dict(holds_low=0.50, holds_margin=0.20))
      for segment in ("sentence", "paragraph")],
    *[Rule(floor_id(task, segment), f"{text} R² at the last layer: every model with position input (DSTG's "
           f"{subspace} subspace, every baseline's full state) vs NoPE-NeoBERT's full state (no positional input)",
           "NoPE-NeoBERT: what content alone recovers (its random-init and shuffle controls in the detail)",
           "every model's interval low > NoPE's interval high", "every model's mean > NoPE's mean")
      for task, segment, text, subspace in FLOOR_READINGS],
    Rule("holmes_wins", "share of Holmes phenomena DSTG wins against each baseline by the test over training seeds",
         "seed-to-seed spread (Welch 95% interval per phenomenon; margin in seed_test_counts.csv)",
         "a majority of phenomena won against every baseline", "against some baseline; inconclusive when the "
         "hardest comparison ties on more than half of the phenomena (the seeds cannot separate the models)"),
    *[Rule(f"final_{segment}_raw", f"plain R² of {segment} index at the last layer (the paper's statistic): DSTG's AP "
           "subspace vs every baseline's full state", "none beyond the baselines (token position is not taken out: "
           "the stricter partial-R² row beside it does)",
           "DSTG's interval low > every baseline's interval high", "DSTG's mean above every baseline's mean")
      for segment in ("sentence", "paragraph")],
)}
__doc__ += "\n".join(f"  {rule.claim_id:<26} {rule.compared.format(**rule.thresholds)}\n  {'':<26} control: {rule.control}\n  {'':<26} {rule.text()}"
                     for rule in RULES.values()) + "\n"


def claim(claim_id, text, paper, ours=None, ci=None, verdict=NOT_MEASURED, detail="", seeds=None) -> dict:
    rule = RULES.get(claim_id)
    return {"id": claim_id, "claim": text, "paper": paper, "ours": ours, "ci": ci, "verdict": verdict,
            "detail": detail, "rule": rule.text() if rule else "", "control": rule.control if rule else "",
            "compared": rule.compared.format(**rule.thresholds) if rule else "", "seeds": seeds}


def _read_csv(path: Path):
    return pd.read_csv(path) if path.is_file() else None


def _with_seed(table):
    """A table without a ``seed`` column comes from one training seed (0)."""
    return table if table is None or "seed" in table else table.assign(seed=0)


def _seeds(table) -> list[int]:
    return sorted(int(s) for s in table.seed.dropna().unique())


def _seeds_text(seeds) -> str:
    return f"{len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]}"


def _interval(values) -> list[float] | None:
    """[min, max] over seeds of a quantity without a sampling CI (None for a single seed)."""
    values = [float(v) for v in values]
    return [min(values), max(values)] if len(values) > 1 else None


def _span(values) -> tuple[float, float]:
    values = [float(v) for v in values]
    return min(values), max(values)


# --- finding 1: the AP manifold ------------------------------------------------------------------
def smooth_bounds(tables: pd.DataFrame, key: str) -> tuple[pd.DataFrame, str]:
    """Per row of ``tables`` (one learned table per seed), the stronger smooth family's mean and q95 of ``key``
    (``analysis.spectra.smooth_controls``), and how they were found.  A ``spectra.csv`` written before the
    smooth controls existed has only the shape: the random-walk family is computed from it (the same code), and
    the detail says the smoothed-noise family is missing."""
    rows, families = [], set()
    for row in tables.itertuples():
        options = []
        for family in SMOOTH_FAMILIES:
            if f"{family}_{key}_q95" in tables and pd.notna(getattr(row, f"{family}_{key}_q95")):
                options.append((getattr(row, f"{family}_{key}_q95"), getattr(row, f"{family}_{key}"), family))
        if not options:
            walk = smooth_control((int(row.n_positions), int(row.width)), "walk")
            options.append((walk[f"{key}_q95"], walk[key], "walk (from the shape)"))
        q95, mean, family = max(options)
        rows.append(dict(q95=q95, mean=mean))
        families.add(family)
    bounds = pd.DataFrame(rows)
    said = (f"q95 {bounds.q95.mean():.3f} (mean {bounds['mean'].mean():.3f}; the stronger family: "
            f"{', '.join(sorted(families))})")
    if any("from the shape" in family for family in families):
        said += "; the smoothed-noise family needs the table's roughness: rerun experiments.fig_ap_manifold"
    return bounds, said


def spectra_claims(spectra) -> list[dict]:
    spectra = _with_seed(spectra)
    texts = {"dstg_pc": "PC1+PC2 of DSTG's learned AP table", "ap_pc": "PC1+PC2 of AP-NeoBERT's entangled table "
             "(width-matched to DSTG's)", "dstg_dct": "Share of DSTG's PC1/PC2 DCT-II power in the first 4 bins"}
    if spectra is None:
        return [claim("ap_pc1_pc2_dstg", texts["dstg_pc"], PAPER_DSTG_TABLE_PC1_PC2), claim("ap_pc1_pc2_entangled", texts["ap_pc"], 0.234),
                claim("ap_dct_low_bins", texts["dstg_dct"], "nearly all")]
    learned = spectra[spectra.source == "learned table"]
    if "model" not in learned:  # an older table: the model is in the name
        learned = learned.assign(model=learned.name.str.split().str[0])
    dstg, ap = learned[learned.model == "dstg"], learned[learned.model == "ap"]
    matched = "matched_excess_pc1_pc2" in learned and len(ap) and ap.matched_excess_pc1_pc2.notna().all()
    rows = []
    rule = RULES["ap_pc1_pc2_dstg"]
    if len(dstg):
        value, low = float(dstg.pc1_pc2.mean()), float(dstg.pc1_pc2.min())
        smooth, smooth_said = smooth_bounds(dstg, "pc1_pc2")
        above = (dstg.pc1_pc2.to_numpy() > smooth["q95"].to_numpy())
        verdict = HOLDS if above.all() and low >= rule["holds_low"] else \
            PARTLY if value > float(smooth["q95"].mean()) else FAILS
        control = float(dstg.control_pc1_pc2.mean())
        detail = (f"{dstg.n_positions.iloc[0]:.0f}x{dstg.width.iloc[0]:.0f} table, {_seeds_text(_seeds(dstg))}; "
                  f"smooth control {smooth_said}; Gaussian control {control:.3f}")
        if "pc3" in dstg:
            detail += f"; PC3 {dstg.pc3.mean():.3f}, PCs to 95% {dstg.pcs_95.mean():.1f}"
        if "participation_ratio" in dstg:
            detail += f"; participation ratio {dstg.participation_ratio.mean():.2f} (Gaussian " \
                      f"{dstg.control_participation_ratio.mean():.1f})"
        rows.append(claim("ap_pc1_pc2_dstg", texts["dstg_pc"], PAPER_DSTG_TABLE_PC1_PC2, value, _interval(dstg.pc1_pc2), verdict, detail,
                          _seeds(dstg)))
    else:
        rows.append(claim("ap_pc1_pc2_dstg", texts["dstg_pc"], PAPER_DSTG_TABLE_PC1_PC2))
    rule = RULES["ap_pc1_pc2_entangled"]
    if len(ap) and len(dstg) and matched:
        dstg_excess = dstg.pc1_pc2 - dstg.control_pc1_pc2  # DSTG's own width is the matched width
        ap_excess = ap.matched_excess_pc1_pc2
        clear = _span(ap_excess)[1] <= _span(dstg_excess)[0] - rule["holds_gap"]
        below = float(ap_excess.mean()) <= float(dstg_excess.mean()) - rule["partly_gap"]
        width = int(ap.matched_width.iloc[0])
        detail = (f"projected to {width} dims: {ap.matched_pc1_pc2.mean():.3f} (spread over projections "
                  f"±{ap.matched_pc1_pc2_std.mean():.3f}; control {ap.matched_control_pc1_pc2.mean():.3f}), excess "
                  f"{ap_excess.mean():.3f} vs DSTG's {dstg_excess.mean():.3f}; raw {ap.width.iloc[0]:.0f}-wide "
                  f"{ap.pc1_pc2.mean():.3f} (control {ap.control_pc1_pc2.mean():.3f}); participation ratio "
                  f"width-matched {ap.matched_participation_ratio.mean():.2f} vs DSTG's "
                  f"{dstg.participation_ratio.mean():.2f}")
        rows.append(claim("ap_pc1_pc2_entangled", texts["ap_pc"], 0.234, float(ap.matched_pc1_pc2.mean()),
                          _interval(ap.matched_pc1_pc2), HOLDS if clear else PARTLY if below else FAILS, detail,
                          _seeds(ap)))
    else:
        rows.append(claim("ap_pc1_pc2_entangled", texts["ap_pc"], 0.234,
                          detail="no width-matched numbers in spectra.csv: rerun experiments.fig_ap_manifold"))
    rule = RULES["ap_dct_low_bins"]
    if len(dstg):
        value, low = float(dstg.low_freq_share.mean()), float(dstg.low_freq_share.min())
        ap_column = "matched_low_freq_share" if matched else "low_freq_share"
        ap_value = float(ap[ap_column].mean()) if len(ap) else float("nan")
        smooth, smooth_said = smooth_bounds(dstg, "low_freq_share")
        above = (dstg.low_freq_share.to_numpy() > smooth["q95"].to_numpy())
        verdict = HOLDS if low >= rule["holds_low"] and above.all() else \
            PARTLY if value >= rule["partly_mean"] and value > float(smooth["mean"].mean()) and value > ap_value else FAILS
        per_pc = ""
        if "pc2_low_freq_share" in dstg:
            per_pc = "; per PC, seeds " + ", ".join(f"{int(r.seed)}: PC1 {r.pc1_low_freq_share:.2f} PC2 "
                                                    f"{r.pc2_low_freq_share:.2f}" for r in dstg.itertuples())
        rows.append(claim("ap_dct_low_bins", texts["dstg_dct"], "nearly all", value, _interval(dstg.low_freq_share),
                          verdict, f"AP-NeoBERT {ap_value:.3f} ({'width-matched' if matched else 'raw'}); smooth "
                          f"control {smooth_said}; Gaussian control {float(dstg.control_low_freq_share.mean()):.3f}"
                          f"{per_pc}", _seeds(dstg)))
    minilm = learned[learned.name.str.startswith("MiniLM")]
    if len(minilm):
        row = minilm.iloc[0]
        extra = f"; projected to {int(row.matched_width)} dims {row.matched_pc1_pc2:.3f} (control " \
                f"{row.matched_control_pc1_pc2:.3f})" if "matched_pc1_pc2" in row and pd.notna(row.matched_pc1_pc2) else ""
        rows.append(claim("minilm_table", "Reference: MiniLM's learned 512x384 position table (PC1+PC2)", None,
                          float(row.pc1_pc2), None, REFERENCE,
                          f"first-4-bin DCT share {float(row.low_freq_share):.3f}; participation ratio "
                          f"{float(row.participation_ratio):.1f}; Gaussian control {float(row.control_pc1_pc2):.3f}"
                          + extra))
    layers = spectra[(spectra.source == "layer states") & (spectra.get("last_layer", False) == True)]  # noqa: E712
    if len(layers):
        shown = layers[(layers.model != "dstg") | (layers.subspace == "ap")]
        column = "matched_pc1_pc2" if "matched_pc1_pc2" in shown and shown.matched_pc1_pc2.notna().all() else "pc1_pc2"
        means = shown.groupby(["model", "subspace"], sort=False)[column].mean()
        detail = ("width-matched: " if column != "pc1_pc2" else "") + \
            "; ".join(f"{model} {subspace} {value:.3f}" for (model, subspace), value in means.items())
        dstg_ap = shown[shown.model == "dstg"]
        rows.append(claim("last_layer_mean_pc1_pc2", "Reference: PC1+PC2 of the last layer's per-position mean",
                          None, float(dstg_ap.pc1_pc2.mean()) if len(dstg_ap) else None,
                          _interval(dstg_ap.pc1_pc2) if len(dstg_ap) else None, REFERENCE, detail, seeds=_seeds(layers)))
    return rows


# --- finding 2: heads ----------------------------------------------------------------------------
def _sweep_counts(sweep, label: str) -> dict:
    """{threshold: max over seeds of the DSTG heads with ``label``} from head_sweep.csv."""
    dstg = sweep[sweep.model == "dstg"]
    counts = dstg[dstg.label == label].groupby("threshold").n_heads.max()
    return {float(t): int(counts.get(t, 0)) for t in sorted(dstg.threshold.unique())}


def head_claims(heads, sweep=None) -> list[dict]:
    heads = _with_seed(heads)
    texts = ("DSTG heads split into structure (AP-driven) and semantic heads",
             "No pure RP heads in DSTG (RP bias only supports semantic heads)")
    dstg = heads[heads.model == "dstg"] if heads is not None else None
    if dstg is None or dstg.empty:
        return [claim("heads_structure_semantic", texts[0], "almost all heads"), claim("heads_no_rp", texts[1], 0)]
    rule = RULES["heads_structure_semantic"]
    per_seed: list[dict[str, Any]] = []
    for model_seed, rows in dstg.groupby("seed"):
        counts = rows.label.value_counts()
        n_structure, n_semantic = int(counts.get("structure", 0)), int(counts.get("semantic", 0))
        per_seed.append(dict(seed=int(model_seed), share=(n_structure + n_semantic) / len(rows),
                             both=n_structure > 0 and n_semantic > 0, n_rp=int(counts.get("RP", 0)),
                             counts=", ".join(f"{label} {int(n)}" for label, n in counts.items()), n=len(rows)))
    seeds = [r["seed"] for r in per_seed]
    shares, n_rp = [r["share"] for r in per_seed], [r["n_rp"] for r in per_seed]
    holds = all(r["share"] >= rule["holds_share"] and r["both"] for r in per_seed)
    counts_text = "; ".join(f"seed {r['seed']}: {r['counts']} of {r['n']} heads" for r in per_seed)
    structure = claim("heads_structure_semantic", texts[0], "almost all heads", sum(shares) / len(shares),
                      _interval(shares), HOLDS if holds else PARTLY if any(r["both"] for r in per_seed) else FAILS,
                      counts_text, seeds)
    rule = RULES["heads_no_rp"]
    largest = f"largest RP share of a DSTG head {dstg.share_rp.max():.3f} ({_seeds_text(seeds)})"
    if sweep is None or sweep.empty:
        no_rp = claim("heads_no_rp", texts[1], 0, sum(n_rp) / len(n_rp), _interval(n_rp), NOT_MEASURED,
                      largest + "; no head_sweep.csv: rerun experiments.fig_heads", seeds)
        return [structure, no_rp]
    rp = _sweep_counts(sweep, "RP")
    majority = [t for t in rp if t >= rule["majority"] - 1e-9]
    verdict = HOLDS if all(rp[t] == 0 for t in majority) else PARTLY if max(n_rp) == 0 else FAILS
    with_rp = [t for t in majority if rp[t] > 0]
    sweep_text = (f"RP heads (most in a seed) at thresholds {', '.join(f'{t:.2f}' for t in with_rp)}: "
                  f"{', '.join(str(rp[t]) for t in with_rp)}" if with_rp else "no RP head at any swept threshold "
                  f">= {rule['majority']:g}")
    return [structure, claim("heads_no_rp", texts[1], 0, sum(n_rp) / len(n_rp), _interval(n_rp), verdict,
                             f"{largest}; {sweep_text}", seeds), structure_kind_reference(dstg),
            offset_heads_reference(heads)]


def structure_kind_reference(dstg: pd.DataFrame) -> dict:
    """Reference: the share of DSTG's structure heads whose attention pattern is explained by the offset j - i
    alone (``positional_score`` >= POSITIONAL_SCORE_MIN: relative, locality heads) rather than by absolute
    position; the paper reads structure heads as carrying macro structure, which an offset head does not."""
    text = "Reference: DSTG structure heads driven by relative offset (locality) rather than absolute position"
    structure = dstg[(dstg.label == "structure") & dstg.positional_score.notna()] if "positional_score" in dstg \
        else dstg.iloc[:0]
    if structure.empty:
        return claim("structure_relative", text, None, verdict=REFERENCE, detail="no structure head with a positional "
                     "score in heads.csv")
    shares = [float((rows.positional_score >= POSITIONAL_SCORE_MIN).mean()) for _, rows in structure.groupby("seed")]
    detail = (f"offset R² of the pattern >= {POSITIONAL_SCORE_MIN:g}; per seed: "
              + ", ".join(f"{int(seed)}: {int((rows.positional_score >= POSITIONAL_SCORE_MIN).sum())} of {len(rows)} "
                          f"(median offset R² {rows.positional_score.median():.2f})"
                          for seed, rows in structure.groupby("seed")))
    return claim("structure_relative", text, None, sum(shares) / len(shares), _interval(shares), REFERENCE, detail,
                 _seeds(structure))


def offset_heads_reference(heads: pd.DataFrame, n_permutations: int = 10_000) -> dict:
    """Reference: DSTG's share of offset-driven heads (pattern explained by the offset j - i, the one head class
    defined alike for every model) against each baseline's, by a permutation test that swaps whole (seed,
    layer) clusters (``analysis.heads.layer_permutation_test``: heads of a layer are not independent)."""
    text = "Reference: DSTG's share of offset-driven heads against each baseline's (layer-clustered permutation test)"
    offset = heads.assign(offset_driven=heads.positional_score.ge(POSITIONAL_SCORE_MIN)) \
        if "positional_score" in heads else None
    others = [m for m in BASELINES if offset is not None and (offset.model == m).any()]
    if offset is None or not others:
        return claim("offset_heads", text, None, verdict=REFERENCE, detail="no baseline heads with a positional "
                     "score in heads.csv")
    dstg = offset[offset.model == "dstg"]
    shares = [float(rows.offset_driven.mean()) for _, rows in dstg.groupby("seed")]
    tests = [layer_permutation_test(offset, "dstg", other, n_permutations=n_permutations) for other in others]
    detail = (f"offset R² of the pattern >= {POSITIONAL_SCORE_MIN:g}; " + "; ".join(
        f"{t['share_a']:.0%} vs {t['model_b']} {t['share_b']:.0%}: p = {t['p_value']:.4f} "
        f"({t['n_clusters']} (seed, layer) clusters, {t['n_permutations']:,} swaps)" for t in tests))
    return claim("offset_heads", text, None, sum(shares) / len(shares), _interval(shares), REFERENCE, detail,
                 _seeds(dstg))


# --- findings 3-4: position probes ---------------------------------------------------------------
def _last_layer(probes, model, task, segment, subspace):
    """The last layer's rows of one model x probe x subspace, one per training seed (None when absent)."""
    rows = probes[(probes.model == model) & (probes.task == task) & (probes.segment == segment)
                  & (probes.subspace == subspace)]
    return rows[rows.layer == rows.layer.max()].sort_values("seed") if len(rows) else None


def _valid_ci(rows, low: str = "ci_low", high: str = "ci_high") -> bool:
    """R² cannot exceed 1: a CI bound above it comes from resamples whose target is (numerically) constant,
    so the interval is not evidence of anything and only point estimates are compared.  A missing CI (too
    few held-out documents) is not evidence either."""
    return bool(rows[high].notna().all() and rows[low].notna().all() and (rows[high] <= 1.0 + 1e-9).all())


def _envelope(rows, low: str = "ci_low", high: str = "ci_high") -> list[float] | None:
    """From the lowest seed's CI low to the highest seed's CI high (None when a CI is undefined)."""
    return [float(rows[low].min()), float(rows[high].max())] if _valid_ci(rows, low, high) else None


def _r2_text(rows, value: str = "r2", low: str = "ci_low", high: str = "ci_high") -> str:
    ci = _envelope(rows, low, high)
    return f"{rows[value].mean():.2f} " + (f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "[CI undefined]")


PARTIAL = ("partial_r2", "partial_ci_low", "partial_ci_high")


def _has_partial(rows) -> bool:
    return rows is not None and "partial_r2" in rows and rows.partial_r2.notna().all()


def final_layer_claims(probes) -> list[dict]:
    probes = _with_seed(probes)
    rows = []
    for task, segment, text in (("segment", "sentence", "Final-layer sentence index beyond token position: DSTG (AP) "
                                 "above every baseline"),
                                ("segment", "paragraph", "Final-layer paragraph index beyond token position: DSTG "
                                 "(AP) above every baseline"),
                                ("token", "sentence", "Final-layer token-position R²: DSTG (AP) above every baseline")):
        claim_id = f"final_{task}_{segment}" if task == "segment" else "final_token"
        dstg = _last_layer(probes, "dstg", task, segment, "ap") if probes is not None else None
        baselines = {m: _last_layer(probes, m, task, segment, "full") for m in BASELINES} if probes is not None else {}
        baselines = {m: r for m, r in baselines.items() if r is not None}
        if dstg is None or not baselines:
            rows.append(claim(claim_id, text, "DSTG high; baselines degrade"))
            continue
        rule = RULES[claim_id]
        beyond = task == "segment"  # token position is its own position baseline: read it raw
        if beyond and not (_has_partial(dstg) and all(_has_partial(r) for r in baselines.values())):
            raw = "; ".join(f"{m} {_r2_text(r)}" for m, r in {"dstg ap": dstg, **baselines}.items())
            rows.append(claim(claim_id, text, "DSTG high; baselines degrade",
                              detail="probes.csv has no partial R² given token position (rerun experiments.fig_probes); "
                                     f"raw R², which token position alone may explain: {raw}"))
            continue
        value, low, high = PARTIAL if beyond else ("r2", "ci_low", "ci_high")
        valid = _valid_ci(dstg, low, high) and all(_valid_ci(r, low, high) for r in baselines.values())
        floor = rule.thresholds.get("holds_floor", -math.inf)
        clear = valid and dstg[low].min() > floor and all(dstg[low].min() > r[high].max() for r in baselines.values())
        above = all(dstg[value].mean() > r[value].mean() for r in baselines.values()) and dstg[value].mean() > floor
        detail = "; ".join(f"{m} {_r2_text(r, value, low, high)}" for m, r in baselines.items())
        dstg_full = _last_layer(probes, "dstg", task, segment, "full")
        if dstg_full is not None and (not beyond or _has_partial(dstg_full)):
            detail += f"; dstg full {_r2_text(dstg_full, value, low, high)}"
        if beyond:
            detail += (f" (partial R²). Raw R²: dstg ap {_r2_text(dstg)}, position alone "
                       f"{dstg.position_r2.mean():.2f}; " + "; ".join(f"{m} {r.r2.mean():.2f}" for m, r in baselines.items()))
        rows.append(claim(claim_id, text, "DSTG high; baselines degrade", float(dstg[value].mean()),
                          _envelope(dstg, low, high), HOLDS if clear else PARTLY if above else FAILS, detail,
                          _seeds(dstg)))
    rows += [raw_r2_claim(probes, segment) for segment in ("sentence", "paragraph")]
    for segment in ("sentence", "paragraph"):
        rows.append(ap_loses_claim(probes, segment))
    return rows


def raw_r2_claim(probes, segment: str) -> dict:
    """The paper's own statistic beside our stricter one: plain held-out R² of the segment index at the last layer,
    DSTG's AP subspace against every baseline's full state (token position not taken out)."""
    claim_id = f"final_{segment}_raw"
    text = f"Final-layer {segment} index, plain R² (the paper's statistic): DSTG (AP) above every baseline"
    probes = _with_seed(probes)
    dstg = _last_layer(probes, "dstg", "segment", segment, "ap") if probes is not None else None
    baselines = {m: _last_layer(probes, m, "segment", segment, "full") for m in BASELINES} if probes is not None else {}
    baselines = {m: r for m, r in baselines.items() if r is not None}
    if dstg is None or not baselines:
        return claim(claim_id, text, "DSTG high; baselines degrade")
    valid = _valid_ci(dstg) and all(_valid_ci(r) for r in baselines.values())
    clear = valid and all(dstg.ci_low.min() > r.ci_high.max() for r in baselines.values())
    above = all(dstg.r2.mean() > r.r2.mean() for r in baselines.values())
    detail = "; ".join(f"{m} {_r2_text(r)}" for m, r in baselines.items())
    if "position_r2" in dstg:
        detail += f"; token position alone explains {dstg.position_r2.mean():.2f} of it (DSTG's tokens)"
    return claim(claim_id, text, "DSTG high; baselines degrade", float(dstg.r2.mean()), _envelope(dstg),
                 HOLDS if clear else PARTLY if above else FAILS, detail, _seeds(dstg))


def ap_loses_claim(probes, segment: str) -> dict:
    """AP-NeoBERT's partial R² (structure beyond token position) from its best middle layer to the last."""
    text = f"AP-NeoBERT loses {segment}-index information (beyond token position) by the final layer"
    claim_id = f"ap_loses_{segment}"
    line = probes[(probes.model == "ap") & (probes.task == "segment") & (probes.segment == segment)
                  & (probes.subspace == "full")] if probes is not None else pd.DataFrame()
    if line.empty or line.layer.nunique() < 3:
        return claim(claim_id, text, "structure lost by the last layer")
    if not _has_partial(line):
        return claim(claim_id, text, "structure lost by the last layer",
                     detail="probes.csv has no partial R² given token position: rerun experiments.fig_probes")
    rule = RULES[claim_id]
    drops, clear, details = [], [], []
    for model_seed, seed_line in line.groupby("seed"):
        seed_line = seed_line.sort_values("layer")
        last, earlier = seed_line.iloc[-1], seed_line.iloc[1:-1]  # layer 0 is the embedding, not a "middle layer"
        best = earlier.loc[earlier.partial_r2.idxmax()]
        drop = float(best.partial_r2 - last.partial_r2)
        disjoint = _valid_ci(pd.DataFrame([last, best]), *PARTIAL[1:]) and last.partial_ci_high < best.partial_ci_low
        drops.append(drop)
        clear.append(drop >= rule["holds_drop"] and disjoint)
        details.append(f"seed {int(model_seed)}: layer {int(best.layer)} {best.partial_r2:.2f} -> layer "
                       f"{int(last.layer)} {last.partial_r2:.2f} (raw R² {best.r2:.2f} -> {last.r2:.2f})")
    mean = sum(drops) / len(drops)
    verdict = HOLDS if all(clear) else PARTLY if min(drops) > 0 and mean >= rule["partly_drop"] else FAILS
    return claim(claim_id, text, "structure lost by the last layer", mean, _interval(drops), verdict,
                 "partial R² given token position; " + "; ".join(details), _seeds(line))


def intra_claims(probes) -> list[dict]:
    probes = _with_seed(probes)
    rows = []
    for segment in ("sentence", "paragraph"):
        text = f"Intra-{segment} position recoverable from DSTG's semantic subspace (and every model)"
        claim_id = f"intra_{segment}_semantic"
        dstg = _last_layer(probes, "dstg", "intra", segment, "sem") if probes is not None else None
        if dstg is None:
            rows.append(claim(claim_id, text, "recoverable in every model"))
            continue
        rule = RULES[claim_id]

        def baseline_of(seed_rows):
            position = seed_rows.position_r2 if "position_r2" in seed_rows else float("-inf")
            return pd.concat([seed_rows.control_r2, pd.Series(position, index=seed_rows.index)], axis=1).max(axis=1)

        def recoverable(seed_rows, rule=rule):
            return _valid_ci(seed_rows) and seed_rows.ci_low.min() >= rule["holds_low"] \
                and (seed_rows.r2 - baseline_of(seed_rows)).min() >= rule["holds_margin"]

        baselines = {m: _last_layer(probes, m, "intra", segment, "full") for m in BASELINES}
        baselines = {m: r for m, r in baselines.items() if r is not None}
        every = recoverable(dstg) and all(recoverable(r) for r in baselines.values())
        verdict = HOLDS if every else PARTLY if recoverable(dstg) else FAILS
        position = f", position alone {dstg.position_r2.mean():.2f}" if "position_r2" in dstg else ""
        detail = f"dstg sem control {dstg.control_r2.mean():.2f}{position}; " + "; ".join(
            f"{m} full {_r2_text(r)} (control {r.control_r2.mean():.2f})" for m, r in baselines.items())
        rows.append(claim(claim_id, text, "recoverable in every model", float(dstg.r2.mean()), _envelope(dstg), verdict,
                          detail, _seeds(dstg)))
    return rows


# --- the floor: what NoPE-NeoBERT recovers with no position input --------------------------------
def floor_claims(probes) -> list[dict]:
    """Each probe's last-layer reading of every model with position input against the NoPE floor's."""
    probes = _with_seed(probes)
    rows = []
    for task, segment, text, subspace in FLOOR_READINGS:
        claim_id, what = floor_id(task, segment), f"{text[0].upper()}{text[1:]} above the NoPE floor, every model"
        paper = "— (no NoPE model)"
        floor = _last_layer(probes, ZOO_FLOOR, task, segment, "full") if probes is not None else None
        if floor is None:
            rows.append(claim(claim_id, what, paper, detail=f"NoPE-NeoBERT (the floor) is not in probes.csv: train it with "
                                                             f"{FLOOR_TRAIN_COMMAND}, then rerun experiments.fig_probes"))
            continue
        readings = {f"dstg {subspace}": _last_layer(probes, "dstg", task, segment, subspace),
                    **{m: _last_layer(probes, m, task, segment, "full") for m in BASELINES}}
        readings = {name: r for name, r in readings.items() if r is not None}
        valid = _valid_ci(floor) and all(_valid_ci(r) for r in readings.values())
        clear = bool(readings) and valid and all(r.ci_low.min() > floor.ci_high.max() for r in readings.values())
        above = bool(readings) and all(r.r2.mean() > floor.r2.mean() for r in readings.values())
        controls = f"control {floor.control_r2.mean():.2f}" if "control_r2" in floor else ""
        if "position_r2" in floor and floor.position_r2.notna().all():
            controls += f", position alone {floor.position_r2.mean():.2f}"
        if task == "segment" and _has_partial(floor):
            controls += f", partial R² given token position {_r2_text(floor, *PARTIAL)}"
        detail = f"floor: nope full {_r2_text(floor)} ({controls.lstrip(', ')}); " + "; ".join(
            f"{name} {_r2_text(r)} ({r.r2.mean() - floor.r2.mean():+.2f} over the floor)" for name, r in readings.items())
        rows.append(claim(claim_id, what, paper, float(floor.r2.mean()), _envelope(floor),
                          HOLDS if clear else PARTLY if above else FAILS, detail, _seeds(floor)))
    return rows


# --- finding 4: Holmes ---------------------------------------------------------------------------
def wilson_interval(successes: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson score interval of a proportion (sensible at small n and near 0 or 1)."""
    if n == 0:
        return [0.0, 1.0]
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def holmes_counts(figures: Path):
    """The test over training seeds of the Holmes run: the full train split (holmes/full/) if run, else Flash."""
    for path in (figures / "holmes" / "full" / "seed_test_counts.csv", figures / "holmes" / "seed_test_counts.csv"):
        if path.is_file():
            return pd.read_csv(path), str(path.relative_to(figures))
    return None, "holmes/seed_test_counts.csv"


def _protocol(figures: Path, source: str) -> str:
    config = figures / Path(source).parent / "config.json"
    try:
        return json.loads(config.read_text())["probe"].get("protocol", "standardised")
    except (OSError, ValueError, KeyError, AttributeError):
        return "unknown"


def holmes_claims(counts, source: str = "holmes/seed_test_counts.csv", protocol: str = "unknown") -> list[dict]:
    text = "Holmes: DSTG improves probing on most phenomena (paper: 49 of 65)"
    overall = counts[(counts.area == "overall") & counts.b.isin(BASELINES)] if counts is not None else None
    if overall is None or overall.empty:
        return [claim("holmes_wins", text, 49 / 65, detail=f"{source} not present (the test needs >= 2 training "
                                                           "seeds per variant: experiments.holmes_suite)")]
    shares = {r.b: (int(r.wins), int(r.ties), int(r.losses), int(r.n_phenomena)) for r in overall.itertuples()}
    worst = min(shares, key=lambda m: shares[m][0] / max(shares[m][3], 1))
    wins, n = shares[worst][0], shares[worst][3]
    majority = [w / max(n_, 1) > 0.5 for w, _, _, n_ in shares.values()]
    ties = shares[worst][1] / max(n, 1)
    verdict = HOLDS if all(majority) else PARTLY if any(majority) else INCONCLUSIVE if ties > 0.5 else FAILS
    first = overall.iloc[0]
    test = (f"Welch {first.level:.0%} interval over {int(first.seeds_a)} training seeds, margin {first.margin:g}"
            if "margin" in overall else "test over training seeds")
    detail = "; ".join(f"vs {m}: {w}/{t}/{lo} won/tied/lost of {n_}" for m, (w, t, lo, n_) in shares.items()) \
        + (f" ({test}; protocol {protocol}: the offline stand-in suite of {n} phenomena, not the paper's 65; "
           f"ours = vs {worst}, the hardest; from {source})")
    seeds = list(range(int(first.seeds_a))) if "seeds_a" in overall else [0]
    return [claim("holmes_wins", text, 49 / 65, wins / max(n, 1), wilson_interval(wins, n), verdict, detail, seeds)]


# --- output --------------------------------------------------------------------------------------
def _format(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def gallery_zoo_path(figures: Path) -> Path:
    """The zoo folder a gallery's figures were drawn from, as its scripts recorded it (``<figure>/config.json``,
    ``zoo``); the shipped zoo when none says."""
    for figure in ("ap_manifold", "probes", "heads", "zoo"):
        config = figures / figure / "config.json"
        if config.is_file():
            zoo = json.loads(config.read_text()).get("zoo")
            if zoo:
                return Path(zoo)
    return ZOO_DIR


def gallery_zoo(figures: Path) -> str:
    """The zoo a gallery's figures were drawn from: "the shipped zoo" for ``dstg_interp/zoo``, else the folder."""
    zoo = gallery_zoo_path(figures)
    return "the shipped zoo (see dstg_interp/zoo/zoo.json)" if zoo.resolve() == ZOO_DIR.resolve() else f"the zoo in `{zoo}`"


# The paper's scale, as its text and the authors' shipped configs give it (shared/notes/paper.md): beside ours
PAPER_SCALE = dict(layers=6, width=768, positions=512, d_ap=48, tokens=22e9, updates=None)


def our_scale(zoo: Path = ZOO_DIR) -> dict | None:
    """The shipped zoo's DSTG member as trained (its config.json and training.json), in PAPER_SCALE's keys."""
    config, training = zoo / "dstg" / "config.json", zoo / "dstg" / "training.json"
    if not config.is_file() or not training.is_file():
        return None
    model, run = json.loads(config.read_text()), json.loads(training.read_text())
    return dict(layers=model["n_layers"], width=model["d_model"], positions=model["max_positions"],
                d_ap=model["d_ap"], tokens=float(run["train_tokens"]), updates=run.get("steps"))


def scale_line(zoo: Path = ZOO_DIR) -> str:
    """One line: our DSTG's layers, width, positions, d_AP, training tokens and updates beside the paper's."""
    ours = our_scale(zoo)

    def said(scale: dict) -> str:
        tokens = f"{scale['tokens'] / 1e9:g}B" if scale["tokens"] >= 1e9 else f"{scale['tokens'] / 1e6:.1f}M"
        updates = f", {scale['updates']:,} updates" if scale.get("updates") else ""
        return (f"{scale['layers']} layers, width {scale['width']}, {scale['positions']} positions, d_AP "
                f"{scale['d_ap']}, {tokens} training tokens{updates}")

    return f"**Scale.** Ours: {said(ours) if ours else 'unknown (no zoo configs)'}; the paper: {said(PAPER_SCALE)}."


def markdown(claims: list[dict], figures: Path) -> str:
    seeds = sorted({s for c in claims for s in (c.get("seeds") or [])})
    lines = ["# Paper claims at our scale", "",
             f"Computed by `experiments/claims.py` from the numbers in `{figures.name}/` (rules as data: "
             f"`experiments.claims.RULES`). Paper: 6 layers, 22B tokens; ours: {gallery_zoo(figures)}, "
             f"training seeds {', '.join(map(str, seeds)) or '—'}. Ours = mean over "
             "seeds; interval = from the lowest seed's 95% CI low (or value) to the highest seed's CI high (or value).",
             "", scale_line(gallery_zoo_path(figures)), "", "| claim | paper | ours | interval | seeds | verdict | compared | control | rule | detail |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in claims:
        ci = f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]" if c["ci"] else "—"
        n = len(c.get("seeds") or []) or "—"
        lines.append(f"| {c['claim']} | {_format(c['paper'])} | {_format(c['ours'])} | {ci} | {n} | {c['verdict']} "
                     f"| {c.get('compared', '')} | {c.get('control', '')} | {c.get('rule', '')} | {c['detail']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES_DIR, help="folder the figure scripts wrote into")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    figures = args.figures
    probes = _read_csv(figures / "probes" / "probes.csv")
    counts, source = holmes_counts(figures)
    claims = (spectra_claims(_read_csv(figures / "ap_manifold" / "spectra.csv"))
              + head_claims(_read_csv(figures / "heads" / "heads.csv"), _read_csv(figures / "heads" / "head_sweep.csv"))
              + final_layer_claims(probes) + intra_claims(probes) + floor_claims(probes)
              + holmes_claims(counts, source, _protocol(figures, source)))
    figures.mkdir(parents=True, exist_ok=True)
    for name, text in (("claims.json", json.dumps(claims, indent=1) + "\n"), ("claims.md", markdown(claims, figures))):
        write_text_atomic(figures / name, text)
    if not args.quiet:
        print(markdown(claims, figures))
    return claims


if __name__ == "__main__":
    main()
