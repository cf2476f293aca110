"""The REPORT tables of the studies beyond position reading, round 2 (issue 40): patching, the logit lens, RoPE
bands, the position / context decomposition, the NoPE floor.  ``experiments.report.TABLES`` names them; each reads the gallery's
CSV files only (``figures/patching``, ``logit_lens``, ``rope_bands``, ``decomposition``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from dstg_interp.model.checkpoint import FLOOR_TRAIN_COMMAND
from dstg_interp.variants import VARIANTS

DISPLAY = {**{name: row.short_name for name, row in VARIANTS.items()},  # any other model (an arm) as it is
           "MiniLM": "all-MiniLM-L6-v2"}


def with_subspace(model: str) -> bool:
    """Whether a table names the subspace beside the model: a zoo model with DSTG's streams."""
    return model in VARIANTS and VARIANTS[model].ap_stream
# the floor table: each probe target and the subspace of DSTG its claim reads (experiments.claims.FLOOR_READINGS)
FLOOR_TARGETS = (("token", "sentence", "token position", "ap"), ("segment", "sentence", "sentence index", "ap"),
                 ("segment", "paragraph", "paragraph index", "ap"), ("intra", "sentence", "intra-sentence position", "sem"),
                 ("intra", "paragraph", "intra-paragraph position", "sem"))


class MissingInput(Exception):
    """A table's input file is not in the gallery (``report.rebuild`` says so in the table's place)."""


def _csv(figures: Path, relative: str) -> pd.DataFrame:
    path = figures / relative
    if not path.is_file():
        raise MissingInput(relative)
    return pd.read_csv(path)


def _markdown(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def _entry(model: str, subspace: str) -> str:
    if model.endswith("-random init"):
        return _entry(model[: -len("-random init")], subspace) + " (random init)"
    name = DISPLAY.get(model, model)
    return f"{name} {subspace}" if with_subspace(model) else name


def _number(value: float, digits: int = 2) -> str:
    return "—" if pd.isna(value) else f"{round(float(value), digits) + 0.0:.{digits}f}"


def _seed_cell(values: pd.Series, digits: int = 2) -> str:
    """The mean over training seeds, with the seed range when there is more than one."""
    values = values.dropna()
    if not len(values):
        return "—"
    if len(values) == 1:
        return _number(values.iloc[0], digits)
    return f"{_number(values.mean(), digits)} [{_number(values.min(), digits)}, {_number(values.max(), digits)}]"


def _pair_by_layer(group: pd.DataFrame, layers: list, first: str, second: str, first_digits: int = 2) -> list[str]:
    """'first / second' for each of ``layers``: the group's means over training seeds ('—' where a layer is absent)."""
    mean = group.groupby("layer")[[first, second]].mean()
    return [f"{_number(mean[first].get(layer), first_digits)} / {_number(mean[second].get(layer))}" for layer in layers]


def patching_table(figures: Path) -> str:
    """Recovery of the clean output by layer: the exact patches summed over the masked positions / over the others,
    mean over training seeds (patching/summary.csv)."""
    summary = _csv(figures, "patching/summary.csv")
    layers = sorted(summary.layer.unique())
    rows = []
    for (model, corruption, subspace), group in summary.groupby(["model", "corruption", "subspace"], sort=False):
        rows.append([_entry(model, subspace), corruption, group.metric.iloc[0], group.seed.nunique()]
                    + _pair_by_layer(group, layers, "recovery_masked", "recovery_other"))
    return _markdown(["model", "corruption", "metric", "seeds", *[f"layer {layer}" for layer in layers]], rows)


def patching_agreement(figures: Path) -> str:
    """Pearson r of attribution patching against the exact patches (patching/agreement.csv; mean [range] over
    seeds), the same without layer 0 (patching.csv, attribution.csv), and on the tiny random models against exact
    patches of a fraction of the state difference (patching/attribution_curve.csv)."""
    agreement = _csv(figures, "patching/agreement.csv")
    exact, approximate = _csv(figures, "patching/patching.csv"), _csv(figures, "patching/attribution.csv")
    keys = ["model", "seed", "corruption", "layer", "subspace", "position"]
    merged = exact[keys + ["recovery"]].merge(approximate[keys + ["recovery"]], on=keys, suffixes=("_exact", "_attr"))
    past_input = merged[merged.layer > 0].groupby(["model", "corruption", "seed"]).apply(
        lambda g: g.recovery_exact.corr(g.recovery_attr), include_groups=False)
    rows = []
    for (model, corruption), group in agreement.groupby(["model", "corruption"], sort=False):
        r = {subspace: _seed_cell(part.r, 3) for subspace, part in group.groupby("subspace")}
        rows.append([DISPLAY.get(model, model), corruption, group.metric.iloc[0], group.seed.nunique(), r["all"],
                     _seed_cell(past_input.loc[(model, corruption)], 3), r.get("sem", "—"), r.get("ap", "—"),
                     int(group.n.iloc[0])])
    curve = _csv(figures, "patching/attribution_curve.csv")
    curve = curve[curve.subspace == "all"]
    for model, group in curve.groupby("model", sort=False):
        cells = ", ".join(f"{fraction:g}: {_number(r, 3)}" for fraction, r in zip(group.fraction, group.r))
        rows.append([model, "shuffle, patched fraction", "logit_diff", 1, cells, "", "", "", ""])
    return _markdown(["model", "corruption", "metric", "seeds", "r (all)", "r (layers ≥ 1)", "r (sem)", "r (AP)",
                      "patches per seed"], rows)


def patching_controls(figures: Path) -> str:
    """At the masked positions, recovery summed over them and averaged over layers 1..L (mean over seeds): the clean
    state of the window itself, of another window, and the random-init twin's own patch, with the twin's clean −
    corrupted metric (patching/summary.csv, controls.csv)."""
    summary = _csv(figures, "patching/summary.csv")
    controls = _csv(figures, "patching/controls.csv")
    summary, controls = summary[summary.layer > 0], controls[controls.layer > 0]  # layer 0: the [MASK] embedding
    summed = controls[controls.masked].groupby(["model", "corruption", "subspace", "control", "seed", "layer"]).recovery.sum()
    controls_mean = summed.groupby(["model", "corruption", "subspace", "control"]).mean()
    spans = (controls.assign(span=controls.clean - controls.corrupted)
             .groupby(["model", "corruption", "control", "seed"]).span.first().groupby(["model", "corruption", "control"])
             .apply(lambda v: v.abs().max()))
    rows = []
    for (model, corruption, subspace), group in summary.groupby(["model", "corruption", "subspace"], sort=False):
        other, twin = (controls_mean.get((model, corruption, subspace, name), float("nan"))
                       for name in ("other window", "random init"))
        span = spans.get((model, corruption, "random init"), float("nan"))
        rows.append([_entry(model, subspace), corruption, _number(group.recovery_masked.mean()), _number(other),
                     _number(twin), _number(span, 4)])
    return _markdown(["model", "corruption", "own clean state", "another window's state", "random init",
                      "random init: largest gap, clean vs corrupted metric"], rows)


def patching_heads(figures: Path) -> str:
    """Per-head patches (hook_z): the recovery of every head summed per stream (mean over seeds), and the strongest
    head of the first seed."""
    heads = _csv(figures, "patching/heads.csv")
    rows = []
    for (model, corruption, stream), group in heads.groupby(["model", "corruption", "stream"], sort=False):
        first = group[group.seed == group.seed.min()]
        best = first.loc[first.recovery.idxmax()]
        rows.append([_entry(model, stream), corruption, _seed_cell(group.groupby("seed").recovery.sum()),
                     f"{int(best.block)}.{int(best['head'])}: {_number(best.recovery)}"])
    return _markdown(["model, stream", "corruption", "sum over heads", "strongest head, first seed (block.head: recovery)"],
                     rows)


def lens_table(figures: Path) -> str:
    """Top-1 accuracy on the masked tokens / KL(final || lens) by layer, mean over training seeds; the random-init
    twins and chance below (logit_lens/logit_lens.csv)."""
    lens = _csv(figures, "logit_lens/logit_lens.csv")
    layers = sorted(lens.layer.unique())
    rows = []
    for (control, model, subspace), group in lens.groupby(["control", "model", "subspace"], sort=False):
        name = _entry(model, subspace) + ("" if control == "trained" else " (random init)")
        rows.append([name, group.seed.nunique()] + _pair_by_layer(group, layers, "top1_accuracy", "kl_to_final",
                                                                  first_digits=3))
    rows.append(["chance (the batch's most frequent masked token)", lens.seed.nunique(),
                 *[_number(lens.chance_accuracy.mean(), 3)] * len(layers)])
    return _markdown(["model", "seeds", *[f"layer {layer}" for layer in layers]], rows)


def bands_table(figures: Path) -> str:
    """RoPE heads by label at the 0.6 threshold, per training seed, the positional count over the sweep, and the
    mean high-half share by layer (rope_bands/heads.csv, sweep.csv)."""
    heads = _csv(figures, "rope_bands/heads.csv")
    sweep = _csv(figures, "rope_bands/sweep.csv")
    layers = sorted(heads.layer.unique())
    rows = []
    for (model, seed), group in heads.groupby(["model", "seed"], sort=False):
        counts = group.label.value_counts()
        positional = sweep[(sweep.model == model) & (sweep.seed == seed) & (sweep.label == "positional")]
        over = positional.set_index("threshold").n_heads.reindex(sorted(sweep.threshold.unique()), fill_value=0)
        by_layer = group.groupby("layer").high_share.mean()
        rows.append([_entry(model, "full"), seed, int(counts.get("positional", 0)), int(counts.get("semantic", 0)),
                     int(counts.get("mixed", 0)), f"{int(over.max())}–{int(over.min())}",
                     " ".join(_number(by_layer.get(layer)) for layer in layers)])
    return _markdown(["model", "seed", "positional", "semantic", "mixed", "positional, thresholds 0.5–0.9",
                      f"high-half share by layer ({layers[0]}–{layers[-1]})"], rows)


def decomposition_table(figures: Path) -> str:
    """Centred position / context share by layer, mean over seeds (decomposition/decomposition.csv)."""
    table = _csv(figures, "decomposition/decomposition.csv")
    layers = sorted(table.layer.unique())
    rows = []
    for (control, model, subspace), group in table.groupby(["control", "model", "subspace"], sort=False):
        mean = group.groupby("layer")[["centred_share_position", "centred_share_context"]].mean()
        name = _entry(model, subspace) + ("" if control == "trained" else " (random init)")
        rows.append([name, group.seed.nunique()] + [
            f"{_number(mean.centred_share_position.get(layer))} / {_number(mean.centred_share_context.get(layer))}"
            if layer in mean.index else "—" for layer in layers])
    return _markdown(["model", "seeds", *[f"layer {layer}" for layer in layers]], rows)


def incoherence_table(figures: Path) -> str:
    """max |cos| between position and context vectors by layer (mean over seeds), Gaussian chance, and the position
    part's rank (95% of its sum of squares) at the last layer (decomposition/decomposition.csv, trained models)."""
    table = _csv(figures, "decomposition/decomposition.csv")
    table = table[table.control == "trained"]
    layers = sorted(table.layer.unique())
    rows = []
    for (model, subspace), group in table.groupby(["model", "subspace"], sort=False):
        mean = group.groupby("layer")[["max_cos_vectors", "chance_max_cos_vectors", "position_rank_95",
                                       "max_cos_bases"]].mean()
        last = mean.index.max()
        rows.append([_entry(model, subspace)] + [_number(mean.max_cos_vectors.get(layer)) if layer in mean.index
                                                 else "—" for layer in layers]
                    + [_number(mean.chance_max_cos_vectors.mean()), _number(mean.max_cos_bases.get(last)),
                       _number(mean.position_rank_95.get(last), 1)])
    return _markdown(["model", *[f"layer {layer}" for layer in layers], "chance", "bases, last layer",
                      "position rank (95%), last layer"], rows)


def floor_table(figures: Path) -> str:
    """Last-layer R² of each probe target: the NoPE floor's (content alone), then every model with position input
    (DSTG's subspace of the claim, each baseline's full state) with its margin over the floor, means over seeds
    (probes/probes_over_seeds.csv); a gallery without nope rows says so and how to train the floor."""
    path = figures / "probes" / "probes_over_seeds.csv"
    probes = _csv(figures, "probes/probes_over_seeds.csv" if path.is_file() else "probes/probes.csv")
    last = probes[probes.layer == probes.groupby("model").layer.transform("max")]
    if "nope" not in set(last.model):
        return (f"(not measured: the gallery's probes have no NoPE-NeoBERT rows; train it with {FLOOR_TRAIN_COMMAND}, "
                "then rerun experiments.fig_probes: docs/models.md, the NoPE floor)")
    r2 = last.groupby(["task", "segment", "model", "subspace"]).r2.mean()
    rows = []
    for task, segment, text, subspace in FLOOR_TARGETS:
        floor = r2.get((task, segment, "nope", "full"))
        cells = [_number(floor, 3)]
        for model, part in (("dstg", subspace), ("rope", "full"), ("ap", "full"), ("rp", "full")):
            value = r2.get((task, segment, model, part))
            cells.append("—" if value is None or floor is None else f"{_number(value, 3)} ({value - floor:+.3f})")
        rows.append([text, *cells])
    return _markdown(["last-layer R² (margin over the floor)", "NoPE (floor)", "DSTG (its claim's stream)", "RoPE",
                      "AP-NeoBERT", "RP"], rows)


def sae_table(figures: Path) -> str:
    """SAEs per stream (sae/fvu.csv, sae/summary.csv): held-out FVU by k at the k sweep's dictionary size, the k
    that reaches the target FVU (the SAE's and rank-k PCA's), and the latents whose activation token position
    explains (position-only R² >= the threshold), their share of the live latents and the median R²."""
    fvu, summary = _csv(figures, "sae/fvu.csv"), _csv(figures, "sae/summary.csv")
    size = int(fvu.groupby("num_latents").k.nunique().idxmax())  # the k sweep's dictionary size
    ks = sorted(fvu[fvu.num_latents == size].k.unique())
    rows = []
    for row in summary.itertuples():
        mine = fvu[(fvu.model == row.model) & (fvu.control == row.control) & (fvu.layer == row.layer) &
                   (fvu.stream == row.stream) & (fvu.num_latents == size)].set_index("k").fvu
        name = _entry(row.model, row.stream if with_subspace(row.model) else "") + \
            ("" if row.control == "trained" else " (random init)")
        k_needed = "—" if pd.isna(row.k_for_target) else str(int(row.k_for_target))
        pca_needed = "—" if pd.isna(row.pca_k_for_target) else str(int(row.pca_k_for_target))
        rows.append([name, row.layer, row.d_in] + [_number(mine.get(k), 3) for k in ks]
                    + [f"{k_needed} ({pca_needed})", row.n_live, _number(row.position_share),
                       _number(row.median_position_r2)])
    return _markdown(["model", "layer", "d", *[f"FVU k={k}" for k in ks], "k for FVU <= target (PCA)", "live latents",
                      "position share", "median position R²"], rows)


# the geometry table's galleries: the zoo's, and MiniLM's from its own folder (absent: left out of the rows)
GEOMETRY = ("geometry/geometry.csv", "geometry/minilm/geometry.csv")


def _geometry_layers(figures: Path) -> pd.DataFrame:
    """The layer rows of the geometry galleries (``GEOMETRY``; the zoo's must be there)."""
    tables = [_csv(figures, GEOMETRY[0])] + [pd.read_csv(figures / g) for g in GEOMETRY[1:] if (figures / g).is_file()]
    table = pd.concat(tables, ignore_index=True)
    return table[table.source == "layer"]


def geometry_heads(figures: Path) -> str:
    """Head classes from the position / context split of each head's q.k (geometry.csv's head columns): the share
    of a member's heads in each class over its blocks, beside the control (the means over shuffled positions), and
    the positional share by block; mean over training seeds [min, max]."""
    layers = _geometry_layers(figures)
    read = layers[layers.n_heads.notna()]
    blocks = sorted(read.layer.unique().astype(int))
    rows = []
    for model, group in read.groupby("model", sort=False):
        members = group.groupby("member")
        cells = [_seed_cell(members[f"heads_{label}"].mean()) for label in ("positional", "semantic", "mixed")]
        by_block = group.groupby("layer").heads_positional.mean()
        rows.append([DISPLAY.get(model, model), group.member.nunique(), int(group.n_heads.iloc[0]), *cells,
                     _seed_cell(members.heads_positional_control.mean()),
                     f"{_seed_cell(members.head_share_position.mean())} ({_seed_cell(members.head_share_position_control.mean())})",
                     " / ".join(_number(by_block.get(b)) for b in blocks)])
    return _markdown(["model", "seeds", "heads per block", "positional", "semantic", "mixed",
                      "positional, shuffled-position control", "mean position share (control)",
                      f"positional by block ({blocks[0]}–{blocks[-1]})"], rows)


def geometry_heads_check(figures: Path) -> str:
    """DSTG's split beside its own logit terms on the same windows (geometry.json, ``head_split_check``): per
    training seed, Pearson r of the split's position share with the AP + RP share and of its context share with
    the semantic share, and the share of heads whose class agrees."""
    path = figures / "geometry" / "geometry.json"
    if not path.is_file():
        raise MissingInput("geometry/geometry.json")
    checks = json.loads(path.read_text()).get("head_split_check", {})
    rows = [[member, summary["n_heads"], _number(summary["r_position"], 3), _number(summary["r_context"], 3),
             _number(summary["class_agreement"])] for member, summary in checks.items()]
    return _markdown(["member", "heads", "r: position share vs AP + RP share", "r: context share vs semantic share",
                      "classes that agree"], rows)


def geometry_probe(figures: Path) -> str:
    """The token-position probe of geometry.csv: held-out R² at the first and last layer, beside the random-init
    twin's and the shuffled target's at the last layer; mean over training seeds [min, max]."""
    layers = _geometry_layers(figures)
    rows = []
    for (model, subspace), group in layers.groupby(["model", "subspace"], sort=False):
        first, last = group[group.layer == group.layer.min()], group[group.layer == group.layer.max()]
        rows.append([_entry(model, subspace), group.member.nunique(), _seed_cell(first.token_probe_r2, 3),
                     _seed_cell(last.token_probe_r2, 3), _seed_cell(last.token_probe_random_init_r2, 3),
                     _seed_cell(last.token_probe_shuffled_r2, 3)])
    return _markdown(["model", "seeds", "R², layer 0", "R², last layer", "random init, last layer",
                      "shuffled target, last layer"], rows)


GROUND_TRUTH_ORDER = ("ap_coordinates", "probe_span", "inlp", "leace", "position_means_pcs", "attribution", "das",
                      "boundless_das", "sae", "random")


def ground_truth_table(figures: Path) -> str:
    """DSTG's ground-truth scores (``fig_ground_truth``): each method's mean cos² with the AP subspace and its
    interchange accuracy at the first, middle and last layer, mean over training seeds [min, max]; the methods of
    ``ground_truth/scores.csv`` and those ``ground_truth/learned_width/scores.csv`` adds (its controls are the same
    rows again and are read from the first)."""
    scores = _csv(figures, "ground_truth/scores.csv")
    added = _csv(figures, "ground_truth/learned_width/scores.csv")
    added = added[~added.method.isin(scores.method.unique())]
    dstg = pd.concat([scores, added], ignore_index=True).query("model == 'dstg'")
    layers = sorted(dstg.layer.unique())
    shown = [layers[0], layers[len(layers) // 2], layers[-1]]
    methods = [m for m in GROUND_TRUTH_ORDER if m in set(dstg.method)] + sorted(set(dstg.method) - set(GROUND_TRUTH_ORDER))
    rows = []
    for method in methods:
        rows_of = dstg[dstg.method == method]
        at = {layer: rows_of[rows_of.layer == layer] for layer in shown}
        rows.append([method, _seed_cell(rows_of.k, 0), *[_seed_cell(at[layer].mean_cos2, 3) for layer in shown],
                     *[_seed_cell(at[layer].top1_agreement, 3) for layer in shown]])
    return _markdown(["method", "k (mean [min, max] over layers and seeds)", *[f"cos² layer {layer}" for layer in shown],
                      *[f"interchange layer {layer}" for layer in shown]], rows)


TABLES = {"patching": patching_table, "patching_agreement": patching_agreement, "patching_controls": patching_controls,
          "patching_heads": patching_heads, "logit_lens": lens_table, "rope_bands": bands_table,
          "decomposition": decomposition_table, "incoherence": incoherence_table, "sae": sae_table,
          "floor": floor_table, "geometry_heads": geometry_heads, "geometry_heads_check": geometry_heads_check,
          "geometry_probe": geometry_probe, "ground_truth": ground_truth_table}
