"""The offline Holmes suite's builder: every dataset of the catalogue (``suite.catalog.SUITE``) written in the
Holmes format into one folder, with a card each and ``suite.json`` last.

    from probes.holmes.suite.build import build_suite
    build_suite("~/.cache/dstg-interp/holmes-suite/v1", seed=0, n_per_dataset=1200)

Deterministic: the same seed and pinned sources give byte-identical files.  The suite is built in a
temporary sibling folder and renamed into place, so an interrupted build leaves nothing that looks like one.
"""

from __future__ import annotations

from collections.abc import Sequence
import json
from pathlib import Path

import numpy as np

from dstg_interp.data import default_cache_dir
from dstg_interp.io import check_output_location, check_replaceable, foreign_entries, written_atomically

from probes.holmes.format import HolmesRow, Target, TaskType, write_dataset
from probes.holmes.suite.catalog import SOURCE_CARDS, SUITE, SUITE_VERSION
from probes.holmes.suite.sources import load_brown, load_paragraphs, load_wordnet

__all__ = ["SUITE_FILE", "build_suite", "default_suite_dir", "is_complete_suite", "suite_foreign_entries"]


def default_suite_dir() -> Path:
    return default_cache_dir() / "holmes-suite" / SUITE_VERSION


def _to_rows(groups, task_type: TaskType, rng) -> list[HolmesRow]:
    """70/10/20 train/dev/test by group (minimal pairs stay together), ids in build order."""
    order = rng.permutation(len(groups))
    n_train, n_dev = int(0.7 * len(groups)), int(0.1 * len(groups))
    split_of = {g: ("train" if k < n_train else "dev" if k < n_train + n_dev else "test") for k, g in enumerate(order)}
    rows = []
    for g, group in enumerate(groups):
        for item in group:
            if task_type.has_targets:
                targets, contexts, label = item
                rows.append(HolmesRow(str(len(rows)), split_of[g], label,
                                      targets=tuple(Target(*t) for t in targets), contexts=tuple(contexts)))
            else:
                sentences, label = item
                rows.append(HolmesRow(str(len(rows)), split_of[g], label, sentences=tuple(sentences)))
    return rows


SUITE_FILE = "suite.json"  # written last: the suite is complete exactly when it is there


def is_complete_suite(folder: str | Path) -> bool:
    """True when ``folder`` holds a whole suite (its suite.json), not the remains of an interrupted build."""
    try:
        record = json.loads((Path(folder) / SUITE_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or not isinstance(record.get("datasets"), list):
        return False
    return all(isinstance(card, dict) and (Path(folder) / str(card.get("dataset"))).is_dir() for card in record["datasets"])


def suite_foreign_entries(folder: Path) -> list[str]:
    """Entries that a suite build does not write (a suite holds its datasets and suite.json only)."""
    return foreign_entries(folder, {d.name for d in SUITE} | {SUITE_FILE})


def build_suite(out_dir: str | Path | None = None, seed: int = 0, n_per_dataset: int = 1200,
                names: Sequence[str] | None = None, cache_dir: Path | None = None,
                overwrite: bool = False) -> list[str]:
    """Write every suite dataset (or `names`) into `out_dir`; returns the dataset names written.

    The suite is built in a temporary sibling folder and renamed into place with its suite.json, so an
    interrupted build leaves nothing that looks like a suite. An existing suite is replaced only with
    `overwrite`; a folder holding anything else never."""
    if int(n_per_dataset) <= 0:
        raise ValueError(f"n_per_dataset must be a positive number of rows, got {n_per_dataset}")
    out = Path(out_dir) if out_dir else default_suite_dir()
    check_output_location(out)
    # The remains of an interrupted build hold nothing of value: they are replaced without being asked.
    check_replaceable(out, "a Holmes suite", suite_foreign_entries, overwrite or not is_complete_suite(out))
    chosen = [d for d in SUITE if names is None or d.name in names]
    if not chosen:
        raise ValueError(f"none of {sorted(names)} is a suite dataset; choose from {[d.name for d in SUITE]}")
    sources = {}
    needs = {d.source for d in chosen}
    if "brown" in needs:
        sources["brown"] = load_brown(cache_dir)
    if "enmix" in needs:
        sources["enmix"] = load_paragraphs(cache_dir)
    if "wordnet" in needs:
        sources["wordnet"] = load_wordnet(cache_dir)
    with written_atomically(out, suite_foreign_entries, "Holmes suite") as tmp:
        cards = _build_into(tmp, chosen, sources, seed, n_per_dataset)
        (tmp / SUITE_FILE).write_text(json.dumps({"version": SUITE_VERSION, "seed": seed, "n_per_dataset": n_per_dataset,
                                                  "datasets": cards}, indent=2))
    return [c["dataset"] for c in cards]


def _build_into(out: Path, chosen, sources, seed: int, n_per_dataset: int) -> list[dict]:
    cards = []
    for index, spec in enumerate(chosen):
        rng = np.random.default_rng([seed, index])  # one stream per dataset: adding one changes no other
        args = (rng, n_per_dataset) if spec.source == "template" else (sources[spec.source], rng, n_per_dataset)
        built = spec.build(*args)
        groups, names_out = built if isinstance(built, tuple) else (built, list(spec.label_names))
        label_names = list(names_out)
        rows = _to_rows(groups, spec.task_type, rng)
        num_labels = 1 if spec.regression else len(label_names)
        num_inputs = 2 if spec.task_type in (TaskType.SENTENCE_PAIR_BI, TaskType.SENTENCE_PAIR_CROSS) else 1
        write_dataset(out / spec.name, spec.task_type, num_labels, rows, None if spec.regression else label_names,
                      num_inputs=num_inputs)
        card = {"dataset": spec.name, "area": spec.area, "phenomenon": spec.phenomenon,
                "holmes_counterpart": spec.counterpart, "task_type": spec.task_type.value,
                "num_labels": num_labels, "label_names": [] if spec.regression else label_names,
                "rows": len(rows), "splits": {s: sum(r.split == s for r in rows) for s in ("train", "dev", "test")},
                "source": SOURCE_CARDS[spec.source], "labels": spec.labels}
        (out / spec.name / "README.md").write_text(_card_markdown(card))
        cards.append(card)
    return cards


def _card_markdown(card: dict) -> str:
    lines = [f"# {card['dataset']}", "", "Offline re-creation for the Holmes protocol; not Holmes data.", ""]
    for key in ("area", "phenomenon", "holmes_counterpart", "task_type", "num_labels", "label_names", "rows",
                "splits", "source", "labels"):
        lines.append(f"- **{key}**: {card[key]}")
    return "\n".join(lines) + "\n"
