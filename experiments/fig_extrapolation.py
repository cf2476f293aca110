"""Figure: length extrapolation along the AP manifold -- MLM by position and position probes past the trained range.

    python -m experiments.fig_extrapolation                       # the zoo at 2x and 4x (256, 512)
    python -m experiments.fig_extrapolation --tiny --out /tmp/x   # tiny random models, seconds
    python -m experiments.fig_extrapolation --model runs/mine models/posneobert-dstg --name mine PosNeoBERT   # yours

Arms, at each length (factor x the trained ``max_positions``):
- DSTG-NeoBERT and AP-NeoBERT with their learned table extended by ``dstg_interp.analysis.extrapolate`` -- ``curve``
  (low-frequency DCT model of the leading PCs, evaluated past the table), ``repeat`` (last row), ``stretch``
  (linear interpolation of the whole table);
- RoPE- and RP-NeoBERT ``native``: relative models rebuilt for the longer length, no table to extend;
- ``dstg-offset native``: DSTG trained with the authors' ``random_offset`` option (a 512-row AP table, 128-token
  sequences each reading it from a random start; ``python -m experiments.pretrain_zoo --variants dstg-offset``), run as it is:
  every row it reads was trained, only the longer context is new;
- every model ``chunked``: the trained model on consecutive chunks of its trained length, same masks (what a
  user without extrapolation does; its positions past the trained length only lose context).

With ``--model`` the arms are those of the models given, under their names (``--name``; no ``dstg-offset`` unless
given): a model with a learned table (DSTG, entangled AP) gets the three extensions, a relative one (RoPE, RP)
``native``.  The study rebuilds our model classes at the longer length and scores their MLM head, so a Hugging
Face encoder and a checkpoint saved encoder-only are left out, each in one line (none left: exit 2); the models
of one run share one trained length (the figures mark it), and each reads windows cut by its own tokenizer.

Data: the held-out en-mix documents (never seen in training) cut into windows of exactly the target length
(``length_eval.long_windows``; at 4x only the long Austen chapters and Treasury of David documents qualify).
MLM: 15% of tokens masked, two seeded draws, the same masks for every arm; loss and accuracy per position
bucket.  Probes: each extended model's store over the same windows, ridge probes of token position and
sentence index, held-out R² and mean absolute error inside vs beyond the trained range, trained on all positions (``fit_on=all``)
or on in-range positions only (``fit_on=inside``, does the in-range code continue?).

Writes into ``--out`` (default dstg-results/figures/extrapolation/; the committed gallery: --out figures/extrapolation): mlm_by_position.csv, probe_ranges.csv,
table_fits.csv (per learned table: PC1+PC2 share, low-frequency DCT share, curve-fit quality), summary.csv (one row per arm and length), the figures mlm_by_position,
probe_ranges, extended_tables (PNG + PDF + JSON) and config.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from dstg_interp.progress import progress_bar

from dstg_interp.analysis.extrapolate import METHODS, extend_positions, fit_ap_curve, with_max_positions
from dstg_interp.analysis.length_eval import long_windows, mlm_by_position
from dstg_interp.analysis.spectra import analyze_table
from dstg_interp.plots import at_last_layer, plot_extended_tables, plot_mlm_by_position, plot_probe_ranges
from dstg_interp.store.cache import cached_extract
from dstg_interp.tiny_zoo import tiny_long_documents
from dstg_interp.encoders import HFEncoder
from experiments.figure_inputs import (OUTPUT_DIR, FigureConfig, has_mlm_head, inputs_for, figure_config, one_seed_title, readable_members,
                                       run_as_command, save_config, with_offset_model)
from probes.by_range import probe_by_range

@dataclass
class ExtrapolationFigureConfig(FigureConfig):
    out: Path = OUTPUT_DIR / "extrapolation"
    factors: list[float] = field(default_factory=lambda: [2.0, 4.0],
                                 metadata={"help": "lengths as multiples of max_positions"})
    max_windows: int = field(default=400, metadata={"help": "windows per length (seeded subset)"})
    max_tokens: int = field(default=40_000, metadata={"help": "tokens subsampled per probe (non-special)"})
    bucket_width: int = field(default=32, metadata={"help": "positions per MLM bucket"})
    n_draws: int = field(default=2, metadata={"help": "seeded mask draws per window"})

    def __post_init__(self) -> None:
        super().__post_init__()
        self.factors = [float(f) for f in self.factors]
        if min(self.factors) <= 1:
            raise ValueError(f"every factor must be above 1 (a longer model), got {self.factors}")


def arms(models: dict, length: int):
    """(model name, method, model at ``length``) for every arm; ``chunked`` arms use the trained model."""
    for name, model in models.items():
        yield name, "chunked", model
        if model.config.max_positions >= length:  # random_offset-trained: its table already reaches ``length``
            yield name, "native", model
        elif model.config.spec.position_table:
            for method in METHODS:
                yield name, method, extend_positions(model, new_length=length, method=method)
        else:
            yield name, "native", with_max_positions(model, length)


def evaluate_length(models: dict, documents, length: int, config: ExtrapolationFigureConfig, store_root: Path):
    """MLM-by-position and probe-range tables of every arm at one length (the windows of the first model's
    tokenizer are returned; a model with another tokenizer reads windows cut by its own)."""
    trained = trained_length(models)
    cut = {}  # tokenizer -> its windows: the zoo's models share one

    def windows_of(model):
        key = model.tokenizer.to_str()
        if key not in cut:
            cut[key] = long_windows(documents, model.tokenizer, length, max_windows=config.max_windows, seed=config.seed)
        return cut[key]

    mlm_tables, probe_tables = [], []
    for name, method, model in progress_bar(list(arms(models, length)), desc=f"{length}-token arms", disable=config.quiet):
        windows = windows_of(models[name])
        chunk = trained if method == "chunked" else None
        mlm = mlm_by_position(model, windows, bucket_width=config.bucket_width, n_draws=config.n_draws, seed=config.seed,
                              chunk_length=chunk)
        mlm_tables.append(mlm.assign(model=name, method=method, length=length, n_windows=len(windows)))
        if method == "chunked":
            continue
        store = cached_extract(model, windows, store_root, f"extrapolation-{name}-{method}-{length}", dtype="float16",
                               batch_size=16, progress=False)
        ranges = probe_by_range(store, trained_length=trained, max_tokens=config.max_tokens, seed=config.seed)
        probe_tables.append(ranges.assign(model=name, method=method, length=length))
    return pd.concat(mlm_tables, ignore_index=True), pd.concat(probe_tables, ignore_index=True), \
        windows_of(next(iter(models.values())))


NEEDS = "a model of ours with an MLM head (DSTG, a RoPE / AP / RP baseline or the authors' formats, with decoder)"


def not_extendable(name: str, model) -> str | None:
    """Why a model has no extrapolation arms here (None: it has)."""
    if isinstance(model, HFEncoder):
        return "a Hugging Face encoder: the study rebuilds our model classes at the longer length; no arms"
    if not has_mlm_head(model):
        return "no MLM head (saved encoder-only): the study scores MLM by position; no arms"
    return None


def check_one_trained_length(models: dict) -> None:
    """The models of one run share their trained length (the figures mark one), or one clear error."""
    lengths = {name: model.config.max_positions for name, model in models.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name}: {length}" for name, length in lengths.items())
        raise ValueError(f"fig_extrapolation marks one trained length, and the models have several ({listed}); "
                         "run it once per length")


def trained_length(models: dict) -> int:
    """The training sequence length: the reference models' max_positions (the offset model's table is longer)."""
    return min(model.config.max_positions for model in models.values())


def table_paths(models: dict, factor: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each learned table extended by each method, projected on the PC1-PC2 plane of its trained range (the
    random_offset model: its whole learned table); and per table its spectrum (``spectra``) and curve fit."""
    paths, fits = [], []
    trained = trained_length(models)
    for name, model in models.items():
        if not model.config.spec.position_table:
            continue
        table = model.ap_table.detach().double().numpy()
        mean = table[:trained].mean(axis=0)
        _, vt = np.linalg.svd(table[:trained] - mean, full_matrices=False)[1:]
        spectrum = analyze_table(table, name=name).summary
        fits.append({"model": name, **fit_ap_curve(table).to_dict(), "pc1_pc2": spectrum["pc1_pc2"],
                     "low_freq_share": spectrum["low_freq_share"], "participation_ratio": spectrum["participation_ratio"]})
        if len(table) > trained:  # the random_offset model: its whole learned table, in its first rows' PC plane
            projected = (table - mean) @ vt[:2].T
            paths.append(pd.DataFrame({"model": name, "method": "learned", "position": np.arange(len(table)),
                                       "pc1": projected[:, 0], "pc2": projected[:, 1]}))
            continue
        for method in METHODS:
            longer = extend_positions(model, factor, method=method).ap_table.detach().double().numpy()
            projected = (longer - mean) @ vt[:2].T
            paths.append(pd.DataFrame({"model": name, "method": method, "position": np.arange(len(longer)),
                                       "pc1": projected[:, 0], "pc2": projected[:, 1]}))
    return pd.concat(paths, ignore_index=True), pd.DataFrame(fits)


def summarize(mlm: pd.DataFrame, ranges: pd.DataFrame, trained: int) -> pd.DataFrame:
    """One row per (model, method, length): MLM accuracy/loss inside and beyond the trained range (masked-token
    weighted) and the final-layer full-state probes beyond it (R² within that range and MAE), each model at its
    own last layer."""
    mlm = mlm.assign(range=np.where(mlm.bucket_start < trained, "inside", "beyond"),
                     hits=mlm.accuracy * mlm.n_masked, loss_sum=mlm.loss * mlm.n_masked)
    grouped = mlm.groupby(["model", "method", "length", "range"])[["hits", "loss_sum", "n_masked"]].sum()
    grouped["accuracy"], grouped["loss"] = grouped.hits / grouped.n_masked, grouped.loss_sum / grouped.n_masked
    table = grouped[["accuracy", "loss"]].unstack("range")
    table.columns = [f"{metric}_{part}" for metric, part in table.columns]
    last = ranges[at_last_layer(ranges) & (ranges.subspace == "full") & (ranges.range == "beyond")]
    probes = last.pivot_table(index=["model", "method", "length"], columns=["target", "fit_on"], values=["r2", "mae"])
    probes.columns = [f"{metric}_beyond_{target}_fit_{fit}" for metric, target, fit in probes.columns]
    return table.join(probes).reset_index()


def run(config: ExtrapolationFigureConfig) -> dict:
    started = time.perf_counter()
    inputs = inputs_for(config)
    documents = tiny_long_documents(seed=config.seed) if config.tiny else inputs.documents
    models = with_offset_model(inputs)
    if inputs.given:
        readable, notes = readable_members(inputs, "fig_extrapolation", NEEDS, not_extendable, config.quiet)
        models = {name: models[name] for name in readable}
        check_one_trained_length(models)
    trained = trained_length(models)

    mlm_tables, probe_tables, windows = [], [], {}
    for factor in config.factors:
        length = int(round(trained * factor))
        mlm, ranges, chosen = evaluate_length(models, documents, length, config, inputs.store_root)
        mlm_tables.append(mlm)
        probe_tables.append(ranges)
        windows[length] = {"n_windows": len(chosen), "n_documents": len(np.unique(chosen.arrays["doc_index"]))}
    mlm, ranges = pd.concat(mlm_tables, ignore_index=True), pd.concat(probe_tables, ignore_index=True)
    paths, fits = table_paths(models, max(config.factors))
    summary = summarize(mlm, ranges, trained)

    config.out.mkdir(parents=True, exist_ok=True)
    mlm.to_csv(config.out / "mlm_by_position.csv", index=False)
    ranges.to_csv(config.out / "probe_ranges.csv", index=False)
    fits.to_csv(config.out / "table_fits.csv", index=False)
    summary.to_csv(config.out / "summary.csv", index=False)
    plot_mlm_by_position(mlm, config.out, trained_length=trained, title=one_seed_title(inputs))
    plot_probe_ranges(ranges, config.out, trained_length=trained, title=one_seed_title(inputs))
    plot_extended_tables(paths, config.out, trained_length=trained, title=one_seed_title(inputs))
    save_config(config, "experiments/fig_extrapolation.py", trained_length=trained, windows=windows,
                inputs=inputs.description, wall_s=round(time.perf_counter() - started, 1))
    if not config.quiet:
        print(summary.to_string(index=False, float_format="%.3f"))
    return {"mlm": mlm, "ranges": ranges, "summary": summary, "fits": fits}


def main(argv=None) -> dict:
    return run(figure_config(ExtrapolationFigureConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_extrapolation"))
