"""A store folder written from arrays we choose: planted directions with known answers (erasure, export, basis);
and FakeStore, the part of a store probe_store reads, in memory (ridge streaming, progress bars).

    store = write_synthetic_store(tmp_path / "s", {"3/full": X}, {"token_position": pos, ...}, doc_index)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dstg_interp.store import ActivationStore
from dstg_interp.data.labels import label_dtypes
from dstg_interp.store.manifest import FORMAT_VERSION


def write_synthetic_store(folder: Path, arrays: dict, labels: dict, doc_index, weights_sha256: str = "0" * 64,
                          config: dict | None = None) -> ActivationStore:
    """``arrays``: {"layer/subspace": [n, d]}; ``labels``: some of the label columns (data.labels; the rest are zeros)."""
    folder.mkdir(parents=True)
    doc_index = np.asarray(doc_index, dtype=np.int32)
    n = len(doc_index)
    columns = {"sequence": doc_index, "doc_index": doc_index, "is_special": np.zeros(n, bool)} | dict(labels)
    files = {}
    for column, dtype in label_dtypes().items():
        files[column] = f"labels_{column}.npy"
        np.save(folder / files[column], np.asarray(columns.get(column, np.zeros(n)), dtype=dtype))
    entries = {}
    for key, values in arrays.items():
        name = key.replace("/", "_") + ".npy"
        np.save(folder / name, np.asarray(values, dtype=np.float32))
        entries[key] = {"file": name, "shape": list(values.shape), "dtype": "float32", "hooks": []}
    documents = [{"doc_id": f"synthetic/{i}"} for i in range(int(doc_index.max()) + 1)]
    (folder / "documents.json").write_text(json.dumps(documents))
    layers = list(dict.fromkeys(int(k.split("/")[0]) for k in arrays))
    subspaces = list(dict.fromkeys(k.split("/")[1] for k in arrays))
    model_config = {"variant": "rope", "max_positions": int(np.max(columns.get("token_position", [0]))) + 1} | (config or {})
    manifest = {"format_version": FORMAT_VERSION, "complete": True,
                "identity": {"format_version": FORMAT_VERSION,
                             "model": {"kind": "dstg-interp", "weights_sha256": weights_sha256, "config": model_config},
                             "sequences": {"sha256": "synthetic", "n_sequences": len(documents), "n_tokens": n},
                             "extraction": {"layers": layers, "subspaces": subspaces, "dtype": "float32"}},
                "n_tokens": n, "n_sequences": len(documents), "arrays": entries,
                "labels": {"files": files, "documents": "documents.json"}, "attention": None,
                "layers": layers, "subspaces": subspaces, "names": []}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return ActivationStore(folder)


def planted_store(folder: Path, n_docs: int = 60, per_doc: int = 40, d: int = 12, seed: int = 0):
    """Token position = a linear function of a planted direction u; sentence index = of v, orthogonal to u and
    independent of position; the other directions noise.  Returns (store, u, v)."""
    rng = np.random.default_rng(seed)
    u, v = np.linalg.qr(rng.standard_normal((d, 2)))[0].T
    position = np.tile(np.arange(per_doc), n_docs)
    sentence = rng.integers(0, 6, size=n_docs * per_doc)
    noise = rng.standard_normal((n_docs * per_doc, d))
    noise -= np.outer(noise @ u, u) + np.outer(noise @ v, v)
    states = noise + np.outer((position - position.mean()) / position.std() * 3, u) + np.outer(sentence - 2.5, v)
    store = write_synthetic_store(folder, {"1/full": states}, {"token_position": position, "sentence_index": sentence},
                                  np.repeat(np.arange(n_docs), per_doc))
    return store, u, v


class FakeStore:
    """The part of ActivationStore that probe_store reads: labels and states; special tokens at sequence ends."""

    def __init__(self, n_docs, seed):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(8, 30, n_docs)
        self.n_tokens = int(lengths.sum())
        doc = np.repeat(np.arange(n_docs), lengths)
        position = np.arange(self.n_tokens) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        special = (position == 0) | (position == lengths[doc] - 1)
        self.labels = pd.DataFrame({"doc_index": doc, "token_position": position, "is_special": special})
        codes = np.column_stack([np.sin(position / 7), np.cos(position / 7), position / 30])
        self.X = (codes @ rng.normal(size=(3, 8)) + 0.1 * rng.normal(size=(self.n_tokens, 8))).astype(np.float16)
        self.layers, self.subspaces = (0,), ("full",)
        self.reads = []

    def subsample(self, n, seed=0, exclude_special=True):
        candidates = np.flatnonzero(~self.labels["is_special"].to_numpy())
        if n >= len(candidates):
            return candidates
        return np.sort(np.random.default_rng(seed).choice(candidates, size=n, replace=False))

    def states(self, layer, subspace):
        self.reads.append((layer, subspace))
        return self.X
