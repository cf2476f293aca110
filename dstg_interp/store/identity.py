"""A store folder's identity: what makes a store this store, and whether a folder already holds it.

    identity = extraction_identity(encoder, sequences, lengths, config)   # format, weights, sequences, config
    is_reusable(out, identity, overwrite)     # True: ``out`` holds this exact, undamaged store (extract returns it)
    is_store_folder(path), store_foreign_entries(path)   # a folder extraction wrote / the entries it did not

The identity is written into the manifest (``manifest.json``, "identity") and compared, field by field, when
``extract`` is asked for a store that may already be on disk: the same store is reused, a damaged copy of it
rebuilt, a different one (or a folder we did not write) refused unless ``overwrite``.  The cache key of
``cache.py`` names folders by the same three things (weights, sequences, extraction config).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from dstg_interp.config import ModelConfig
from dstg_interp.encoders import Encoder
from dstg_interp.io import OutputError, check_replaceable, folder_entries, foreign_entries

from .config import ExtractionConfig
from .manifest import FORMAT_VERSION, MANIFEST_FILE, StoreError, read_manifest, sequences_sha256, weights_sha256
from .reader import store_damage

__all__ = ["extraction_identity", "is_reusable", "is_store_folder", "store_foreign_entries"]


def extraction_identity(encoder: Encoder, sequences, lengths: np.ndarray, config: ExtractionConfig) -> dict:
    """What makes a store this store: format, weights, sequences and extraction config (the manifest's identity)."""
    return {
        "format_version": FORMAT_VERSION,
        "model": {"kind": encoder.kind, "weights_sha256": weights_sha256(encoder.weights_module),
                  "config": encoder.config.to_dict()},
        "sequences": {"sha256": sequences_sha256(sequences), "n_sequences": len(lengths), "n_tokens": int(lengths.sum())},
        "extraction": config.to_dict(),
    }


def store_foreign_entries(path: Path) -> list[str]:
    """Entries of ``path`` that are not part of a store (all of them when it has no readable manifest)."""
    if not (path / MANIFEST_FILE).is_file():  # missing, or a FIFO / device that would block the read
        return folder_entries(path)
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return folder_entries(path)
    if not isinstance(manifest, dict) or "format_version" not in manifest:
        return folder_entries(path)
    listed = {MANIFEST_FILE, "documents.json", "extraction.json", "attention.npz", "attention.json"}
    listed |= {entry.get("file") for entry in (manifest.get("arrays") or {}).values() if isinstance(entry, dict)}
    listed |= set(((manifest.get("labels") or {}).get("files") or {}).values())
    return foreign_entries(path, listed)


def _current_model_identity(model: dict | None):
    """A stored model identity with its config read through today's ModelConfig: fields added since (all with
    defaults that keep the old behaviour) must not make an old store look like another model's."""
    if not isinstance(model, dict) or model.get("kind") != "dstg-interp" or not isinstance(model.get("config"), dict):
        return model
    try:
        return {**model, "config": ModelConfig.from_dict(model["config"]).to_dict()}
    except (TypeError, ValueError):
        return model


def is_store_folder(path: Path) -> bool:
    """A folder extraction wrote: a manifest, and nothing that the manifest does not account for."""
    return (path / MANIFEST_FILE).is_file() and not store_foreign_entries(path)


def is_reusable(out: Path, identity: dict, overwrite: bool) -> bool:
    """True when ``out`` already holds this exact, undamaged store; raises when it holds something that may
    not be replaced (see dstg_interp.io.check_replaceable): a file, a folder we did not write, or without
    ``overwrite`` a different store.  A damaged copy of this same store is rebuilt: nothing is lost."""
    if not out.exists() or (out.is_dir() and not folder_entries(out)):
        return False
    if out.is_dir() and is_store_folder(out):
        try:
            manifest = read_manifest(out)
        except StoreError:  # another format version or an incomplete manifest: replaceable with overwrite only
            if not overwrite:
                raise
            manifest = None
        # An older format that still reads holds the same arrays: reuse it rather than extract again.
        same_format = None if manifest is None else {**manifest.get("identity", {}), "format_version": identity["format_version"],
                                                     "model": _current_model_identity(manifest.get("identity", {}).get("model"))}
        if manifest is not None and same_format == json.loads(json.dumps(identity)):
            damage = store_damage(out, manifest)
            if damage:  # this same store, damaged: said, and rebuilt rather than read (round 4, P2)
                warnings.warn(f"{damage}; the store {out} is damaged and is extracted again", stacklevel=2)
            return damage is None
        if manifest is not None and not overwrite:
            differs = [key for key in ("model", "sequences", "extraction") if manifest["identity"].get(key) != identity[key]]
            raise StoreError(f"{out} holds a different store ({', '.join(differs)} differ); choose another out folder "
                             "or pass --overwrite (overwrite=True)")
    try:
        check_replaceable(out, "an activation store", store_foreign_entries, overwrite, flag="out folder",
                          overwrite_flag="--overwrite (overwrite=True)")
    except OutputError as err:
        raise StoreError(str(err)) from None
    return False
