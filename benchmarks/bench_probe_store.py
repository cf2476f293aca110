"""Ridge probes over a whole activation store (every token, streamed) vs the 100k-token subsample.

    python benchmarks/bench_probe_store.py                        # 1M-token store; writes results/probe_store.json
    python benchmarks/bench_probe_store.py --store runs/store-x   # probe an existing store instead
    python benchmarks/bench_probe_store.py --quick                # 20k tokens: checks the script; $TMPDIR only

The store: a random DSTG-NeoBERT of zoo size (6 layers, d_sem 112 + d_ap 16, vocab 8192) extracted over
random-token sequences of 256 with structure labels (bench_store.RandomSequences, one document per
sequence), float16, every layer 0..6 x sem/ap/full (format 2: full served as [sem | ap]); built once into
--work and reused. The grid: ``fit_ridge_grid`` over every layer x subspace x 3 position targets
(token_position, sentence_index, intra_sentence_position), 80/20 grouped document split, grouped 5-fold CV
over 17 alphas, BLAS on one thread. Two modes, each in a fresh subprocess (peak RSS = VmHWM from /proc,
reported with the RSS just before the grid, so imports and labels are told apart):
  all        every non-special token; each feature set is the store's memory map, read in chunks
  subsample  100,000 non-special tokens (store.subsample, seed 0: the dstg-probe default until now),
             features materialised per set as ``np.asarray(states[rows])``, as probes/positions.py did
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from bench_store import RandomSequences, _status_mb
from dstg_interp import ActivationStore, ModelConfig, build_model, extract
from machine import LoadWatch, add_load_arguments, write_result
from probes import fit_ridge_grid, grouped_train_test_split
from probes.ridge import DEFAULT_ALPHAS

RESULT_PATH = Path(__file__).parent / "results" / "probe_store.json"
TARGETS = ("token_position", "sentence_index", "intra_sentence_position")
SUBSAMPLE = 100_000


def build_store(folder: Path, n_tokens: int, threads: int) -> ActivationStore:
    config = ModelConfig(variant="dstg", vocab_size=8192, max_positions=256, n_layers=6, n_heads=4, d_head=32,
                         d_sem=112, d_ap=16, seed=0)
    torch.set_num_threads(threads)
    return extract(build_model(config).eval(), RandomSequences(n_tokens, 256, 8192), folder, dtype="float16",
                   progress=True)


def run_grid(store: ActivationStore, mode: str, subsample: int) -> dict:
    """The probe grid in one mode; the child process's measurements."""
    labels = store.labels
    special = labels["is_special"].to_numpy()
    rows = np.flatnonzero(~special) if mode == "all" else store.subsample(subsample, seed=0)
    rss_before = _status_mb("VmRSS")
    start = time.perf_counter()
    with threadpool_limits(limits=1):
        if mode == "all":  # store rows as they are: groups and targets over every row, features never copied
            groups = labels["doc_index"].to_numpy()
            targets = {name: labels[name].to_numpy().astype(np.float64) for name in TARGETS}
            train, test = grouped_train_test_split(groups[rows], test_fraction=0.2, seed=0)
            train, test = rows[train], rows[test]
            features = {(layer, sub): (lambda layer=layer, sub=sub: store.states(layer, sub))
                        for layer in store.layers for sub in store.subspaces}
        else:  # what the subsample protocol did: the selected rows' features, one set at a time in memory
            groups = labels["doc_index"].to_numpy()[rows]
            targets = {name: labels[name].to_numpy()[rows].astype(np.float64) for name in TARGETS}
            train, test = grouped_train_test_split(groups, test_fraction=0.2, seed=0)
            features = {(layer, sub): (lambda layer=layer, sub=sub: np.asarray(store.states(layer, sub)[rows]))
                        for layer in store.layers for sub in store.subspaces}
        table = fit_ridge_grid(features, targets, groups, train, test, DEFAULT_ALPHAS, n_splits=5,
                               keep_predictions=False)
    seconds = time.perf_counter() - start
    return {"mode": mode, "n_tokens_probed": int(len(rows)), "n_train": int(len(train)), "n_test": int(len(test)),
            "feature_sets": len(features), "targets": list(TARGETS), "seconds": round(seconds, 2),
            "rss_before_grid_mb": round(rss_before, 1), "peak_rss_mb": round(_status_mb("VmHWM"), 1),
            "test_r2": {f"{key[0]}/{key[1]}/{target}": round(float(r2), 4)
                        for key, target, r2 in zip(table.key, table.target, table.test_r2)}}


def child(args) -> None:
    print(json.dumps(run_grid(ActivationStore(args.store), args.child, args.subsample)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="size of the synthetic store")
    parser.add_argument("--subsample", type=int, default=SUBSAMPLE)
    parser.add_argument("--store", default=None, help="an existing store folder to probe (skips building one)")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bench-probe-store"),
                        help="where the synthetic store is built and kept for reruns")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads for building")
    parser.add_argument("--quick", action="store_true", help="20k tokens, 5k subsample: check the script only")
    parser.add_argument("--child", choices=["all", "subsample"], help=argparse.SUPPRESS)
    add_load_arguments(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.tokens, args.subsample = 20_480, 5_000
    store_path = Path(args.store) if args.store else Path(args.work) / f"store-{args.tokens}"
    if not args.store:
        build_store(store_path, args.tokens, args.threads)  # reused when already there (same identity)
    watch = LoadWatch.start(args)  # after the build: the load the grid itself sees
    runs = {}
    for mode in ("subsample", "all"):
        command = [sys.executable, __file__, "--child", mode, "--store", str(store_path), "--subsample",
                   str(args.subsample)]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        runs[mode] = json.loads(output.strip().splitlines()[-1])
        print(f"{mode:10s} {runs[mode]['n_tokens_probed']:>9} tokens  {runs[mode]['seconds']:8.1f} s  "
              f"peak RSS {runs[mode]['peak_rss_mb']:.0f} MB (before grid {runs[mode]['rss_before_grid_mb']:.0f})",
              flush=True)
    shared = sorted(set(runs["all"]["test_r2"]) & set(runs["subsample"]["test_r2"]))
    growth = {mode: run["peak_rss_mb"] - run["rss_before_grid_mb"] for mode, run in runs.items()}
    result = {
        "benchmark": "fit_ridge_grid over every token of a store (streamed) vs a 100k-token subsample",
        "quick": args.quick,
        "store": str(store_path) if args.store else f"synthetic: random zoo-size DSTG, {args.tokens} tokens",
        "n_tokens_store": ActivationStore(store_path).n_tokens,
        "runs": runs,
        "time_ratio_all_vs_subsample": round(runs["all"]["seconds"] / runs["subsample"]["seconds"], 2),
        "token_ratio_all_vs_subsample": round(runs["all"]["n_tokens_probed"] / runs["subsample"]["n_tokens_probed"], 2),
        "grid_rss_growth_mb": {mode: round(value, 1) for mode, value in growth.items()},
        "max_abs_delta_test_r2": max((abs(runs["all"]["test_r2"][k] - runs["subsample"]["test_r2"][k]) for k in shared),
                                     default=None),
    }
    path = Path(tempfile.gettempdir()) / "probe_store-quick.json" if args.quick else RESULT_PATH
    write_result(path, result, watch, args)


if __name__ == "__main__":
    main()
