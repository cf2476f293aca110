"""dstg-probe: the main command -- position (or Holmes) probes of one or more models, as one table.

    dstg-probe --task segment                                 # shipped DSTG model, default corpus (en-mix)
    dstg-probe --model dstg rope ap rp --task segment --segment paragraph --out results/segment
    dstg-probe --model runs/dstg/checkpoint --task intra --layers 0,3,6 --subspaces sem,ap
    dstg-probe --model path/to/all-MiniLM-L6-v2 --task token  # any local HF encoder folder

Prints a compact table (layer rows; model/subspace columns; held-out R² ± half the 95% CI) and writes
``results.csv`` (tidy, one row per model x layer x subspace) and ``results.json`` (config, versions,
results) into ``--out`` (default ``results/<task>``), written atomically.  Activation stores are cached
and reused.  Bad input: one line on stderr, exit code 2, nothing written; an unusable --out is refused
before any work, and --out may hold earlier dstg-probe results (replaced) but no other results.csv/json.
Intervals resting on fewer than 10 held-out documents print as "n/a", with a warning.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

from dstg_interp.io import OutputError, check_output_location, positive_int, run_cli, write_text_atomic
from probes.positions import model_label

TASKS = ("token", "segment", "intra", "holmes")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dstg-probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", default=["dstg"],
                        help="zoo names (dstg rope ap rp), checkpoint folders or HF encoder folders (default: dstg)")
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--segment", default="sentence", choices=["sentence", "paragraph"])
    parser.add_argument("--corpus", default="en-mix", help="en-mix (held-out documents), a folder of *.txt, a .jsonl, hf:...")
    parser.add_argument("--layers", default=None, help="comma-separated layers, e.g. 0,3,6 (default: all)")
    parser.add_argument("--subspaces", default=None, help="comma-separated: ap,sem,full (default: all each model has)")
    parser.add_argument("--out", default=None, help="output folder (default: results/<task>)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (extraction)")
    parser.add_argument("--max-tokens", type=positive_int, default=None,
                        help="a seeded subsample of this many tokens for the probes (default: every token)")
    parser.add_argument("--max-docs", type=positive_int, default=None)
    parser.add_argument("--no-controls", action="store_true", help="skip the random-init and shuffled-target controls")
    parser.add_argument("--benchmark", default=None, help="--task holmes: a Holmes-format folder (default: the offline suite)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def _layers(text: str | None):
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers takes comma-separated integers (0 = embeddings), got {text!r}") from None


def _subspaces(text: str | None):
    if text is None:
        return None
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in ("ap", "sem", "full")]
    if bad:
        raise ValueError(f"unknown subspace {bad[0]!r}; choose from ap, sem, full")
    return values


def compact_table(results: pd.DataFrame) -> str:
    """Layer rows, (model, subspace) columns, 'R² ± half-CI' cells."""
    cells = results.assign(cell=[
        f"{r:.3f} ± {(hi - lo) / 2:.3f}" if pd.notna(lo) else f"{r:.3f} ± n/a"
        for r, lo, hi in zip(results.r2, results.ci_low, results.ci_high)
    ])
    several_models = results.model.nunique() > 1
    cells["column"] = [f"{m}/{s}" if several_models else s for m, s in zip(cells.model, cells.subspace)]
    order = list(dict.fromkeys(cells.column))
    table = cells.pivot(index="layer", columns="column", values="cell")[order]
    return table.to_string()


RESULT_FILES = ("results.csv", "results.json")


def check_results_folder(out: Path) -> None:
    """Before any work: ``out`` must be a writable folder whose results files, if any, dstg-probe wrote."""
    check_output_location(out)
    if not any((out / name).exists() for name in RESULT_FILES):
        return
    try:
        ours = json.loads((out / "results.json").read_text()).get("command") == "dstg-probe"
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise OutputError(f"--out {out} holds a results.csv or results.json that dstg-probe did not write; "
                          "it is never replaced: choose another --out")


def write_results(out: Path, results: pd.DataFrame, record: dict) -> None:
    """results.csv + results.json, each written under a temporary name and renamed; a failure (a full disk)
    removes the temporary files and leaves the previous results as they were."""
    out.mkdir(parents=True, exist_ok=True)
    csv_tmp = out / f".results.csv.tmp-{os.getpid()}"
    try:
        results.to_csv(csv_tmp, index=False)
        write_text_atomic(out / "results.json", json.dumps(record, indent=2, default=str) + "\n")
        os.replace(csv_tmp, out / "results.csv")
    finally:
        csv_tmp.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> tuple[pd.DataFrame, dict]:
    from dstg_interp.store.manifest import versions

    layers, subspaces = _layers(args.layers), _subspaces(args.subspaces)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: no CUDA device is available here; use --device cpu")
    started = time.time()
    if args.task == "holmes":
        import torch

        from probes.holmes import run_holmes
        from probes.holmes.suite import build_suite, default_suite_dir, is_complete_suite

        torch.set_num_threads(1)  # the probes are tiny; two threads only oversubscribe (see probes/holmes)
        benchmark = args.benchmark
        if benchmark is None:  # the offline suite, built into the cache on first use
            benchmark = default_suite_dir()
            if not is_complete_suite(benchmark):  # an interrupted first build is rebuilt, never used
                build_suite(benchmark)
        from dstg_interp.encoders import open_encoder

        models = {model_label(m): open_encoder(m, device=args.device) for m in args.model}
        results = run_holmes(models, benchmark_dir=benchmark, layers=layers if layers is not None else "last",
                             subspaces=subspaces, progress=not args.quiet)
    else:
        from probes.positions import probe_positions

        tables = []
        for spec in args.model:
            tables.append(probe_positions(spec, task=args.task, segment=args.segment, corpus=args.corpus, layers=layers,
                                          subspaces=subspaces, max_tokens=args.max_tokens, controls=not args.no_controls,
                                          seed=args.seed, max_docs=args.max_docs, model_name=model_label(spec),
                                          progress=not args.quiet, device=args.device))
        results = pd.concat(tables, ignore_index=True)
    record = dict(command="dstg-probe", arguments=vars(args), versions=versions(), seconds=round(time.time() - started, 1),
                  results=results.to_dict(orient="records"))
    return results, record


def _main(args: argparse.Namespace) -> int:
    out = Path(args.out or Path("results") / args.task)
    check_results_folder(out)  # a file, an unwritable place or foreign results: refused before the probe runs
    results, record = run(args)
    if args.task != "holmes":
        title = f"held-out R² ({args.task}" + (f", {args.segment}" if args.task != "token" else "") + ") ± half the 95% CI"
        print(title)
        print(compact_table(results))
    else:
        from probes.holmes import dataset_scores

        print(dataset_scores(results).to_string(index=False))
    write_results(out, results, record)
    print(f"wrote {out / 'results.csv'} and {out / 'results.json'}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_cli("dstg-probe", lambda: _main(args), interrupted=lambda: "no results were written")


if __name__ == "__main__":
    sys.exit(main())
