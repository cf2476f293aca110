"""Regenerate the whole gallery in figures/: AP manifold, heads, probes, Holmes, the claims table, then the two
studies beyond the paper (length extrapolation, position-free semantic states).

    python experiments/run_all.py                  # the shipped zoo, target <= 30 min on 2 cores
    python experiments/run_all.py --tiny --out /tmp/gallery   # tiny random models, no Holmes, seconds
    python experiments/run_all.py --skip holmes    # reuse figures/holmes/ as it is

The figure scripts run in this process, in order, on the same models and documents, so each model's
activation store is extracted once (by the first script that needs it) and read by the others; stores
already in the cache folder from an earlier run are reused as they are.  Holmes runs as its own script
(``experiments/holmes_suite.py``, maintained with probes/holmes/) in a subprocess.  The claims table
comes after them, from the numbers the others wrote; the extrapolation and invariance studies
(``fig_extrapolation.py``, ``fig_invariance.py``) run last, on their own windows and passages.  A timing table is printed and written to
``timing.json`` next to the figures, with run_all's config in ``run_all.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import claims  # noqa: E402
import fig_ap_manifold  # noqa: E402
import fig_extrapolation  # noqa: E402
import fig_heads  # noqa: E402
import fig_invariance  # noqa: E402
import fig_probes  # noqa: E402
from figure_inputs import FIGURES_DIR  # noqa: E402

STEPS = ("ap_manifold", "heads", "probes", "holmes", "claims", "extrapolation", "invariance")
HOLMES_SCRIPT = Path(__file__).resolve().parent / "holmes_suite.py"


def run_holmes(out: Path) -> str:
    """The Holmes suite script, into ``out``/holmes; returns a note when it cannot run."""
    if not HOLMES_SCRIPT.is_file():
        return f"skipped: {HOLMES_SCRIPT.name} not found"
    command = [sys.executable, str(HOLMES_SCRIPT), "--out", str(out / "holmes")]
    result = subprocess.run(command, cwd=HOLMES_SCRIPT.parents[1])
    return "ok" if result.returncode == 0 else f"failed with exit code {result.returncode}"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=FIGURES_DIR, help="gallery folder (subfolders per figure)")
    parser.add_argument("--tiny", action="store_true", help="tiny random models on a synthetic corpus; Holmes skipped")
    parser.add_argument("--skip", nargs="*", default=[], choices=STEPS, help="steps to leave out")
    parser.add_argument("--n-docs", type=int, default=300, help="held-out documents for stores and probes")
    parser.add_argument("--store-root", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shared = ["--n-docs", str(args.n_docs), "--seed", str(args.seed)] + (["--tiny"] if args.tiny else []) \
        + (["--store-root", str(args.store_root)] if args.store_root else []) + (["--quiet"] if args.quiet else [])
    steps = {
        "ap_manifold": lambda: fig_ap_manifold.main(["--out", str(args.out / "ap_manifold"), *shared]),
        "heads": lambda: fig_heads.main(["--out", str(args.out / "heads"), *shared]),
        "probes": lambda: fig_probes.main(["--out", str(args.out / "probes"), *shared]),
        "holmes": lambda: run_holmes(args.out),
        "claims": lambda: claims.main(["--figures", str(args.out)] + (["--quiet"] if args.quiet else [])),
        "extrapolation": lambda: fig_extrapolation.main(["--out", str(args.out / "extrapolation"), "--seed", str(args.seed)]
                                                        + (["--tiny", "--factors", "2"] if args.tiny else [])
                                                        + (["--store-root", str(args.store_root)] if args.store_root else [])
                                                        + (["--quiet"] if args.quiet else [])),
        "invariance": lambda: fig_invariance.main(["--out", str(args.out / "invariance"), "--seed", str(args.seed)]
                                                  + (["--tiny"] if args.tiny else []) + (["--quiet"] if args.quiet else [])),
    }
    skipped = set(args.skip) | ({"holmes"} if args.tiny else set())  # Holmes needs the real zoo and its suite
    timing = []
    for name in STEPS:
        if name in skipped:
            timing.append({"step": name, "seconds": 0.0, "status": "skipped"})
            continue
        started = time.perf_counter()
        result = steps[name]()
        status = result if isinstance(result, str) else "ok"
        timing.append({"step": name, "seconds": round(time.perf_counter() - started, 1), "status": status})
        print(f"[run_all] {name}: {timing[-1]['seconds']:.0f} s ({status})", flush=True)
    total = round(sum(t["seconds"] for t in timing), 1)
    record = {"steps": timing, "total_seconds": total, "cpu_count": os.cpu_count(), "threads": args.threads,
              "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    (args.out / "timing.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / "run_all.json").write_text(json.dumps({"script": "experiments/run_all.py", **vars(args)}, indent=1,
                                                      default=str) + "\n")
    print(f"\n{'step':<12} {'seconds':>8}  status")
    for t in timing:
        print(f"{t['step']:<12} {t['seconds']:>8.1f}  {t['status']}")
    print(f"{'total':<12} {total:>8.1f}")
    return timing


if __name__ == "__main__":
    main()
