"""Offline Holmes suite on the four zoo models: build it (cache dir), probe it (Flash protocol), draw it.

    python -m experiments.holmes_suite                     # the offline suite, Flash protocol
    python -m experiments.holmes_suite --models dstg rope  # a subset; --full for the whole train split

Writes figures/holmes/{results,scores,winning_rates,areas,phenomena,a_vs_b,skipped}.csv (the aggregation of
``probes.holmes.aggregate``), config.json, summary.json, tables.md (per-area winning rates, DSTG-vs-baseline
phenomenon counts) and the figures of ``experiments.fig_holmes``; --full writes figures/holmes/full/.
Last layer = the last block's resid_post (not the MLM head's final norm); DSTG also per subspace (ap / sem / full).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from experiments import fig_holmes
from experiments.figure_inputs import FIGURES_DIR, ScriptConfig, parse_config, save_config
from probes.holmes import ProbeConfig, run_holmes
from probes.holmes.suite import build_suite, default_suite_dir


@dataclass
class HolmesSuiteConfig(ScriptConfig):
    out: Path | None = field(default=None, metadata={"help": "default figures/holmes (Flash) or figures/holmes/full"})
    models: list[str] = field(default_factory=lambda: ["dstg", "rope", "ap", "rp"], metadata={"help": "zoo models"})
    suite_dir: Path | None = field(default=None, metadata={"help": "where the suite is built (default: the cache)"})
    full: bool = field(default=False, metadata={"help": "whole train split instead of Flash (1/32)"})
    random_init: bool = field(default=False, metadata={"help": "add the random-init encoder control"})
    threads: int = field(default=1, metadata={"help": "torch threads (2 oversubscribe a busy 2-core box)"})

    def __post_init__(self) -> None:
        if self.out is None:
            self.out = FIGURES_DIR / "holmes" / ("full" if self.full else "")
        super().__post_init__()
        self.suite_dir = Path(self.suite_dir) if self.suite_dir is not None else default_suite_dir()
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")


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


def run(config: HolmesSuiteConfig) -> dict:
    torch.set_num_threads(config.threads)
    if not (config.suite_dir / "suite.json").exists():
        build_suite(config.suite_dir)
    started = time.perf_counter()
    probe = ProbeConfig(flash_fraction=None if config.full else 1 / 32)
    results = run_holmes(config.models, config.suite_dir, config=probe, random_init_control=config.random_init,
                         out_dir=config.out)
    areas = pd.read_csv(config.out / "areas.csv")
    counts = pd.read_csv(config.out / "a_vs_b.csv") if (config.out / "a_vs_b.csv").exists() else pd.DataFrame()
    summary = {"suite": str(config.suite_dir), "flash": not config.full, "wall_s": round(time.perf_counter() - started, 1),
               "n_datasets": int(results["dataset"].nunique()), "areas": areas.to_dict("records"),
               "a_vs_b_overall": counts[counts["area"] == "overall"].to_dict("records") if len(counts) else [],
               "skipped": results.attrs["skipped"]}
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2))
    (config.out / "tables.md").write_text(markdown_tables(areas, counts, summary))
    save_config(config, "experiments/holmes_suite.py", name="suite_config.json", wall_s=summary["wall_s"])
    fig_holmes.draw(config.out)
    print(areas.to_string(index=False))
    if len(counts):
        print(counts.to_string(index=False))
    return summary


def main(argv=None) -> dict:
    return run(parse_config(HolmesSuiteConfig, argv, __doc__))


if __name__ == "__main__":
    main()
