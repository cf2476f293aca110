"""Writing a checkpoint: config + weights (+ tokenizer, + extra files) into a folder, atomically.

Kept apart from ``checkpoint.py`` (which builds and loads every variant) so that the models' own ``save``
imports only downhill.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from ..io import foreign_entries, written_atomically
from .files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE

CHECKPOINT_FILES = frozenset({CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE})  # what save_checkpoint writes


def checkpoint_foreign_entries(path: Path, extra: frozenset[str] = frozenset()) -> list[str]:
    """What makes ``path`` not a checkpoint folder we wrote (a user's notes, a sub-folder, no weights);
    empty when it is one, and so replaceable (with --overwrite) under dstg_interp.io.check_replaceable."""
    return foreign_entries(Path(path), CHECKPOINT_FILES | extra, required={CONFIG_FILE, WEIGHTS_FILE})


def save_checkpoint(
    model,
    path: str | Path,
    dtype: torch.dtype | None = None,
    tokenizer=None,
    extra_files: dict | None = None,
    extra_tensors: dict[str, dict[str, torch.Tensor]] | None = None,
    owned: Callable[[Path], bool | list[str]] | None = None,
) -> Path:
    """Write config + weights (+ tokenizer, + extra JSON/text files, + extra safetensors files such as
    optimizer state) atomically into ``path``.  What ``path`` holds is replaced only if it is such a checkpoint
    (the files this call writes; ``owned`` recognises more, say a zoo member's), checked at the swap."""
    path = Path(path)
    with written_atomically(path, owned, "checkpoint") as tmp:
        try:
            # clone: a tied MLM head shares the embedding's storage, which safetensors refuses to write twice
            state = {k: v.detach().to("cpu", dtype=dtype or v.dtype).contiguous().clone() for k, v in model.state_dict().items()}
            save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
            model.config.to_json(tmp / CONFIG_FILE)
            if tokenizer is not None:
                tokenizer.save(str(tmp / TOKENIZER_FILE))
            for name, tensors in (extra_tensors or {}).items():
                save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / name))
            for name, content in (extra_files or {}).items():
                (tmp / name).write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
        except SafetensorError as err:  # safetensors reports a full disk as its own error type
            full = "No space left" in str(err) or "StorageFull" in str(err)
            raise OSError(errno.ENOSPC if full else errno.EIO, "No space left on device" if full else str(err),
                          str(path)) from None
    return path
