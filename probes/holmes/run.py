"""Run a Holmes-format benchmark folder on a pool of models and write tidy results.

    dstg-holmes build --out ~/.cache/dstg-interp/holmes-suite/v1                # offline suite
    dstg-probe --task holmes --benchmark DIR --model dstg rope ap rp --out results/holmes
    dstg-holmes run --benchmark DIR --model dstg rope ap rp --out results/holmes  # the same run (an alias)

    from probes.holmes import run_holmes
    results = run_holmes({"dstg": dstg, "rope": rope}, "DIR", layers="last")   # tidy DataFrame
    results.attrs["skipped"]                                                   # dataset, model, reason

Features are computed once per (model, dataset) for every requested layer and subspace, on the rows
the protocol uses (the train split as the folder has it, or ``--flash-fraction`` of it, + all of dev and
test), then every probe (seeds x controls) trains on them in one batched run (see protocol.py).

A ``--benchmark`` folder is never subsampled unless ``--flash-fraction`` says so: FlashHolmes downloads
ship train splits already cut to 1/32.  The offline suite (no ``--benchmark``) has full train splits and
is cut to 1/32 by default, as FlashHolmes is (``--full``: the whole split).  ``--protocol reference``
(the default) reproduces holmes-evaluation (raw features, softmax-then-cross-entropy, layer = its
``hidden_states[-1]``); ``--protocol standardised`` is our variant (protocol.py).  Every table carries a
``protocol`` column.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from dstg_interp.progress import progress_bar

from dstg_interp.config import RANDOM_INIT_SEED_SHIFT, ConfigIO
from dstg_interp.encoders import Encoder, open_encoder
from dstg_interp.encoders.selection import LayerSelection, check_device
from dstg_interp.io import OutputError, check_output_location, created_folder, output_lock, write_text_atomic
from probes.holmes.aggregate import a_vs_b, area_table, dataset_scores, phenomenon_table, winning_rates
from probes.holmes.encode import HOLMES_LAYERS, UnpoolableRow, encode_dataset
from probes.holmes.format import HolmesFormatError, load_benchmark
from probes.holmes.protocol import HolmesProbeConfig, evaluate_features, flash_subsample
from probes.holmes.registry import DATASETS
from probes.positions import SmallSampleWarning
from probes.holmes.significance import seed_test, seed_test_counts, variant_of
from probes.holmes.suite import build_suite, default_suite_dir, is_complete_suite  # (also registers its areas)
from dstg_interp.encoders.naming import model_label, table_names

__all__ = ["run_holmes", "HolmesRunConfig", "run_config", "write_tables"]


@dataclass
class HolmesRunConfig(ConfigIO):
    """What a run does (``run_config``) or did; saved as config.json next to its tables.

    benchmark_dir: a Holmes-format folder; None = the offline suite (built into the cache on first use).
    layers: a LayerSelection (the grammar of ``dstg_interp.encoders.selection``); None = ``HOLMES_LAYERS`` ("last").
    """

    benchmark_dir: str | None
    models: list[str]
    layers: LayerSelection = HOLMES_LAYERS
    subspaces: list[str] | None = None
    random_init_control: bool = False
    datasets: list[str] | None = None
    probe: HolmesProbeConfig = field(default_factory=HolmesProbeConfig)
    device: str = "cpu"
    names: list[str] | None = None  # how the tables name each model, in order (None: the naming rule)

    def __post_init__(self):
        if isinstance(self.probe, dict):
            self.probe = HolmesProbeConfig(**self.probe)
        self.layers = _layers_record(HOLMES_LAYERS if self.layers is None else self.layers)  # checked per model
        if self.subspaces is not None:
            self.subspaces = list(self.subspaces)
        if not self.models:
            raise ValueError("a Holmes run needs at least one model (--model)")


def _as_encoders(models, device=None) -> dict[str, Encoder]:
    """{label: Encoder} from a mapping, or from a list of zoo names / folders (ours or HF) / models."""
    if isinstance(models, Mapping):
        return {name: open_encoder(model, device=device) for name, model in models.items()}
    out = {}
    for item in models:
        if isinstance(item, (str, os.PathLike)):
            out[model_label(str(item))] = open_encoder(item, device=device)
        else:
            encoder = open_encoder(item, device=device)
            out[encoder.name] = encoder
    return out


def random_init_twin(encoder: Encoder) -> Encoder:
    """Same architecture and tokenizer, fresh weights (the random-init encoder control)."""
    return encoder.random_init(seed=getattr(encoder.config, "seed", 0) + RANDOM_INIT_SEED_SHIFT)


SKIPPED_LINES = 20  # skipped datasets said on stderr; the rest are counted in one line (all in skipped.csv)
FEW_TRAIN_ROWS = 10  # fewer training rows than this after the flash cut is said (the few-documents rule's count)


def _load(benchmark_dir, datasets) -> tuple[list, list[dict]]:
    """The loadable datasets of ``benchmark_dir`` and a {dataset, model, reason} row per skipped one."""
    loaded, skipped = load_benchmark(benchmark_dir, datasets)
    skipped_rows = [{"dataset": s.dataset, "model": "*", "reason": s.reason} for s in skipped]
    for s in skipped[:SKIPPED_LINES]:
        print(f"skipped: {s.reason}", file=sys.stderr)
    if len(skipped) > SKIPPED_LINES:  # round 4, HM1: 3,000 junk folders were 3,000 lines
        print(f"skipped: {len(skipped) - SKIPPED_LINES:,} more dataset folders; every reason is in skipped.csv "
              "(results.attrs['skipped'])", file=sys.stderr)
    if not loaded:
        raise HolmesFormatError(f"holmes benchmark {benchmark_dir}: no dataset could be loaded ({len(skipped)} skipped"
                                + (", reasons above" if skipped else "; it has no dataset folders") + "); "
                                "fix the datasets or pass another benchmark folder")
    return loaded, skipped_rows


def _protocol_rows(dataset, flash_fraction):
    """The rows the protocol uses (Flash: a share of train, all of dev and test), their local split indices
    and labels."""
    splits_full = {s: dataset.split_indices(s) for s in ("train", "dev", "test")}
    train = flash_subsample(splits_full["train"], flash_fraction)
    if len(train) < min(FEW_TRAIN_ROWS, len(splits_full["train"])):  # round 4, HO2: 1e-9 probed on 2, silently
        warnings.warn(f"holmes dataset {dataset.name!r}: flash fraction {flash_fraction:g} keeps {len(train)} of its "
                      f"{len(splits_full['train'])} training rows; its probes rest on them alone (raise "
                      "--flash-fraction)", SmallSampleWarning, stacklevel=2)
    used = np.concatenate([train, splits_full["dev"], splits_full["test"]])
    subset = dataset.subset(used)
    local = {"train": np.arange(len(train)), "dev": np.arange(len(train), len(train) + len(splits_full["dev"])),
             "test": np.arange(len(train) + len(splits_full["dev"]), len(used))}
    return subset, local, subset.labels()


def _probe_encoder(dataset, subset, local, labels, name: str, control: str, model, config: HolmesProbeConfig, layers,
                   subspaces, batch_size: int) -> list[pd.DataFrame]:
    """Every probe of one (dataset, encoder): one table per layer x subspace (raises UnpoolableRow)."""
    started = time.perf_counter()
    features = encode_dataset(model, subset, layers, subspaces, batch_size=batch_size,
                              last_state="final" if config.protocol == "reference" else "block")
    encode_s = time.perf_counter() - started
    probe_config = config if control == "none" else dataclasses.replace(config, randomized_control=False, mdl=False)
    tables = []
    for (layer, subspace), X in features.items():
        started = time.perf_counter()
        table = evaluate_features(X, labels, local, dataset.config.num_labels, probe_config)
        if control != "none":
            table["control"] = control
        table["probe_s"] = time.perf_counter() - started
        table["encode_s"] = encode_s
        table.insert(0, "subspace", subspace)
        table.insert(0, "layer", layer)
        table.insert(0, "dataset", dataset.name)
        table.insert(0, "model", name)
        table["n_dev"], table["n_test"] = len(local["dev"]), len(local["test"])
        table["task_type"] = dataset.task_type.value
        table["protocol"] = config.protocol
        tables.append(table)
    return tables


def _results(frames: list, skipped_rows: list[dict]) -> pd.DataFrame:
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["model", "dataset", "layer", "subspace", "control", "seed", "metric", "score"])
    results["area"] = results["dataset"].map(lambda d: DATASETS.get(d, (None, None))[0])
    results["phenomenon"] = results["dataset"].map(lambda d: DATASETS.get(d, (None, None))[1])
    # A list, not a DataFrame: pandas compares attrs on concat/merge, and DataFrames have no truth value.
    results.attrs["skipped"] = skipped_rows
    return results


def _layers_record(layers: LayerSelection) -> str | list:
    """The layer selection as HolmesRunConfig saves it: a name as it is, indices as a list."""
    return layers if isinstance(layers, str) else [layers] if isinstance(layers, int) else list(layers or ())


def run_holmes(models: Mapping | Sequence, benchmark_dir: str | os.PathLike, *, layers: LayerSelection = HOLMES_LAYERS,
               subspaces: Sequence[str] | None = None, config: HolmesProbeConfig | None = None,
               random_init_control: bool = False, datasets: list[str] | None = None,
               out_dir: str | os.PathLike | None = None, batch_size: int = 64, progress: bool = True,
               device: str | None = None) -> pd.DataFrame:
    """Probe every dataset of `benchmark_dir` on every model.

    models: {name: model}, or a list of zoo names / checkpoint or HF folders / models (anything
        `open_encoder` takes; a model object is keyed by its encoder name).
    layers: "last" (default, the Holmes protocol), "all", or a list of layer indices (0 = embeddings),
        "last" and "final" (the grammar of ``dstg_interp.encoders.selection``).
    subspaces: None = every subspace of each model (DSTG: ap, sem, full; baselines: full).
    Returns one row per model x dataset x layer x subspace x control x seed x metric, with `area` and
    `phenomenon`; `.attrs["skipped"]` is a list of {dataset, model, reason} for what could not run.
    With `out_dir`, also writes the tables of `write_tables` and config.json.
    """
    config = config or HolmesProbeConfig()
    pool = _as_encoders(models, device)
    for encoder in pool.values():
        encoder.model.eval()
    if out_dir is not None:
        check_results_folder(Path(out_dir))  # before any work, not after it
    loaded, skipped_rows = _load(benchmark_dir, datasets)
    encoders = {}
    for name, model in pool.items():
        encoders[(name, "none")] = model
        if random_init_control:
            encoders[(name, "random-init")] = random_init_twin(model)
    frames = []
    bar = progress_bar(total=len(loaded) * len(encoders), desc="holmes", disable=not progress)
    try:  # closed on Ctrl-C too, so the bar does not redraw after the one-line message
        for dataset in loaded:
            subset, local, labels = _protocol_rows(dataset, config.flash_fraction)
            for (name, control), model in encoders.items():
                bar.set_postfix_str(f"{dataset.name} / {name}")
                try:
                    frames += _probe_encoder(dataset, subset, local, labels, name, control, model, config, layers,
                                             subspaces, batch_size)
                except UnpoolableRow as error:
                    skipped_rows.append({"dataset": dataset.name, "model": name, "reason": str(error)})
                    print(f"skipped: {error}", file=sys.stderr)
                bar.update()
    finally:
        bar.close()
    results = _results(frames, skipped_rows)
    if out_dir is not None:
        run_config = HolmesRunConfig(str(benchmark_dir), list(pool), _layers_record(layers),
                                     list(subspaces) if subspaces else None, random_init_control, datasets, config,
                                     str(device or "cpu"))
        write_tables(results, out_dir, run_config)
    return results


def _write_csv(frame: pd.DataFrame, path: Path, index: bool = False) -> None:
    if len(frame.columns) == 0 and not index:  # pandas writes a 1-byte file that pandas itself cannot read
        raise ValueError(f"{path.name}: a table without columns; every table is written with its header")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        frame.to_csv(tmp, index=index, float_format="%.6g")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# Every file write_tables may write: a new run removes those it does not write, so no table of an
# earlier run is left beside the new results.
SUMMARY_TABLES = ("scores", "winning_rates", "areas", "phenomena", "a_vs_b", "seed_test", "seed_test_counts")
RESULT_FILES = ("results.csv", "skipped.csv", "config.json") + tuple(f"{name}.csv" for name in SUMMARY_TABLES)


def is_holmes_results(out: Path) -> bool:
    """A folder holding the tables of an earlier run (recognised by its config.json), or none of them."""
    if not any((out / name).exists() for name in RESULT_FILES):
        return True
    try:
        record = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"benchmark_dir", "models", "probe"} <= set(record)


def check_results_folder(out: Path, flag: str = "--out") -> None:
    """``out`` can take the tables: a (writable) folder without result files of anyone else."""
    check_output_location(out, flag)
    if not is_holmes_results(out):
        raise OutputError(f"{flag} {out} holds results.csv or other tables that a Holmes run did not write; "
                          f"they are never replaced: choose another {flag}")


def summary_tables(results: pd.DataFrame, compare: str | None = None) -> dict[str, pd.DataFrame]:
    """scores, winning rates, per-area and per-phenomenon tables, A-vs-B counts (last layer per model)."""
    scores = dataset_scores(results)
    last = scores.groupby("model")["layer"].transform("max")
    at_last = scores[scores["layer"] == last]
    full = at_last[at_last["subspace"] == "full"]
    rates = winning_rates(full)
    models = list(dict.fromkeys(full["model"]))
    compare = compare or next((m for m in models if "dstg" in m), models[0] if models else None)
    tables = {"scores": scores, "winning_rates": rates, "areas": area_table(rates).reset_index(),
              "phenomena": phenomenon_table(rates).reset_index()}
    if compare is not None:
        tables["a_vs_b"] = a_vs_b(at_last, compare, [e for e in dict.fromkeys(at_last["entry"]) if e != compare])
        variant = variant_of(compare)[0]
        others = [v for v in dict.fromkeys(variant_of(m)[0] for m in models) if v != variant]
        try:  # several training seeds of every variant: the test over seeds (significance.py)
            tests = seed_test(scores, variant, others)
        except ValueError:
            tests = None  # one seed of some variant: only the one-seed a_vs_b counts
        if tests is not None and len(tests):
            tables["seed_test"] = tests
            tables["seed_test_counts"] = seed_test_counts(tests)
    return tables


def write_tables(results: pd.DataFrame, out_dir: str | os.PathLike, run_config: HolmesRunConfig | None = None) -> Path:
    """Write results.csv, skipped.csv, the summary tables and config.json into ``out_dir`` (each file
    atomically); tables of an earlier run that this one does not produce are removed."""
    out = Path(out_dir)
    check_results_folder(out)
    with created_folder(out):  # a failure (a full disk) leaves no empty --out behind
        _write_all_tables(results, out, run_config)
    return out


def _write_all_tables(results: pd.DataFrame, out: Path, run_config: HolmesRunConfig | None) -> None:
    tables = {"results": results,
              "skipped": pd.DataFrame(results.attrs.get("skipped", []), columns=["dataset", "model", "reason"])}
    if len(results):
        tables.update(summary_tables(results))
    for name, table in tables.items():
        _write_csv(table, out / f"{name}.csv")
    for name in SUMMARY_TABLES:
        if name not in tables:
            (out / f"{name}.csv").unlink(missing_ok=True)
    if run_config is not None:
        write_text_atomic(out / "config.json", run_config.to_json())


# One Holmes runner for both spellings of the command (``dstg-probe --task holmes`` and ``dstg-holmes run``,
# dstg_interp/cli/holmes.py): it takes a HolmesRunConfig.
HOLMES_THREADS = 1  # on a shared 2-core machine two threads oversubscribe the tiny probes and run ~20x slower


OFFLINE_FLASH_FRACTION = 1 / 32  # the offline suite's train splits are whole: cut them as FlashHolmes is


def flash_fraction_for(benchmark: str | os.PathLike, flash_fraction: float | None = None, full: bool = False) -> float | None:
    """The train fraction a run uses: an explicit ``flash_fraction``; else a user's folder as it is, the
    offline suite (``benchmark`` None) cut to 1/32 unless ``full``."""
    if flash_fraction is not None:
        if full:
            raise ValueError("--full and --flash-fraction contradict each other: pass one")
        return flash_fraction
    return None if benchmark is not None or full else OFFLINE_FLASH_FRACTION


def run_config(cfg: HolmesRunConfig, out: str | os.PathLike, progress: bool = True, threads: int | None = HOLMES_THREADS) -> pd.DataFrame:
    """Run ``cfg`` and write its tables and config.json into ``out``; the runner behind both spellings."""
    check_results_folder(Path(out))  # before any work: a file, an unwritable place or foreign tables
    models = dict(zip(table_names(cfg.models, cfg.names), cfg.models))  # --name, else the naming rule
    check_device(cfg.device)
    if threads:
        torch.set_num_threads(threads)
    benchmark = cfg.benchmark_dir
    if benchmark is None:  # the offline suite, built into the cache on first use
        benchmark = default_suite_dir()
        if not is_complete_suite(benchmark):  # an interrupted first build is rebuilt, never used
            build_suite(benchmark)
    # a second run on --out stops, naming this one by its command line as typed (dstg-holmes run ... or
    # dstg-probe --task holmes ...; a fixed "dstg-holmes run " + argv[1:] said "dstg-holmes run run ...")
    with output_lock(Path(out)):
        return run_holmes(models, benchmark, layers=cfg.layers, subspaces=cfg.subspaces, config=cfg.probe,
                          random_init_control=cfg.random_init_control, datasets=cfg.datasets, out_dir=out,
                          progress=progress, device=cfg.device)
