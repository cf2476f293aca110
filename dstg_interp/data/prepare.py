"""Prepared training data: corpus -> train/validation split -> tokenizer -> structured sequences, cached.

    from dstg_interp.data.prepare import prepare_data
    prepared = prepare_data("en-mix", max_length=256, windows=True, vocab_size=8192)
    prepared.tokenizer, prepared.train, prepared.validation, prepared.directory

Everything that determines the result keys a folder under ``<cache>/prepared/<key>/`` holding
``tokenizer.json``, ``train/``, ``validation/`` and ``recipe.json``; a second call (another variant of the
zoo, another rank of a DDP run, a rerun) loads it instead of rebuilding.  The tokenizer is trained on the
training split only, unless an existing ``tokenizer.json`` (or a model's tokenizer) is given.

One tokenizer per key: the recipe names what a trained tokenizer depends on (the corpus's version, the
training procedure and the tokenizers library, ``TOKENIZER_TRAINING``), training is deterministic, and
data prepared with a given tokenizer is keyed on that tokenizer.  So a model's own data is found again
from its tokenizer (``prepare_data(..., tokenizer=model.tokenizer)``: what ``dstg-eval`` and
``dstg-train --resume`` do), whichever process prepared the cache first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from .catalog import corpus_version, load_corpus
from .corpora import ZOO_SPLIT_SEED, ZOO_VAL_FRACTION, DataError, default_cache_dir, split_documents
from .structure import DEFAULT_MAX_LENGTH, StructuredSequences, build_structured_sequences
from .tokenizer import TOKENIZER_TRAINING, load_tokenizer, save_tokenizer, tokenizer_hash, train_tokenizer

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
                split_seed: int, max_docs: int | None, tokenizer_path: str | None, tokenizer: Tokenizer | None = None) -> dict:
    """Everything that decides the prepared data, as a JSON-able dict (its hash is the cache key).
    ``tokenizer``: a tokenizer object to use (keyed on its vocabulary), instead of a file or training one."""
    is_local = not corpus.startswith(("en-mix", "en-large", "hf:")) and Path(corpus).exists()
    recipe = dict(version=PREPARE_VERSION, corpus=str(Path(corpus).resolve()) if is_local else corpus,
                  max_length=max_length, windows=windows, vocab_size=vocab_size, val_fraction=val_fraction,
                  split_seed=split_seed, max_docs=max_docs,
                  tokenizer_sha256=_file_sha256(Path(tokenizer_path)) if tokenizer_path else None)
    if tokenizer is not None:
        recipe["tokenizer_sha256"] = None
        recipe["tokenizer_vocab_sha256"] = tokenizer_hash(tokenizer)
    elif not tokenizer_path:
        recipe["tokenizer_training"] = TOKENIZER_TRAINING
    version = corpus_version(corpus)
    if version is not None:  # a named corpus whose content can change with the code (en-mix's pieces)
        recipe["corpus_version"] = version
    if is_local:  # a folder or file can change under the same name: key on its content
        path = Path(corpus)
        digest = hashlib.sha256()
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(file.name.encode() + _file_sha256(file).encode())
        recipe["corpus_sha256"] = digest.hexdigest()
    return recipe


def recipe_key(recipe: dict) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def prepared_directory(recipe: dict, cache_dir: str | Path | None = None) -> Path:
    """The cache entry of ``recipe``: ``<cache>/prepared/<key>``."""
    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "prepared" / recipe_key(recipe)


def load_prepared(directory: Path, recipe: dict) -> PreparedData | None:
    """The complete cache entry in ``directory``, or None.  An entry whose tokenizer is not the one its
    recipe.json records (edited or damaged from outside) is refused, naming the entry to remove."""
    if not (directory / "recipe.json").is_file():
        return None
    tokenizer = load_tokenizer(directory / "tokenizer.json")
    try:
        recorded = json.loads((directory / "recipe.json").read_text())["stats"]["tokenizer_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    if recorded != tokenizer_hash(tokenizer):
        raise DataError(f"prepared data {directory}: its tokenizer.json is not the one its recipe.json records; "
                        f"remove {directory} and run again to rebuild it")
    return PreparedData(tokenizer, StructuredSequences.load(directory / "train"),
                        StructuredSequences.load(directory / "validation"), directory, recipe)


def prepare_data(corpus: str = "en-mix", max_length: int = DEFAULT_MAX_LENGTH, windows: bool = True, vocab_size: int = 8192,
                 val_fraction: float = ZOO_VAL_FRACTION, split_seed: int = ZOO_SPLIT_SEED, max_docs: int | None = None,
                 tokenizer_path: str | None = None, cache_dir: str | Path | None = None,
                 progress: bool = True, tokenizer: Tokenizer | None = None) -> PreparedData:
    """The prepared data of this recipe, from the cache or built (and cached).  ``tokenizer``: tokenize with
    this one (a model's own): the entry that trained exactly this tokenizer is used if there is one, else
    an entry keyed on it is built."""
    args = (corpus, max_length, windows, vocab_size, val_fraction, split_seed, max_docs)
    if tokenizer is not None:
        # the entry this tokenizer was made or given for, if it exists here; else one keyed on the tokenizer
        usable_path = tokenizer_path if tokenizer_path and Path(tokenizer_path).is_file() else None
        if usable_path and tokenizer_hash(load_tokenizer(usable_path)) != tokenizer_hash(tokenizer):
            usable_path = None
        if usable_path or not tokenizer_path:
            first_recipe = data_recipe(*args, usable_path)
            first = load_prepared(prepared_directory(first_recipe, cache_dir), first_recipe)
            if first is not None and tokenizer_hash(first.tokenizer) == tokenizer_hash(tokenizer):
                return first
        tokenizer_path = usable_path
    recipe = data_recipe(*args, tokenizer_path, tokenizer if not tokenizer_path else None)
    directory = prepared_directory(recipe, cache_dir)
    cached = load_prepared(directory, recipe)
    if cached is not None:
        return cached

    documents = load_corpus(corpus, cache_dir=cache_dir, progress=progress, max_docs=max_docs)
    train_docs, val_docs = split_documents(documents, val_fraction=val_fraction, seed=split_seed)
    if not train_docs or (val_fraction > 0 and not val_docs):
        raise DataError(f"corpus {corpus!r}: {len(documents)} documents are too few for a train/validation split; add text")
    if tokenizer_path:
        tokenizer = load_tokenizer(tokenizer_path)
    elif tokenizer is None:
        tokenizer = train_tokenizer(train_docs, vocab_size=vocab_size)
    train = build_structured_sequences(train_docs, tokenizer, max_length=max_length, windows=windows, corpus_spec=corpus)
    validation = build_structured_sequences(val_docs, tokenizer, max_length=max_length, windows=windows, corpus_spec=corpus)

    # Built in a temporary sibling and renamed, so concurrent preparers never see half a folder.
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_tokenizer(tokenizer, tmp / "tokenizer.json")
    train.save(tmp / "train")
    validation.save(tmp / "validation")
    stats = dict(documents=len(documents), train_documents=len(train_docs), validation_documents=len(val_docs),
                 train_sequences=len(train), train_tokens=train.n_tokens, validation_sequences=len(validation),
                 validation_tokens=validation.n_tokens, tokenizer_sha256=tokenizer_hash(tokenizer),
                 sources={source: sum(doc.source == source for doc in documents)  # the pieces this data holds
                          for source in dict.fromkeys(doc.source for doc in documents)})
    (tmp / "recipe.json").write_text(json.dumps(dict(recipe=recipe, stats=stats), indent=2) + "\n")
    try:
        os.replace(tmp, directory)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    prepared = load_prepared(directory, recipe)
    if prepared is None:
        raise DataError(f"prepared data {directory} vanished while it was being used; run again")
    return prepared
