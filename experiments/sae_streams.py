"""Study: sparse autoencoders on each stream -- how many features DSTG's AP stream needs against its semantic stream
at the same reconstruction, and whether its features are position features (issue 41, item 1).

    python -m experiments.sae_streams --out figures/sae                 # zoo dstg (sem, ap) and rope (full), layer 3
    python -m experiments.sae_streams --tiny --out /tmp/sae              # tiny random models, seconds
    python -m experiments.sae_streams --model runs/mine --streams ap     # a model of your own (it must have the stream)

Per model of ``--variants`` (seed 0 of the zoo; ``--model`` instead: any encoder) and its random-init twin (the
control: the same config and tokens, no training), on the probes' store (``dstg-probe``'s: every held-out en-mix
document, [CLS] / [SEP] dropped), per layer of ``--layers`` and stream (DSTG: sem and ap; a baseline: full;
``--streams`` asks for given ones): TopK SAEs (``dstg_interp.analysis.sae``, EleutherAI's sparsify) at
``--dict-size`` latents for every k of ``--ks``, and at k = ``--ref-k`` for every size of ``--dict-sizes``; the
held-out FVU of each beside the rank-k PCA reconstruction.  ``k_for_target``: the smallest k of the sweep whose
FVU is at most ``--target-fvu``.  For the SAE at (``--dict-size``, ``--ref-k``), each live latent's activation
(nonzero on >= ``--min-active`` training and held-out tokens) is regressed on token position alone with the
position-only probe the position probes use (``probes.position_baseline.position_r2_of_columns``: ridge on
one-hot position, grouped CV, held-out documents); ``position_share``: the share of live latents with
R^2 >= ``--position-r2``.

Writes into ``--out`` (default dstg-results/figures/sae/): fvu.csv (one row per model x control x layer x stream x
size x k), features.csv (one row per latent of the reference SAEs), curves.csv (training FVU by step), summary.csv
and summary.json, sae_streams (PNG + PDF + JSON), config.json (with the library versions).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dstg_interp.analysis.sae import STREAMS, SAEConfig, SAEError, check_stream, train_sae
from dstg_interp.io import write_text_atomic
from dstg_interp.plots.output import display_name, save_figure, subspace_name
from experiments.figure_inputs import (OUTPUT_DIR, FigureConfig, figure_config, load_figure_inputs, model_store,
                                       random_init_store, run_as_command, save_config)
from probes.position_baseline import position_r2_of_columns

CONTROLS = ("trained", "random init")


DEFAULT_LAYER = 3  # the zoo's middle block


@dataclass
class SAEStreamsConfig(FigureConfig):
    out: Path = OUTPUT_DIR / "sae"
    variants: list[str] = field(default_factory=lambda: ["dstg", "rope"], metadata={
        "help": "zoo variants to read (seed 0)"})
    layers: list[int] | None = field(default=None, metadata={
        "help": "layers (0 = embeddings, l = block l); a layer past a model's blocks is refused",
        "shown": "3, or the last block of a shallower model"})
    streams: list[str] | None = field(default=None, metadata={
        "help": "streams to read (sem, ap, full); every model must have each", "shown": "DSTG: sem ap; others: full"})
    dict_size: int = field(default=256, metadata={"help": "latents of the k sweep and of the feature study"})
    ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16], metadata={"help": "k of the k sweep"})
    dict_sizes: list[int] = field(default_factory=lambda: [32, 64, 128, 256], metadata={"help": "sizes of the size sweep"})
    ref_k: int = field(default=4, metadata={"help": "k of the size sweep and of the feature study"})
    steps: int = field(default=1000, metadata={"help": "Adam steps per SAE"})
    batch_size: int = field(default=512, metadata={"help": "tokens per step"})
    target_fvu: float = field(default=0.1, metadata={"help": "the reconstruction k_for_target asks for"})
    min_active: int = field(default=20, metadata={"help": "tokens a latent must fire on (train and test) to be live"})
    position_r2: float = field(default=0.5, metadata={"help": "position R^2 from which a latent counts as positional"})
    controls: list[str] | None = field(default=None, metadata={
        "help": "models whose random-init twin is read too (none: --controls with no name is refused; see --no-controls)",
        "shown": "every model"})
    no_controls: bool = field(default=False, metadata={"help": "read no random-init twin"})

    def __post_init__(self) -> None:
        super().__post_init__()
        for stream in self.streams or []:
            check_stream(stream, STREAMS, "")
        if self.ref_k not in self.ks or self.dict_size not in self.dict_sizes:
            raise ValueError(f"--ref-k ({self.ref_k}) must be one of --ks and --dict-size ({self.dict_size}) one of "
                             "--dict-sizes: the two sweeps meet at the reference SAE")
        if max(self.ks) > min(self.dict_sizes):
            raise ValueError(f"--ks go up to {max(self.ks)}, past the smallest --dict-sizes ({min(self.dict_sizes)})")
        if not 0 < self.target_fvu < 1:
            raise ValueError(f"--target-fvu must lie in (0, 1), got {self.target_fvu}")


def model_streams(config: SAEStreamsConfig, name: str, subspaces) -> list[str]:
    """The streams read in model ``name``: the ones asked for (each one it must have), else its own split."""
    if config.streams is not None:
        for stream in config.streams:
            check_stream(stream, subspaces, f"model {name}")
        return list(config.streams)
    return ["sem", "ap"] if "sem" in subspaces else ["full"]


def sweep(config: SAEStreamsConfig):
    """(num_latents, k) of every SAE: the k sweep at dict_size, then the size sweep at ref_k (shared point once)."""
    runs = [(config.dict_size, k) for k in config.ks]
    return runs + [(size, config.ref_k) for size in config.dict_sizes if size != config.dict_size]


def feature_table(trained, store, config: SAEStreamsConfig) -> pd.DataFrame:
    """One row per latent of the reference SAE: firing rate and position-only R^2 (NaN for a dead latent)."""
    labels = store.labels
    rows = np.concatenate([trained.train_rows, trained.test_rows])
    order = np.argsort(rows)
    rows = rows[order]
    is_test = np.r_[np.zeros(len(trained.train_rows), bool), np.ones(len(trained.test_rows), bool)][order]
    codes = trained.encode(store.states(trained.layer, trained.stream)[rows])
    r2 = position_r2_of_columns(codes, labels.token_position.to_numpy()[rows], labels.doc_index.to_numpy()[rows],
                                np.flatnonzero(~is_test), np.flatnonzero(is_test), min_nonzero=config.min_active)
    return pd.DataFrame({"feature": np.arange(codes.shape[1]), "firing_rate": (codes != 0).mean(0),
                         "position_r2": r2})


def summary_rows(fvu: pd.DataFrame, features: pd.DataFrame, config: SAEStreamsConfig) -> pd.DataFrame:
    keys = ["model", "control", "layer", "stream"]
    out = []
    for key, group in fvu.groupby(keys, sort=False):
        by_k = group[group.num_latents == config.dict_size].sort_values("k")
        reached = by_k[by_k.fvu <= config.target_fvu]
        pca_reached = by_k[by_k.fvu_pca <= config.target_fvu]
        feats = features.loc[(features[keys] == pd.Series(key, index=keys)).all(axis=1)]
        live = feats.position_r2.dropna()
        ref = by_k[by_k.k == config.ref_k].iloc[0]
        out.append({**dict(zip(keys, key)), "d_in": int(group.d_in.iloc[0]),
                    "k_for_target": int(reached.k.iloc[0]) if len(reached) else np.nan,
                    "pca_k_for_target": int(pca_reached.k.iloc[0]) if len(pca_reached) else np.nan,
                    "fvu_ref": float(ref.fvu), "fvu_pca_ref": float(ref.fvu_pca), "n_live": int(len(live)),
                    "position_share": float((live >= config.position_r2).mean()) if len(live) else np.nan,
                    "median_position_r2": float(live.median()) if len(live) else np.nan})
    return pd.DataFrame(out)


def draw(fvu: pd.DataFrame, features: pd.DataFrame, summary: pd.DataFrame, config: SAEStreamsConfig) -> dict:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.8))
    colors = {"sem": "#56B4E9", "ap": "#D55E00", "full": "#E69F00"}
    numbers: dict = {"target_fvu": config.target_fvu, "position_r2": config.position_r2, "lines": {}}
    for (model, control, layer, stream), group in fvu.groupby(["model", "control", "layer", "stream"], sort=False):
        label = f"{display_name(model)} {subspace_name(stream)} L{layer}" + (" (random init)" if control != "trained" else "")
        style = dict(color=colors.get(stream, "#555555"), linestyle="-" if control == "trained" else ":", marker="o",
                     markersize=3)
        by_k = group[group.num_latents == config.dict_size].sort_values("k")
        by_size = group[group.k == config.ref_k].sort_values("num_latents")
        axes[0].plot(by_k.k, by_k.fvu, label=label, **style)
        axes[1].plot(by_size.num_latents, by_size.fvu, label=label, **style)
        feats = features[(features.model == model) & (features.control == control) & (features.layer == layer) &
                         (features.stream == stream)].position_r2.dropna().sort_values()
        axes[2].plot(feats.to_numpy(), np.linspace(1, 0, len(feats), endpoint=False), label=label, **{**style, "marker": None})
        numbers["lines"][label] = {"k": by_k.k.tolist(), "fvu_by_k": by_k.fvu.round(4).tolist(),
                                   "num_latents": by_size.num_latents.tolist(),
                                   "fvu_by_size": by_size.fvu.round(4).tolist(),
                                   "position_r2_sorted": feats.round(4).tolist()}
    for ax in axes[:2]:
        ax.axhline(config.target_fvu, color="#999999", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylabel("held-out FVU")
    axes[0].set_xlabel(f"k (active latents), {config.dict_size} latents")
    axes[1].set_xlabel(f"dictionary size, k = {config.ref_k}")
    axes[2].axvline(config.position_r2, color="#999999", linewidth=0.8)
    axes[2].set_xlabel("position-only R² of a latent's activation")
    axes[2].set_ylabel("share of live latents with at least this R²")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Sparse autoencoders per stream (sparsify TopK; dotted: random-init twin)", fontsize=10)
    fig.tight_layout()
    numbers["summary"] = summary.to_dict(orient="records")
    return save_figure(fig, config.out, "sae_streams", numbers)


def run(config: SAEStreamsConfig) -> dict:
    started = time.perf_counter()
    inputs = (load_figure_inputs(tiny=config.tiny, models=config.model, names=config.name, given=True, seed=config.seed,
                                 store_root=config.store_root) if config.model is not None else
              load_figure_inputs(tiny=config.tiny, models=config.variants, seed=config.seed,
                                 store_root=config.store_root, zoo=config.zoo))
    plan = {}
    for name in inputs.models:  # every model's streams checked before any work: a refusal writes nothing
        encoder = inputs.encoder(name)
        layers = config.layers if config.layers is not None else [min(DEFAULT_LAYER, encoder.n_layers)]
        for layer in layers:
            if not 0 <= layer <= encoder.n_layers:
                raise SAEError(f"model {name} has layers 0..{encoder.n_layers}; --layers asked for {layer}")
        plan[name] = (list(dict.fromkeys(layers)), model_streams(config, name, encoder.subspaces))
    fvu_rows, feature_tables, curves = [], [], []
    steps = min(config.steps, 200) if config.tiny else config.steps
    for name, (layers, streams) in plan.items():
        twin = not config.no_controls and (config.controls is None or name in config.controls)
        for control in CONTROLS if twin else CONTROLS[:1]:
            store = (model_store if control == "trained" else random_init_store)(inputs, name, progress=not config.quiet)
            for layer in layers:
                for stream in streams:
                    for num_latents, k in sweep(config):
                        sae_config = SAEConfig(num_latents=num_latents, k=k, steps=steps, batch_size=config.batch_size,
                                               seed=config.seed)
                        trained = train_sae(store, layer, stream, sae_config)
                        facts = {"model": name, "control": control, "layer": layer, "stream": stream}
                        fvu_rows.append({**facts, **{key: value for key, value in trained.metrics().items()
                                                     if key not in ("model", "store", "layer", "stream")}})
                        curves.append(trained.curve.assign(**facts, num_latents=num_latents, k=k))
                        if (num_latents, k) == (config.dict_size, config.ref_k):
                            feature_tables.append(feature_table(trained, store, config).assign(**facts))
                        if not config.quiet:
                            print(f"[sae] {name} {control} L{layer} {stream} n={num_latents} k={k}: fvu {trained.fvu:.3f} "
                                  f"(pca {trained.fvu_pca:.3f}) {trained.seconds:.0f}s", file=sys.stderr, flush=True)
    fvu = pd.DataFrame(fvu_rows)
    features = pd.concat(feature_tables, ignore_index=True)
    features = features[["model", "control", "layer", "stream", "feature", "firing_rate", "position_r2"]]
    summary = summary_rows(fvu, features, config)
    config.out.mkdir(parents=True, exist_ok=True)
    for table, stem in ((fvu, "fvu"), (features, "features"), (pd.concat(curves, ignore_index=True), "curves"),
                        (summary, "summary")):
        write_text_atomic(config.out / f"{stem}.csv", table.to_csv(index=False, float_format="%.6g"))
    write_text_atomic(config.out / "summary.json", json.dumps(summary.to_dict(orient="records"), indent=1) + "\n")
    draw(fvu, features, summary, config)
    save_config(config, "experiments/sae_streams.py", wall_s=round(time.perf_counter() - started, 1),
                inputs=inputs.description, versions={package: importlib.metadata.version(package)
                                                     for package in ("eai-sparsify", "torch")})
    if not config.quiet:
        print(summary.to_string(float_format="%.3f"))
    return {"fvu": fvu, "features": features, "summary": summary}


def main(argv=None) -> dict:
    return run(figure_config(SAEStreamsConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "sae_streams"))
