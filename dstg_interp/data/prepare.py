"""Prepared training data: corpus -> train/validation split -> tokenizer -> structured sequences, cached.

    from dstg_interp.data.prepare import prepare_data
    prepared = prepare_data("en-mix", max_length=256, windows=True, vocab_size=8192)
    prepared.tokenizer, prepared.train, prepared.validation, prepared.directory

Everything that determines the result keys a folder under ``<cache>/prepared/<key>/`` holding
``tokenizer.json``, ``train/``, ``validation/`` and ``recipe.json``; a second call (another variant of the
zoo, another rank of a DDP run, a rerun) loads it instead of rebuilding.  The tokenizer is trained on the
training split only, unless an existing ``tokenizer.json`` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from .catalog import load_corpus
from .corpora import DataError, default_cache_dir, split_documents
from .structure import StructuredSequences, build_structured_sequences
from .tokenizer import load_tokenizer, save_tokenizer, tokenizer_hash, train_tokenizer

PREPARE_VERSION = 1


@dataclass
class PreparedData:
    tokenizer: Tokenizer
    train: StructuredSequences
    validation: StructuredSequences
    directory: Path
    recipe: dict


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def data_recipe(corpus: str, max_length: int, windows: bool, vocab_size: int, val_fraction: float,
                split_seed: int, max_docs: int | None, tokenizer_path: str | None) -> dict:
    """Everything that decides the prepared data, as a JSON-able dict (its hash is the cache key)."""
    is_local = not corpus.startswith(("en-mix", "hf:")) and Path(corpus).exists()
    recipe = dict(version=PREPARE_VERSION, corpus=str(Path(corpus).resolve()) if is_local else corpus,
                  max_length=max_length, windows=windows, vocab_size=vocab_size, val_fraction=val_fraction,
                  split_seed=split_seed, max_docs=max_docs,
                  tokenizer_sha256=_file_sha256(Path(tokenizer_path)) if tokenizer_path else None)
    if is_local:  # a folder or file can change under the same name: key on its content
        path = Path(corpus)
        digest = hashlib.sha256()
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(file.name.encode() + _file_sha256(file).encode())
        recipe["corpus_sha256"] = digest.hexdigest()
    return recipe


def prepare_data(corpus: str = "en-mix", max_length: int = 256, windows: bool = True, vocab_size: int = 8192,
                 val_fraction: float = 0.05, split_seed: int = 0, max_docs: int | None = None,
                 tokenizer_path: str | None = None, cache_dir: str | Path | None = None,
                 progress: bool = True) -> PreparedData:
    recipe = data_recipe(corpus, max_length, windows, vocab_size, val_fraction, split_seed, max_docs, tokenizer_path)
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = root / "prepared" / key
    if (directory / "recipe.json").is_file():
        return PreparedData(load_tokenizer(directory / "tokenizer.json"), StructuredSequences.load(directory / "train"),
                            StructuredSequences.load(directory / "validation"), directory, recipe)

    documents = load_corpus(corpus, cache_dir=cache_dir, progress=progress, max_docs=max_docs)
    train_docs, val_docs = split_documents(documents, val_fraction=val_fraction, seed=split_seed)
    if not train_docs or (val_fraction > 0 and not val_docs):
        raise DataError(f"corpus {corpus!r}: {len(documents)} documents are too few for a train/validation split; add text")
    if tokenizer_path:
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        tokenizer = train_tokenizer(train_docs, vocab_size=vocab_size)
    train = build_structured_sequences(train_docs, tokenizer, max_length=max_length, windows=windows, corpus_spec=corpus)
    validation = build_structured_sequences(val_docs, tokenizer, max_length=max_length, windows=windows, corpus_spec=corpus)

    # Built in a temporary sibling and renamed, so concurrent preparers never see half a folder.
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{key}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_tokenizer(tokenizer, tmp / "tokenizer.json")
    train.save(tmp / "train")
    validation.save(tmp / "validation")
    stats = dict(documents=len(documents), train_documents=len(train_docs), validation_documents=len(val_docs),
                 train_sequences=len(train), train_tokens=train.n_tokens, validation_sequences=len(validation),
                 validation_tokens=validation.n_tokens, tokenizer_sha256=tokenizer_hash(tokenizer))
    (tmp / "recipe.json").write_text(json.dumps(dict(recipe=recipe, stats=stats), indent=2) + "\n")
    try:
        os.replace(tmp, directory)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return PreparedData(load_tokenizer(directory / "tokenizer.json"), StructuredSequences.load(directory / "train"),
                        StructuredSequences.load(directory / "validation"), directory, recipe)
