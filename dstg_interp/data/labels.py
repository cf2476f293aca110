"""The per-token columns, named once: one row per column (``LABELS``, data), read by the structured sequences,
the store (its files, manifest and content hash), the probes and erasure.

    LABELS["sentence_index"].meaning         # "index of the token's sentence in the sequence"
    token_fields()                           # the arrays of a StructuredSequences, in hashing order
    position_labels()                        # the position labels a probe or an eraser reads

Every number counts within its sequence, from 0 ([CLS] has sentence / paragraph index 0 and intra positions -1,
the final [SEP] the last sentence / paragraph index and -1).  A new column is one row here (and its values where
``data.structure`` builds a sequence's).  Table order is the order of the files, the hash and the columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Label:
    """One per-token column: its numpy dtype, what it means and what kind of column it is."""

    name: str
    dtype: Literal["int32", "bool"]
    meaning: str
    # token: what the model reads; position: a position label (probe and erasure target); document: where the
    # token comes from; store: written by extraction only (not a field of StructuredSequences)
    kind: Literal["token", "position", "document", "store"]


LABELS: dict[str, Label] = {row.name: row for row in (
    Label("sequence", "int32", "which of the store's sequences the token belongs to", "store"),
    Label("input_ids", "int32", "token id", "token"),
    Label("token_position", "int32", "index in the sequence", "position"),
    Label("sentence_index", "int32", "index of the token's sentence in the sequence", "position"),
    Label("paragraph_index", "int32", "index of the token's paragraph in the sequence", "position"),
    Label("intra_sentence_position", "int32", "index of the token inside its sentence (windows start at sentence "
          "starts)", "position"),
    Label("intra_paragraph_position", "int32", "index inside its paragraph, counted from the paragraph's first "
          "token in this sequence (a window can start mid-paragraph)", "position"),
    Label("doc_index", "int32", "row in the documents table (meta.json / documents.json)", "document"),
    Label("is_special", "bool", "True at [CLS] / [SEP]", "token"),
)}


def label_row(name: str) -> Label:
    """The row of column ``name``, or one clear ValueError naming the known columns."""
    row = LABELS.get(name) if isinstance(name, str) else None
    if row is None:
        raise ValueError(f"unknown label column {name!r}; known: {', '.join(LABELS)}")
    return row


def label_dtypes() -> dict[str, np.dtype]:
    """Every column a store writes, one ``labels_<name>.npy`` each, and its dtype."""
    return {name: np.dtype(row.dtype) for name, row in LABELS.items()}


def label_bytes() -> int:
    """Bytes one token's labels take in a store (one value per column)."""
    return sum(dtype.itemsize for dtype in label_dtypes().values())


def token_fields() -> list[str]:
    """The per-token arrays of a StructuredSequences (every column but the store's own), in table order."""
    return [name for name, row in LABELS.items() if row.kind != "store"]


def position_labels() -> tuple[str, ...]:
    """The position labels: what the probes and the erasers read as targets."""
    return tuple(name for name, row in LABELS.items() if row.kind == "position")
