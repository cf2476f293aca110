"""Rebuild the result tables of figures/REPORT.md and README.md from the gallery's CSV/JSON, so every number
they quote comes from one file and the two never disagree.

    python -m experiments.report                        # figures/ -> figures/REPORT.md, README.md and the recipe
                                                        # studies' DIAGNOSIS.md, LEVERS.md, DATA_FORM.md
    python -m experiments.report --figures /tmp/gallery # a gallery elsewhere: only its own REPORT.md

A table lives in a document between two markers, and only there:

    <!-- report:probes_final -->
    ...rebuilt by TABLES["probes_final"]...
    <!-- /report:probes_final -->

Everything outside the markers (the prose, its readings) is written by hand; a table whose inputs are
missing says so instead of keeping stale numbers.  ``run_all`` runs this last.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dstg_interp.analysis.spectra import smooth_control
from dstg_interp.io import write_text_atomic
from dstg_interp.plots.recipe import plot_data_form
from dstg_interp.variants import VARIANTS
from experiments import report_beyond, zoo_heldout
from experiments.claims import PAPER_DSTG_TABLE_PC1_PC2
from experiments.figure_inputs import FIGURES_DIR, ScriptConfig, parse_config

README = FIGURES_DIR.parent / "README.md"
REPORT_NAME = "REPORT.md"
DISPLAY = report_beyond.DISPLAY
ZOO_ROWS = {name: row.display_name + (" (the floor: no positional input)" if row.role == "floor" else "")
            for name, row in VARIANTS.items()} | {"dstg-offset": "DSTG-NeoBERT, `random_offset` (`dstg-offset`)"}
PROBES = (("token", "sentence", "token position"), ("segment", "sentence", "sentence index"),
          ("segment", "paragraph", "paragraph index"), ("intra", "sentence", "intra-sentence position"),
          ("intra", "paragraph", "intra-paragraph position"))
# the probe tables' columns; ("nope", "full") is the floor, "—" until the zoo holds a trained nope member
ENTRIES = (("dstg", "ap"), ("dstg", "sem"), ("dstg", "full"), ("rope", "full"), ("ap", "full"), ("rp", "full"),
           ("nope", "full"))
ARMS = (("dstg", "chunked", "chunked (reference)"), ("dstg", "curve", "curve"), ("dstg", "repeat", "repeat"),
        ("dstg", "stretch", "stretch"), ("dstg-offset", "chunked", "chunked (reference)"),
        ("dstg-offset", "native", "native (random_offset)"), ("rope", "chunked", "chunked (reference)"),
        ("rope", "native", "native"), ("rp", "chunked", "chunked (reference)"), ("rp", "native", "native"),
        ("ap", "chunked", "chunked (reference)"), ("ap", "curve", "curve"), ("ap", "repeat", "repeat"),
        ("ap", "stretch", "stretch"))
CONDITIONS = ("shift", "prefix", "inside", "context")


@dataclass
class ReportConfig(ScriptConfig):
    out: Path = FIGURES_DIR  # unused: the documents are rewritten in place
    figures: Path = field(default=FIGURES_DIR, metadata={"help": "the gallery the tables are read from"})

    def __post_init__(self) -> None:
        super().__post_init__()
        self.figures = Path(self.figures)


class MissingInput(Exception):
    """A table's input file is not in the gallery."""


def _markdown(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def _csv(figures: Path, relative: str) -> pd.DataFrame:
    path = figures / relative
    if not path.is_file():
        raise MissingInput(relative)
    return pd.read_csv(path)


def _json(path: Path, relative: str):
    if not path.is_file():
        raise MissingInput(relative)
    return json.loads(path.read_text())


def _entry(model: str, subspace: str) -> str:
    return f"{DISPLAY.get(model, model)} {subspace}" if report_beyond.with_subspace(model) else DISPLAY.get(model, model)


# --- the tables ------------------------------------------------------------------------------------
def zoo_table(figures: Path, relative: str = "zoo/zoo.csv") -> str:
    """The zoo, one row per member (variant x training seed): size (layers, positions, parameters), budget,
    validation MLM and held-out accuracy on every corpus of figures/zoo/zoo.csv (``experiments/zoo_heldout.py``),
    then the mean gain per variant."""
    zoo = _csv(figures, relative)
    corpora = [c[:-len("_gain_points")] for c in zoo.columns if c.endswith("_gain_points")]
    header = ["model", "seed", "layers", "positions", "params", "train tokens", "train wall", "val MLM loss",
              "val accuracy", *(f"{corpus}: accuracy (gain)" for corpus in corpora)]
    rows = []
    for variant in [m for m in ZOO_ROWS if m in set(zoo.variant)]:
        members = zoo[zoo.variant == variant].sort_values("seed")
        for z in members.to_dict("records"):
            rows.append([ZOO_ROWS[variant], z["seed"], z["n_layers"], z["max_positions"], f"{z['params'] / 1e6:.2f} M",
                         f"{z['train_tokens'] / 1e6:.1f} M", f"{z['train_seconds']:.0f} s", f"{z['val_loss']:.3f}",
                         f"{z['val_accuracy']:.1%}",
                         *(f"{z[corpus + '_accuracy']:.1%} ({z[corpus + '_gain_points']:+.1f})" for corpus in corpora)])
        if len(members) > 1:
            gains = [members[f"{corpus}_gain_points"] for corpus in corpora]
            rows.append([f"**{ZOO_ROWS[variant]}, mean ± sd**", "", "", "", "", "", "",
                         f"**{members.val_loss.mean():.3f} ± {members.val_loss.std():.3f}**",
                         f"**{members.val_accuracy.mean():.1%}**",
                         *(f"**({g.mean():+.1f} ± {g.std():.1f})**" for g in gains)])
    return _markdown(header, rows)


def zoo_former(figures: Path) -> str:
    """The former 4-layer zoo (recipe 4x128), the same table from the zoo.csv it had when it left the tree
    (figures/zoo/former-4x128/, its README says from which commit)."""
    return zoo_table(figures, "zoo/former-4x128/zoo.csv")


def zoo_targets(figures: Path) -> str:
    """The zoo issue's targets per held-out corpus (``zoo_heldout.zoo_targets`` on figures/zoo/heldout.csv, as in
    figures/zoo/targets.csv): each value with its 95% interval and threshold, and the verdict (met / missed, and
    whether the interval clears the threshold)."""
    targets = zoo_heldout.zoo_targets(_csv(figures, "zoo/heldout.csv"))
    header = ["corpus", "target", "model", "seeds", "value [95% interval]", "threshold", "compared with", "verdict"]
    rows = []
    for t in targets.to_dict("records"):
        sign = -1 if t["target"] == "AP-NeoBERT seed sd" else 1  # stored as -sd so that every target is value >= threshold
        low, high = sorted((sign * t["low"], sign * t["high"])) if not pd.isna(t["low"]) else (np.nan, np.nan)
        number = "{:+.1f}" if sign > 0 else "{:.1f}"  # gains and gaps signed, an sd not
        interval = f" [{number.format(low)}, {number.format(high)}]" if not pd.isna(low) else " (one seed: no interval)"
        verdict = ("met" if t["met"] else "missed") + ("" if t["outside_noise"] else ", inside the noise")
        rows.append([t["corpus"], t["target"], DISPLAY.get(t["variant"], t["variant"]), t["n_seeds"],
                     number.format(sign * t["value"]) + interval, f"≤ {-t['threshold']:.0f}" if sign < 0 else f"≥ {t['threshold']:+.0f}",
                     DISPLAY.get(t["compared_with"], t["compared_with"]), verdict])
    return _markdown(header, rows)


def _probes(figures: Path) -> pd.DataFrame:
    """The probe table over the zoo's seeds (mean, seed x bootstrap interval: probes_over_seeds.csv); a
    gallery from before seeds has only probes.csv (one seed)."""
    if (figures / "probes/probes_over_seeds.csv").is_file():
        return _csv(figures, "probes/probes_over_seeds.csv")
    return _csv(figures, "probes/probes.csv")


def _final_layer(probes: pd.DataFrame) -> pd.DataFrame:
    return probes[probes.layer == probes.groupby("model").layer.transform("max")]


def probes_final(figures: Path) -> str:
    """Final-layer held-out R² of every probe, model and subspace, mean over the zoo's seeds
    (figures/probes/probes_over_seeds.csv)."""
    last = _final_layer(_probes(figures)).set_index(["task", "segment", "model", "subspace"])
    rows = []
    for task, segment, name in PROBES:
        cells = [f"{last.r2[(task, segment, m, s)]:.3f}" if (task, segment, m, s) in last.index else "—"
                 for m, s in ENTRIES]
        rows.append([name, *cells])
    return _markdown(["final-layer R²", *(_entry(m, s) for m, s in ENTRIES)], rows)


def segment_by_layer(figures: Path) -> str:
    """Sentence-index R² (mean over seeds) ± half the interval (seeds x 95% bootstrap), by layer."""
    probes = _probes(figures)
    rows = probes[(probes.task == "segment") & (probes.segment == "sentence")].set_index(["layer", "model", "subspace"])
    layers = sorted(rows.index.unique("layer"))
    table = []
    for layer in layers:
        cells = []
        for model, subspace in ENTRIES:
            key = (layer, model, subspace)
            cells.append(f"{rows.r2[key]:.3f} ± {(rows.ci_high[key] - rows.ci_low[key]) / 2:.3f}" if key in rows.index else "—")
        table.append([layer, *cells])
    return _markdown(["layer", *(_entry(m, s) for m, s in ENTRIES)], table)


def segment_controls(figures: Path) -> str:
    """Final-layer sentence-index R² beside its two controls and the selectivity, and beside token position:
    the position-only R², the partial R² given token position and R² minus the position-only R² (means over
    seeds; "—" for a gallery from before the position baseline)."""
    last = _final_layer(_probes(figures))
    last = last[(last.task == "segment") & (last.segment == "sentence")].set_index(["model", "subspace"])

    def cell(column, key):
        return f"{last[column][key]:.3f}" if column in last and pd.notna(last[column][key]) else "—"

    columns = ["r2", "random_init_r2", "shuffled_r2", "selectivity", "position_r2", "partial_r2", "position_selectivity"]
    rows = [[_entry(m, s), *(cell(column, (m, s)) for column in columns)] for m, s in ENTRIES if (m, s) in last.index]
    return _markdown(["final layer", "R²", "random-init model", "shuffled in document", "selectivity",
                      "position-only R²", "partial R² given position", "R² - position-only"], rows)


def _holmes_folder(figures: Path) -> str:
    """The Holmes run the tables read: the whole train split (holmes/full/) when it holds the test over
    training seeds, else the Flash run (holmes/)."""
    return "holmes/full" if (figures / "holmes/full/seed_test_counts.csv").is_file() or \
        not (figures / "holmes/seed_test_counts.csv").is_file() else "holmes"


def holmes_seed_test(figures: Path) -> str:
    """Phenomena DSTG wins / ties / loses against each baseline by the test over training seeds, overall
    (seed_test_counts.csv of the run ``_holmes_folder`` picks)."""
    folder = _holmes_folder(figures)
    counts = _csv(figures, f"{folder}/seed_test_counts.csv")
    overall = counts[counts.area == "overall"]
    rows = [[f"{r.a} vs {r.b}", r.wins, r.ties, r.losses, r.n_phenomena, f"{int(r.seeds_a)} / {int(r.seeds_b)}",
             f"{r.margin:g}"] for r in overall.itertuples()]
    return _markdown(["phenomena", "wins", "ties", "losses", "of", "training seeds", "margin"], rows)


def holmes_areas(figures: Path) -> str:
    """Winning rate x100 per area within the pool (areas.csv of the run ``_holmes_folder`` picks; chance 50)."""
    areas = _csv(figures, f"{_holmes_folder(figures)}/areas.csv")
    columns = [c for c in areas.columns if c not in ("entry", "n_datasets")]
    rows = [[ZOO_ROWS.get(r.entry, r.entry), *(f"{getattr(r, c):.1f}" for c in columns)] for r in areas.itertuples()]
    return _markdown(["model", *columns], rows)


def holmes_a_vs_b(figures: Path) -> str:
    """Phenomena on which DSTG's mean score beats the other entry's, overall, training seed 0, any difference
    (a_vs_b.csv of the run ``_holmes_folder`` picks)."""
    counts = _csv(figures, f"{_holmes_folder(figures)}/a_vs_b.csv")
    overall = counts[counts.area == "overall"]
    rows = [[f"{r.a} vs {r.b}", r.wins, r.ties, r.losses, r.n_phenomena] for r in overall.itertuples()]
    return _markdown(["phenomena", "wins", "ties", "losses", "of"], rows)


def claims_table(figures: Path, brief: bool = False) -> str:
    """The claims table (claims.json, computed by experiments/claims.py); ``brief``: the paper's claims only (no
    reference rows) without the control, the rule and the detail (the README's; REPORT.md has them all)."""
    claims = _json(figures / "claims.json", "claims.json")
    if brief:
        claims = [c for c in claims if c["verdict"] != "reference"]

    def number(value):
        if value is None:
            return "—"
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    rows = [[c["claim"], number(c["paper"]), number(c["ours"]),
             f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]" if c["ci"] else "—", len(c.get("seeds") or []) or "—",
             c["verdict"], c.get("control") or "—", c.get("rule") or "—", c["detail"]] for c in claims]
    header = ["claim", "paper", "ours (mean over seeds)", "interval (seeds x 95% CI)", "seeds", "verdict",
              "control", "rule", "detail"]
    if brief:
        return _markdown(header[:6], [row[:6] for row in rows])
    return _markdown(header, rows)


def claims_brief(figures: Path) -> str:
    """The paper's claims without the reference rows and the control, rule and detail columns (README.md;
    REPORT.md has the whole table)."""
    return claims_table(figures, brief=True)


def extrapolation_mlm(figures: Path) -> str:
    """MLM accuracy on masked tokens inside / beyond the trained positions, per arm and length (summary.csv)."""
    summary = _csv(figures, "extrapolation/summary.csv").set_index(["model", "method", "length"])
    lengths = sorted(summary.index.unique("length"))
    header = ["model", "arm"] + [f"{n}: {part}" for n in lengths for part in ("inside", "beyond")]
    rows = []
    for model, method, name in ARMS:
        if not any((model, method, n) in summary.index for n in lengths):
            continue
        cells = [f"{summary.loc[(model, method, n), f'accuracy_{part}']:.1%}" if (model, method, n) in summary.index
                 else "—" for n in lengths for part in ("inside", "beyond")]
        rows.append([DISPLAY.get(model, model), name, *cells])
    return _markdown(header, rows)


def extrapolation_probes(figures: Path) -> str:
    """Final-layer probes past the trained range, fitted on all positions (summary.csv): MAE and R² within it."""
    summary = _csv(figures, "extrapolation/summary.csv").set_index(["model", "method", "length"])
    lengths = sorted(summary.index.unique("length"))
    columns = [("mae_beyond_token_position_fit_all", "token position MAE", ".1f"),
               ("r2_beyond_token_position_fit_all", "token position R²", ".2f"),
               ("r2_beyond_sentence_index_fit_all", "sentence index R²", ".2f")]
    header = ["model", "arm"] + [f"{label} {n}" for _, label, _ in columns for n in lengths]
    rows = []
    for model, method, name in ARMS:
        if method == "chunked" or not any((model, method, n) in summary.index for n in lengths):
            continue
        cells = [format(summary.loc[(model, method, n), column], spec) if (model, method, n) in summary.index else "—"
                 for column, _, spec in columns for n in lengths]
        rows.append([DISPLAY.get(model, model), name, *[c.replace("-", "−") for c in cells]])
    return _markdown(header, rows)


def invariance_table(figures: Path) -> str:
    """Final-layer relative L2 change and recall@1 per condition (invariance.csv, retrieval.csv)."""
    invariance = _csv(figures, "invariance/invariance.csv")
    retrieval = _csv(figures, "invariance/retrieval.csv")
    last = invariance[invariance.layer == invariance.groupby("model").layer.transform("max")]
    change = last.set_index(["model", "subspace", "condition"]).token_rel_l2
    ranked = retrieval[(retrieval.k == 1) & (retrieval.layer == retrieval.groupby("model").layer.transform("max"))]
    recall = ranked.set_index(["model", "subspace", "condition"]).recall
    entries = list(dict.fromkeys(zip(last.model, last.subspace)))
    order = {m: i for i, m in enumerate(("dstg", "dstg-offset", "rope", "ap", "rp", "nope"))}
    entries.sort(key=lambda e: (order.get(e[0], 9), ("sem", "ap", "full").index(e[1]) if e[1] in ("sem", "ap", "full") else 9))
    conditions = [c for c in CONDITIONS if c in set(last.condition)]
    header = ["model / subspace"] + [f"rel. L2: {c}" for c in conditions] + [f"recall@1: {c}" for c in conditions]
    rows = []
    for model, subspace in entries:
        name = DISPLAY.get(model, model) + (f" {subspace}" if subspace != "full" or model.startswith("dstg") else "")
        rows.append([name] + [f"{change[(model, subspace, c)]:.3f}" for c in conditions]
                    + [f"{recall[(model, subspace, c)]:.3f}" for c in conditions])
    return _markdown(header, rows)


ERASURE_ENTRIES = (("dstg", "ap"), ("dstg", "sem"), ("dstg", "full"), ("rope", "full"), ("ap", "full"),
                   ("rp", "full"), ("all-MiniLM-L6-v2", "full"))


def _erasure(figures: Path) -> pd.DataFrame:
    """erasure.csv averaged over training seeds (``experiments/fig_erasure.py``), integer layers only."""
    table = _csv(figures, "erasure/erasure.csv")
    table = table[table.layer.astype(str) != "final"].astype({"layer": int})
    metrics = ["loss_increase", "output_change", "r2_before", "r2_after", "attention_js"]
    return table.groupby(["model", "subspace", "layer", "method"])[metrics].mean()


def _erasure_cells(erasure: pd.DataFrame, metric: str, digits: int) -> tuple[list, list]:
    layers = sorted(erasure.index.unique("layer"))
    rows = []
    for model, subspace in ERASURE_ENTRIES:
        if (model, subspace) not in erasure.index.droplevel(["layer", "method"]):
            continue
        cells = []
        for layer in layers:
            key = (model, subspace, layer)
            if (*key, "leace") not in erasure.index or pd.isna(erasure.loc[(*key, "leace"), metric]):
                cells.append("—")
                continue
            cells.append(f"{erasure.loc[(*key, 'leace'), metric]:.{digits}f} ({erasure.loc[(*key, 'random'), metric]:.{digits}f})")
        if any(cell != "—" for cell in cells):
            rows.append([_entry(model, subspace) if model != "all-MiniLM-L6-v2" else model, *cells])
    return [f"layer {layer}" for layer in layers], rows


def erasure_table(figures: Path) -> str:
    """MLM loss increase (nats) when token position is erased by LEACE at layer l, with a random erasure of the
    same rank in parentheses; then the probe R² before -> after LEACE (erasure/erasure.csv)."""
    erasure = _erasure(figures)
    header, rows = _erasure_cells(erasure, "loss_increase", 3)
    text = _markdown(["loss increase: LEACE (random)", *header], rows)
    header, rows = _erasure_cells(erasure, "output_change", 3)
    text += "\n\n" + _markdown(["1 - cos(output): LEACE (random)", *header], rows)
    probe, layers = [], sorted(erasure.index.unique("layer"))
    for model, subspace in ERASURE_ENTRIES:
        keys = [(model, subspace, layer, "leace") for layer in layers]
        if any(k in erasure.index for k in keys):  # a cell per layer of the widest model ("—" past a model's depth)
            probe.append([_entry(model, subspace) if model != "all-MiniLM-L6-v2" else model,
                          *(f"{erasure.loc[k, 'r2_before']:.2f} → {erasure.loc[k, 'r2_after']:.3f}" if k in erasure.index
                            else "—" for k in keys)])
    return text + "\n\n" + _markdown(["token-position R²: before → after LEACE", *(f"layer {l}" for l in layers)], probe)


def _seed_spread(values: pd.Series) -> str:
    """'+0.301 [+0.115, +0.515] over 3 seeds (> 0 in every seed)': the mean over seeds, the range, the sign."""
    values = values.dropna()
    sign = " (> 0 in every seed)" if (values > 0).all() and len(values) > 1 else ""
    return (f"{values.mean():+.3f} [{values.min():+.3f}, {values.max():+.3f}] over {len(values)} "
            f"seed{'s' if len(values) > 1 else ''}{sign}")


def erasure_reading(figures: Path) -> str:
    """What the erasure says about "MLM overwrites position": for each entry, the excess loss of LEACE over the
    same-rank random erasure at the layer where it is largest (on the seed mean) and at the last layer, as the
    mean over training seeds with its range, and whether it is above zero in every seed."""
    table = _csv(figures, "erasure/erasure.csv")
    table = table[table.layer.astype(str) != "final"].astype({"layer": int})
    by_seed = table.pivot_table(index=["model", "subspace", "layer", "seed"], columns="method", values="loss_increase")
    excess = (by_seed["leace"] - by_seed["random"]).rename("excess")
    erasure = _erasure(figures)
    lines = []
    for model, subspace in ERASURE_ENTRIES:
        if model == "all-MiniLM-L6-v2" or (model, subspace) not in erasure.index.droplevel(["layer", "method"]):
            continue
        seeds = excess.xs((model, subspace), level=["model", "subspace"]).unstack("seed")  # layer x seed
        mean = seeds.mean(axis=1)
        last, peak = int(mean.index.max()), int(mean.idxmax())

        rows = erasure.xs((model, subspace), level=["model", "subspace"])
        lines.append(f"- {_entry(model, subspace)}: erasing position costs {_seed_spread(seeds.loc[peak])} nats more than a random "
                     f"erasure of the same rank at layer {peak} (the largest), {_seed_spread(seeds.loc[last])} at the last layer "
                     f"({last}); the probe falls from R² {rows.loc[(last, 'leace'), 'r2_before']:.2f} to "
                     f"{rows.loc[(last, 'leace'), 'r2_after']:.3f} there.")
    return "\n".join(lines)


def interventions_table(figures: Path) -> str:
    """KL(clean || intervened) of the MLM output (nats, mean ± sd over seeds) per AP intervention and layer, the
    output change (1 - cos of the mean-pooled last-layer output, mean ± sd) and the mean relative change of the
    next block's AP logit term (interventions/*.csv); all-MiniLM-L6-v2 (no MLM head, no separate logit terms)
    has the output change only."""
    table = _csv(figures, "interventions/interventions.csv")
    heads = _csv(figures, "interventions/heads.csv")
    term = {"dstg": "ap", "ap": "content"}

    def spread(values: pd.Series, digits: int) -> str:
        values = values.dropna()
        if not len(values):
            return "—"
        mean = round(float(values.mean()), digits) + 0.0  # + 0.0: a rounding -1e-17 reads 0.0000, not -0.0000
        return f"{mean:.{digits}f}" + (f" ± {values.std():.{digits}f}" if len(values) > 1 else "")

    rows = []
    for (model, layer, kind), group in table.groupby(["model", "layer", "kind"], sort=False):
        first = heads[(heads.model == model) & (heads.layer == layer) & (heads.kind == kind)
                      & (heads.block == layer) & (heads.term == term.get(model, "ap"))]
        change = group.output_change if "output_change" in group else pd.Series(dtype=float)
        agreement = group.top1_agreement.dropna()
        rows.append([DISPLAY.get(model, model), layer, kind, spread(group.mlm_kl, 4),
                     f"{agreement.mean():.3f}" if len(agreement) else "—", spread(change, 4),
                     f"{first.relative_change.mean():.3f}" if len(first) else "—", group.seed.nunique()])
    return _markdown(["model", "layer", "intervention", "MLM KL (nats)", "top-1 agreement",
                      "output change (1 − cos, pooled)", "next block's AP / content term: relative change", "seeds"],
                     rows)


def corpus_table(figures: Path) -> str:
    """The en-large corpus, one row per piece (figures/corpus/pieces.csv, ``experiments/corpus_table.py``)."""
    pieces = _csv(figures, "corpus/pieces.csv")
    header = ["piece", "package (registry)", "licence", "documents", "tokens", "held-out docs", "package sha256",
              "text sha256"]
    rows = []
    for p in pieces.to_dict("records"):
        if not p.get("fetched", True):
            rows.append([p["piece"], "", p["licence"], "not fetched", "", "", "", ""])
            continue
        rows.append([p["piece"], f"`{p['package']}` {p['version']} ({p['registry']})", p["licence"], f"{p['documents']:,}",
                     f"{p['tokens'] / 1e6:.2f} M", f"{p['heldout_documents']:,}", f"`{p['artifact_sha256'][:12]}…`",
                     f"`{p['text_sha256'][:12]}…`"])
    fetched = pieces[pieces.fetched] if "fetched" in pieces else pieces
    rows.append(["**all**", "", "", f"**{int(fetched.documents.sum()):,}**", f"**{fetched.tokens.sum() / 1e6:.2f} M**",
                 f"**{int(fetched.heldout_documents.sum()):,}**", "", ""])
    table = _markdown(header, rows)
    if "register" in fetched:
        shares = fetched.groupby("register", sort=False).tokens.sum() / fetched.tokens.sum()
        table += "\n\nShare of tokens by register: " + "; ".join(f"{name} {share:.0%}" for name, share in
                                                              shares.sort_values(ascending=False).items()) + "."
    return table


def recipe_diagnosis(figures: Path) -> str:
    """The recipe diagnosis, one row per (variant, arm): mean ± sd over seeds (figures/recipe/diagnosis_arms.csv,
    ``experiments/recipe_study.py --arms``)."""
    arms = _csv(figures, "recipe/diagnosis_arms.csv")

    def pm(row, column, scale=1.0, digits=2):
        mean, sd = row.get(f"{column}_mean"), row.get(f"{column}_sd")
        if mean is None or pd.isna(mean):
            return "—"
        return f"{scale * mean:.{digits}f}" + ("" if sd is None or pd.isna(sd) else f" ± {scale * sd:.{digits}f}")

    header = ["variant", "arm", "seeds", "left plateau", "plateau exit (M tokens)", "held-out gain (points)",
              "PC1+PC2 (chance)", "PC1+PC2 at width 16 (chance)", "position R² first → last block", "train tokens (M)"]
    rows = []
    for a in arms.to_dict("records"):
        chance = a.get("pc1_pc2_chance_mean")
        rows.append([a["variant"], a["arm"], a["seeds"], f"{a['seeds_off_plateau']}/{a['n_seeds']}",
                     pm(a, "plateau_exit_tokens", 1e-6), pm(a, "heldout_gain_points", 1, 1),
                     f"{pm(a, 'pc1_pc2')} ({chance:.2f})" if chance is not None and not pd.isna(chance) else "—",
                     f"{pm(a, 'pc1_pc2_matched')} ({a['pc1_pc2_matched_chance_mean']:.2f})"
                     if not pd.isna(a.get("pc1_pc2_matched_chance_mean", np.nan)) else "—",
                     f"{pm(a, 'position_r2_first')} → {pm(a, 'position_r2_last')}", pm(a, "train_tokens", 1e-6)])
    return _markdown(header, rows)


LEVER_BASE = "reimpl-wiki"  # the lever study's base arm (experiments/recipe_levers.ARMS)
# the readings the lever study's verdicts are drawn on: a lever "moves" a reading when every seed of its arm lies
# outside the base arm's seed range on the same side (2 seeds an arm: the only interval two seeds give)
LEVER_VERDICT_READINGS = (("pc1_pc2", "PC1+PC2"), ("low_freq_share", "DCT share"), ("position_r2_last", "R² last"))


def _seed_range(values: pd.Series, digits: int = 2) -> str:
    values = values.dropna()
    if values.empty:
        return "—"
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} [{values.min():.{digits}f}, {values.max():.{digits}f}]"


def lever_verdict(arm: pd.DataFrame, base: pd.DataFrame, column: str) -> str:
    """'↑' / '↓' when every seed of ``arm`` lies above / below every seed of ``base`` (and both have >= 2 seeds),
    '=' when the ranges overlap, '?' with fewer than two seeds on either side."""
    a, b = arm[column].dropna(), base[column].dropna()
    if len(a) < 2 or len(b) < 2:
        return "?"
    if a.min() > b.max():
        return "↑"
    if a.max() < b.min():
        return "↓"
    return "="


def recipe_levers(figures: Path, ledgers: tuple = ("recipe/levers/diagnosis_runs.csv",), base_arm: str | None = None,
                  prefix: str = LEVER_BASE, keep=None) -> str:
    """The lever study (issue 35): one row per arm of ``recipe/levers/diagnosis_runs.csv`` (or of ``ledgers``
    together), each reading as the mean over seeds [min, max], chance in brackets where it has one, and which
    readings the arm moves against the base arm (``lever_verdict``): ``base_arm``, by default the arm named
    ``prefix`` alone; ``prefix,`` is shown as "+ " in the other arms' labels; ``keep``: which arms to show."""
    runs = pd.concat([_csv(figures, ledger) for ledger in ledgers], ignore_index=True)
    runs = runs[runs.variant == "dstg"] if "variant" in runs else runs
    if keep is not None:
        runs = runs[runs.arm.map(keep)]
    arms = list(dict.fromkeys(runs.arm))
    base_label = base_arm or next((arm for arm in arms if arm.split(",")[0] == prefix and "," not in arm), None)
    base = runs[runs.arm == base_label] if base_label else runs.iloc[:0]
    header = ["arm (one lever over the base)", "seeds", "PC1+PC2 (chance)", "participation ratio (chance)",
              "DCT share, 4 bins: pooled (PC1 / PC2)", "AP-stream position R² first → last", "held-out gain (points)",
              "plateau exit (M tokens)", "moves vs base: " + ", ".join(name for _, name in LEVER_VERDICT_READINGS)]
    rows = []
    for label in arms:
        arm = runs[runs.arm == label]
        shown = "base: " + label if label == base_label else label.replace(f"{prefix},", "+ ")
        exits = arm.plateau_exit_tokens.dropna() / 1e6
        verdicts = "—" if label == base_label else " ".join(lever_verdict(arm, base, c) for c, _ in LEVER_VERDICT_READINGS)
        rows.append([shown, " ".join(map(str, sorted(arm.seed))),
                     f"{_seed_range(arm.pc1_pc2)} ({arm.pc1_pc2_chance.mean():.2f})",
                     f"{_seed_range(arm.participation_ratio, 1)} ({arm.participation_ratio_chance.mean():.1f})",
                     f"{_seed_range(arm.low_freq_share)} ({arm.pc1_low_freq_share.mean():.2f} / "
                     f"{arm.pc2_low_freq_share.mean():.2f})",
                     f"{_seed_range(arm.position_r2_first)} → {_seed_range(arm.position_r2_last)}",
                     _seed_range(arm.heldout_gain_points, 1),
                     f"{_seed_range(exits)} ({len(exits)}/{len(arm)} left)", verdicts])
    return _markdown(header, rows) + ("\n\nMoves: ↑ / ↓ every seed above / below the base arm's seed range, = the "
                                      "ranges overlap, ? fewer than two seeds.")


AUTHORS_GALLERY = "zoo-authors"  # the authors' recipe at half the shipped zoo's budget, 14.2M tokens (results/zoo-authors)
FORMER_6X128 = "zoo/former-6x128"  # the tables the former shipped zoo (recipe 6x128, until da43ed7) left behind
SIX_LAYERS = "recipe/six_layers"  # the 6-layer test of the normed residual: the authors' zoo against normed=false


def recipe_six_layers(figures: Path) -> str:
    """The normed residual at 6 layers: the authors'-recipe zoo (normed, ``--reference-zoo``) as the base, the same
    recipe with ``normed=false`` as the arm, both read under the study's protocol."""
    reference = _csv(figures, f"{SIX_LAYERS}/diagnosis_reference_zoo.csv")
    return recipe_levers(figures, (f"{SIX_LAYERS}/diagnosis_reference_zoo.csv", f"{SIX_LAYERS}/diagnosis_runs.csv"),
                         base_arm=str(reference.arm.iloc[0]), prefix="authors,layers=6,corpus=en-large,tokens=14200000")


def recipe_depth(figures: Path) -> str:
    """Depth on the collapsing recipe: the lever study's base arm (4 layers) beside the same recipe at 6 layers,
    and at 6 layers on en-large (``recipe/depth/``), 4M tokens each."""
    return recipe_levers(figures, ("recipe/levers/diagnosis_runs.csv", "recipe/depth/diagnosis_runs.csv"),
                         keep=lambda arm: arm == LEVER_BASE or "layers=" in arm)


DATA_FORM = "recipe/data_form"  # the data-form study (issue 58): figures/recipe/DATA_FORM.md
DATA_FORM_TABLE = (128, 16)  # the shape of every data-form arm's position table (128 positions x d_AP 16)
DATA_FORM_BASE = "authors,layers=6,corpus=en-mix:wikipedia,tokens=8000000"  # arm A, first run in recipe/depth
DATA_FORM_ARMS = {  # arm label -> (letter, the one thing it changes)
    DATA_FORM_BASE: ("A", "Wikipedia leads: whole ~117-token articles from their start"),
    "authors,layers=6,corpus=en-large:-wikipedia@words=80,tokens=8000000":
        ("B", "en-large without Wikipedia, re-cut to <= 80 words: ends inside the window, starts at paragraphs"),
    "authors,layers=6,corpus=en-large:-wikipedia@first-cut,tokens=8000000":
        ("C", "en-large without Wikipedia, first cut of each source text only: real starts, truncated"),
    "authors,layers=6,corpus=en-mix:wikipedia@pack=64,windows=true,tokens=8000000":
        ("D", "A's articles packed across their ends into full windows: genre kept, starts and ends gone"),
    "authors,layers=6,corpus=en-mix:wikipedia,tokens=8000000,schedule=constant":
        ("E", "A with the rate kept at its peak (constant, linear decay over the last 20%)"),
    "authors,layers=6,corpus=en-mix:wikipedia,tokens=8000000,rp_prior=2.0":
        ("G", "A with the RP bias started at a locality prior, -2 ln(1 + the offset's size): locality off the table"),
}


def data_form_runs(figures: Path) -> pd.DataFrame:
    """The study's ledger (``recipe/data_form``), with arm A's rows from ``recipe/depth`` where A was not rerun
    (the same run key: the same recipe, data and seed)."""
    runs = _csv(figures, f"{DATA_FORM}/diagnosis_runs.csv")
    depth = _csv(figures, "recipe/depth/diagnosis_runs.csv")
    earlier = depth[(depth.arm == DATA_FORM_BASE) & ~depth.seed.isin(runs[runs.arm == DATA_FORM_BASE].seed)]
    return pd.concat([earlier.assign(ledger="recipe/depth"), runs.assign(ledger=DATA_FORM)], ignore_index=True)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """``frame[name]``, or NaNs where a ledger written before that reading has no such column."""
    return frame[name] if name in frame else pd.Series(np.nan, index=frame.index)


def recipe_data_form(figures: Path) -> str:
    """One row per arm of the data-form study: the training split's form, the table against the smooth
    (random-walk) control, layer 0's AP kernel and the model's learning, mean over seeds [min, max]."""
    runs = data_form_runs(figures)
    header = ["arm", "what it changes", "seeds", "train split: M tokens (epochs at 8M)", "sequences ending inside "
              "the window", "PC1+PC2", "random walk q95 (seeds above)", "PC3", "participation ratio",
              "DCT share, bins 0-3 (walk q95)", "layer-0 AP kernel: offset share (random table)",
              "active heads' modal offsets", "AP-stream position R² first → last", "held-out gain (points)",
              "plateau exit (M tokens)"]
    rows = []
    walk = smooth_control(DATA_FORM_TABLE, "walk")  # every arm's table: d_AP 16 over 128 positions
    for label, (letter, what) in DATA_FORM_ARMS.items():
        arm = runs[runs.arm == label]
        if arm.empty:
            rows.append([letter, what, "—"] + ["not run yet"] + ["—"] * (len(header) - 4))
            continue
        q95 = _column(arm, "pc1_pc2_walk_q95").fillna(walk["pc1_pc2_q95"])  # A's rows: the same shape's walk
        dct_q95 = _column(arm, "low_freq_share_walk_q95").fillna(walk["low_freq_share_q95"])
        split = _column(arm, "train_split_tokens") / 1e6
        exits = arm.plateau_exit_tokens.dropna() / 1e6
        modal = "; ".join(f"s{int(r.seed)}: {r.l0_modal_offsets}" for r in arm.itertuples()
                          if isinstance(getattr(r, "l0_modal_offsets", None), str))
        rows.append([letter, what, " ".join(map(str, sorted(arm.seed))),
                     f"{_seed_range(split)} ({_seed_range(8 / split, 1)})" if split.notna().any() else "—",
                     _seed_range(_column(arm, "ends_inside_window")),
                     _seed_range(arm.pc1_pc2), f"{q95.mean():.2f} ({int((arm.pc1_pc2 > q95).sum())}/{len(arm)})",
                     _seed_range(_column(arm, "pc3")), _seed_range(arm.participation_ratio, 1),
                     f"{_seed_range(arm.low_freq_share)} ({dct_q95.mean():.2f})",
                     f"{_seed_range(_column(arm, 'l0_offset_share'))} ({_seed_range(_column(arm, 'l0_offset_share_random'))})",
                     modal or "—",
                     f"{_seed_range(arm.position_r2_first)} → {_seed_range(arm.position_r2_last)}",
                     _seed_range(arm.heldout_gain_points, 1), f"{_seed_range(exits)} ({len(exits)}/{len(arm)} left)"])
    from_depth = runs[runs.ledger == "recipe/depth"]
    return _markdown(header, rows) + ("\n\nEach reading: mean over seeds [min, max]. \"Seeds above\": seeds whose "
                                      "table's PC1+PC2 exceeds the 95th percentile of 200 random walks of its shape "
                                      "(the smooth structureless control). "
                                      + (f"Arm A's seed(s) {' '.join(map(str, sorted(from_depth.seed)))} come from "
                                         "`recipe/depth` (run before the layer-0 readings existed). "
                                         if len(from_depth) else "")
                                      + "Held-out gain is on each arm's own held-out documents, so it compares "
                                      "learning within an arm, not across corpora.")


def data_form_figure(figures: Path) -> dict:
    """``recipe/data_form/data_form.{png,pdf,json}``: every arm's table curves (A's from ``recipe/depth`` where
    it was not rerun) against the random-walk control of the table's shape."""
    runs = data_form_runs(figures)
    curves = pd.concat([_csv(figures, f"{ledger}/diagnosis_table_curves.csv").assign(ledger=ledger)
                        for ledger in ("recipe/depth", DATA_FORM)], ignore_index=True)
    curves = curves.merge(runs[["arm", "seed", "ledger"]], on=["arm", "seed", "ledger"])
    curves = curves[curves.arm.isin(list(DATA_FORM_ARMS))]
    curves = curves.assign(arm=curves.arm.map(lambda a: f"{DATA_FORM_ARMS[a][0]}: {DATA_FORM_ARMS[a][1].split(':')[0]}"))
    order = {f"{letter}: {what.split(':')[0]}": i for i, (letter, what) in enumerate(DATA_FORM_ARMS.values())}
    curves = curves.sort_values(["arm", "seed", "tokens"], key=lambda c: c.map(order) if c.name == "arm" else c)
    return plot_data_form(curves, smooth_control(DATA_FORM_TABLE, "walk"), figures / DATA_FORM, paper=PAPER_DSTG_TABLE_PC1_PC2)


def gallery_tables(prefix: str, gallery: str) -> dict:
    """The zoo, target, final-layer probe and claims tables of another zoo's gallery (``figures/<gallery>/``,
    written by ``run_all --out figures/<gallery>``, or the files a former zoo's gallery kept in the same layout),
    named ``<prefix>_zoo`` and so on."""
    return {f"{prefix}_zoo": lambda figures: zoo_table(figures / gallery),
            f"{prefix}_zoo_targets": lambda figures: zoo_targets(figures / gallery),
            f"{prefix}_probes_final": lambda figures: probes_final(figures / gallery),
            f"{prefix}_claims_brief": lambda figures: claims_brief(figures / gallery)}


TABLES = {
    "zoo": zoo_table,
    **gallery_tables("authors", AUTHORS_GALLERY),
    **gallery_tables("former6x128", FORMER_6X128),
    "recipe_six_layers": recipe_six_layers,
    "zoo_former": zoo_former,
    "zoo_targets": zoo_targets,
    "probes_final": probes_final,
    "segment_by_layer": segment_by_layer,
    "segment_controls": segment_controls,
    "holmes_areas": holmes_areas,
    "holmes_a_vs_b": holmes_a_vs_b,
    "holmes_seed_test": holmes_seed_test,
    "claims": claims_table,
    "claims_brief": claims_brief,
    "extrapolation_mlm": extrapolation_mlm,
    "extrapolation_probes": extrapolation_probes,
    "invariance": invariance_table,
    "corpus": corpus_table,
    "recipe_diagnosis": recipe_diagnosis,
    "recipe_levers": recipe_levers,
    "recipe_depth": recipe_depth,
    "recipe_data_form": recipe_data_form,
    "erasure": erasure_table,
    "erasure_reading": erasure_reading,
    "interventions": interventions_table,
    **report_beyond.TABLES,  # patching, the logit lens, RoPE bands, the position / context decomposition
}
# documents beside README whose marked tables come from the repository's own gallery
REPOSITORY_DOCUMENTS = [FIGURES_DIR / "recipe" / "DIAGNOSIS.md",
                        FIGURES_DIR / "recipe" / "LEVERS.md", FIGURES_DIR / "recipe" / "DATA_FORM.md"]
BLOCK = re.compile(r"(<!-- report:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /report:(?P=name) -->)", re.DOTALL)


def rebuild(text: str, figures: Path) -> str:
    """``text`` with every marked table rebuilt from ``figures``."""
    def table(match):
        name = match["name"]
        if name not in TABLES:
            raise ValueError(f"unknown report table {name!r}; known: {', '.join(TABLES)}")
        try:
            body = TABLES[name](figures)
        except (MissingInput, report_beyond.MissingInput) as missing:
            body = f"(not measured: {missing} is not in the gallery)"
        return f"{match[1]}{body}\n{match[4]}"

    return BLOCK.sub(table, text)


def run(config: ReportConfig) -> str:
    """Rewrite the gallery's REPORT.md (copied from figures/REPORT.md for a gallery elsewhere) and, for the
    repository's own gallery, README.md; each written under a temporary name, then renamed."""
    report = config.figures / REPORT_NAME
    if not report.is_file():
        shutil.copyfile(FIGURES_DIR / REPORT_NAME, report)
    own = config.figures.resolve() == FIGURES_DIR.resolve()
    if own and (config.figures / DATA_FORM / "diagnosis_table_curves.csv").is_file():
        data_form_figure(config.figures)  # drawn from the committed ledgers, as the tables below
    documents = [report] + ([README] + [d for d in REPOSITORY_DOCUMENTS if d.is_file()] if own else [])
    for document in documents:
        text = document.read_text()
        rebuilt = rebuild(text, config.figures)
        if rebuilt != text:
            write_text_atomic(document, rebuilt)
    return "ok"


def main(argv=None) -> str:
    return run(parse_config(ReportConfig, argv, __doc__))


if __name__ == "__main__":
    main()
