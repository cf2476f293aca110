"""Regenerate the whole gallery in figures/: the zoo's held-out table, AP manifold, heads, probes, Holmes, the two studies
beyond the paper (length extrapolation, position-free semantic states), the claims table, then REPORT.md's tables.

    python -m experiments.run_all                   # the shipped zoo (figures/timing.json: each step's time)
    python -m experiments.run_all --tiny --out /tmp/gallery   # tiny random models, no Holmes, seconds
    python -m experiments.run_all --skip holmes     # reuse figures/holmes/ as it is (its figures are redrawn)
    python -m experiments.run_all --model-seeds 0   # one training seed of the zoo (default: 0 1 2)

Run it from the repository root (``experiments`` is a package there).  The figure scripts run in this
process, in order, each with its config built here from run_all's, on the same models and documents, so
each model's activation store is extracted once (by the first script that needs it) and read by the
others.  The AP-manifold, heads and probe figures read every training seed of the zoo (``--model-seeds``),
so the claims table reports a mean and a seed interval; Holmes, extrapolation and invariance read seed 0.
Stores already in the cache folder from an earlier run -- or from ``dstg-probe``, which builds the
same ones -- are reused as they are.  The Holmes suite runs as its own script
(``experiments/holmes_suite.py``) in a subprocess with one torch thread; ``holmes_figure`` then draws
whatever Holmes results the gallery holds.  The claims table comes after them, from the numbers the
others wrote; ``report`` rebuilds the tables of figures/REPORT.md from the gallery's CSV/JSON.  A timing
table is printed and written to ``timing.json`` next to the figures, with run_all's config in ``run_all.json``.
"""

from __future__ import annotations

if not __package__:  # started as a file (python experiments/run_all.py): the package imports below need -m
    raise SystemExit("run it from the repository root as a module: python -m experiments.run_all")

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from dstg_interp.model.checkpoint import ZOO_DIR
from experiments import claims, report, zoo_heldout
from experiments.figure_inputs import OUTPUT_DIR, SeedsFigureConfig, figure_config, run_as_command, save_config
from experiments.figures import FIGURES
from experiments.holmes_suite import ZOO_MEMBERS

# the gallery's figures are the registry's rows with a gallery step (experiments/figures.py), between the zoo's
# held-out table and the two steps that read what the figures wrote: the claims table and REPORT.md's tables
GALLERY_FIGURES = {row.gallery: name for name, row in FIGURES.items() if row.gallery}
STEPS = ("zoo", *GALLERY_FIGURES, "claims", "report")
REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass
class RunAllConfig(SeedsFigureConfig):
    out: Path = OUTPUT_DIR  # the committed gallery: --out figures
    skip: list[str] = field(default_factory=list, metadata={"help": f"steps to leave out, of {', '.join(STEPS)}"})
    n_docs: int | None = field(default=None, metadata={"help": "a seeded sample of the held-out documents for "
                                                                "stores and probes (default: all, as dstg-probe)"})
    threads: int = field(default=2, metadata={"help": "torch threads"})
    # the zoo's gallery (claims, report): your own models go to each figure script's --model
    FLAGS_LEFT_OUT: ClassVar[tuple[str, ...]] = ("model", "name", "allow_tokenizer_mismatch")

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = sorted(set(self.skip) - set(STEPS))
        if unknown:
            raise ValueError(f"unknown step(s) {unknown}; choose from {', '.join(STEPS)}")


def run_holmes_suite(out: Path, zoo: Path = ZOO_DIR) -> str:
    """The Holmes suite script on its Flash split, into ``out``/holmes (``holmes_suite --full``, the whole
    train split the README reports, is a separate 5-minute run into holmes/full), on the members of ``zoo``
    (another zoo than the shipped one: its member folders, under their member names)."""
    command = [sys.executable, "-m", "experiments.holmes_suite", "--out", str(out / "holmes")]
    if Path(zoo).resolve() != ZOO_DIR.resolve():
        command += ["--model", *[str(Path(zoo) / member) for member in ZOO_MEMBERS], "--name", *ZOO_MEMBERS]
    result = subprocess.run(command, cwd=REPOSITORY)
    return "ok" if result.returncode == 0 else f"failed with exit code {result.returncode}"


def figure_step(step: str, config: RunAllConfig, **given):
    """Gallery step ``step`` as a call of its registered script's ``run`` on the script's own config, built from
    run_all's fields the config has (a field run_all leaves unset keeps the script's default) into
    <out>/<step>; ``given`` overrides."""
    module = importlib.import_module(FIGURES[GALLERY_FIGURES[step]].module)
    config_class = typing.get_type_hints(module.run)["config"]
    fields = {spec.name for spec in dataclasses.fields(config_class)}
    shared = dict(tiny=config.tiny, seed=config.seed, store_root=config.store_root, quiet=config.quiet, zoo=config.zoo,
                  model_seeds=config.model_seeds, n_docs=config.n_docs)
    values = {key: value for key, value in shared.items() if key in fields and value is not None}
    return lambda: module.run(config_class(**{"out": config.out / step, **values, **given}))


def steps(config: RunAllConfig) -> dict:
    """Each step as a call of its script on its own config, built from run_all's: the registry's gallery figures
    (``figure_step``; the Holmes suite runs as its own process, its figures drawn from both of its results
    folders, and a tiny run extrapolates to twice the length only), then the claims and the report."""
    out = config.out
    special = {
        "holmes": lambda: run_holmes_suite(out, config.zoo),
        "holmes_figure": figure_step("holmes_figure", config, out=out / "holmes",
                                     results=[out / "holmes", out / "holmes" / "full"]),
        "extrapolation": figure_step("extrapolation", config, **({"factors": [2.0]} if config.tiny else {})),
    }
    figures = {step: special.get(step) or figure_step(step, config) for step in GALLERY_FIGURES}
    return {
        "zoo": lambda: zoo_heldout.run(zoo_heldout.ZooHeldoutConfig(
            out=out / "zoo", tiny=config.tiny, seed=config.seed, store_root=config.store_root, quiet=config.quiet,
            zoo=config.zoo, model_seeds=config.model_seeds)),
        **figures,
        "claims": lambda: claims.main(["--figures", str(out)] + (["--quiet"] if config.quiet else [])),
        "report": lambda: report.run(report.ReportConfig(figures=out)),
    }


def run(config: RunAllConfig) -> list[dict]:
    torch.set_num_threads(config.threads)
    skipped = set(config.skip) | ({"holmes"} if config.tiny else set())  # Holmes needs the real zoo and its suite
    timing = []
    for name, step in steps(config).items():
        if name in skipped:
            timing.append({"step": name, "seconds": 0.0, "status": "skipped"})
            continue
        started = time.perf_counter()
        result = step()
        status = result if isinstance(result, str) else "ok"
        timing.append({"step": name, "seconds": round(time.perf_counter() - started, 1), "status": status})
        print(f"[run_all] {name}: {timing[-1]['seconds']:.0f} s ({status})", flush=True)
    total = round(sum(t["seconds"] for t in timing), 1)
    record = {"steps": timing, "total_seconds": total, "cpu_count": os.cpu_count(), "threads": config.threads,
              "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    (config.out / "timing.json").write_text(json.dumps(record, indent=1) + "\n")
    save_config(config, "experiments/run_all.py", "run_all.json")
    print(f"\n{'step':<14} {'seconds':>8}  status")
    for t in timing:
        print(f"{t['step']:<14} {t['seconds']:>8.1f}  {t['status']}")
    print(f"{'total':<14} {total:>8.1f}")
    return timing


def main(argv=None) -> list[dict]:
    return run(figure_config(RunAllConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "run_all"))
