"""Offline Holmes suite on the four zoo models: build it (cache dir), probe it (Flash protocol), draw it.

    python -m experiments.holmes_suite                     # the 12 zoo members (4 variants x 3 seeds), Flash cut
    python -m experiments.holmes_suite --models dstg rope  # a subset; --full for the whole train split
    python -m experiments.holmes_suite --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM   # your models
    python -m experiments.holmes_suite --datasets offline-pos offline-tense --out /tmp/h1   # a part of the run ...
    python -m experiments.holmes_suite --combine /tmp/h1 /tmp/h2 ...                        # ... the parts merged

Writes figures/holmes/{results,scores,winning_rates,areas,phenomena,a_vs_b,skipped}.csv (the aggregation of
``probes.holmes.aggregate``), config.json, summary.json, tables.md (per-area winning rates, DSTG-vs-baseline
phenomenon counts) and the figures of ``experiments.fig_holmes``; --full writes figures/holmes/full/.
Protocol: ``--protocol reference`` (default; holmes-evaluation's: raw features, its loss, the last layer read
as hidden_states[-1], the final-normed state of our pre-norm models) or ``standardised``; every table says
which.  DSTG also per subspace (ap / sem / full).  With several training seeds per variant (the default
pool), seed_test.csv / seed_test_counts.csv hold the test over seeds (``probes.holmes.significance``).
``--model`` probes any models instead of zoo members (what ``dstg-probe --model`` takes: checkpoint and run
folders, the authors' formats, Hugging Face folders and hub ids), named by ``--name``; the tables and figures
carry those names.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from dstg_interp.config import tokenizer_mismatch_field
from dstg_interp.model.checkpoint import ZOO_NAMES
from dstg_interp.model.files import tokenizer_mismatch_allowed
from experiments import fig_holmes
from experiments.figure_inputs import OUTPUT_DIR, ScriptConfig, model_names, figure_config, run_as_command, save_config
from probes.holmes import HolmesProbeConfig, run_holmes
from probes.holmes.protocol import PROTOCOLS
from probes.holmes.run import HolmesRunConfig, write_tables

from probes.holmes.suite import build_suite, default_suite_dir

# The reference four at three seeds: the test over training seeds needs >= 2 seeds per variant, and the NoPE floor
# has one so far (its Holmes scores: --models nope once trained, as any member).
ZOO_MEMBERS = tuple(f"{variant}{suffix}" for variant in ZOO_NAMES for suffix in ("", "-seed1", "-seed2"))


@dataclass
class HolmesSuiteConfig(ScriptConfig):
    out: Path | None = field(default=None, metadata={"help": "default dstg-results/figures/holmes (Flash) or .../holmes/full; the committed ones: --out figures/holmes[/full]"})
    models: list[str] = field(default_factory=lambda: list(ZOO_MEMBERS), metadata={"help": "zoo members"})
    model: list[str] | None = field(default=None, metadata={
        "help": "probe these models instead of zoo members: checkpoint or dstg-train run folders, the authors' "
                "PosNeoBERT/NeoBERT folders, Hugging Face folders or hub ids (what dstg-probe --model takes)"})
    name: list[str] | None = field(default=None, metadata={
        "help": "how tables and figures name each --model, in order (default: the zoo name, hub id, model-card "
                "title or folder name)"})
    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    protocol: str = field(default="reference", metadata={"help": "reference or standardised (probes.holmes.protocol)"})
    datasets: list[str] | None = field(default=None, metadata={"help": "only these suite datasets (a part of the run)"})
    combine: list[Path] | None = field(default=None, metadata={
        "help": "no probing: merge the results of these earlier runs (parts of one run, e.g. --datasets chunks) into "
                "--out and write its tables and figures"})
    suite_dir: Path | None = field(default=None, metadata={"help": "where the suite is built (default: the cache)"})
    full: bool = field(default=False, metadata={"help": "whole train split instead of Flash (1/32)"})
    random_init: bool = field(default=False, metadata={"help": "add the random-init encoder control"})
    threads: int = field(default=1, metadata={"help": "torch threads (2 oversubscribe a busy 2-core box)"})

    def __post_init__(self) -> None:
        if self.out is None:
            self.out = OUTPUT_DIR / "holmes" / ("full" if self.full else "")
        super().__post_init__()
        self.suite_dir = Path(self.suite_dir) if self.suite_dir is not None else default_suite_dir()
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; choose {' or '.join(PROTOCOLS)}")
        if self.model is not None:
            self.model = [str(spec) for spec in self.model]
        model_names(self.model, self.name)  # a --name list that does not fit is refused before any work

    def pool(self) -> list | dict:
        """What run_holmes probes: the zoo members, or {name: spec} of --model."""
        return self.models if self.model is None else dict(zip(model_names(self.model, self.name), self.model))


def _markdown(frame, digits=1) -> str:
    cells = [[f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def markdown_tables(areas, counts, summary, seed_counts=None) -> str:
    """Per-area mean winning rates, A-vs-B phenomenon counts (the paper reports 49/65 for DSTG) and, with
    several training seeds, the counts of the test over seeds."""
    text = [f"Offline Holmes suite ({summary['n_datasets']} datasets, {'Flash 1/32' if summary['flash'] else 'full'} "
            f"train split), last layer, protocol {summary['protocol']}; winning rate x100 within the pool of "
            "full-subspace models (chance: 50).", "", _markdown(areas), ""]
    if len(counts):
        overall = counts[counts["area"] == "overall"][["a", "b", "wins", "ties", "losses", "n_phenomena"]]
        text += ["Phenomena on which A's mean score beats B's, training seed 0, any difference (the paper's statistic; "
                 "real Flash-Holmes: DSTG better on 49/65):", "", _markdown(overall, 0), ""]
    if seed_counts is not None and len(seed_counts):
        overall = seed_counts[seed_counts["area"] == "overall"]
        row = overall.iloc[0]
        text += [f"The same over {int(row.seeds_a)} training seeds per variant: a win is a difference of seed means "
                 f"above {row.margin:g} whose Welch {row.level:.0%} interval excludes 0 (probes.holmes.significance):",
                 "", _markdown(overall[["a", "b", "wins", "ties", "losses", "n_phenomena"]], 0), ""]
    return "\n".join(text)


def run(config: HolmesSuiteConfig) -> dict:
    torch.set_num_threads(config.threads)
    if not (config.suite_dir / "suite.json").exists():
        build_suite(config.suite_dir)
    started = time.perf_counter()
    if config.combine:  # the rows the parts wrote, aggregated as one run
        folders = [Path(folder) for folder in config.combine]
        results = pd.concat([pd.read_csv(folder / "results.csv") for folder in folders], ignore_index=True)
        skipped = [pd.read_csv(folder / "skipped.csv") for folder in folders if (folder / "skipped.csv").is_file()]
        results.attrs["skipped"] = pd.concat(skipped).to_dict("records") if skipped else []
        run_config = HolmesRunConfig.from_json(folders[0] / "config.json")
        run_config.datasets = sorted(set(results["dataset"])) if config.datasets is None else config.datasets
        config.out.mkdir(parents=True, exist_ok=True)
        write_tables(results, config.out, run_config)
    else:
        probe = HolmesProbeConfig(flash_fraction=None if config.full else 1 / 32, protocol=config.protocol)
        with tokenizer_mismatch_allowed(config.allow_tokenizer_mismatch):
            results = run_holmes(config.pool(), config.suite_dir, config=probe, random_init_control=config.random_init,
                                 datasets=config.datasets, out_dir=config.out)
    areas = pd.read_csv(config.out / "areas.csv")
    counts = pd.read_csv(config.out / "a_vs_b.csv") if (config.out / "a_vs_b.csv").exists() else pd.DataFrame()
    seed_counts = pd.read_csv(config.out / "seed_test_counts.csv") if (config.out / "seed_test_counts.csv").exists() \
        else None
    protocol = str(results["protocol"].iloc[0]) if "protocol" in results and len(results) else config.protocol
    summary = {"suite": str(config.suite_dir), "flash": not config.full, "protocol": protocol,
               "wall_s": round(time.perf_counter() - started, 1),
               "n_datasets": int(results["dataset"].nunique()), "areas": areas.to_dict("records"),
               "a_vs_b_overall": counts[counts["area"] == "overall"].to_dict("records") if len(counts) else [],
               "seed_test_overall": seed_counts[seed_counts["area"] == "overall"].to_dict("records")
               if seed_counts is not None else [],
               "skipped": results.attrs["skipped"]}
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2))
    (config.out / "tables.md").write_text(markdown_tables(areas, counts, summary, seed_counts))
    save_config(config, "experiments/holmes_suite.py", "suite_config.json", wall_s=summary["wall_s"])
    fig_holmes.draw(config.out)
    print(areas.to_string(index=False))
    if len(counts):
        print(counts.to_string(index=False))
    return summary


def main(argv=None) -> dict:
    return run(figure_config(HolmesSuiteConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "holmes_suite"))
