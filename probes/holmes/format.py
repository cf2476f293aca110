"""The Holmes on-disk format: load, validate and write one probing dataset per folder.

A benchmark folder holds one folder per dataset::

    <benchmark>/<dataset>/samples.csv        inputs, context, topic, org_label, set-0, string_label, label, id
    <benchmark>/<dataset>/config-none.yaml   probe_task_type, num_inputs, num_labels, control_task_type, ...

    from probes.holmes import load_benchmark
    datasets, skipped = load_benchmark("~/.cache/dstg-interp/holmes-suite/v1")

Python-literal cells (`inputs`, `context`) are parsed with `ast.literal_eval`, never `eval`: a
benchmark folder is data a user hands us. Token targets are `(text, context_index, char_start,
char_end)`; SENTENCE_SPANS targets carry a fifth element, the span id. `num_labels: 1` = regression.

A problem inside a dataset (bad cell, label outside range, span outside its sentence, missing config,
empty split, unsupported task type) raises `HolmesFormatError` with one line naming the dataset, the
CSV row and the column; `load_benchmark` turns it into a `SkippedDataset` and carries on.
"""

from __future__ import annotations

from collections.abc import Iterable
import ast
import csv
import math
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

__all__ = ["TaskType", "Target", "HolmesRow", "HolmesConfig", "HolmesDataset", "HolmesFormatError",
           "SkippedDataset", "load_dataset", "load_benchmark", "write_dataset", "SPLITS"]

SPLITS = ("train", "dev", "test")
SAMPLE_COLUMNS = ["inputs", "context", "topic", "org_label", "set-0", "string_label", "label", "id"]


class TaskType(str, Enum):
    SENTENCE = "SENTENCE"
    SENTENCE_PAIR_BI = "SENTENCE_PAIR_BI"
    SENTENCE_PAIR_CROSS = "SENTENCE_PAIR_CROSS"
    SENTENCE_TOKENS = "SENTENCE_TOKENS"
    SENTENCE_SPANS = "SENTENCE_SPANS"
    SENTENCE_PAIR_TOKENS_BI = "SENTENCE_PAIR_TOKENS_BI"
    SENTENCE_PAIR_TOKENS_CROSS = "SENTENCE_PAIR_TOKENS_CROSS"

    @property
    def has_targets(self) -> bool:
        return self.name.startswith("SENTENCE_") and ("TOKENS" in self.name or "SPANS" in self.name)

    @property
    def n_contexts(self) -> int:
        return 2 if self.name.startswith("SENTENCE_PAIR_TOKENS") else 1


class HolmesFormatError(ValueError):
    """One line: dataset, row, column, what is wrong, what to do."""


@dataclass(frozen=True)
class Target:
    text: str
    context_index: int
    char_start: int
    char_end: int
    span_id: int = 0


@dataclass
class HolmesRow:
    id: str
    split: str
    label: float  # int class id for classification, float for regression
    sentences: tuple[str, ...] = ()  # sentence tasks: 1 or 2 sentences
    targets: tuple[Target, ...] = ()  # token tasks
    contexts: tuple[str, ...] = ()  # token tasks: 1 or 2 context sentences


@dataclass
class HolmesConfig:
    probe_task_type: TaskType
    num_inputs: int
    num_labels: int
    control_task_type: str = "NONE"
    probe_name: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1


@dataclass
class HolmesDataset:
    name: str
    config: HolmesConfig
    rows: list[HolmesRow]
    path: Path | None = None

    @property
    def task_type(self) -> TaskType:
        return self.config.probe_task_type

    @property
    def is_regression(self) -> bool:
        return self.config.is_regression

    def labels(self) -> np.ndarray:
        dtype = np.float64 if self.is_regression else np.int64
        return np.array([row.label for row in self.rows], dtype=dtype)

    def split_indices(self, split: str) -> np.ndarray:
        return np.array([i for i, row in enumerate(self.rows) if row.split == split], dtype=np.int64)

    def subset(self, indices: Iterable[int]) -> "HolmesDataset":
        return HolmesDataset(self.name, self.config, [self.rows[i] for i in indices], self.path)


@dataclass(frozen=True)
class SkippedDataset:
    dataset: str
    reason: str


# ----------------------------------------------------------------------------- config

# Sizes read from a config are bounded before anything is allocated from them: a probe has num_labels
# outputs per seed, so a typo such as 100000000000 would ask for terabytes.  Holmes's own datasets have at
# most a few dozen classes; 10,000 leaves room for any real task.
MAX_NUM_LABELS = 10_000
NUM_INPUTS = {TaskType.SENTENCE: (1,), TaskType.SENTENCE_PAIR_BI: (2,), TaskType.SENTENCE_PAIR_CROSS: (2,)}
# YAML 1.1 reads these words as booleans (`control_task_type: NO` is False); Holmes configs never mean
# a boolean by them, so they are refused instead of read as one.  Only `true` / `false` are booleans.
AMBIGUOUS_BOOLEANS = {"y", "yes", "n", "no", "on", "off"}


class StrictYamlLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice and the YAML 1.1 yes/no/on/off booleans."""


def _strict_mapping(loader: StrictYamlLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice (line {key_node.start_mark.line + 1}); keep one", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


def _strict_bool(loader: StrictYamlLoader, node: yaml.ScalarNode) -> bool:
    text = loader.construct_scalar(node)
    if text.lower() in AMBIGUOUS_BOOLEANS:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} (line {node.start_mark.line + 1}) is a boolean in YAML 1.1 but a word in YAML 1.2; "
            f"write true/false, or quote it ('{text}') to mean the word", node.start_mark)
    return text.lower() == "true"


StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)
StrictYamlLoader.add_constructor("tag:yaml.org,2002:bool", _strict_bool)


def _integer(raw: dict, key: str, default, low: int, high: int, where: str, what: str) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise HolmesFormatError(f"{where}, key {key!r} must be an integer from {low} to {high:,} {what}, got {value!r}")
    return value


def read_config(folder: Path, name: str, control: str = "none") -> HolmesConfig:
    path = folder / f"config-{control}.yaml"
    if not path.is_file():
        raise HolmesFormatError(f"holmes dataset {name!r}: missing {path.name} in {folder}; "
                                f"every dataset folder needs config-{control}.yaml")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=StrictYamlLoader) or {}
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise HolmesFormatError(f"holmes dataset {name!r}: {path.name} is not valid YAML ({problem})") from None
    except UnicodeDecodeError:
        raise HolmesFormatError(f"holmes dataset {name!r}: {path.name} is not UTF-8 text") from None
    if not isinstance(raw, dict):
        raise HolmesFormatError(f"holmes dataset {name!r}: {path.name} must be a mapping of keys to values")
    for key in ("probe_task_type", "num_labels"):
        if key not in raw:
            raise HolmesFormatError(f"holmes dataset {name!r}: {path.name} has no key {key!r}")
    where = f"holmes dataset {name!r}: {path.name}"
    try:
        task_type = TaskType(str(raw["probe_task_type"]).upper())
    except ValueError:
        raise HolmesFormatError(
            f"{where}, key 'probe_task_type': unsupported task type "
            f"{raw['probe_task_type']!r}; supported: {', '.join(t.value for t in TaskType)}") from None
    num_labels = _integer(raw, "num_labels", None, 1, MAX_NUM_LABELS, where, "(1 = regression)")
    expected_inputs = NUM_INPUTS.get(task_type, (1, 2))
    num_inputs = _integer(raw, "num_inputs", expected_inputs[0], 1, 2, where, "(sentences per row)")
    if num_inputs not in expected_inputs:
        raise HolmesFormatError(f"{where}, key 'num_inputs': {task_type.value} rows hold {expected_inputs[0]} "
                                f"sentence(s), got {num_inputs}; fix num_inputs or probe_task_type")
    for key in ("control_task_type", "probe_name"):
        if key in raw and not isinstance(raw[key], str):
            raise HolmesFormatError(f"{where}, key {key!r} must be a string, got {raw[key]!r}; quote it")
    known = {"probe_task_type", "num_inputs", "num_labels", "control_task_type", "probe_name"}
    return HolmesConfig(task_type, num_inputs, num_labels, raw.get("control_task_type", "NONE"),
                        raw.get("probe_name", f"probe-{name}"), {k: v for k, v in raw.items() if k not in known})


# ----------------------------------------------------------------------------- rows

def _literal(cell: str, where: str):
    try:
        return ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        shown = cell if len(cell) <= 40 else cell[:37] + "..."
        raise HolmesFormatError(f"{where}: cannot parse Python literal {shown!r}; "
                                "write a tuple/list literal such as ('a sentence',)") from None


def _parse_label(cell: str, config: HolmesConfig, where: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise HolmesFormatError(f"{where}: label {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise HolmesFormatError(f"{where}: label {cell!r} is not finite")
    if config.is_regression:
        return value
    if value != int(value) or not 0 <= value < config.num_labels:
        raise HolmesFormatError(f"{where}: label {cell!r} outside the class ids 0..{config.num_labels - 1} "
                                f"(num_labels: {config.num_labels}); fix the label or num_labels")
    return int(value)


def _parse_sentences(value, n_expected: int, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(isinstance(s, str) for s in value):
        raise HolmesFormatError(f"{where}: expected a tuple of {n_expected} sentence string(s)")
    if len(value) != n_expected:
        raise HolmesFormatError(f"{where}: expected {n_expected} sentence(s), got {len(value)}")
    if not all(s.strip() for s in value):
        raise HolmesFormatError(f"{where}: empty sentence")
    return tuple(value)


def _parse_targets(value, contexts: tuple[str, ...], task_type: TaskType, where: str) -> tuple[Target, ...]:
    if isinstance(value, tuple) and value and not isinstance(value[0], (tuple, list)):
        value = [value]  # one bare target
    if not isinstance(value, (tuple, list)) or not value:
        raise HolmesFormatError(f"{where}: expected a list of targets (text, context_index, start, end)")
    arity = 5 if task_type == TaskType.SENTENCE_SPANS else 4
    targets = []
    for k, item in enumerate(value):
        if not isinstance(item, (tuple, list)) or len(item) not in (4, 5) or (arity == 5 and len(item) != 5):
            raise HolmesFormatError(f"{where}: target {k} must be (text, context_index, char_start, char_end"
                                    + (", span_id)" if arity == 5 else ")"))
        text, ctx, start, end = item[:4]
        span = item[4] if len(item) == 5 else k
        if not (isinstance(ctx, int) and isinstance(start, int) and isinstance(end, int) and isinstance(span, int)):
            raise HolmesFormatError(f"{where}: target {k} needs integer context_index, char_start, char_end")
        if not 0 <= ctx < len(contexts):
            raise HolmesFormatError(f"{where}: target {k} points to context {ctx}, but the row has "
                                    f"{len(contexts)} context sentence(s)")
        if not 0 <= start < end <= len(contexts[ctx]):
            raise HolmesFormatError(f"{where}: target {k} span [{start}, {end}) is outside its sentence "
                                    f"(length {len(contexts[ctx])})")
        targets.append(Target(str(text), ctx, start, end, span))
    return tuple(targets)


def parse_row(record: dict, row_number: int, name: str, config: HolmesConfig) -> HolmesRow:
    task_type = config.probe_task_type
    base = f"holmes dataset {name!r}: samples.csv row {row_number} (id {record.get('id', '?')!s})"
    split = str(record.get("set-0", "")).strip()
    if split not in SPLITS:
        raise HolmesFormatError(f"{base}, column 'set-0': split {split!r} is not one of train/dev/test")
    label = _parse_label(str(record.get("label", "")).strip(), config, f"{base}, column 'label'")
    inputs = _literal(str(record.get("inputs", "")), f"{base}, column 'inputs'")
    row_id = str(record.get("id", row_number))
    if not task_type.has_targets:
        n = 2 if task_type in (TaskType.SENTENCE_PAIR_BI, TaskType.SENTENCE_PAIR_CROSS) else 1
        return HolmesRow(row_id, split, label, sentences=_parse_sentences(inputs, n, f"{base}, column 'inputs'"))
    contexts = _literal(str(record.get("context", "")), f"{base}, column 'context'")
    contexts = _parse_sentences(contexts, len(contexts) if isinstance(contexts, (list, tuple)) else 1,
                                f"{base}, column 'context'")
    if len(contexts) < task_type.n_contexts:
        raise HolmesFormatError(f"{base}, column 'context': {task_type.value} needs "
                                f"{task_type.n_contexts} context sentences, got {len(contexts)}")
    targets = _parse_targets(inputs, contexts, task_type, f"{base}, column 'inputs'")
    return HolmesRow(row_id, split, label, targets=targets, contexts=contexts)


# ----------------------------------------------------------------------------- datasets

def load_dataset(folder: str | Path, control: str = "none") -> HolmesDataset:
    """Load and validate one dataset folder; raise `HolmesFormatError` on the first problem."""
    folder = Path(folder)
    name = folder.name
    config = read_config(folder, name, control)
    samples = folder / "samples.csv"
    if not samples.is_file():
        raise HolmesFormatError(f"holmes dataset {name!r}: missing samples.csv in {folder}")
    try:
        frame = pd.read_csv(samples, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as error:
        raise HolmesFormatError(f"holmes dataset {name!r}: samples.csv is not a readable CSV "
                                f"({str(error).splitlines()[0]})") from None
    missing = [c for c in ("inputs", "set-0", "label") if c not in frame.columns]
    if missing:
        raise HolmesFormatError(f"holmes dataset {name!r}: samples.csv lacks column(s) {', '.join(missing)}")
    # Row numbers are 1-based data rows (the header is row 0), as a spreadsheet user counts them.
    rows = [parse_row(record, i + 1, name, config) for i, record in enumerate(frame.to_dict("records"))]
    dataset = HolmesDataset(name, config, rows, folder)
    for split in SPLITS:
        if not any(row.split == split for row in rows):
            raise HolmesFormatError(f"holmes dataset {name!r}: samples.csv, column 'set-0': split {split!r} "
                                    "is empty; every dataset needs train, dev and test rows")
    if not config.is_regression and len({row.label for row in rows if row.split == "train"}) < 2:
        raise HolmesFormatError(f"holmes dataset {name!r}: samples.csv, column 'label': the train split has "
                                "a single class; a probe needs at least two")
    return dataset


def load_benchmark(directory: str | Path, datasets: list[str] | None = None,
                   control: str = "none") -> tuple[list[HolmesDataset], list[SkippedDataset]]:
    """All dataset folders under `directory` (sorted), plus the ones skipped with their one-line reason."""
    directory = Path(directory).expanduser()
    if directory.exists() and not directory.is_dir():
        raise HolmesFormatError(f"holmes benchmark {directory} is a file; pass the folder that holds one "
                                "sub-folder per dataset")
    if not directory.is_dir():
        raise HolmesFormatError(f"holmes benchmark folder {directory} does not exist; "
                                "build one with `dstg-holmes build --out DIR`")
    folders, skipped = _dataset_folders(directory, datasets)
    loaded = []
    for folder in folders:
        try:
            loaded.append(load_dataset(folder, control))
        except HolmesFormatError as error:
            skipped.append(SkippedDataset(folder.name, str(error)))
    return loaded, skipped


def _dataset_folders(directory: Path, datasets: list[str] | None) -> tuple[list[Path], list[SkippedDataset]]:
    """The dataset folders of a benchmark (sorted), each real folder once: a symbolic link to a folder already
    listed, or one that leads to no folder (a loop, a dangling link), is skipped with its reason (round 4,
    HM2: a chain of 41 links probed one dataset under 41 names, and dropped the rest without a word)."""
    entries = [p for p in directory.iterdir() if not p.name.startswith(".")
               and (datasets is None or p.name in set(datasets))]
    folders, skipped, seen = [], [], {}
    for entry in sorted(entries, key=lambda p: (p.is_symlink(), p.name)):  # a real folder keeps its own name
        try:
            real = Path(os.path.realpath(entry, strict=True))
        except (OSError, RuntimeError) as error:
            if entry.is_symlink():
                reason = getattr(error, "strerror", None) or str(error)
                skipped.append(SkippedDataset(entry.name, f"holmes dataset {entry.name!r}: a symbolic link that leads "
                                                          f"to no folder ({reason}); remove it or point it at one"))
            continue
        if not real.is_dir():
            continue  # a plain file beside the datasets (a README)
        if real in seen:
            skipped.append(SkippedDataset(entry.name, f"holmes dataset {entry.name!r}: the same folder as "
                                                      f"{seen[real]!r} (through a symbolic link); probed once, "
                                                      f"as {seen[real]!r}"))
            continue
        seen[real] = entry.name
        folders.append(entry)
    return sorted(folders), sorted(skipped, key=lambda s: s.dataset)


# ----------------------------------------------------------------------------- writing

CONTROL_FILES = {"none": "NONE", "randomization": "RANDOMIZATION"}


def _row_record(row: HolmesRow, task_type: TaskType, string_label: str, org_label) -> dict:
    if task_type.has_targets:
        targets = [(t.text, t.context_index, t.char_start, t.char_end) +
                   ((t.span_id,) if task_type == TaskType.SENTENCE_SPANS else ()) for t in row.targets]
        inputs, context = repr(targets), repr(list(row.contexts))
    else:
        inputs, context = repr(tuple(row.sentences)), ""
    return {"inputs": inputs, "context": context, "topic": "", "org_label": org_label, "set-0": row.split,
            "string_label": string_label, "label": row.label, "id": row.id}


def write_dataset(folder: str | Path, task_type: TaskType, num_labels: int, rows: list[HolmesRow],
                  label_names: list[str] | None = None, num_inputs: int = 1) -> Path:
    """Write `samples.csv` and the config yamls atomically (temp name, then rename)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = folder.name
    samples_tmp = folder / ".samples.csv.tmp"
    with open(samples_tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=SAMPLE_COLUMNS)
        writer.writeheader()
        for row in rows:
            string_label = (label_names[int(row.label)] if label_names and num_labels > 1 else str(row.label))
            writer.writerow(_row_record(row, task_type, string_label, row.label))
    os.replace(samples_tmp, folder / "samples.csv")
    for control, control_type in CONTROL_FILES.items():
        config = {"control_task_type": control_type, "num_inputs": num_inputs, "num_labels": num_labels,
                  "num_probe_folds": 1, "probe_name": f"probe-{name}", "probe_task_type": task_type.value,
                  "probes_samples_path": "samples.csv"}
        tmp = folder / f".config-{control}.yaml.tmp"
        tmp.write_text(yaml.safe_dump(config, sort_keys=True), encoding="utf-8")
        os.replace(tmp, folder / f"config-{control}.yaml")
    return folder
