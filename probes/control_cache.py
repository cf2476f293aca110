"""The random-init control's outcome, kept: one small JSON per (twin, tokens, probe), reused by a rerun.

    entry = control_entry(cache_dir() / "controls", twin, sequences, rows, sets, settings)
    control_r2 = entry.read(expected)     # {(layer, subspace): test R²}, or None (absent; damaged: said)
    entry.write(control_r2)               # after the twin was run

The control (``probes.positions``: ``random_init_r2``, a model of the same config with fresh weights) depends on
the twin, the tokens and what is probed, never on the trained weights: a rerun of a model, or another model of the
same architecture and seed, would run the same twin over the same tokens for the same numbers. ``storeless_fits``
asks this module first and skips the twin's forward pass when an entry for its key is here.

The key (``KEY_FIELDS``, sha256 of their canonical JSON; the file is ``random-init-<key>.json``): the twin's weights
(``weights_sha256``, as the store cache keys the twin's store: architecture, seed and the initialisation code all
decide them; its config is kept beside it to read), the token ids and sequence boundaries, the probed rows (each
row's fold or held-out part and its target), the (layer, subspace) sets and their hooks, the folds, alphas, Gram
precision, batch size, device type and the number of ranks whose sums were added. Checked inside the file, not
keyed, so a new version rewrites the same file: ``CONTROL_CACHE_VERSION`` (bump it when the storeless maths or a
model's forward pass change) and the software versions. The file holds the numbers as JSON floats (``repr``:
the same float back), the key's components and an xxh3-128 checksum of its own content; it is written atomically.
A damaged file, one of another version or one holding another key is said in one line, recomputed and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from dstg_interp.encoders import Encoder
from dstg_interp.encoders.inputs import sequence_ids, sequence_lengths
from dstg_interp.io import write_text_atomic
from dstg_interp.store.checksums import ALGORITHM
from dstg_interp.store.manifest import versions, weights_sha256

__all__ = ["CONTROL_CACHE_VERSION", "ControlCacheWarning", "ControlEntry", "control_entry"]

CONTROL_CACHE_VERSION = 1  # bump when the numbers of the same key would change (the maths, a model's forward)
FORMAT = "dstg-interp random-init control"
KEY_FIELDS = ("twin_weights_sha256", "twin_config", "sequences_sha256", "rows_sha256", "sets", "n_splits", "alphas",
              "gram_precision", "batch_size", "device", "world_size")
SAYS = {"sequences_sha256": "other tokens", "rows_sha256": "other probed rows or targets",
        "twin_weights_sha256": "another twin", "twin_config": "another twin"}


class ControlCacheWarning(UserWarning):
    """A control cache entry that could not be used (damaged, another version, another key) or written."""


def _sequences_sha256(sequences) -> str:
    """sha256 of every sequence's token ids and the boundaries between them (what the twin reads)."""
    digest = hashlib.sha256()
    lengths = sequence_lengths(sequences)
    digest.update(np.ascontiguousarray(lengths, dtype=np.int64).tobytes())
    if hasattr(sequences, "arrays") and hasattr(sequences, "offsets"):
        digest.update(np.ascontiguousarray(sequences.arrays["input_ids"], dtype=np.int64).tobytes())
    else:
        for index in range(len(lengths)):
            digest.update(np.ascontiguousarray(sequence_ids(sequences, index), dtype=np.int64).tobytes())
    return digest.hexdigest()


def _rows_sha256(part_of_row: np.ndarray, target_of_row: np.ndarray) -> str:
    """sha256 of each row's part (CV fold, held out, -1 = not probed) and its centred target."""
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(part_of_row, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(target_of_row, dtype=np.float64).tobytes())
    return digest.hexdigest()


def _checksum(body: dict) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _layer(value):
    return value if isinstance(value, str) else int(value)


@dataclass
class ControlEntry:
    """One key's file: ``read`` the numbers (or None), ``write`` them."""

    path: Path
    key: str
    components: dict

    def read(self, expected: list) -> dict | None:
        """{(layer, subspace): R²} in ``expected``'s order when the file is this key's, whole and of this version;
        None when there is no file, and None with one ControlCacheWarning line when it cannot be used."""
        if not self.path.is_file():
            return None
        problem, numbers = self._check()
        if problem is None:
            missing = [key for key in expected if key not in numbers]
            if missing or len(numbers) != len(expected):
                problem = f"holds other (layer, subspace) sets ({len(numbers)} for {len(expected)})"
            else:
                return {key: numbers[key] for key in expected}
        warnings.warn(f"random-init control cache {self.path}: {problem}; the twin is run again and the file "
                      "rewritten", ControlCacheWarning, stacklevel=3)
        return None

    def _check(self) -> tuple[str | None, dict]:
        try:
            stored = json.loads(self.path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as err:
            return f"unreadable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'no detail'})", {}
        if not isinstance(stored, dict) or not {"format", "version", "key", "components", "control_r2",
                                                "checksum"} <= set(stored):
            return "not a control cache entry (keys missing)", {}
        if stored["format"] != FORMAT or stored["version"] != CONTROL_CACHE_VERSION:  # its checksum may differ too
            return f"written by another version ({stored['version']!r}, this is {CONTROL_CACHE_VERSION})", {}
        body = {name: value for name, value in stored.items() if name != "checksum"}
        checksum = stored["checksum"]
        if not isinstance(checksum, dict) or checksum.get("digest") != _checksum(body):
            return f"damaged ({ALGORITHM} checksum mismatch)", {}
        components = stored["components"]
        if stored["key"] != self.key or not isinstance(components, dict) or \
                {k: components.get(k) for k in KEY_FIELDS} != {k: self.components[k] for k in KEY_FIELDS}:
            differs = [name for name in KEY_FIELDS if not isinstance(components, dict) or
                       components.get(name) != self.components[name]]
            said = sorted({SAYS.get(name, name) for name in differs}) or ["another key"]
            return f"holds the control of {', '.join(said)} (key mismatch)", {}
        if components.get("versions") != self.components["versions"]:
            return f"written by other software versions ({components.get('versions')})", {}
        try:
            numbers = {(_layer(layer), str(sub)): float(r2) for layer, sub, r2 in stored["control_r2"]}
        except (TypeError, ValueError):
            return "not a control cache entry (control_r2 unreadable)", {}
        return None, numbers

    def write(self, control_r2: dict) -> None:
        """The numbers (``repr`` floats: read back bit for bit), atomically; a failure is one warning line."""
        body = {"format": FORMAT, "version": CONTROL_CACHE_VERSION, "key": self.key, "components": self.components,
                "control_r2": [[_layer(layer), sub, float(r2)] for (layer, sub), r2 in control_r2.items()]}
        text = json.dumps({**body, "checksum": {"algorithm": ALGORITHM, "digest": _checksum(body)}}, indent=1)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, text + "\n")
        except OSError as err:
            warnings.warn(f"random-init control cache {self.path}: not written ({err.strerror or err}); the results "
                          "are unaffected, a rerun runs the twin again", ControlCacheWarning, stacklevel=3)


def control_entry(folder: str | Path, twin: Encoder, sequences, part_of_row: np.ndarray, target_of_row: np.ndarray,
                  sets: list, settings: dict) -> ControlEntry:
    """The entry of ``twin`` over ``sequences`` probed at ``part_of_row`` (fold / held out / -1) for
    ``target_of_row``; ``sets``: [(layer, subspace, hooks)] in solving order; ``settings``: n_splits, alphas,
    gram_precision, batch_size, device, world_size."""
    components = {
        "twin_weights_sha256": weights_sha256(twin.weights_module),
        "twin_config": json.loads(json.dumps(twin.config.to_dict(), sort_keys=True)),
        "sequences_sha256": _sequences_sha256(sequences),
        "rows_sha256": _rows_sha256(part_of_row, target_of_row),
        "sets": [[_layer(layer), sub, list(hooks)] for layer, sub, hooks in sets],
        **{name: settings[name] for name in ("n_splits", "gram_precision", "batch_size", "device", "world_size")},
        "alphas": [float(a) for a in settings["alphas"]],
    }
    canonical = json.dumps({name: components[name] for name in KEY_FIELDS}, sort_keys=True, separators=(",", ":"))
    key = hashlib.sha256(canonical.encode()).hexdigest()[:32]
    software = {name: version for name, version in versions().items() if name != "python"}
    return ControlEntry(Path(folder) / f"random-init-{key}.json", key, {**components, "versions": software})
