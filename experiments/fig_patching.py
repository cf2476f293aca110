"""Figure: activation patching per stream and attribution patching on the zoo (issue 40, item 1).

    python -m experiments.fig_patching --out figures/patching          # the zoo, seed 0 (the committed gallery)
    python -m experiments.fig_patching --tiny --out /tmp/fig            # tiny random models, seconds
    python -m experiments.fig_patching --model path/to/mlm --out /tmp/fig   # your masked LMs (--model, --name)

Per zoo member (``--model-seeds``, default seed 0), ``n_sequences`` held-out en-mix windows of ``length`` tokens with
``n_masked`` masked positions (the same in every row) become clean / corrupted pairs
(``dstg_interp.analysis.patching.patching_pair``):
    shuffle   every model: the unmasked words of each window in another order; metric: logit difference
    offset    DSTG and AP-NeoBERT: the same window read ``offset`` positions later; metric: KL (the answer rarely changes)
``patch_states`` patches every (layer, subspace, position) -- DSTG sem / AP / both, the baselines' one state --,
``patch_heads`` every head's mixed values, ``attribution_patch`` approximates every state patch from one
forward/backward pair.  Controls, at the masked positions only: the clean state of *another* window (a same-size
patch carrying the wrong sentence, ``source="other"``) and the random-init twin of each model patched the same way.
Where attribution breaks: on a tiny random DSTG and RoPE (float64), r of attribution against exact patches of a
fraction of the state difference, from 1e-3 to 1 (``attribution_curve.csv``).
With ``--model``, the models with a masked-LM head are read (a model without one is left out in one line, a list
with none refused in one line: exit 2, nothing written); an HF encoder has no per-head values (``hook_z``), so its
heads are not patched, and the offset is cut to fit a model's position table (said in one line).

Writes into ``--out`` (default dstg-results/figures/patching/): patching.csv (every exact patch), attribution.csv,
heads.csv, controls.csv, agreement.csv (r per model x corruption x subspace), attribution_curve.csv, summary.csv
(recovery summed over positions, masked and other, per layer x subspace), patching_map_<corruption> and
attribution (PNG + PDF + JSON, the first seed), config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from dstg_interp import EncoderError, open_encoder
from dstg_interp.analysis.patching import (attribution_patch, compare_attribution, patch_heads, patch_states,
                                           patching_pair)
from dstg_interp.model import build_model
from dstg_interp.plots import plot_attribution_agreement, plot_patching_map
from dstg_interp.tiny_zoo import tiny_config
from experiments.fig_interventions import windows
from experiments.figure_inputs import (MLM_HEAD, OUTPUT_DIR, FigureConfig, inputs_for, figure_config, readable_members,
                                       run_as_command, print_summary, save_config, say_not_applicable, without_mlm_head)

CURVE_FRACTIONS = (1e-3, 1e-2, 0.1, 0.3, 1.0)


@dataclass
class PatchingFigureConfig(FigureConfig):
    out: Path = OUTPUT_DIR / "patching"
    model_seeds: list[int] = field(default_factory=lambda: [0], metadata={"help": "training seeds of the zoo to read"})
    n_sequences: int = field(default=8, metadata={"min": 1, "help": "held-out windows per pair batch"})
    length: int = field(default=24, metadata={"min": 1, "help": "tokens per window"})
    n_masked: int = field(default=3, metadata={"min": 1, "help": "masked positions (the same in every window)"})
    offset: int = field(default=32, metadata={"min": 1, "help": "positions the 'offset' corruption moves the window"})


def _has_table(encoder) -> bool:
    """A learned position table for the 'offset' corruption to read further down (DSTG's AP stream, AP-NeoBERT's)."""
    return encoder.kind == "dstg-interp" and encoder.config.spec.position_table


def _corruptions(encoder, offset: int) -> list[tuple[str, str]]:
    return [("shuffle", "logit_diff")] + ([("offset", "kl")] if _has_table(encoder) and offset >= 1 else [])


def fitted_offset(encoder, length: int, offset: int) -> int:
    """The offset as asked, or cut to what the model's position table leaves after a ``length``-token window."""
    return min(offset, encoder.max_positions - length)


def patch_member(encoder, tokens, mask, config, labels: dict, offset: int | None = None) -> dict:
    tables = {key: [] for key in ("patching", "attribution", "heads", "controls", "agreement")}
    offset = config.offset if offset is None else offset
    for corruption, metric in _corruptions(encoder, offset):
        pair = patching_pair(encoder, tokens, mask, corruption=corruption, n_masked=config.n_masked,
                             offset=offset, seed=config.seed)
        keys = {**labels, "corruption": corruption}
        try:
            exact = patch_states(encoder, pair, metric=metric).assign(**keys)
        except EncoderError as err:  # a random (--tiny) model whose output the corruption does not move
            print(f"fig_patching: skipped {labels['model']} {corruption}: {err}", file=sys.stderr)
            continue
        approximate = attribution_patch(encoder, pair, metric=metric).assign(**keys)
        agreement, _ = compare_attribution(exact, approximate)
        tables["patching"].append(exact)
        tables["attribution"].append(approximate)
        tables["agreement"].append(pd.DataFrame([{**keys, "metric": metric, "subspace": s, "r": r, "n": agreement["n"]}
                                                 for s, r in agreement.items() if s != "n"]))
        if encoder.kind != "hf":  # an HF encoder has no per-head values to patch (hook_z)
            tables["heads"].append(patch_heads(encoder, pair, metric=metric).assign(**keys))
        other = patch_states(encoder, pair, metric=metric, positions=pair.clean.positions, source="other")
        controls = [other.assign(control="other window")]
        twin = encoder.random_init()
        twin_pair = patching_pair(twin, tokens, mask, corruption=corruption, n_masked=config.n_masked,
                                  offset=offset, seed=config.seed)
        try:  # a random model's output may not move at all under the corruption: then there is nothing to patch
            controls.append(patch_states(twin, twin_pair, metric=metric, positions=twin_pair.clean.positions)
                            .assign(control="random init"))
        except EncoderError:
            pass
        tables["controls"].append(pd.concat(controls).assign(**keys))
    return tables


def attribution_curve(seed: int) -> pd.DataFrame:
    """r of attribution against exact patches of a fraction of the difference, tiny random DSTG and RoPE (float64)."""
    rows = []
    tokens = torch.randint(5, 140, (6, 16), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0], tokens[:, -1] = 2, 3
    for variant in ("dstg", "rope"):
        model = build_model(tiny_config(variant, 150, seed=seed, init_std=0.2)).eval()
        encoder = open_encoder(model, dtype=torch.float64, name=f"{variant}-tiny random")
        pair = patching_pair(encoder, tokens, n_masked=3, seed=seed)
        approximate = attribution_patch(encoder, pair)
        for fraction in CURVE_FRACTIONS:
            exact = patch_states(encoder, pair, fraction=fraction)
            exact["recovery"] = exact.recovery / fraction
            agreement, _ = compare_attribution(exact, approximate)
            rows += [{"model": f"{variant}-tiny random", "fraction": fraction, "subspace": s, "r": r}
                     for s, r in agreement.items() if s != "n"]
    return pd.DataFrame(rows)


def summarise(patching: pd.DataFrame) -> pd.DataFrame:
    """Recovery summed over the masked positions and over the others, per model x corruption x layer x subspace."""
    keys = ["model", "seed", "corruption", "metric", "layer", "subspace"]
    summed = patching.groupby(keys + ["masked"]).recovery.sum().unstack("masked")
    summed = summed.rename(columns={True: "recovery_masked", False: "recovery_other"}).reset_index()
    return summed


def draw(results: dict, out: Path) -> None:
    """The figures from the tables (``results``: name -> DataFrame, as written; the first seed is drawn)."""
    patching, attribution = results["patching"], results["attribution"]
    first = patching.seed.min()
    for corruption, table in patching[patching.seed == first].groupby("corruption", sort=False):
        plot_patching_map(table, out, stem=f"patching_map_{corruption}",
                          numbers={"corruption": corruption, "metric": table.metric.iloc[0], "seed": int(first)})
    merged = []
    for (model, corruption), exact in patching[patching.seed == first].groupby(["model", "corruption"], sort=False):
        approximate = attribution[(attribution.model == model) & (attribution.corruption == corruption)
                                  & (attribution.seed == first)]
        merged.append(compare_attribution(exact, approximate)[1].assign(model=f"{model}-{corruption}"))
    curve = results["attribution_curve"]
    points = pd.concat(merged).round(4)
    plot_attribution_agreement(points, curve[curve.subspace == "all"], out, stem="attribution",
                               numbers={"seed": int(first), "agreement": results["agreement"]})


def run(config: PatchingFigureConfig) -> dict:
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    inputs = inputs_for(config, n_docs=60 if not config.tiny else None)
    length = min(config.length, 24) if config.tiny else config.length
    tables = {key: [] for key in ("patching", "attribution", "heads", "controls", "agreement")}
    members, notes = (readable_members(inputs, "fig_patching", MLM_HEAD, without_mlm_head, config.quiet)
                      if inputs.given else (list(inputs.models), {}))
    said = {}
    for name in members:
        encoder = open_encoder(inputs.models[name])
        offset = fitted_offset(encoder, length, config.offset)
        if _has_table(encoder) and offset != config.offset:
            said[name] = (f"{encoder.max_positions} positions: offset {offset}" if offset >= 1 else
                          f"{encoder.max_positions} positions: no room for an offset, shuffle only")
        if encoder.kind == "hf":
            said[name] = (said[name] + "; " if name in said else "") + "an HF encoder: no per-head patching (no hook_z)"
        tokens, mask = windows(encoder, inputs.documents, length, config.n_sequences)
        variant, model_seed = inputs.member(name)
        labels = {"model": variant, "seed": model_seed}
        for key, parts in patch_member(encoder, tokens, mask, config, labels, offset=offset).items():
            tables[key] += parts
    say_not_applicable("fig_patching", said, quiet=config.quiet)
    results = {key: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame() for key, parts in tables.items()}
    results["attribution_curve"] = attribution_curve(config.seed)
    results["summary"] = summarise(results["patching"])
    config.out.mkdir(parents=True, exist_ok=True)
    for key, table in results.items():
        table.to_csv(config.out / f"{key}.csv", index=False)
    draw(results, config.out)
    save_config(config, "experiments/fig_patching.py", **({"notes": notes} if notes else {}),
                wall_s=round(time.perf_counter() - started, 1))
    print_summary(config, results["agreement"], "%.3f", index=["model", "corruption"], columns="subspace", values="r")
    return results


def main(argv=None) -> dict:
    return run(figure_config(PatchingFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_patching"))
