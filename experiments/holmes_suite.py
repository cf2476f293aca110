"""Offline Holmes suite on the four zoo models: build it (cache dir) and probe it (Flash protocol).

    python experiments/holmes_suite.py                     # ~5 min on one CPU thread
    python experiments/holmes_suite.py --models dstg rope  # a subset; --full for the whole train split

Writes figures/holmes/{results,scores,winning_rates,areas,phenomena,a_vs_b,skipped}.csv, config.json,
summary.json and tables.md (per-area winning rates, DSTG-vs-baseline phenomenon counts); --full writes
figures/holmes/full/. Last layer = the last
block's resid_post (not the MLM head's final norm); DSTG also per subspace (ap / sem / full).
"""

import argparse
import json
import time
from pathlib import Path

import torch

from probes.holmes import ProbeConfig, run_holmes
from probes.holmes.suite import build_suite, default_suite_dir

OUT = Path(__file__).resolve().parents[1] / "figures" / "holmes"


def _markdown(frame, digits=1) -> str:
    cells = [[f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def markdown_tables(areas, counts, summary) -> str:
    """Per-area mean winning rates and A-vs-B phenomenon counts (the paper reports 49/65 for DSTG)."""
    text = [f"Offline Holmes suite ({summary['n_datasets']} datasets, {'Flash 1/32' if summary['flash'] else 'full'} "
            "train split), last layer; winning rate x100 within the pool of full-subspace models.", "",
            _markdown(areas), ""]
    if len(counts):
        overall = counts[counts["area"] == "overall"][["a", "b", "wins", "ties", "losses", "n_phenomena"]]
        text += ["Phenomena on which A's mean score beats B's (paper, real Flash-Holmes: DSTG better on 49/65):", "",
                 _markdown(overall, 0), ""]
    return "\n".join(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["dstg", "rope", "ap", "rp"])
    parser.add_argument("--suite-dir", default=None)
    parser.add_argument("--full", action="store_true", help="whole train split instead of Flash (1/32)")
    parser.add_argument("--random-init", action="store_true", help="add the random-init encoder control")
    parser.add_argument("--out", default=None, help="default figures/holmes (Flash) or figures/holmes/full")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (2 oversubscribe a busy 2-core box)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    suite = Path(args.suite_dir) if args.suite_dir else default_suite_dir()
    if not (suite / "suite.json").exists():
        build_suite(suite)
    out = Path(args.out) if args.out else (OUT / "full" if args.full else OUT)
    started = time.perf_counter()
    config = ProbeConfig(flash_fraction=None if args.full else 1 / 32)
    results = run_holmes(args.models, suite, config=config, random_init_control=args.random_init, out_dir=out)
    import pandas as pd
    areas = pd.read_csv(out / "areas.csv")
    counts = pd.read_csv(out / "a_vs_b.csv") if (out / "a_vs_b.csv").exists() else pd.DataFrame()
    summary = {"suite": str(suite), "flash": not args.full, "wall_s": round(time.perf_counter() - started, 1),
               "n_datasets": int(results["dataset"].nunique()), "areas": areas.to_dict("records"),
               "a_vs_b_overall": counts[counts["area"] == "overall"].to_dict("records") if len(counts) else [],
               "skipped": results.attrs["skipped"]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "tables.md").write_text(markdown_tables(areas, counts, summary))
    print(areas.to_string(index=False))
    if len(counts):
        print(counts.to_string(index=False))


if __name__ == "__main__":
    main()
