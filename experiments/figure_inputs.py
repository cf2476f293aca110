"""What the figure scripts read: the zoo (or a tiny stand-in), the held-out documents, and the activation
stores they share.

    from figure_inputs import load_figure_inputs, model_store
    inputs = load_figure_inputs(tiny=False, n_docs=300, seed=0)     # the shipped zoo on en-mix
    store = model_store(inputs, "dstg")                              # all layers + attention summaries

One store per model holds every layer (0 = embeddings .. n_layers), every subspace the model has and the
attention summaries, over the same held-out documents; fig_ap_manifold (per-position means), fig_heads
(head classification) and fig_probes (position probes) all read it, so ``run_all.py`` runs each model
forward once.  The probes' random-init control gets its own store (``random_init_store``).  Stores live
in the cache folder (``$DSTG_CACHE/stores/figures`` by default), keyed by weights + sequences + layers,
and are reused by every later run; they are never committed.

``tiny=True`` replaces the zoo by four randomly initialised 2-layer models (d = 32) and en-mix by a
synthetic corpus written here, so tests and the notebook run the whole pipeline in seconds, offline.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from dstg_interp import ModelConfig, build_model, extract, load_model, open_encoder
from dstg_interp.data import default_cache_dir, probing_documents, train_tokenizer
from dstg_interp.data.corpora import make_document
from dstg_interp.model.checkpoint import ZOO_DIR, ZOO_NAMES
from dstg_interp.store.extract import as_sequences
from dstg_interp.store.manifest import sequences_sha256, weights_sha256

FIGURES_DIR = Path(__file__).resolve().parents[1] / "figures"
PROBE_MAX_LENGTH = 256  # as probes.positions: one document per sequence, from its start
TINY_MAX_LENGTH = 64


@dataclass
class FigureInputs:
    """The models (name -> model, each with its tokenizer), the documents they are read on, and where
    their stores go."""

    models: dict
    documents: list
    store_root: Path
    max_length: int
    tiny: bool
    description: dict = field(default_factory=dict)  # what was loaded, for the config files


def load_figure_inputs(tiny: bool = False, models=ZOO_NAMES, n_docs: int | None = 300, seed: int = 0,
                       store_root=None, corpus: str = "en-mix") -> FigureInputs:
    """The zoo models (or tiny stand-ins) and ``n_docs`` held-out documents drawn with ``seed``.

    The zoo's held-out documents come ordered by source (Wikipedia, then Austen, then Treasury of David);
    a seeded draw keeps every source in the sample.  Models and documents are loaded once per process and
    shared by every script run_all calls (the tiny tokenizer is not bit-reproducible across trainings, and
    a different tokenizer would mean different stores).
    """
    if tiny:
        zoo, documents = _shared_tiny_zoo(tuple(models), seed)
        root = Path(store_root) if store_root is not None else default_cache_dir() / "stores" / "figures-tiny"
        return FigureInputs(zoo, documents, root, TINY_MAX_LENGTH, True,
                            {"models": "tiny random (tiny_zoo)", "corpus": "synthetic", "n_docs": len(documents)})
    missing = [name for name in models if not (ZOO_DIR / name / "model.safetensors").is_file()]
    if missing:
        raise SystemExit(f"zoo model(s) {', '.join(missing)} not in {ZOO_DIR}; train them with "
                         "experiments/pretrain_zoo.py, or pass --tiny for a smoke run")
    documents = _shared_probing_documents(corpus)
    if n_docs is not None and n_docs < len(documents):
        chosen = np.sort(np.random.default_rng(seed).choice(len(documents), size=n_docs, replace=False))
        documents = [documents[i] for i in chosen]
    zoo = {name: _shared_zoo_model(name) for name in models}
    root = Path(store_root) if store_root is not None else default_cache_dir() / "stores" / "figures"
    zoo_json = ZOO_DIR / "zoo.json"
    description = {"models": {name: str(ZOO_DIR / name) for name in models}, "corpus": corpus,
                   "n_docs": len(documents), "zoo": json.loads(zoo_json.read_text()) if zoo_json.is_file() else None}
    return FigureInputs(zoo, documents, root, PROBE_MAX_LENGTH, False, description)


@lru_cache(maxsize=None)
def _shared_tiny_zoo(models: tuple, seed: int):
    return tiny_zoo(models, seed=seed)


@lru_cache(maxsize=None)
def _shared_probing_documents(corpus: str):
    return probing_documents(corpus)


@lru_cache(maxsize=None)
def _shared_zoo_model(name: str):
    return load_model(name).eval()


OFFSET_MODEL = "dstg-offset"  # DSTG trained with random_offset on a 512-row table (pretrain_zoo.py --variants dstg-offset)


def with_offset_model(inputs: FigureInputs) -> dict:
    """The figure models plus the random_offset DSTG: shipped in the zoo, or for --tiny a random DSTG with a
    table four times the tiny models' length.  The studies beyond the paper read it; the paper figures do not."""
    models = dict(inputs.models)
    if inputs.tiny:
        reference = models["dstg"]
        config = ModelConfig.from_dict({**reference.config.to_dict(), "max_positions": 4 * reference.config.max_positions})
        models[OFFSET_MODEL] = build_model(config).eval()
        models[OFFSET_MODEL].tokenizer = reference.tokenizer
    elif (ZOO_DIR / OFFSET_MODEL / "model.safetensors").is_file():
        models[OFFSET_MODEL] = _shared_zoo_model(OFFSET_MODEL)
    else:
        raise SystemExit(f"zoo model {OFFSET_MODEL} not in {ZOO_DIR}; train it with "
                         f"python experiments/pretrain_zoo.py --variants {OFFSET_MODEL}")
    return models


def model_store(inputs: FigureInputs, name: str, progress: bool = True):
    """The shared store of model ``name``: all layers and subspaces, attention summaries (reused if present)."""
    return _store(inputs.models[name], name, inputs, attention=True, progress=progress)


def random_init_store(inputs: FigureInputs, name: str, progress: bool = True):
    """The store of a randomly initialised twin of ``name`` (same config and tokenizer): the probes' control."""
    return _store(open_encoder(inputs.models[name]).random_init(), f"{name}-random-init", inputs, attention=False,
                  progress=progress)


def _store(model, label: str, inputs: FigureInputs, attention: bool, progress: bool):
    encoder = open_encoder(model)
    sequences = as_sequences(encoder, inputs.documents, inputs.max_length, windows=False)
    key = hashlib.sha256(f"{weights_sha256(encoder.weights_module)}|{sequences_sha256(sequences)}|all|{attention}".encode()).hexdigest()[:16]
    return extract(encoder, sequences, inputs.store_root / f"{label}-{key}", layers=None, dtype="float16",
                   attention_summaries=attention, batch_size=16, progress=progress)


def write_config(out_dir: Path, config: dict) -> Path:
    """``config.json`` next to a script's outputs (written under a temporary name, then renamed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    temporary = out_dir / ".config.json.tmp"
    temporary.write_text(json.dumps(config, indent=1, default=str) + "\n")
    return temporary.replace(out_dir / "config.json")


# --- a tiny stand-in for tests and the notebook ----------------------------------------------------
_NAMES = ["the miller", "a weaver", "the captain", "her cousin", "the baker", "an old clerk"]
_ACTIONS = ["mended", "opened", "counted", "lost", "painted", "carried"]
_THINGS = ["the green door", "a copper pot", "the long rope", "a paper map", "the iron key", "a woollen coat"]
_WHEN = ["at dawn", "after supper", "before the storm", "on market day", "in early spring", "late at night"]


def tiny_documents(n_docs: int = 40, seed: int = 0) -> list:
    """Synthetic documents of 2-4 paragraphs of 1-3 template sentences each (text written for this project):
    short paragraphs, so that the first 64 tokens of almost every document span several of them."""
    rng = np.random.default_rng(seed)
    documents = []
    for i in range(n_docs):
        paragraphs = []
        for _ in range(int(rng.integers(2, 5))):
            sentences = []
            for _ in range(int(rng.integers(1, 4))):
                who, did, what, when = (words[int(rng.integers(len(words)))] for words in (_NAMES, _ACTIONS, _THINGS, _WHEN))
                sentences.append(f"{who.capitalize()} {did} {what} {when}.")
            paragraphs.append(" ".join(sentences))
        documents.append(make_document(f"tiny/{i:03d}", "tiny", paragraphs))
    return documents


def tiny_zoo(names=ZOO_NAMES, n_docs: int = 40, seed: int = 0) -> tuple[dict, list]:
    """Four random 2-layer models (DSTG d_sem 24 + d_ap 8; baselines d_model 32) sharing one tokenizer
    trained on ``tiny_documents``; returns (name -> model, documents)."""
    documents = tiny_documents(n_docs, seed)
    tokenizer = train_tokenizer(documents, vocab_size=150)
    models = {}
    for name in names:
        widths = {"d_sem": 24, "d_ap": 8} if name == "dstg" else {"d_model": 32}
        config = ModelConfig(variant=name, vocab_size=tokenizer.get_vocab_size(), max_positions=TINY_MAX_LENGTH,
                             n_layers=2, n_heads=4, d_head=8, seed=seed, **widths)
        model = build_model(config).eval()
        model.tokenizer = tokenizer
        models[name] = model
    return models, documents
