"""The store's contract: format version, errors, content hashes and the manifest that ties them together.

A store folder is complete exactly when ``manifest.json`` is in it with ``"complete": true``: extraction
writes everything into a temporary sibling folder and renames it only after the manifest is written, so
a folder under the final name is never half-written.

``identity`` is the part of the manifest that decides what the arrays hold (format version, weights,
model config, token sequences, extraction config). Two runs with equal identities write equal stores,
so a rerun returns the existing folder (also one of an older format that still reads: same arrays).
Library versions and timestamps are recorded but not compared.
"""

from __future__ import annotations

import hashlib
import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import transformers

import dstg_interp
from dstg_interp.data.labels import token_fields
from dstg_interp.io import read_json_file

FORMAT_VERSION = 2  # 2: DSTG full = [sem | ap] is served on read, not written (layout.py)
READABLE_VERSIONS = (1, 2)  # 1: full written as its own file; the reader serves both
MANIFEST_FILE = "manifest.json"


class StoreError(ValueError):
    """Bad input to extraction or a store that cannot be read. The message is one line: what, where, what to do."""


class StoreInterrupted(StoreError, KeyboardInterrupt):
    """Ctrl-C during extraction. Still a KeyboardInterrupt, so ``except KeyboardInterrupt`` keeps working."""


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, bytes) of every tensor in the state dict, sorted by name.

    Hashing the live tensors rather than the checkpoint file keeps the hash true when a model was
    built in memory or edited after loading."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        if tensor.numel():
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def file_sha256(path: str | Path, chunk: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sequences_sha256(sequences) -> str:
    """sha256 of every token field and the sequence boundaries, in a fixed order.

    Works on ``StructuredSequences`` (flat arrays, one update per field) and on any object with
    ``len``/``__getitem__`` returning dicts of arrays (one sequence at a time, bounded memory)."""
    digest, fields = hashlib.sha256(), token_fields()
    if hasattr(sequences, "arrays") and hasattr(sequences, "offsets"):
        digest.update(np.ascontiguousarray(sequences.offsets, dtype=np.int64).tobytes())
        for field in fields:
            digest.update(field.encode())
            digest.update(np.ascontiguousarray(sequences.arrays[field]).tobytes())
    else:
        for index in range(len(sequences)):
            item = sequences[index]
            digest.update(np.int64(len(item["input_ids"])).tobytes())
            for field in fields:
                digest.update(np.ascontiguousarray(item[field]).tobytes())
    documents = getattr(sequences, "meta", {}).get("documents", [])
    digest.update(json.dumps(documents, sort_keys=True).encode())
    return digest.hexdigest()


def versions() -> dict:
    return {"dstg_interp": dstg_interp.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "transformers": transformers.__version__}


def build_manifest(identity: dict, arrays: dict, labels: dict, attention: dict | None, n_tokens: int,
                   n_sequences: int, extra: dict) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "complete": True,
        "identity": identity,
        "n_tokens": n_tokens,
        "n_sequences": n_sequences,
        "arrays": arrays,
        "labels": labels,
        "attention": attention,
        "versions": versions(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")


def read_manifest(folder: str | Path) -> dict:
    """The manifest of a complete store of this format version, or one clear StoreError."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not folder.is_dir():
        raise StoreError(f"{folder}: no such store folder; create it with dstg_interp.extract or dstg-cache")
    if not path.is_file():
        raise StoreError(f"{folder}: no {MANIFEST_FILE}, so not a complete activation store; re-run the extraction")
    manifest = read_json_file(path, StoreError, "; delete the folder and re-run the extraction")
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise StoreError(f"{folder}: store format version {version}, this dstg-interp reads versions {readable}; "
                         "re-extract it (overwrite=True / --overwrite) or use the dstg-interp that wrote it")
    if manifest.get("complete") is not True:
        raise StoreError(f"{folder}: manifest says the store is incomplete; re-run the extraction")
    problem = manifest_problem(manifest)
    if problem:
        raise StoreError(f"{path}: {problem}; the store is damaged: delete {folder} and re-run the extraction")
    return manifest


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def manifest_problem(manifest: dict) -> str | None:
    """What is wrong with the manifest's own fields (types, ranges, required keys), in words naming the key, or
    None.  Every reader passes here first, so an edited or damaged manifest is one line, never a traceback
    (round 5: M3, M4, M10-M19)."""
    for key in ("n_tokens", "n_sequences"):
        if not _count(manifest.get(key)):
            return f"{key} must be a count (a whole number >= 0), got {manifest.get(key)!r}"
    arrays = manifest.get("arrays")
    if not isinstance(arrays, dict):
        return f"arrays must be a table of the stored arrays, got {type(arrays).__name__}"
    for name, entry in arrays.items():
        if not isinstance(entry, dict):
            return f"arrays[{name!r}] must be a table, got {type(entry).__name__}"
        shape = entry.get("shape")
        if "file" in entry and not isinstance(entry["file"], str):
            return f"arrays[{name!r}].file must be a file name, got {entry['file']!r}"
        if shape is not None and (not isinstance(shape, list) or len(shape) != 2 or not all(map(_count, shape))
                                  or shape[1] < 1):
            return f"arrays[{name!r}].shape must be [tokens, width >= 1], got {shape!r}"
    labels = manifest.get("labels")
    if not isinstance(labels, dict) or not isinstance(labels.get("files"), dict) \
            or not all(isinstance(f, str) for f in labels["files"].values()):
        return "labels must be a table whose files name one file per label column"
    if "documents" in labels and not isinstance(labels["documents"], str):
        return f"labels.documents must be a file name, got {labels['documents']!r}"
    checksums = manifest.get("checksums")
    if checksums is not None:
        if not isinstance(checksums, dict) or not isinstance(checksums.get("files", {}), dict):
            return "checksums must be a table whose files map each file to its digests"
        for name, entry in checksums.get("files", {}).items():
            if not isinstance(entry, dict) or not _count(entry.get("bytes")):
                return f"checksums.files[{name!r}] must be a table with a byte count, got {entry!r}"
    return None
