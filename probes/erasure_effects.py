"""Does the model use the position it encodes?  Erase it inside the forward pass and measure what breaks.

    from dstg_interp.encoders import open_encoder
    from probes.erasure_effects import ErasureConfig, measure_erasure
    result = measure_erasure(open_encoder("dstg"), store, eval_documents, ErasureConfig(layers=[2, 4]))
    with erasing(encoder, result.erasers[(2, "ap", "leace")]): encoder.mlm_logits(tokens, mask)
    result.table          # one row per (layer, subspace, method): rank, probe R² before/after, loss increase, ...
    result.heads          # one row per (layer, subspace, method, block, head): attention change (JS, bits)

Per (layer, subspace) of ``store`` (states of ``encoder`` on documents the evaluation never reads):
1. the tokens are split by document into a fitting side and a probing side (``test_fraction``);
2. erasers of the position target are fitted on the fitting side (``probes.erasure``: LEACE, INLP, and a
   random subspace of LEACE's rank as the control);
3. **probe**: a ridge probe of the raw target (``RidgeProbe``, grouped CV) is trained on the fitting side and
   scored on the probing side, on the states as stored and as erased: ``r2_before``, ``r2_after`` (with a
   bootstrap interval over probing documents), beside ``position_r2``, what token position alone explains of
   the target on the same split (``probes.position_baseline``; 1 for token position itself), which a
   successful erasure of a structure target brings the probe to or below;
4. **use**: the eraser runs inside the forward pass at that layer (``encoders.edits.edit_states``) while
   ``dstg_interp.evaluation.mlm_accuracy`` scores masked tokens of ``eval_documents`` (its masks, seeded by
   sequence: the clean and the erased runs see the same masked tokens): ``loss_increase``,
   ``accuracy_drop``.  HF encoders have no MLM head here: their rows have NaN there and are read through
   ``output_change`` instead (1 - cosine of the mean-pooled last states, what sentence encoders output), which
   every model gets;
5. **attention**: Jensen-Shannon divergence (bits) between the clean and the erased pattern of every head of
   the blocks after the layer, mean over real query tokens (``attention_js``: mean over those heads).

Read ``loss_increase`` of ``leace`` against ``random`` (same rank): position is *used* where erasing it costs
more than erasing as many arbitrary directions.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp.config import ConfigIO, layers_field, seed_field, subspaces_field
from dstg_interp.analysis.interventions import output_change, pooled_output
from dstg_interp.data import Document, default_cache_dir, probing_documents, split_documents
from dstg_interp.encoders import Encoder, open_encoder
from dstg_interp.encoders.edits import edit_states
from dstg_interp.encoders.inputs import pad_batch
from dstg_interp.encoders.selection import LayerSelection, listed
from dstg_interp.data.labels import position_labels
from dstg_interp.evaluation import Unigram, mlm_accuracy
from dstg_interp.store import ActivationStore
from dstg_interp.store.attention import jensen_shannon
from dstg_interp.store.manifest import weights_sha256
from probes.erasure import (
    BACKENDS,
    ENCODINGS,
    METHODS,
    ErasureError,
    LinearEraser,
    check_request,
    fit_erasers,
    position_features,
    store_identity,
    store_period,
)
from probes.position_baseline import PositionBaseline
from dstg_interp.encoders.naming import model_label
from probes.positions import cached_store
from probes.ridge import RidgeProbe
from probes.splits import bootstrap_r2_ci, grouped_train_test_split

RESULT_COLUMNS = ["model", "layer", "subspace", "method", "target", "encoding", "rank", "r2_before", "r2_after",
                  "r2_after_ci_low", "r2_after_ci_high", "position_r2", "loss_clean", "loss", "loss_increase", "accuracy_clean",
                  "accuracy", "accuracy_drop", "output_change", "attention_js", "n_fit_tokens", "n_probe_tokens",
                  "n_eval_tokens", "backend"]

# The probing documents are themselves the zoo's held-out split, hashed with seed 0: the store / evaluation split
# must hash with another seed, or every document would fall on one side.
EVAL_SPLIT_SEED_OFFSET = 1000


@dataclass
class ErasureConfig(ConfigIO):
    """How one erasure study runs; saved beside its results.

    layers, subspaces: which of the store's to erase at (None = all it has).  target: a position label of the
    store.  encoding, n_features: the concept (``probes.erasure.position_features``).  methods: of
    ``probes.erasure.METHODS``.  max_tokens: seeded subsample of the store's tokens for fitting and probing.
    test_fraction: share of the store's documents kept for the probe's held-out score.  corpus, n_docs: the
    evaluation corpus name (decides its held-out split in ``mlm_accuracy``) and how many of the evaluation
    documents are scored.  attention_sequences: sequences for the attention comparison.
    """

    # The metadata makes dstg-erase's flags (dstg_interp/cli/config_args.py): a field is written once.
    layers: LayerSelection = layers_field(shown="all the store has")
    subspaces: list | None = subspaces_field(shown="all the model has")
    target: str = field(default="token_position", metadata={"choices": list(position_labels()),
                                                              "help": "the position label to erase"})
    encoding: str = field(default="dct", metadata={
        "choices": list(ENCODINGS), "help": "linear: the value; dct: the value and its first DCT cosines"})
    n_features: int = field(default=8, metadata={"min": 1, "help": "concept features with --encoding dct"})
    methods: tuple[str, ...] = field(default=METHODS, metadata={
        "csv": True, "help": f"comma-separated, of {', '.join(METHODS)}", "shown": ",".join(METHODS)})
    max_tokens: int = field(default=20_000, metadata={"min": 1, "help": "store tokens for fitting and probing"})
    test_fraction: float = field(default=0.3, metadata={"help": "share of the store's documents held out for the probe"})
    corpus: str = field(default="en-mix", metadata={"help": "corpus of the probing documents (en-mix: held-out ones)"})
    n_docs: int = field(default=100, metadata={"min": 1, "help": "evaluation documents for the MLM loss"})
    eval_fraction: float = field(default=0.3, metadata={
        "help": "share of the probing documents kept out of the store, for the MLM and attention measures"})
    attention_sequences: int = field(default=16, metadata={"min": 1, "help": "sequences for the attention comparison"})
    batch_size: int = field(default=32, metadata={"min": 1, "help": "sequences per forward pass"})
    backend: str = field(default="auto", metadata={"choices": list(BACKENDS), "help": "LEACE's implementation"})
    n_boot: int = field(default=200, metadata={"min": 1, "help": "bootstrap resamples for the CI of r2_after"})
    seed: int = seed_field()

    ERROR = ErasureError

    def __post_init__(self) -> None:
        self.methods = tuple(self.methods)
        for name in ("layers", "subspaces"):  # the flags' "all" / (0, "last") as a list, as saved
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, [value] if isinstance(value, (str, int)) else list(value))
        if self.encoding not in ENCODINGS:
            raise ErasureError(f"unknown encoding {self.encoding!r}; use {', '.join(ENCODINGS)}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ErasureError(f"unknown erasure method(s) {unknown or []}; use {', '.join(METHODS)}")
        for name in ("n_features", "max_tokens", "n_docs", "attention_sequences", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ErasureError(f"{name} must be a positive integer, got {value!r}")
        for name in ("test_fraction", "eval_fraction"):
            if not 0 < getattr(self, name) < 1:
                raise ErasureError(f"{name} must be in (0, 1), got {getattr(self, name)}")



@dataclass
class ErasureResult:
    table: pd.DataFrame
    heads: pd.DataFrame
    erasers: dict = field(default_factory=dict)  # (layer, subspace, method) -> LinearEraser


def measure_erasure(encoder: Encoder, store: ActivationStore, eval_documents: Sequence[Document], config: ErasureConfig | None = None,
                    model_name: str | None = None, progress: bool = False) -> ErasureResult:
    """The erasure study of ``encoder`` (see the module docstring); ``store`` holds its states."""
    config = config or ErasureConfig()
    name = model_name or encoder.name
    weights = weights_sha256(encoder.weights_module)
    if store.manifest["identity"]["model"]["weights_sha256"] != weights:
        raise ErasureError(f"the store {store.directory} was extracted from another model than {name} (weights "
                           f"{store.manifest['identity']['model']['weights_sha256'][:12]} vs {weights[:12]}); "
                           "extract a store of this model")
    layers = listed(config.layers) or list(store.layers)
    subspaces = list(config.subspaces) if config.subspaces is not None else list(store.subspaces)
    check_request(store, layers, subspaces, config.target)
    eval_documents = _disjoint_documents(store, eval_documents)
    fit_rows, probe_rows = _split_rows(store, config)
    labels = store.labels
    target = labels[config.target].to_numpy().astype(np.float64)
    groups = labels["doc_index"].to_numpy()
    concept = position_features(target[fit_rows], config.encoding, config.n_features, store_period(store, config.target))

    position_r2 = _position_only_r2(labels, target, groups, fit_rows, probe_rows, config)
    evaluation = _Evaluation(encoder, eval_documents, config)
    records, head_frames, erasers = [], [], {}
    steps = [(layer, sub) for layer in layers for sub in subspaces]
    for step, (layer, sub) in enumerate(steps):
        if progress:
            print(f"erasure {name}: layer {layer} {sub} ({step + 1}/{len(steps)})", flush=True)
        states = store.states(layer, sub)
        X_fit, X_probe = np.asarray(states[fit_rows], dtype=np.float64), np.asarray(states[probe_rows], dtype=np.float64)
        fitted = fit_erasers(X_fit, concept, groups[fit_rows], config.methods, config.backend, config.seed)
        r2_before, _ = _probe_r2(X_fit, X_probe, target, groups, fit_rows, probe_rows, config)
        for method, eraser in fitted.items():
            eraser.identity.update(store_identity(store, layer, sub, config.target, config.encoding, config.n_features))
            eraser.check_model(weights, name)
            erasers[(layer, sub, method)] = eraser
            # in float32, as the model carries them (see fit_inlp: float64 residue is readable by a standardising probe)
            r2_after, interval = _probe_r2(eraser(X_fit).astype(np.float32), eraser(X_probe).astype(np.float32), target,
                                           groups, fit_rows, probe_rows, config)
            effects, heads = evaluation.with_eraser(layer, sub, eraser)
            records.append(dict(model=name, layer=layer, subspace=sub, method=method, target=config.target,
                                encoding=config.encoding, rank=eraser.rank, r2_before=r2_before, r2_after=r2_after,
                                r2_after_ci_low=interval[0], r2_after_ci_high=interval[1], position_r2=position_r2,
                                **effects,
                                n_fit_tokens=len(fit_rows), n_probe_tokens=len(probe_rows),
                                backend=fitted["leace"].identity.get("backend", "") if "leace" in fitted else ""))
            head_frames.append(heads.assign(model=name, layer=layer, subspace=sub, method=method))
    table = pd.DataFrame(records)
    table = table.assign(loss_clean=evaluation.clean["loss"], accuracy_clean=evaluation.clean["accuracy"],
                         n_eval_tokens=evaluation.clean["n_tokens"])
    table["loss_increase"] = table["loss"] - table["loss_clean"]
    table["accuracy_drop"] = table["accuracy_clean"] - table["accuracy"]
    heads = pd.concat(head_frames, ignore_index=True) if head_frames else pd.DataFrame()
    return ErasureResult(table[RESULT_COLUMNS], heads, erasers)


def erase_positions(model: str | os.PathLike | torch.nn.Module | Encoder, config: ErasureConfig | None = None,
                    store: ActivationStore | None = None, store_root: str | os.PathLike | None = None,
                    model_name: str | None = None, device: str = "cpu", progress: bool = False,
                    documents: Sequence[Document] | None = None) -> ErasureResult:
    """The erasure study from a model (anything ``open_encoder`` takes) and a corpus.

    The corpus's probing documents (``probing_documents``: for en-mix the zoo's held-out documents) are split
    by a hash of their ids: ``1 - eval_fraction`` of them make the store the erasers are fitted on (extracted
    once into ``store_root``, default the cache folder, and reused), the rest are scored.  With ``store`` (an
    ActivationStore of this model) the evaluation reads the probing documents the store does not hold.
    ``documents``: the probing documents themselves, instead of the corpus's."""
    config = config or ErasureConfig()
    encoder = open_encoder(model, device=device)
    name = model_name or model_label(model)
    layers, _ = encoder.resolve(config.layers, config.subspaces)  # at the door: grammar, names, range
    if config.layers is not None:  # "last" and "all" -> this model's layers; None stays "all the store has"
        config = dataclasses.replace(config, layers=layers)
    documents = probing_documents(config.corpus) if documents is None else list(documents)
    if store is None:
        store_documents, eval_documents = split_documents(documents, config.eval_fraction,
                                                          seed=EVAL_SPLIT_SEED_OFFSET + config.seed)
        root = Path(store_root) if store_root is not None else default_cache_dir() / "stores"
        store = cached_store(encoder, store_documents, listed(config.layers), root, f"{name}-erasure", progress)
    else:
        held = {doc.get("doc_id") for doc in store.documents}
        eval_documents = [doc for doc in documents if doc.doc_id not in held]
    return measure_erasure(encoder, store, eval_documents, config, model_name=name, progress=progress)


@contextlib.contextmanager
def erasing(encoder: Encoder, eraser: LinearEraser):
    """Every forward inside the block runs with ``eraser`` at the layer and subspace it was fitted on; an eraser
    fitted on another model's store, or a layer / subspace / width this model lacks, is one ErasureError."""
    eraser.check_model(weights_sha256(encoder.weights_module), encoder.name)
    layer, subspace = eraser.identity.get("layer"), eraser.identity.get("subspace")
    if layer is None or subspace is None:
        raise ErasureError("the eraser does not say which layer and subspace it was fitted on (fit it with fit_eraser)")
    if layer not in encoder.layers or subspace not in encoder.subspaces:
        raise ErasureError(f"the eraser was fitted on layer {layer!r} {subspace!r}, which {encoder.name} does not have "
                           f"(layers {list(encoder.layers)}, subspaces {list(encoder.subspaces)})")
    with edit_states(encoder, layer, subspace, eraser_edit(eraser)):
        yield


# --- pieces ----------------------------------------------------------------------------------------
def _disjoint_documents(store, documents) -> list:
    """The evaluation documents, refused when they share documents with the store the erasers are fitted on."""
    documents = list(documents)
    if not documents:
        raise ErasureError("no evaluation documents: pass documents the store was not extracted from")
    fitted_on = {doc.get("doc_id") for doc in store.documents}
    shared = [doc.doc_id for doc in documents if doc.doc_id in fitted_on]
    if shared:
        raise ErasureError(f"{len(shared)} evaluation document(s) (e.g. {shared[0]!r}) are in the store the erasers "
                           "are fitted on; evaluate on documents the store does not hold")
    return documents


def _split_rows(store, config: ErasureConfig):
    rows = store.subsample(config.max_tokens, seed=config.seed)
    groups = store.labels["doc_index"].to_numpy()[rows]
    if len(np.unique(groups)) < 7:
        raise ErasureError(f"the store has {len(np.unique(groups))} documents with real tokens; fitting and a "
                           "grouped probe need at least 7")
    fit, probe = grouped_train_test_split(groups, config.test_fraction, config.seed)
    return rows[fit], rows[probe]


def _probe_r2(X_fit, X_probe, target, groups, fit_rows, probe_rows, config: ErasureConfig):
    """Held-out R² of a ridge probe of the raw target, and its bootstrap interval over probing documents."""
    probe = RidgeProbe(n_splits=5).fit(X_fit, target[fit_rows], groups=groups[fit_rows])
    predicted = probe.predict(X_probe)
    y = target[probe_rows]
    r2 = float(1 - ((y - predicted) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    interval = bootstrap_r2_ci(y, predicted, groups[probe_rows], n_boot=config.n_boot, seed=config.seed)
    return r2, interval


def _position_only_r2(labels, target, groups, fit_rows, probe_rows, config: ErasureConfig) -> float:
    """Held-out R² of the target from token position alone (``probes.position_baseline``, one-hot), on the
    probe's tokens and split: what erasure must bring the probe to or below (1 for token position itself)."""
    rows = np.concatenate([fit_rows, probe_rows])
    local_train, local_test = np.arange(len(fit_rows)), np.arange(len(fit_rows), len(rows))
    baseline = PositionBaseline.fit(labels["token_position"].to_numpy()[rows], target[rows], groups[rows], local_train,
                                    local_test, n_boot=0, seed=config.seed, name=config.target)
    return baseline.r2


class _Evaluation:
    """The clean measurements of one model, and the same with an eraser in the forward pass."""

    def __init__(self, encoder: Encoder, documents, config: ErasureConfig):
        self.encoder, self.documents, self.config = encoder, documents, config
        # our models' MLM loss (mlm_accuracy); not an HF encoder's, nor a checkpoint of ours saved encoder-only
        self.has_mlm = encoder.kind != "hf" and not encoder.config.encoder_only
        length = min(encoder.max_positions, 128)
        sequences = encoder.structured_sequences(documents[:max(config.attention_sequences, 64)], max_length=length,
                                                 windows=False)
        ids = [sequences[i]["input_ids"] for i in range(len(sequences))]
        self.tokens, self.mask = (t.to(encoder.device) for t in pad_batch(ids, encoder.special.pad))
        self.clean = self._mlm() if self.has_mlm else {"loss": np.nan, "accuracy": np.nan, "n_tokens": 0}
        self.clean_output = self._pooled_output()
        self.clean_patterns = self._patterns()

    def with_eraser(self, layer, subspace: str, eraser: LinearEraser) -> tuple[dict, pd.DataFrame]:
        edit = eraser_edit(eraser)
        with edit_states(self.encoder, layer, subspace, edit):
            scores = self._mlm() if self.has_mlm else {"loss": np.nan, "accuracy": np.nan}
            output = self._pooled_output()
            patterns = self._patterns()
        first_block = 0 if layer == "final" else int(layer)
        rows = []
        for block, pattern in patterns.items():
            if layer == "final" or block < first_block:
                continue  # blocks before the edit read unchanged states
            js = jensen_shannon(self.clean_patterns[block].double(), pattern.double())  # [B, H, T]
            weights = self.mask[: len(js), None, :].double()
            per_head = (js.nan_to_num(0) * weights).sum(dim=(0, 2)) / weights.sum(dim=(0, 2))
            rows += [dict(block=block, head=h, js_bits=float(v)) for h, v in enumerate(per_head)]
        heads = pd.DataFrame(rows, columns=["block", "head", "js_bits"])
        effects = dict(loss=scores["loss"], accuracy=scores["accuracy"], output_change=output_change(self.clean_output, output),
                       attention_js=float(heads.js_bits.mean()) if len(heads) else np.nan)
        return effects, heads

    def _mlm(self) -> dict:
        # The unigram baseline columns of mlm_accuracy are not read here: a flat one stands in for the training
        # frequencies (which need the model's training corpus), and only loss / accuracy are kept.
        flat = Unigram(np.ones(self.encoder.vocab_size))
        return mlm_accuracy(self.encoder.model, self.config.corpus, self.config.n_docs, seed=self.config.seed,
                            batch_size=self.config.batch_size, unigram=flat, documents=self.documents)

    def _pooled_output(self) -> torch.Tensor:
        """[B, d] mean over real tokens of the last layer's states (what a sentence encoder returns)."""
        return pooled_output(self.encoder, self.tokens, self.mask)

    def _patterns(self) -> dict:
        n = self.config.attention_sequences
        tokens, mask = self.tokens[:n], self.mask[:n]
        return {block: parts["pattern"] for block, parts in self.encoder.attention(tokens, mask).items()}


def eraser_edit(eraser: LinearEraser):
    """The eraser as a state edit for ``edit_states`` ([batch, pos, d] -> same), in float32 on the state's device."""
    return lambda states: eraser(states)
