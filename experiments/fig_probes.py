"""Figure: linear position probes by layer -- token, segment and intra-segment position, all models and subspaces.

    python experiments/fig_probes.py                      # the zoo, ~1 min on 2 cores (stores reused)
    python experiments/fig_probes.py --tiny --out /tmp/fig  # tiny random models, seconds

For each zoo model and each probe -- token position; segment index (sentence, paragraph); intra-segment
position (sentence, paragraph) -- ``probes.positions.probe_store`` fits a ridge probe per layer x subspace
on the model's shared store (held-out documents): penalty by grouped 5-fold CV on the training
documents, R² on held-out documents with a bootstrap CI over documents, and two controls (a random-init
twin's store, and the target shuffled within each document).  DSTG has ap / sem / full subspaces, the
entangled baselines only full.

Writes into ``--out`` (default figures/probes/): probes.csv (one row per model x task x segment x layer x
subspace, the columns of ``probes.positions.RESULT_COLUMNS``), r2_by_layer (PNG + PDF + JSON) and config.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figure_inputs import FIGURES_DIR, load_figure_inputs, model_store, random_init_store, write_config  # noqa: E402

from dstg_interp.plots import plot_r2_by_layer  # noqa: E402
from probes.positions import PositionProbeConfig, probe_store  # noqa: E402

OUT = FIGURES_DIR / "probes"
# token position is the same target whatever the segment: probed once
PROBES = (("token", "sentence"), ("segment", "sentence"), ("segment", "paragraph"),
          ("intra", "sentence"), ("intra", "paragraph"))


def probe_all(inputs, max_tokens: int, n_boot: int, seed: int, progress: bool) -> pd.DataFrame:
    """Every probe of PROBES on every model, all layers and subspaces, with both controls."""
    tables = []
    for name in inputs.models:
        store = model_store(inputs, name, progress=progress)
        control = random_init_store(inputs, name, progress=progress)
        for task, segment in tqdm(PROBES, desc=f"probes {name}", disable=not progress):
            config = PositionProbeConfig(task=task, segment=segment, max_tokens=max_tokens, n_boot=n_boot, seed=seed)
            tables.append(probe_store(store, config, model_name=name, control_store=control))
    return pd.concat(tables, ignore_index=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tiny", action="store_true", help="tiny random models on a synthetic corpus (smoke run)")
    parser.add_argument("--n-docs", type=int, default=300, help="held-out documents probed")
    parser.add_argument("--max-tokens", type=int, default=30_000, help="tokens subsampled per probe (non-special)")
    parser.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples of test documents for the CI")
    parser.add_argument("--store-root", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0, help="documents, subsample, split, shuffle and bootstrap seed")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    progress = not args.quiet
    inputs = load_figure_inputs(tiny=args.tiny, n_docs=args.n_docs, seed=args.seed, store_root=args.store_root)

    results = probe_all(inputs, args.max_tokens, args.n_boot, args.seed, progress)
    args.out.mkdir(parents=True, exist_ok=True)
    results.to_csv(args.out / "probes.csv", index=False)
    plot_r2_by_layer(results, args.out, stem="r2_by_layer")
    write_config(args.out, {"script": "experiments/fig_probes.py", **vars(args), "probes": PROBES,
                            "inputs": inputs.description, "wall_s": round(time.perf_counter() - started, 1)})
    if progress:
        last = results[results.layer == results.groupby("model").layer.transform("max")]
        print(last.pivot_table(index=["model", "subspace"], columns=["task", "segment"], values="r2")
              .to_string(float_format="%.2f"))
    return {"results": results}


if __name__ == "__main__":
    main()
