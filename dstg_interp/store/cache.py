"""The store's own cache: one key from (weights, sequences, extraction config), one folder per key.

    from dstg_interp.store.cache import cached_extract
    store = cached_extract(encoder, sequences, "~/.cache/dstg-interp/stores", "dstg", layers=(0, 4), dtype="float16")
    store = cached_extract(encoder, sequences, root, "dstg", ExtractionConfig(attention_summaries=True))

A second call with the same weights, sequences and extraction config finds the same folder and reuses the
store in it (``extract`` checks the folder's identity); anything else that decides the states makes a new
key.  The probes, the figures and the extrapolation study all cache their stores this way.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from dstg_interp.config import config_or_fields
from dstg_interp.data.structure import DEFAULT_MAX_LENGTH
from dstg_interp.encoders import Encoder, open_encoder

from .config import ExtractionConfig
from .extract import extract
from .inputs import as_sequences
from .manifest import sequences_sha256, weights_sha256
from .reader import ActivationStore

__all__ = ["cached_extract", "cache_key", "folder_name"]


def folder_name(label: str) -> str:
    """A label made safe as one folder name (a path label must not point the store outside the cache)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._")[:80] or "model"


def cache_key(encoder: Encoder, sequences, config: ExtractionConfig) -> str:
    """16 hex digits of sha256(weights | sequences | extraction config): what decides a store's content."""
    settings = json.dumps(config.to_dict(), sort_keys=True)
    text = f"{weights_sha256(encoder.weights_module)}|{sequences_sha256(sequences)}|{settings}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_extract(model, sequences, cache_root, label: str, config: ExtractionConfig | None = None, *,
                   progress: bool = True, max_length: int = DEFAULT_MAX_LENGTH, windows: bool = True,
                   **fields) -> ActivationStore:
    """The store of ``model`` over ``sequences`` in ``cache_root / <label>-<key>``: extracted once, then reused.

    model: anything ``open_encoder`` takes.  sequences: StructuredSequences or Documents (tokenized as in
    ``extract``).  config: the ExtractionConfig, or its fields as keywords."""
    config = config_or_fields(ExtractionConfig, config, fields)
    encoder = open_encoder(model)
    sequences = as_sequences(encoder, sequences, max_length, windows)
    folder = Path(cache_root) / f"{folder_name(label)}-{cache_key(encoder, sequences, config)}"
    return extract(encoder, sequences, folder, config, progress=progress)
