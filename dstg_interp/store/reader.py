"""ActivationStore: lazy, read-only access to a folder written by ``extract`` / ``dstg-cache``.

    store = ActivationStore("runs/store-dstg")
    store.layers, store.subspaces                 # (0, 1, ..., 6, 'final'), ('sem', 'ap', 'full')
    X = store.states(6, "ap")                      # np.memmap [n_tokens, d_ap]; nothing read yet
    X = store.states(6, "full")                    # DSTG: ConcatenatedRows [sem | ap] (format 2), same indexing
    X = store.states(6, "ap", as_torch=True)       # torch tensor over the same mapping (copy-on-write)
    table = store.labels                           # DataFrame, one row per stored token
    rows = store.subsample(20_000, seed=0)         # sorted token rows, the same for the same seed
    X[rows], table.iloc[rows]
    store.attention.to_dataframe()                 # per (layer, head, term) summaries, if extracted
    with ActivationStore("runs/store-dstg") as store:   # held: no dstg-interp writer replaces it meanwhile
        ...

Opening a store checks that its files hold the bytes it was written with (sampled checksums, checksums.py;
``verify="full"`` reads every byte, ``"none"`` skips it): a damaged store is one StoreError naming the file.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch

from dstg_interp.data.labels import label_dtypes
from dstg_interp.io import reading_lock

from .attention import AttentionSummaries
from .checksums import StoreFileError, checksum_damage, open_plain, store_file
from .layout import ConcatenatedRows
from .manifest import MANIFEST_FILE, StoreError, read_manifest


def store_damage(out: Path, manifest: dict, checksums: Literal["sample", "full", "none"] = "sample") -> str | None:
    """What is wrong with the files of a complete-looking store, or None: a file missing or smaller than the
    manifest's shapes say (a manifest claiming 10^12 tokens, round 4 C1), arrays that disagree with its token
    count, or bytes other than those it was written with (its checksums; checksums.py)."""
    n_tokens = int(manifest.get("n_tokens", 0))
    arrays = [entry for entry in manifest.get("arrays", {}).values() if "file" in entry]  # DSTG full: from its parts
    for entry in manifest.get("arrays", {}).values():
        if list(entry.get("shape", [n_tokens]))[:1] != [n_tokens]:
            return f"{out / MANIFEST_FILE} gives an array of shape {entry.get('shape')} for {n_tokens} tokens"
    expected = [(entry["file"], int(np.prod(entry["shape"])) * (2 if entry.get("dtype") == "float16" else 4))
                for entry in arrays]
    dtypes = label_dtypes()
    expected += [(file, n_tokens * dtypes.get(column, np.dtype(np.int32)).itemsize)
                 for column, file in manifest.get("labels", {}).get("files", {}).items()]
    for file, data_bytes in expected:
        path = out / file
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size < data_bytes:
            return f"{path} is cut short ({path.stat().st_size} bytes, the manifest's shape needs over {data_bytes})"
    return None if checksums == "none" else checksum_damage(out, manifest, full=checksums == "full")


class ActivationStore:
    def __init__(self, directory: str | Path, verify: Literal["sample", "full", "none"] = "sample"):
        self.directory, self.verify = Path(directory), verify
        self._open()
        self._held = None

    def _open(self) -> None:
        self.manifest = read_manifest(self.directory)
        self.n_tokens = int(self.manifest["n_tokens"])
        self.n_sequences = int(self.manifest["n_sequences"])
        damage = store_damage(self.directory, self.manifest, self.verify)
        if damage:
            raise StoreError(f"{damage}; the store is damaged: delete {self.directory} and re-run the extraction")

    def __enter__(self) -> ActivationStore:
        """Hold the store for reading (a shared lock, ``dstg_interp.io.reading_lock``): a store being written is
        refused here, and no writer replaces it until the block ends.  Read again under the lock, so what is
        read is the store as it is held (round 4, X5)."""
        held = self._held = reading_lock(self.directory, "the store")
        held.__enter__()
        try:
            self._open()
            self.__dict__.pop("labels", None), self.__dict__.pop("documents", None)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)

    def __repr__(self) -> str:
        return (f"ActivationStore({str(self.directory)!r}, {self.n_tokens} tokens, layers={list(self.layers)}, "
                f"subspaces={list(self.subspaces)}, names={list(self.names)})")

    def __len__(self) -> int:
        return self.n_tokens

    @property
    def model_name(self) -> str | None:
        """How the model was named when this store was written (``open_encoder(..., name=)``, dstg-cache --name,
        else the naming rule); None for a store written before names were recorded."""
        return self.manifest.get("model_name")

    @property
    def layers(self) -> tuple:
        return tuple(self.manifest["layers"])

    @property
    def subspaces(self) -> tuple[str, ...]:
        return tuple(self.manifest["subspaces"])

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.manifest["names"])

    @property
    def dtype(self) -> str:
        return self.manifest["identity"]["extraction"]["dtype"]

    def states(self, layer, subspace: str | None = None, as_torch: bool = False):
        """Token states [n_tokens, d] of ``layer`` (int, "final", or a stored hook name) in ``subspace``.

        The subspace may be left out when the store has only one. Returns a read-only np.memmap, or with
        ``as_torch`` a torch tensor on a copy-on-write mapping (edits stay in memory, the file never changes).
        DSTG ``full`` in a format-2 store is a ConcatenatedRows over the ``sem`` and ``ap`` files (rows read
        when indexed, ``np.asarray`` reads all); with ``as_torch`` it is read into memory whole.
        """
        key = self._key(layer, subspace)
        entry = self.manifest["arrays"][key]
        if "parts" in entry:
            array = ConcatenatedRows([self._mapped(part, mmap_mode="r") for part in entry["parts"]])
            if list(array.shape) != entry["shape"]:
                raise StoreError(f"{self.directory}: {key} is {list(array.shape)} from its parts but the manifest says "
                                 f"{entry['shape']}; the store is damaged")
            array = np.asarray(array) if as_torch else array
        else:
            array = self._mapped(key, mmap_mode="c" if as_torch else "r")
        if as_torch:
            return torch.from_numpy(array)
        return array

    def _mapped(self, key: str, mmap_mode: Literal["r", "c"]) -> np.memmap:
        entry = self.manifest["arrays"][key]
        path = self.directory / entry["file"]
        if not path.is_file():
            raise StoreError(f"{path}: missing from the store; re-run the extraction")
        try:
            array = np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
        except ValueError as err:  # a file cut short or overwritten outside dstg-interp
            raise StoreError(f"{path}: damaged ({err}); delete {self.directory} and re-run the extraction") from None
        if list(array.shape) != entry["shape"]:
            raise StoreError(f"{path}: shape {list(array.shape)} but the manifest says {entry['shape']}; the store is damaged")
        return array

    def _key(self, layer, subspace) -> str:
        if isinstance(layer, str) and layer in self.names:
            return layer
        if subspace is None:
            if len(self.subspaces) != 1:
                raise StoreError(f"say which subspace: this store has {', '.join(self.subspaces)}")
            subspace = self.subspaces[0]
        if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool):
            layer = int(layer)
        key = f"{layer}/{subspace}"
        if key not in self.manifest["arrays"]:
            if subspace not in self.subspaces:
                raise StoreError(f"subspace {subspace!r} is not in this store (it has {', '.join(self.subspaces)})")
            raise StoreError(f"layer {layer!r} is not in this store (layers {list(self.layers)}, names {list(self.names)})")
        return key

    @cached_property
    def labels(self):
        """One row per stored token: sequence, input_ids, token/sentence/paragraph positions, intra positions,
        doc_index, is_special and the document's string ``doc_id`` (same columns as StructuredSequences.to_dataframe)."""
        files = self.manifest["labels"]["files"]
        table = pd.DataFrame({column: np.load(self.directory / file, allow_pickle=False) for column, file in files.items()})
        doc_ids = np.array([doc.get("doc_id") for doc in self.documents], dtype=object)
        table["doc_id"] = doc_ids[table["doc_index"].to_numpy()] if len(doc_ids) else None
        return table

    @cached_property
    def documents(self) -> list[dict]:
        try:
            with open_plain(store_file(self.directory, self.manifest["labels"]["documents"])) as handle:
                return json.loads(handle.read())
        except StoreFileError as err:
            raise StoreError(f"{err}; the store is damaged: delete {self.directory} and re-run the extraction") from None

    def subsample(self, n: int, seed: int = 0, exclude_special: bool = True) -> np.ndarray:
        """``n`` token rows drawn without replacement (all of them if fewer), sorted; a function of (n, seed) only."""
        if n < 0:
            raise StoreError(f"subsample size must be >= 0, got {n}")
        candidates = np.arange(self.n_tokens)
        if exclude_special:
            special = np.load(self.directory / self.manifest["labels"]["files"]["is_special"], mmap_mode="r")
            candidates = candidates[~np.asarray(special)]
        if n >= len(candidates):
            return candidates
        rng = np.random.default_rng(seed)
        return np.sort(rng.choice(candidates, size=n, replace=False))

    @cached_property
    def attention(self) -> AttentionSummaries:
        if not self.manifest.get("attention"):
            raise StoreError(f"{self.directory}: no attention summaries; extract with attention_summaries=True")
        return AttentionSummaries.load(self.directory)
