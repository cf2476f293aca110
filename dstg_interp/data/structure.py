"""Structured sequences: token ids plus per-token structure labels, one document per sequence.

    from dstg_interp.data import build_structured_sequences, StructuredSequences
    sequences = build_structured_sequences(docs, tokenizer, max_length=256, windows=True)
    sequences.save("runs/seq/train")                 # .npy arrays + meta.json, atomic
    sequences = StructuredSequences.load("runs/seq/train")
    item = sequences[0]                              # dict of int arrays, all of one length
    table = sequences.to_dataframe()                 # one row per token

Layout of a sequence: [CLS] tokens... [SEP], at most max_length tokens; when a document is longer it
is truncated and the last token is still [SEP]. No packing: a sequence never mixes documents.
With windows=True the rest of a long document becomes further sequences, each with its own [CLS]:
a window starts at the first sentence the previous window did not fully include (if a window holds
only part of one over-long sentence, the next starts at the following sentence, so nothing repeats).

Labels: the per-token columns of ``data.labels.LABELS`` (token / sentence / paragraph index, intra-sentence and
intra-paragraph position, doc_index, is_special), each with its dtype and meaning there, all counted within the
sequence from 0. Padding is added later, by `mlm.collate`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from dstg_interp.data.labels import label_dtypes, token_fields
from dstg_interp.data.tokenizer import CLS_ID, SEP_ID, tokenizer_hash

FORMAT_VERSION = 1


class StructuredSequences:
    """Ragged sequences stored flat: field[offsets[i]:offsets[i + 1]] belongs to sequence i."""

    def __init__(self, arrays: dict[str, np.ndarray], offsets: np.ndarray, meta: dict):
        self.arrays, self.offsets, self.meta = arrays, offsets, meta

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"sequence {index} out of range for {len(self)} sequences")
        index %= len(self)
        start, end = self.offsets[index], self.offsets[index + 1]
        return {name: array[start:end] for name, array in self.arrays.items()}

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def documents(self) -> list[dict]:
        return self.meta["documents"]

    def select(self, indices) -> "StructuredSequences":
        """The sequences at ``indices`` (in that order), same meta: e.g. only the windows that cross a paragraph."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        token_index = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in indices]) \
            if len(indices) else np.zeros(0, dtype=np.int64)
        arrays = {name: array[token_index] for name, array in self.arrays.items()}
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return StructuredSequences(arrays, offsets, dict(self.meta, selected=len(indices)))

    def to_dataframe(self):
        """One row per token: `sequence` plus every token field, and the document's string id."""
        table = pd.DataFrame({"sequence": np.repeat(np.arange(len(self)), self.lengths), **self.arrays})
        doc_ids = np.array([doc["doc_id"] for doc in self.documents], dtype=object)
        table["doc_id"] = doc_ids[table["doc_index"].to_numpy()] if len(doc_ids) else []
        return table

    def save(self, directory: str | Path) -> None:
        """Write `<field>.npy` + offsets.npy + meta.json into a temp folder, then rename it in place."""
        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        temporary = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        for name, array in {**self.arrays, "offsets": self.offsets}.items():
            np.save(temporary / f"{name}.npy", array, allow_pickle=False)
        (temporary / "meta.json").write_text(json.dumps(self.meta, indent=1, ensure_ascii=False))
        if directory.exists():  # a folder cannot be replaced by rename: move the old one aside first
            previous = directory.with_name(f".{directory.name}.old-{os.getpid()}")
            directory.rename(previous)
            temporary.rename(directory)
            shutil.rmtree(previous)
        else:
            temporary.rename(directory)

    @classmethod
    def load(cls, directory: str | Path) -> "StructuredSequences":
        directory = Path(directory)
        meta = json.loads((directory / "meta.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: format_version {meta.get('format_version')} != {FORMAT_VERSION}")
        arrays = {name: np.load(directory / f"{name}.npy", allow_pickle=False) for name in token_fields()}
        return cls(arrays, np.load(directory / "offsets.npy", allow_pickle=False), meta)


def _document_sequences(sentence_ids: list[list[int]], sentence_paragraph: np.ndarray,
                        max_length: int, windows: bool):
    """Yield (token_ids, label arrays) for one document given its sentences' token ids."""
    capacity = max_length - 2
    sentence_lengths = np.array([len(ids) for ids in sentence_ids], dtype=np.int64)
    if sentence_lengths.sum() == 0:
        return
    sentence_starts = np.concatenate([[0], np.cumsum(sentence_lengths)])  # token offsets in the document
    tokens = np.array([token for ids in sentence_ids for token in ids], dtype=np.int32)
    token_sentence = np.repeat(np.arange(len(sentence_ids)), sentence_lengths)
    token_paragraph = sentence_paragraph[token_sentence]
    first_sentence = 0
    while first_sentence < len(sentence_ids):
        start = sentence_starts[first_sentence]
        end = min(start + capacity, sentence_starts[-1])
        if end > start:
            span = np.arange(start, end)
            sentences, paragraphs = token_sentence[span], token_paragraph[span]
            # first token of each paragraph inside this window (the window may open mid-paragraph)
            paragraph_first = np.maximum(sentence_starts[np.searchsorted(sentence_paragraph, paragraphs)], start)
            labels = {
                "sentence_index": sentences - sentences[0],
                "paragraph_index": paragraphs - paragraphs[0],
                "intra_sentence_position": span - sentence_starts[sentences],
                "intra_paragraph_position": span - paragraph_first,
            }
            yield tokens[start:end], labels
        if not windows:
            return
        fully_included = np.searchsorted(sentence_starts, end, side="right") - 1  # sentences ending <= end
        first_sentence = max(fully_included, first_sentence + 1)


# Tokens per sequence wherever a length is not given (dstg-cache, extract, the probes, the zoo's training): one
# number, clamped to a model's position table in one place (``Encoder.structured_sequences``).
DEFAULT_MAX_LENGTH = 256


def build_structured_sequences(documents, tokenizer, max_length: int = DEFAULT_MAX_LENGTH, windows: bool = False,
                               corpus_spec: str = "") -> StructuredSequences:
    """Tokenize every sentence (one `encode_batch` call, no special tokens) and assemble sequences."""
    if max_length < 3:
        raise ValueError(f"max_length must be >= 3 to hold [CLS], a token and [SEP], got {max_length}")
    all_sentences = [sentence for doc in documents for paragraph in doc.paragraphs for sentence in paragraph]
    encodings = tokenizer.encode_batch(all_sentences, add_special_tokens=False)
    columns: dict[str, list] = {name: [] for name in token_fields()}
    lengths, cursor = [], 0
    for doc_index, doc in enumerate(documents):
        n_sentences = sum(len(paragraph) for paragraph in doc.paragraphs)
        sentence_ids = [encoding.ids for encoding in encodings[cursor:cursor + n_sentences]]
        cursor += n_sentences
        sentence_paragraph = np.repeat(np.arange(len(doc.paragraphs)), [len(p) for p in doc.paragraphs])
        for content_ids, labels in _document_sequences(sentence_ids, sentence_paragraph, max_length, windows):
            n = len(content_ids) + 2
            last_sentence, last_paragraph = labels["sentence_index"][-1], labels["paragraph_index"][-1]
            columns["input_ids"].append(np.concatenate([[CLS_ID], content_ids, [SEP_ID]]))
            columns["token_position"].append(np.arange(n))
            columns["sentence_index"].append(np.concatenate([[0], labels["sentence_index"], [last_sentence]]))
            columns["paragraph_index"].append(np.concatenate([[0], labels["paragraph_index"], [last_paragraph]]))
            for name in ("intra_sentence_position", "intra_paragraph_position"):
                columns[name].append(np.concatenate([[-1], labels[name], [-1]]))
            columns["doc_index"].append(np.full(n, doc_index))
            special = np.zeros(n, dtype=bool)
            special[[0, -1]] = True
            columns["is_special"].append(special)
            lengths.append(n)
    arrays, dtypes = {}, label_dtypes()
    for name, parts in columns.items():
        arrays[name] = np.concatenate(parts).astype(dtypes[name]) if parts else np.zeros(0, dtype=dtypes[name])
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    meta = {
        "format_version": FORMAT_VERSION,
        "tokenizer_hash": tokenizer_hash(tokenizer),
        "corpus_spec": corpus_spec,
        "max_length": max_length,
        "windows": windows,
        "documents": [{"doc_id": doc.doc_id, "source": doc.source} for doc in documents],
    }
    return StructuredSequences(arrays, offsets, meta)
