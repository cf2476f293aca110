"""The corpus catalogue: one entry point from a corpus spec to documents.

    from dstg_interp.data import load_corpus, probing_documents
    docs = load_corpus("en-mix")                    # fetched once into $DSTG_CACHE or ~/.cache/dstg-interp
    docs = load_corpus("en-large")                  # en-mix + 12 pieces (~15M tokens), for the 6-layer zoo
    docs = load_corpus("pydocs")                    # held-out technical prose (Python docs), not in en-mix
    docs = load_corpus("path/to/folder")            # *.txt, one document per file, blank line = paragraph
    docs = load_corpus("path/to/file.jsonl")        # {"text": ..., "id": ...} per line
    docs = load_corpus("hf:HuggingFaceFW/fineweb:sample-10BT:train", max_docs=20_000)
    held_out = probing_documents("en-mix")          # the validation documents the zoo never trained on

The `en-mix` recipes (fetch, extract, pinned hashes) live in `en_mix.py`, those of the held-out `pydocs`
source in `pydocs.py`; the local sources, normalisation and sentence splitting in `corpora.py`.  This
module sits above all three (catalog -> en_mix / pydocs -> corpora), so none of them imports it.
"""

from __future__ import annotations

from pathlib import Path

from dstg_interp.data.corpora import (ZOO_SPLIT_SEED, ZOO_VAL_FRACTION, DataError, Document, default_cache_dir,
                                      load_hf_dataset, load_jsonl, load_text_folder, read_text_document,
                                      split_documents)
from dstg_interp.data.en_large import en_large_version, load_en_large
from dstg_interp.data.en_mix import en_mix_version, load_en_mix
from dstg_interp.data.forms import apply_forms, split_form_spec
from dstg_interp.data.pydocs import load_pydocs


def load_corpus(spec: str = "en-mix", cache_dir: str | Path | None = None, progress: bool = True,
                max_docs: int | None = None, text_field: str = "text") -> list[Document]:
    """Load a corpus as a list of Documents.

    spec: "en-mix" (or "en-mix:wikipedia,austen" for a subset of pieces), "en-large" (en-mix and twelve more
    pieces, about 15M tokens; "en-large:partial" skips pieces that cannot be fetched), "pydocs" (held-out
    Python documentation prose, see pydocs.py), a folder of *.txt files,
    a .jsonl file, or "hf:NAME[:CONFIG]:SPLIT". `max_docs` keeps the first documents only.
    Any spec may end in document forms, ``@words=N``, ``@first-cut``, ``@pack=K`` (``forms.py``): the same
    text cut into documents of another shape.  ``en-large:-wikipedia`` is en-large without a piece.
    Raises DataError (a ValueError) with one line when nothing usable is found.
    """
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs <= 0):
        raise DataError(f"max_docs must be a positive number of documents (or None for all), got {max_docs!r}")
    full_spec = spec
    spec, forms = split_form_spec(spec)
    if spec == "en-mix" or spec.startswith("en-mix:"):
        pieces = spec.split(":", 1)[1].split(",") if ":" in spec else None
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        documents = load_en_mix(cache, pieces=pieces, progress=progress)
    elif spec == "en-large" or spec.startswith("en-large:"):
        documents = load_en_large(spec, Path(cache_dir) if cache_dir is not None else default_cache_dir(), progress=progress)
    elif spec == "pydocs":
        documents = load_pydocs(Path(cache_dir) if cache_dir is not None else default_cache_dir(), progress=progress)
    elif spec.startswith("hf:"):
        documents = load_hf_dataset(spec, max_docs, text_field, progress)
    else:
        path = Path(spec)
        if path.is_dir():
            documents = load_text_folder(path, progress=progress)
        elif path.is_file() and path.suffix == ".jsonl":
            documents = load_jsonl(path, text_field)
        elif path.is_file() and path.suffix == ".txt":
            documents = [d for d in [read_text_document(path, path.name, path.stem, progress=progress)] if d]
        else:
            raise DataError(f"corpus spec {spec!r}: not 'en-mix', 'pydocs', 'hf:NAME[:CONFIG]:SPLIT', "
                            "a folder of *.txt files or a .jsonl file")
    if not documents:
        raise DataError(f"corpus {spec!r}: no documents with text found; "
                        "check the path (folders need *.txt files) or the spec")
    documents = apply_forms(documents, forms, full_spec)
    return documents[:max_docs] if max_docs is not None else documents


def corpus_version(spec: str) -> str | None:
    """The version of a named corpus whose text comes from the code's own recipe (en-mix and its piece
    subsets), for cache keys; None for a path (keyed on its content) or a hub dataset.  Document forms are
    part of the spec, so they key every cache through it."""
    spec, _ = split_form_spec(spec)
    if spec == "en-mix" or spec.startswith("en-mix:"):
        return en_mix_version(spec.split(":", 1)[1].split(",") if ":" in spec else None)
    if spec == "en-large" or spec.startswith("en-large:"):
        return en_large_version(spec, default_cache_dir())
    return None


def probing_documents(corpus: str = "en-mix", max_docs: int | None = None, progress: bool = True) -> list[Document]:
    """The documents to probe on.  For ``en-mix`` the held-out validation documents of the zoo's
    training split (``split_documents`` with ``ZOO_VAL_FRACTION`` and ``ZOO_SPLIT_SEED``, TrainConfig's defaults:
    the models never saw them); for any other corpus, all of its documents.  ``progress``: bars while a
    registry corpus is fetched and split the first time (a cached one reads silently)."""
    if max_docs is not None and (not isinstance(max_docs, int) or max_docs <= 0):
        raise ValueError(f"max_docs must be a positive number of documents (or None for all), got {max_docs!r}")
    documents = load_corpus(corpus, progress=progress)
    if corpus == "en-mix":
        _, documents = split_documents(documents, val_fraction=ZOO_VAL_FRACTION, seed=ZOO_SPLIT_SEED)
    return documents[:max_docs] if max_docs else documents
