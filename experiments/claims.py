"""The claims table: each paper claim, the paper's number, ours (mean over the zoo's training seeds, with an
interval) and whether it holds at our scale -- computed from the numbers the figure scripts wrote, by the rules
below, never typed.

    python -m experiments.claims                     # reads figures/, writes figures/claims.json + claims.md
    python -m experiments.claims --figures /tmp/fig  # any folder laid out like figures/

Reads ap_manifold/spectra.csv, heads/heads.csv, probes/probes.csv (each with a ``seed`` column: one row set
per training seed of the zoo; a table without one is one seed) and, if present, the Holmes A-vs-B counts
(holmes/full/a_vs_b.csv, the whole train split, else holmes/a_vs_b.csv, Flash; seed 0 of the zoo).

Over seeds.  ``ours`` is the mean over the training seeds.  The interval runs from the lowest seed's lower
end to the highest seed's upper end, where a seed's ends are its 95% bootstrap CI over documents (probes) or
its value (spectra, heads, counts): it covers the seed-to-seed spread and, where there is one, the bootstrap.
A rule "holds" only when the whole interval satisfies it (every seed, with its CI); comparisons between
models compare their intervals; "partly" rules read the means.  One seed: the interval is that seed's CI.

  PC1+PC2 of DSTG's AP table (paper 94.1%)      holds: interval low >= 0.80; partly: mean >= 0.50 and >= 3x the
                                                  Gaussian control
  PC1+PC2 of AP-NeoBERT's table (paper 23.4%)   holds: interval high <= 0.50 and >= 0.20 below DSTG's interval low;
                                                  partly: mean below DSTG's mean
  DCT power of DSTG's PC1/PC2 in bins 0-3       holds: interval low >= 0.90 ("nearly all"); partly: mean >= 0.50
                                                  and above AP-NeoBERT's mean
  DSTG heads structure or semantic              holds: >= 75% of heads and both kinds present, in every seed;
                                                  partly: both kinds present in some seed
  no pure RP heads in DSTG                      holds: 0 heads labelled RP in every seed; else does not hold
  final-layer token / segment R², DSTG's AP     holds: DSTG's interval low > every baseline's interval high at the
    subspace vs every baseline's full state       last layer; partly: DSTG's mean above every baseline's mean
  AP-NeoBERT loses segment structure by the     holds: in every seed, last-layer R² >= 0.10 below the best earlier
    final layer                                   layer's with disjoint CIs; partly: mean drop > 0
  intra-segment position from DSTG's semantic   holds: interval low >= 0.50 and R² - control >= 0.20 in every seed,
    subspace (and every model's full state)       for DSTG sem and every baseline; partly: for DSTG sem only
  Holmes: DSTG better on 49 of 65 phenomena     holds: DSTG wins a majority of phenomena against every baseline;
                                                  partly: against some (CI: Wilson interval of the win share)
Paragraph-level probes read paragraph-crossing windows (``probes.positions.probing_sequences``).
MiniLM's table and the last-layer per-position means are reference rows (no verdict).
Spectra of a fixed table have no sampling CI; the Gaussian control of the same shape is shown instead.
A probe CI reaching above R² = 1 is impossible (resamples with a numerically constant target): it is shown
as undefined and cannot support a "holds".
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

from dstg_interp.io import write_text_atomic
from experiments.figure_inputs import FIGURES_DIR

BASELINES = ("rope", "ap", "rp")
HOLDS, PARTLY, FAILS, NOT_MEASURED, REFERENCE = "holds", "partly", "does not hold", "not measured", "reference"


def claim(claim_id, text, paper, ours=None, ci=None, verdict=NOT_MEASURED, detail="", rule="", seeds=None) -> dict:
    return {"id": claim_id, "claim": text, "paper": paper, "ours": ours, "ci": ci, "verdict": verdict,
            "detail": detail, "rule": rule, "seeds": seeds}


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


# --- finding 1: the AP manifold ------------------------------------------------------------------
def spectra_claims(spectra) -> list[dict]:
    spectra = _with_seed(spectra)
    texts = {"dstg_pc": "PC1+PC2 of DSTG's learned AP table", "ap_pc": "PC1+PC2 of AP-NeoBERT's entangled table",
             "dstg_dct": "Share of DSTG's PC1/PC2 DCT-II power in the first 4 bins"}
    if spectra is None:
        return [claim("ap_pc1_pc2_dstg", texts["dstg_pc"], 0.941), claim("ap_pc1_pc2_entangled", texts["ap_pc"], 0.234),
                claim("ap_dct_low_bins", texts["dstg_dct"], "nearly all")]
    learned = spectra[spectra.source == "learned table"]
    if "model" not in learned:  # an older table: the model is in the name
        learned = learned.assign(model=learned.name.str.split().str[0])
    dstg, ap = learned[learned.model == "dstg"], learned[learned.model == "ap"]
    rows = []
    if len(dstg):
        value, low = float(dstg.pc1_pc2.mean()), float(dstg.pc1_pc2.min())
        control = float(dstg.control_pc1_pc2.mean())
        verdict = HOLDS if low >= 0.80 else PARTLY if value >= 0.50 and value >= 3 * control else FAILS
        rows.append(claim("ap_pc1_pc2_dstg", texts["dstg_pc"], 0.941, value, _interval(dstg.pc1_pc2), verdict,
                          f"{dstg.n_positions.iloc[0]:.0f}x{dstg.width.iloc[0]:.0f} table, {_seeds_text(_seeds(dstg))}; "
                          f"Gaussian control {control:.3f}",
                          "interval low >= 0.80 holds; mean >= 0.50 and >= 3x control partly", _seeds(dstg)))
    else:
        rows.append(claim("ap_pc1_pc2_dstg", texts["dstg_pc"], 0.941))
    if len(ap) and len(dstg):
        value, gap = float(ap.pc1_pc2.mean()), float(dstg.pc1_pc2.mean() - ap.pc1_pc2.mean())
        clear = float(ap.pc1_pc2.max()) <= 0.50 and float(dstg.pc1_pc2.min() - ap.pc1_pc2.max()) >= 0.20
        verdict = HOLDS if clear else PARTLY if gap > 0 else FAILS
        rows.append(claim("ap_pc1_pc2_entangled", texts["ap_pc"], 0.234, value, _interval(ap.pc1_pc2), verdict,
                          f"{gap:+.3f} below DSTG (means); Gaussian control {float(ap.control_pc1_pc2.mean()):.3f}",
                          "interval high <= 0.50 and >= 0.20 below DSTG's interval low holds; mean below DSTG's partly",
                          _seeds(ap)))
    else:
        rows.append(claim("ap_pc1_pc2_entangled", texts["ap_pc"], 0.234))
    if len(dstg):
        value, low = float(dstg.low_freq_share.mean()), float(dstg.low_freq_share.min())
        ap_value = float(ap.low_freq_share.mean()) if len(ap) else float("nan")
        verdict = HOLDS if low >= 0.90 else PARTLY if value >= 0.50 and value > ap_value else FAILS
        rows.append(claim("ap_dct_low_bins", texts["dstg_dct"], "nearly all", value, _interval(dstg.low_freq_share),
                          verdict, f"AP-NeoBERT {ap_value:.3f}; Gaussian control "
                          f"{float(dstg.control_low_freq_share.mean()):.3f}",
                          "interval low >= 0.90 holds; mean >= 0.50 and above AP-NeoBERT's partly", _seeds(dstg)))
    minilm = learned[learned.name.str.startswith("MiniLM")]
    if len(minilm):
        row = minilm.iloc[0]
        rows.append(claim("minilm_table", "Reference: MiniLM's learned 512x384 position table (PC1+PC2)", None,
                          float(row.pc1_pc2), None, REFERENCE,
                          f"first-4-bin DCT share {float(row.low_freq_share):.3f}; participation ratio "
                          f"{float(row.participation_ratio):.1f}; Gaussian control {float(row.control_pc1_pc2):.3f}"))
    layers = spectra[(spectra.source == "layer states") & (spectra.last_layer == True)]  # noqa: E712 (CSV bools)
    if len(layers):
        shown = layers[(layers.model != "dstg") | (layers.subspace == "ap")]
        means = shown.groupby(["model", "subspace"], sort=False).pc1_pc2.mean()
        detail = "; ".join(f"{model} {subspace} {value:.3f}" for (model, subspace), value in means.items())
        dstg_ap = shown[shown.model == "dstg"]
        rows.append(claim("last_layer_mean_pc1_pc2", "Reference: PC1+PC2 of the last layer's per-position mean",
                          None, float(dstg_ap.pc1_pc2.mean()) if len(dstg_ap) else None,
                          _interval(dstg_ap.pc1_pc2) if len(dstg_ap) else None, REFERENCE, detail, seeds=_seeds(layers)))
    return rows


# --- finding 2: heads ----------------------------------------------------------------------------
def head_claims(heads) -> list[dict]:
    heads = _with_seed(heads)
    texts = ("DSTG heads split into structure (AP-driven) and semantic heads",
             "No pure RP heads in DSTG (RP bias only supports semantic heads)")
    dstg = heads[heads.model == "dstg"] if heads is not None else None
    if dstg is None or dstg.empty:
        return [claim("heads_structure_semantic", texts[0], "almost all heads"), claim("heads_no_rp", texts[1], 0)]
    per_seed = []
    for model_seed, rows in dstg.groupby("seed"):
        counts = rows.label.value_counts()
        n_structure, n_semantic = int(counts.get("structure", 0)), int(counts.get("semantic", 0))
        per_seed.append(dict(seed=int(model_seed), share=(n_structure + n_semantic) / len(rows),
                             both=n_structure > 0 and n_semantic > 0, n_rp=int(counts.get("RP", 0)),
                             counts=", ".join(f"{label} {int(n)}" for label, n in counts.items()), n=len(rows)))
    seeds = [r["seed"] for r in per_seed]
    shares, n_rp = [r["share"] for r in per_seed], [r["n_rp"] for r in per_seed]
    holds = all(r["share"] >= 0.75 and r["both"] for r in per_seed)
    counts_text = "; ".join(f"seed {r['seed']}: {r['counts']} of {r['n']} heads" for r in per_seed)
    return [
        claim("heads_structure_semantic", texts[0], "almost all heads", sum(shares) / len(shares), _interval(shares),
              HOLDS if holds else PARTLY if any(r["both"] for r in per_seed) else FAILS, counts_text,
              ">= 75% structure or semantic and both present in every seed holds; both present in some seed partly",
              seeds),
        claim("heads_no_rp", texts[1], 0, sum(n_rp) / len(n_rp), _interval(n_rp), HOLDS if max(n_rp) == 0 else FAILS,
              f"largest RP share of a DSTG head {dstg.share_rp.max():.3f} ({_seeds_text(seeds)})",
              "0 heads labelled RP in every seed", seeds),
    ]


# --- findings 3-4: position probes ---------------------------------------------------------------
def _last_layer(probes, model, task, segment, subspace):
    """The last layer's rows of one model x probe x subspace, one per training seed (None when absent)."""
    rows = probes[(probes.model == model) & (probes.task == task) & (probes.segment == segment)
                  & (probes.subspace == subspace)]
    return rows[rows.layer == rows.layer.max()].sort_values("seed") if len(rows) else None


def _valid_ci(rows) -> bool:
    """R² cannot exceed 1: a CI bound above it comes from resamples whose target is (numerically) constant,
    so the interval is not evidence of anything and only point estimates are compared.  A missing CI (too
    few held-out documents) is not evidence either."""
    return bool(rows.ci_high.notna().all() and rows.ci_low.notna().all() and (rows.ci_high <= 1.0 + 1e-9).all())


def _envelope(rows) -> list[float] | None:
    """From the lowest seed's CI low to the highest seed's CI high (None when a CI is undefined)."""
    return [float(rows.ci_low.min()), float(rows.ci_high.max())] if _valid_ci(rows) else None


def _r2_text(rows) -> str:
    ci = _envelope(rows)
    return f"{rows.r2.mean():.2f} " + (f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "[CI undefined]")


def final_layer_claims(probes) -> list[dict]:
    probes = _with_seed(probes)
    rows = []
    for task, segment, text in (("segment", "sentence", "Final-layer sentence-index R²: DSTG (AP) above every baseline"),
                                ("segment", "paragraph", "Final-layer paragraph-index R²: DSTG (AP) above every baseline"),
                                ("token", "sentence", "Final-layer token-position R²: DSTG (AP) above every baseline")):
        claim_id = f"final_{task}_{segment}" if task == "segment" else "final_token"
        dstg = _last_layer(probes, "dstg", task, segment, "ap") if probes is not None else None
        baselines = {m: _last_layer(probes, m, task, segment, "full") for m in BASELINES} if probes is not None else {}
        baselines = {m: r for m, r in baselines.items() if r is not None}
        if dstg is None or not baselines:
            rows.append(claim(claim_id, text, "DSTG high; baselines degrade"))
            continue
        valid = _valid_ci(dstg) and all(_valid_ci(r) for r in baselines.values())
        clear = valid and all(dstg.ci_low.min() > r.ci_high.max() for r in baselines.values())
        above = all(dstg.r2.mean() > r.r2.mean() for r in baselines.values())
        detail = "; ".join(f"{m} {_r2_text(r)}" for m, r in baselines.items())
        dstg_full = _last_layer(probes, "dstg", task, segment, "full")
        if dstg_full is not None:
            detail += f"; dstg full {_r2_text(dstg_full)}"
        rows.append(claim(claim_id, text, "DSTG high; baselines degrade", float(dstg.r2.mean()),
                          _envelope(dstg), HOLDS if clear else PARTLY if above else FAILS,
                          detail, "DSTG interval low > every baseline's interval high holds; mean above every "
                          "baseline's partly", _seeds(dstg)))
    for segment in ("sentence", "paragraph"):
        text = f"AP-NeoBERT loses {segment}-index information by the final layer"
        line = probes[(probes.model == "ap") & (probes.task == "segment") & (probes.segment == segment)
                      & (probes.subspace == "full")] if probes is not None else pd.DataFrame()
        if line.empty or line.layer.nunique() < 3:
            rows.append(claim(f"ap_loses_{segment}", text, "structure lost by the last layer"))
            continue
        drops, clear, details = [], [], []
        for model_seed, seed_line in line.groupby("seed"):
            seed_line = seed_line.sort_values("layer")
            last, earlier = seed_line.iloc[-1], seed_line.iloc[1:-1]  # layer 0 is the embedding, not a "middle layer"
            best = earlier.loc[earlier.r2.idxmax()]
            drop = float(best.r2 - last.r2)
            disjoint = _valid_ci(pd.DataFrame([last, best])) and last.ci_high < best.ci_low
            drops.append(drop)
            clear.append(drop >= 0.10 and disjoint)
            details.append(f"seed {int(model_seed)}: layer {int(best.layer)} {best.r2:.2f} -> layer {int(last.layer)} "
                           f"{last.r2:.2f}")
        verdict = HOLDS if all(clear) else PARTLY if sum(drops) / len(drops) > 0 else FAILS
        rows.append(claim(f"ap_loses_{segment}", text, "structure lost by the last layer", sum(drops) / len(drops),
                          _interval(drops), verdict, "; ".join(details),
                          "drop >= 0.10 with disjoint CIs in every seed holds; mean drop > 0 partly", _seeds(line)))
    return rows


def intra_claims(probes) -> list[dict]:
    probes = _with_seed(probes)
    rows = []
    for segment in ("sentence", "paragraph"):
        text = f"Intra-{segment} position recoverable from DSTG's semantic subspace (and every model)"
        dstg = _last_layer(probes, "dstg", "intra", segment, "sem") if probes is not None else None
        if dstg is None:
            rows.append(claim(f"intra_{segment}_semantic", text, "recoverable in every model"))
            continue

        def recoverable(seed_rows):
            return _valid_ci(seed_rows) and seed_rows.ci_low.min() >= 0.50 \
                and (seed_rows.r2 - seed_rows.control_r2).min() >= 0.20

        baselines = {m: _last_layer(probes, m, "intra", segment, "full") for m in BASELINES}
        baselines = {m: r for m, r in baselines.items() if r is not None}
        every = recoverable(dstg) and all(recoverable(r) for r in baselines.values())
        verdict = HOLDS if every else PARTLY if recoverable(dstg) else FAILS
        detail = f"dstg sem control {dstg.control_r2.mean():.2f}; " + "; ".join(
            f"{m} full {_r2_text(r)} (control {r.control_r2.mean():.2f})" for m, r in baselines.items())
        rows.append(claim(f"intra_{segment}_semantic", text, "recoverable in every model", float(dstg.r2.mean()),
                          _envelope(dstg), verdict, detail,
                          "interval low >= 0.50 and R² - control >= 0.20 in every seed, DSTG sem and every baseline",
                          _seeds(dstg)))
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
    """A-vs-B counts of the Holmes script: the full train split (holmes/full/) if run, else Flash (holmes/)."""
    for path in (figures / "holmes" / "full" / "a_vs_b.csv", figures / "holmes" / "a_vs_b.csv"):
        if path.is_file():
            return pd.read_csv(path), str(path.relative_to(figures))
    return None, "holmes/a_vs_b.csv"


def holmes_claims(counts, source: str = "holmes/a_vs_b.csv") -> list[dict]:
    text = "Holmes: DSTG improves probing on most phenomena (paper: 49 of 65)"
    overall = counts[(counts.area == "overall") & counts.b.isin(BASELINES)] if counts is not None else None
    if overall is None or overall.empty:
        return [claim("holmes_wins", text, 49 / 65, detail=f"{source} not present")]
    shares = {r.b: (int(r.wins), int(r.n_phenomena)) for r in overall.itertuples()}
    worst = min(shares, key=lambda m: shares[m][0] / max(shares[m][1], 1))
    wins, n = shares[worst]
    majority = [w / max(n_, 1) > 0.5 for w, n_ in shares.values()]
    verdict = HOLDS if all(majority) else PARTLY if any(majority) else FAILS
    detail = "; ".join(f"vs {m}: {w}/{n_} wins" for m, (w, n_) in shares.items()) \
        + f" (ours = vs {worst}, the hardest; from {source})"
    return [claim("holmes_wins", text, 49 / 65, wins / max(n, 1), wilson_interval(wins, n), verdict, detail,
                  "majority of phenomena against every baseline holds; against some partly", [0])]


# --- output --------------------------------------------------------------------------------------
def _format(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def markdown(claims: list[dict], figures: Path) -> str:
    seeds = sorted({s for c in claims for s in (c.get("seeds") or [])})
    lines = ["# Paper claims at our scale", "",
             f"Computed by `experiments/claims.py` from the numbers in `{figures.name}/` (rules in its docstring). "
             "Paper: 6 layers, 22B tokens; ours: the shipped zoo (see dstg_interp/zoo/zoo.json), "
             f"training seeds {', '.join(map(str, seeds)) or '—'}. Ours = mean over seeds; interval = from the lowest "
             "seed's 95% CI low (or value) to the highest seed's CI high (or value).", "",
             "| claim | paper | ours | interval | seeds | verdict | detail |", "|---|---|---|---|---|---|---|"]
    for c in claims:
        ci = f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]" if c["ci"] else "—"
        n = len(c.get("seeds") or []) or "—"
        lines.append(f"| {c['claim']} | {_format(c['paper'])} | {_format(c['ours'])} | {ci} | {n} | {c['verdict']} "
                     f"| {c['detail']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES_DIR, help="folder the figure scripts wrote into")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    figures = args.figures
    probes = _read_csv(figures / "probes" / "probes.csv")
    claims = (spectra_claims(_read_csv(figures / "ap_manifold" / "spectra.csv"))
              + head_claims(_read_csv(figures / "heads" / "heads.csv"))
              + final_layer_claims(probes) + intra_claims(probes)
              + holmes_claims(*holmes_counts(figures)))
    figures.mkdir(parents=True, exist_ok=True)
    for name, text in (("claims.json", json.dumps(claims, indent=1) + "\n"), ("claims.md", markdown(claims, figures))):
        write_text_atomic(figures / name, text)
    if not args.quiet:
        print(markdown(claims, figures))
    return claims


if __name__ == "__main__":
    main()
