"""Ridge probes over a whole activation store: the one-pass-per-layer grid vs the per-set route before it.

    python benchmarks/bench_probe_store.py                        # 1M-token store; writes results/probe_store.json
    python benchmarks/bench_probe_store.py --store runs/store-x   # probe an existing store instead
    python benchmarks/bench_probe_store.py --device cuda          # the sums on a GPU too (mode "all-<device>")
    python benchmarks/bench_probe_store.py --quick                # 20k tokens: checks the script; $TMPDIR only

The store: a random DSTG-NeoBERT of zoo size (6 layers, d_sem 112 + d_ap 16, vocab 8192) extracted over
random-token sequences of 256 with structure labels (bench_store.RandomSequences, one document per
sequence), float16, every layer 0..6 x sem/ap/full (format 2: full served as [sem | ap]); built once into
--work and reused. The grid: ``fit_ridge_grid`` over every layer x subspace x 3 position targets
(token_position, sentence_index, intra_sentence_position), 80/20 grouped document split, grouped 5-fold CV
over 17 alphas, BLAS on one thread, no predictions kept (the benchmark reads test R² only). Modes, each
in a fresh subprocess (peak RSS = VmHWM from /proc, reported with the RSS just before the grid, so
imports and labels are told apart):
  before     every non-special token, the per-set route of commit 447a0a1 (benchmarks/ridge_grid_before.py):
             each of the 21 feature sets read on its own, then its test rows read again for predictions
  all        every non-special token, the grid as dstg-probe runs it now: probes.grid.store_feature_sets,
             one pass per layer shared by sem / ap / full, test R² from the held-out rows' sums
  subsample  100,000 non-special tokens (store.subsample, seed 0: the dstg-probe default until round 2),
             features materialised per set as ``np.asarray(states[rows])``
and ``same-process``: one process runs before and after alternately (``--rounds`` times each), the ratio of
their medians is the speed-up, measured under the same load. Every child records os.getloadavg().
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

import os

from bench_store import RandomSequences
from dstg_interp import ActivationStore, ModelConfig, build_model, extract
from machine import LoadWatch, add_load_arguments, status_mb, write_result
from probes import fit_ridge_grid, grouped_train_test_split
from probes.grid import store_feature_sets
from ridge_grid_before import fit_ridge_grid_before
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


def grid_inputs(store: ActivationStore, mode: str, subsample: int):
    """(feature sets, targets, groups, train, test) of a mode, rows in store coordinates."""
    labels = store.labels
    special = labels["is_special"].to_numpy()
    groups = labels["doc_index"].to_numpy()
    if mode == "subsample":  # what the subsample protocol did: the selected rows' features, one set at a time
        rows = store.subsample(subsample, seed=0)
        targets = {name: labels[name].to_numpy()[rows].astype(np.float64) for name in TARGETS}
        train, test = grouped_train_test_split(groups[rows], test_fraction=0.2, seed=0)
        features = {(layer, sub): (lambda layer=layer, sub=sub: np.asarray(store.states(layer, sub)[rows]))
                    for layer in store.layers for sub in store.subspaces}
        return features, targets, groups[rows], train, test
    rows = np.flatnonzero(~special)  # store rows as they are: features never copied
    targets = {name: labels[name].to_numpy().astype(np.float64) for name in TARGETS}
    train, test = grouped_train_test_split(groups[rows], test_fraction=0.2, seed=0)
    if mode == "before":
        features = {(layer, sub): (lambda layer=layer, sub=sub: store.states(layer, sub))
                    for layer in store.layers for sub in store.subspaces}
    else:
        features = store_feature_sets(store)
    return features, targets, groups, rows[train], rows[test]


def fit(store: ActivationStore, mode: str, subsample: int, device: str | None):
    features, targets, groups, train, test = grid_inputs(store, mode, subsample)
    if mode == "before":
        table = fit_ridge_grid_before(features, targets, groups, train, test, DEFAULT_ALPHAS, n_splits=5)
    else:
        table = fit_ridge_grid(features, targets, groups, train, test, DEFAULT_ALPHAS, n_splits=5,
                               keep_predictions=False, device=device)
    return table, len(train) + len(test), len(train), len(test)


def run_grid(store: ActivationStore, mode: str, subsample: int, device: str | None = None) -> dict:
    """The probe grid in one mode; the child process's measurements."""
    rss_before = status_mb("VmRSS")
    load = os.getloadavg()
    start = time.perf_counter()
    cpu = time.process_time()
    with threadpool_limits(limits=1):
        table, n_rows, n_train, n_test = fit(store, mode, subsample, device)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return {"mode": mode, "device": device, "n_tokens_probed": int(n_rows), "n_train": int(n_train),
            "n_test": int(n_test), "feature_sets": int(table.key.nunique()), "targets": list(TARGETS),
            "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
            "rss_before_grid_mb": round(rss_before, 1), "peak_rss_mb": round(status_mb("VmHWM"), 1),
            "loadavg_before": [round(x, 2) for x in load], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "test_r2": {f"{key[0]}/{key[1]}/{target}": float(r2)
                        for key, target, r2 in zip(table.key, table.target, table.test_r2)},
            "cv_r2": {f"{key[0]}/{key[1]}/{target}": float(r2)
                      for key, target, r2 in zip(table.key, table.target, table.cv_r2)}}


def same_process(store: ActivationStore, rounds: int) -> dict:
    """Before and after alternately in this one process: seconds of each, load at each, median ratio."""
    times: dict[str, list] = {"before": [], "all": []}
    cpu: dict[str, list] = {"before": [], "all": []}
    loads = []
    with threadpool_limits(limits=1):
        for _ in range(rounds):
            for mode in ("before", "all"):
                loads.append({"mode": mode, "loadavg": [round(x, 2) for x in os.getloadavg()]})
                start, cpu_start = time.perf_counter(), time.process_time()
                fit(store, mode, 0, None)
                times[mode].append(round(time.perf_counter() - start, 2))
                cpu[mode].append(round(time.process_time() - cpu_start, 2))
    medians = {mode: float(np.median(values)) for mode, values in times.items()}
    cpu_medians = {mode: float(np.median(values)) for mode, values in cpu.items()}
    return {"rounds": rounds, "seconds": times, "cpu_seconds": cpu, "median_s": medians, "median_cpu_s": cpu_medians,
            "loadavg_at_each_start": loads, "speedup_before_over_all": round(medians["before"] / medians["all"], 2),
            "cpu_speedup_before_over_all": round(cpu_medians["before"] / cpu_medians["all"], 2)}


def child(args) -> None:
    store = ActivationStore(args.store)
    if args.child == "same-process":
        print(json.dumps(same_process(store, args.rounds)))
    else:
        print(json.dumps(run_grid(store, args.child, args.subsample, args.device if args.child == "all" else None)))


def largest_difference(a: dict, b: dict) -> float | None:
    shared = sorted(set(a) & set(b))
    return max((abs(a[key] - b[key]) for key in shared), default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="size of the synthetic store")
    parser.add_argument("--subsample", type=int, default=SUBSAMPLE)
    parser.add_argument("--store", default=None, help="an existing store folder to probe (skips building one)")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bench-probe-store"),
                        help="where the synthetic store is built and kept for reruns")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads for building")
    parser.add_argument("--quick", action="store_true", help="20k tokens, 5k subsample: check the script only")
    parser.add_argument("--rounds", type=int, default=1, help="before/after rounds in the same-process comparison")
    parser.add_argument("--device", default=None, help="also run the grid with its sums on this torch device")
    parser.add_argument("--output", default=None, help=f"result file (default {RESULT_PATH})")
    parser.add_argument("--child", choices=["all", "before", "subsample", "same-process"], help=argparse.SUPPRESS)
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
    modes = ["subsample", "before", "all"] + ([f"all-{args.device}"] if args.device else [])
    for mode in modes + ["same-process"]:
        command = [sys.executable, __file__, "--child", mode.split("-")[0] if mode.startswith("all-") else mode,
                   "--store", str(store_path), "--subsample", str(args.subsample), "--rounds", str(args.rounds)]
        if mode.startswith("all-"):
            command += ["--device", args.device]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        runs[mode] = json.loads(output.strip().splitlines()[-1])
        if mode == "same-process":
            print(f"same process: {runs[mode]['seconds']} s (before, after): {runs[mode]['speedup_before_over_all']}x",
                  flush=True)
        else:
            print(f"{mode:10s} {runs[mode]['n_tokens_probed']:>9} tokens  {runs[mode]['seconds']:8.1f} s  "
                  f"peak RSS {runs[mode]['peak_rss_mb']:.0f} MB (before grid {runs[mode]['rss_before_grid_mb']:.0f})  "
                  f"load {runs[mode]['loadavg_before'][0]}", flush=True)
    same = runs.pop("same-process")
    growth = {mode: run["peak_rss_mb"] - run["rss_before_grid_mb"] for mode, run in runs.items()}
    result = {
        "benchmark": "fit_ridge_grid over every token of a store: one pass per layer (all) vs per set (before)",
        "quick": args.quick,
        "store": str(store_path) if args.store else f"synthetic: random zoo-size DSTG, {args.tokens} tokens",
        "n_tokens_store": ActivationStore(store_path).n_tokens,
        "runs": runs,
        "same_process": same,
        "speedup_before_over_all_separate_processes": round(runs["before"]["seconds"] / runs["all"]["seconds"], 2),
        "time_ratio_all_vs_subsample": round(runs["all"]["seconds"] / runs["subsample"]["seconds"], 2),
        "grid_rss_growth_mb": {mode: round(value, 1) for mode, value in growth.items()},
        "max_abs_delta_before_vs_all": {
            "test_r2": largest_difference(runs["before"]["test_r2"], runs["all"]["test_r2"]),
            "cv_r2": largest_difference(runs["before"]["cv_r2"], runs["all"]["cv_r2"])},
        "max_abs_delta_test_r2_all_vs_subsample": largest_difference(runs["all"]["test_r2"], runs["subsample"]["test_r2"]),
    }
    if args.device:
        result["max_abs_delta_all_vs_device"] = largest_difference(runs["all"]["test_r2"],
                                                                   runs[f"all-{args.device}"]["test_r2"])
    path = Path(tempfile.gettempdir()) / "probe_store-quick.json" if args.quick else Path(args.output or RESULT_PATH)
    write_result(path, result, watch, args)


if __name__ == "__main__":
    main()
