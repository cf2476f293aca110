"""Figure: the Holmes study -- winning rate per area, phenomena won / tied / lost against each baseline, and
every score -- drawn from the tables the Holmes run aggregated (``probes.holmes.aggregate``).

    python -m experiments.fig_holmes                                  # dstg-results/figures/holmes/ and .../full/
    python -m experiments.fig_holmes --results figures/holmes figures/holmes/full   # the committed gallery
    python -m experiments.fig_holmes --results /tmp/holmes            # any folder holmes_suite / dstg-holmes wrote
    python -m experiments.fig_holmes --results /tmp/holmes --out /tmp/figs   # the figures into /tmp/figs

Reads, in each results folder, winning_rates.csv, a_vs_b.csv and scores.csv (and seed_test_counts.csv when
the pool has several training seeds per variant), and writes beside them holmes_areas, holmes_a_vs_b,
holmes_scores (and holmes_seed_test) as PNG + PDF + JSON and figure_config.json (the folder's
config.json belongs to the Holmes run); with --out they go there instead (a subfolder per results folder
when there are several).  A folder without those tables is reported and left alone:
``run_all --tiny`` has no Holmes run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from dstg_interp.plots import plot_holmes_areas, plot_holmes_counts, plot_holmes_scores
from experiments.figure_inputs import OUTPUT_DIR, ScriptConfig, figure_config, save_config

TABLES = ("winning_rates.csv", "a_vs_b.csv", "scores.csv")


@dataclass
class HolmesFigureConfig(ScriptConfig):
    out: Path | None = field(default=None, metadata={
        "help": "where the figures go (several --results: a subfolder per results folder, named after it)",
        "shown": "each results folder"})
    # holmes_suite's default outputs; the committed ones are figures/holmes and figures/holmes/full
    results: list[Path] = field(default_factory=lambda: [OUTPUT_DIR / "holmes", OUTPUT_DIR / "holmes" / "full"],
                                metadata={"help": "Holmes results folders; each gets its figures"})

    def __post_init__(self) -> None:
        out, self.out = self.out, OUTPUT_DIR  # ScriptConfig's checks read a path
        super().__post_init__()
        self.out = None if out is None else Path(out)
        self.results = [Path(folder) for folder in self.results]

    def figures_folder(self, results: Path) -> Path:
        """Where the figures of ``results`` go: beside it without --out; --out itself for one results folder
        (or the one that is --out); else --out/<its name>."""
        if self.out is None:
            return results
        if len(self.results) == 1 or results.resolve() == self.out.resolve():
            return self.out
        return self.out / results.name


def draw(folder: Path, target: Path | None = None) -> dict:
    """The three Holmes figures of one results folder, written into ``target`` (default: the folder itself);
    {} when its tables are missing."""
    missing = [name for name in TABLES if not (folder / name).is_file()]
    if missing:
        return {}
    target = folder if target is None else target
    counts = pd.read_csv(folder / "a_vs_b.csv")
    drawn = {
        "areas": plot_holmes_areas(pd.read_csv(folder / "winning_rates.csv"), target, stem="holmes_areas"),
        # no pair to count on datasets outside the Holmes catalogue (no phenomena): no A-vs-B figure
        **({"a_vs_b": plot_holmes_counts(counts, target, stem="holmes_a_vs_b",
                                         title="Holmes, training seed 0: phenomena won / tied / lost (any difference)")}
           if len(counts) else {}),
        "scores": plot_holmes_scores(pd.read_csv(folder / "scores.csv"), target, stem="holmes_scores"),
    }
    if (folder / "seed_test_counts.csv").is_file():
        counts = pd.read_csv(folder / "seed_test_counts.csv")
        row = counts.iloc[0]
        drawn["seed_test"] = plot_holmes_counts(
            counts, target, stem="holmes_seed_test",
            title=f"Holmes over {int(row.seeds_a)} training seeds: won / tied / lost "
                  f"(Welch {row.level:.0%} interval, margin {row.margin:g})")
    return drawn


def run(config: HolmesFigureConfig) -> str:
    """Draw every results folder; returns run_all's status line (``ok``, or what was skipped)."""
    drawn = []
    for folder in config.results:
        target = config.figures_folder(folder)
        if draw(folder, target):
            save_config(replace(config, out=target), "experiments/fig_holmes.py", "figure_config.json")
            drawn.append(folder)
        print(f"[fig_holmes] {folder}: {f'drawn into {target}' if folder in drawn else 'skipped: no ' + ' / '.join(TABLES)}")
    return "ok" if drawn else "skipped: no Holmes results to draw"


def main(argv=None) -> str:
    return run(figure_config(HolmesFigureConfig, argv, __doc__))


if __name__ == "__main__":
    main()
