"""sparsify (in-process, ``dstg_interp.analysis.sae``) beside SAELens (its own environment, reading a ``dstg-export``
folder): the same TopK SAE on the same activations, split and batches, on CPU.

    python benchmarks/bench_sae_libraries.py --export EXPORT --saelens-python /work/venv-saelens/bin/python
    python benchmarks/bench_sae_libraries.py --export EXPORT --saelens-python ... --quick    # checks the script

EXPORT: ``dstg-export --store STORE --out EXPORT --layers 3 --subspaces sem,ap`` of the zoo DSTG's probe store.
Per column (``layer_3_ap``, ``layer_3_sem``): one SAE per library, ``--d-sae`` latents, TopK ``--k``, ``--steps``
Adam steps of ``--batch-size`` tokens drawn from the training documents, sparsify's learning-rate rule for both;
held-out FVU on the held-out documents ([CLS] / [SEP] dropped, 20% of documents, seed 0).  Each side is timed
in its own process: import seconds, training wall and CPU seconds (the box is shared: CPU seconds are the fair
number), steps per second.  The install facts (seconds, size, what each adds) are measured by hand and passed in
(``--install-json``).  Writes benchmarks/results/sae_libraries.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import torch

from machine import LoadWatch, add_load_arguments, write_result

RESULTS = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve().parent


def split_rows(table, seed: int = 0, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    doc = np.asarray(table["doc_index"])
    rows = np.flatnonzero(~np.asarray(table["is_special"]))
    documents = np.unique(doc[rows])
    held_out = np.random.default_rng(seed).permutation(documents)[:round(test_fraction * len(documents))]
    is_test = np.isin(doc[rows], held_out)
    return rows[~is_test], rows[is_test]


def sparsify_side(export: str, column: str, split: str, d_sae: int, k: int, steps: int, batch_size: int) -> dict:
    """The sparsify SAE, timed in a fresh process as the SAELens side is (import included)."""
    code = f"""
import time, json, resource
t = time.perf_counter()
from dstg_interp.analysis.sae import SAEConfig, train_sae_on_states, sparsify
import datasets, numpy as np, torch
import_s = time.perf_counter() - t
torch.set_num_threads(1)
split = np.load({split!r})
states = np.asarray(datasets.load_from_disk({export!r}).with_format("numpy")[{column!r}], dtype=np.float32)
cpu, wall = time.process_time(), time.perf_counter()
trained = train_sae_on_states(states[split["train"]], states[split["test"]],
                              SAEConfig(num_latents={d_sae}, k={k}, steps={steps}, batch_size={batch_size}))
print(json.dumps({{"library": "eai-sparsify", "version": sparsify.__version__, "torch": torch.__version__,
                  "import_s": round(import_s, 2), "train_s": round(time.perf_counter() - wall, 2),
                  "train_cpu_s": round(time.process_time() - cpu, 2),
                  "steps_per_s": round({steps} / (time.perf_counter() - wall), 1), "fvu": round(trained.fvu, 4),
                  "fvu_pca": round(trained.fvu_pca, 4)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=HERE.parent, env={"PYTHONPATH": str(HERE.parent), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def saelens_side(python: str, export: str, column: str, split: str, d_sae: int, k: int, steps: int,
                 batch_size: int) -> dict:
    started = time.perf_counter()
    out = subprocess.run([python, str(HERE / "sae_lens_runner.py"), export, column, split, "--d-sae", str(d_sae),
                          "--k", str(k), "--steps", str(steps), "--batch-size", str(batch_size)],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - started, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True)
    parser.add_argument("--saelens-python", required=True)
    parser.add_argument("--columns", nargs="+", default=["layer_3_ap", "layer_3_sem"])
    parser.add_argument("--d-sae", type=int, default=256)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--install-json", help="install facts measured by hand (seconds, sizes, packages added)")
    parser.add_argument("--quick", action="store_true", help="50 steps: checks the script, not the numbers")
    parser.add_argument("--out", default=str(RESULTS / "sae_libraries.json"))
    add_load_arguments(parser)
    args = parser.parse_args()
    steps = 50 if args.quick else args.steps
    watch = LoadWatch.start(args)
    table = datasets.load_from_disk(args.export).with_format("numpy")
    train, test = split_rows(table)
    split = str(Path(tempfile.mkdtemp()) / "split.npz")
    np.savez(split, train=train, test=test)
    runs = []
    for column in args.columns:
        setting = {"column": column, "d_sae": args.d_sae, "k": args.k, "steps": steps, "batch_size": args.batch_size,
                   "n_train": len(train), "n_test": len(test)}
        runs.append({**setting, **sparsify_side(args.export, column, split, args.d_sae, args.k, steps, args.batch_size)})
        runs.append({**setting, **saelens_side(args.saelens_python, args.export, column, split, args.d_sae, args.k,
                                               steps, args.batch_size)})
        print(json.dumps(runs[-2]), json.dumps(runs[-1]), sep="\n", flush=True)
    install = json.loads(Path(args.install_json).read_text()) if args.install_json else None
    write_result(args.out, {"benchmark": "sae_libraries", "torch_here": torch.__version__, "runs": runs,
                            "install": install}, watch, args)


if __name__ == "__main__":
    main()
