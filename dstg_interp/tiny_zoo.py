"""A tiny stand-in for the shipped zoo: random 2-layer models of every variant on a synthetic corpus.

    from dstg_interp.tiny_zoo import tiny_zoo, tiny_documents
    models, documents = tiny_zoo(["dstg", "rope"], n_docs=24, seed=0)   # name -> model (with .tokenizer), docs

Tests, the notebook (``DSTG_NOTEBOOK_TINY=1``) and every ``--tiny`` experiment run the whole pipeline on
it in seconds, offline: nothing is fetched, the corpus is generated from a few templates written for
this project, and the models share one WordPiece tokenizer trained on it.
"""

from __future__ import annotations

import numpy as np

from .config import ModelConfig
from .data import train_tokenizer
from .data.corpora import make_document
from .model import build_model
from .model.checkpoint import ZOO_NAMES
from .variants import VARIANTS, variant_row

TINY_MAX_POSITIONS = 64
# The tiny models' widths (the --tiny recipe study and the GPU check's dry run read them): each variant's row of
# the variants table, the zoo's widths at a quarter (DSTG 24 + 8).
TINY_WIDTHS = {name: row.widths(tiny=True) for name, row in VARIANTS.items()}

_NAMES = ["the miller", "a weaver", "the captain", "her cousin", "the baker", "an old clerk"]
_ACTIONS = ["mended", "opened", "counted", "lost", "painted", "carried"]
_THINGS = ["the green door", "a copper pot", "the long rope", "a paper map", "the iron key", "a woollen coat"]
_WHEN = ["at dawn", "after supper", "before the storm", "on market day", "in early spring", "late at night"]


def tiny_documents(n_docs: int = 40, seed: int = 0) -> list:
    """Synthetic documents of 2-4 paragraphs of 1-3 template sentences each: short paragraphs, so that
    the first 64 tokens of almost every document span several of them (the segment probes need that)."""
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


def tiny_long_documents(n_docs: int = 24, per_doc: int = 8, seed: int = 0) -> list:
    """Longer synthetic documents (each joins the paragraphs of ``per_doc`` tiny documents), for windows
    past the tiny models' 64 positions."""
    pieces = tiny_documents(n_docs * per_doc, seed)
    return [make_document(f"tiny-long/{i:03d}", "tiny",
                          [" ".join(p) for doc in pieces[i * per_doc:(i + 1) * per_doc] for p in doc.paragraphs])
            for i in range(n_docs)]


def tiny_config(variant: str, vocab_size: int, seed: int = 0, **overrides) -> ModelConfig:
    """A 2-layer, 4-head model of ``variant`` (``dstg-offset`` and the like: of ``dstg``), ``TINY_WIDTHS`` wide."""
    settings = dict(variant_row(variant.split("-")[0]).widths(tiny=True), vocab_size=vocab_size,
                    max_positions=TINY_MAX_POSITIONS, n_layers=2, n_heads=4, d_head=8, seed=seed)
    return ModelConfig(**{**settings, **overrides})


def tiny_zoo(names=ZOO_NAMES, n_docs: int = 40, seed: int = 0) -> tuple[dict, list]:
    """Random tiny models named ``names`` sharing one tokenizer trained on ``tiny_documents``; returns
    (name -> model in eval mode with ``.tokenizer``, documents)."""
    documents = tiny_documents(n_docs, seed)
    tokenizer = train_tokenizer(documents, vocab_size=150)
    models = {}
    for name in names:
        model = build_model(tiny_config(name, tokenizer.get_vocab_size(), seed=seed)).eval()
        model.tokenizer = tokenizer
        models[name] = model
    return models, documents
