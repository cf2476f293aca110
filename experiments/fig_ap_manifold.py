"""Figure: the AP manifold -- PCA and DCT of learned position tables and of per-position mean layer states.

    python experiments/fig_ap_manifold.py                 # the zoo + MiniLM, ~1 min on 2 cores (extracts the shared stores)
    python experiments/fig_ap_manifold.py --tiny --out /tmp/fig   # tiny random models, seconds

Two families of position tables (rows = positions), each analysed by ``dstg_interp.spectra.analyze_table``
(PCA centred over positions, DCT-II of PC1/PC2, share of power in the first 4 bins, Gaussian control):
1. learned tables: DSTG's AP table, AP-NeoBERT's entangled table and MiniLM's 512x384 table as a real-world
   reference, each next to one Gaussian table of the same shape ("random PxD") drawn with the seed;
   RoPE/RP have no table -- the script says so and covers them in 2.
2. layer states: the per-position mean of every zoo model's states (DSTG ap/sem/full, baselines full)
   over the held-out documents, at every layer; the figures show the last layer.  Positions seen fewer
   than ``--min-count`` times are dropped (late positions come from few long documents and are noise).

Writes into ``--out`` (default figures/ap_manifold/): tables_{scree,pc_curves,dct}, layers_{scree,pc_curves,
dct} as PNG + PDF + JSON, spectra.csv (one row per analysed table: PC1+PC2, participation ratio,
low-frequency share, with the control next to each) and config.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figure_inputs import FIGURES_DIR, load_figure_inputs, model_store, write_config  # noqa: E402

from dstg_interp.plots import plot_dct_power, plot_pc_curves, plot_scree  # noqa: E402
from dstg_interp.spectra import analyze_table, per_position_mean, position_table, spectra_table  # noqa: E402

OUT = FIGURES_DIR / "ap_manifold"
TABLE_NAMES = {"dstg": "dstg AP table", "ap": "ap table (entangled)"}


def learned_table_spectra(inputs, seed: int, n_control_draws: int, with_minilm: bool) -> tuple[list, list, dict]:
    """Spectra of every learned position table (+ one random table of each shape); notes on what was skipped."""
    spectra, random_spectra, notes = [], [], {}
    tables = {}
    for name, model in inputs.models.items():
        try:
            tables[TABLE_NAMES.get(name, f"{name} table")] = position_table(model)
        except ValueError as err:  # RoPE / RP: no table; their layer-state version is in part 2
            notes[name] = str(err).split(" -- ")[0] + " (layers_* below)"
    if with_minilm:
        try:
            from dstg_interp import load_hf_encoder
            from dstg_interp.encoders import fetch_minilm

            tables["MiniLM table (all-MiniLM-L6-v2)"] = load_hf_encoder(fetch_minilm()).ap_table.detach().double().numpy()
        except Exception as err:  # a reference point only: the figures still make sense without it
            notes["minilm"] = f"MiniLM reference skipped: {err}"
    rng = np.random.default_rng(seed)
    for name, table in tables.items():
        spectra.append(analyze_table(table, name=name, n_control_draws=n_control_draws, seed=seed))
        shape = table.shape
        random_table = rng.standard_normal(shape)
        random_spectra.append(analyze_table(random_table, name=f"random {shape[0]}x{shape[1]}",
                                            n_control_draws=0, seed=seed))
    return spectra, random_spectra, notes


def layer_state_spectra(inputs, min_count: int, seed: int, n_control_draws: int, progress: bool) -> list:
    """Per-position-mean spectra of every model x layer x subspace (the last layer is what the figures show)."""
    spectra = []
    for name in tqdm(list(inputs.models), desc="layer spectra", disable=not progress):
        store = model_store(inputs, name, progress=progress)
        positions = store.labels["token_position"].to_numpy()
        layers = [layer for layer in store.layers if isinstance(layer, int)]
        for layer in layers:
            for subspace in store.subspaces:
                states = np.asarray(store.states(layer, subspace), dtype=np.float64)  # [n_tokens, d]
                table, kept = per_position_mean(states, positions, min_count=min_count)
                spectrum = analyze_table(table, name=f"{name} L{layer} {subspace}", positions=kept,
                                         n_control_draws=n_control_draws, seed=seed)
                spectrum.summary.update(model=name, layer=int(layer), subspace=subspace, last_layer=layer == layers[-1])
                spectra.append(spectrum)
    return spectra


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tiny", action="store_true", help="tiny random models on a synthetic corpus (smoke run)")
    parser.add_argument("--n-docs", type=int, default=300, help="held-out documents the layer states are read on")
    parser.add_argument("--min-count", type=int, default=20, help="drop positions seen fewer times (layer states)")
    parser.add_argument("--control-draws", type=int, default=20, help="Gaussian tables averaged for each control")
    parser.add_argument("--no-minilm", action="store_true", help="skip the MiniLM reference table")
    parser.add_argument("--store-root", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    progress = not args.quiet
    min_count = min(args.min_count, 3) if args.tiny else args.min_count  # the tiny corpus has 40 documents
    inputs = load_figure_inputs(tiny=args.tiny, n_docs=args.n_docs, seed=args.seed, store_root=args.store_root)

    tables, random_tables, notes = learned_table_spectra(inputs, args.seed, args.control_draws,
                                                        with_minilm=not (args.no_minilm or args.tiny))
    for model, note in notes.items():
        print(f"[fig_ap_manifold] {model}: {note}")
    if tables:
        plot_scree(tables + random_tables, args.out, stem="tables_scree")
        plot_pc_curves(tables, args.out, stem="tables_pc_curves")
        plot_dct_power(tables + random_tables, args.out, stem="tables_dct")

    layers = layer_state_spectra(inputs, min_count, args.seed, args.control_draws, progress)
    last = [s for s in layers if s.summary["last_layer"]]
    plot_scree(last, args.out, stem="layers_scree")
    plot_pc_curves(last, args.out, stem="layers_pc_curves")
    plot_dct_power(last, args.out, stem="layers_dct")

    summary = spectra_table(tables + random_tables + layers)
    summary.insert(0, "source", ["learned table"] * len(tables) + ["random table"] * len(random_tables)
                   + ["layer states"] * len(layers))
    summary.to_csv(args.out / "spectra.csv", index=False)
    write_config(args.out, {"script": "experiments/fig_ap_manifold.py", **vars(args), "min_count_used": min_count,
                            "inputs": inputs.description, "notes": notes, "wall_s": round(time.perf_counter() - started, 1)})
    if progress:
        columns = ["source", "name", "pc1_pc2", "control_pc1_pc2", "low_freq_share", "control_low_freq_share"]
        print(summary[summary.source != "layer states"][columns].to_string(index=False, float_format="%.3f"))
    return {"spectra": summary, "notes": notes}


if __name__ == "__main__":
    main()
