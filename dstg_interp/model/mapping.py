"""Shared pieces of the readers of other authors' checkpoints (``posneobert_format``, ``neobert_format``):
config fields, the authors' width rounding, shape checks against config.json, the position-table shift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import ModelConfig
from .files import CONFIG_FILE, CheckpointError
from .layers import t5_relative_buckets

# The authors hard-code their relative bias: 32 T5 buckets, max distance 128 (notes/interop.md §2.1).
AUTHORS_RP_BUCKETS, AUTHORS_RP_MAX_DISTANCE = 32, 128

# Fields whose other values change the forward in ways none of our models computes: value we run, and
# what the other values mean.
UNSUPPORTED_VALUES = {
    "attention_activation": ("softmax", "another attention activation"),
    "mix_attentions": ("sum", "another way of mixing the AP and semantic attention scores"),
    "ngpt": (False, "the normalised-GPT block"),
    "rms_norm": (True, "LayerNorm instead of RMSNorm"),
    "untie_cls": (False, "learned [CLS]/[SEP] score overrides (untie_cls)"),
    "shared_pos_keys": (False, "shared positional keys"),
    "positional_embed_init": ("random", "a fixed (sinusoidal) position table"),
}


@dataclass
class ForeignCheckpoint:
    """A folder of another author's, mapped: ``state`` has our key names and loads into
    ``build_model(config)``."""

    config: ModelConfig
    state: dict[str, torch.Tensor]
    format: str


def check_supported(path: Path, data: dict) -> None:
    for field, (runnable, meaning) in UNSUPPORTED_VALUES.items():
        if field in data and data[field] != runnable:
            raise CheckpointError(f"{path / CONFIG_FILE}: {field}={data[field]!r} ({meaning}) is not supported; "
                                  f"only {field}={runnable!r} can be loaded")


def field(data: dict, name: str, path: Path, default=None):
    """A required positive integer (or float) of config.json, with a clear error when absent."""
    value = data.get(name, default)
    if value is None:
        raise CheckpointError(f"{path / CONFIG_FILE}: lacks {name!r}, which the weights' layout depends on")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise CheckpointError(f"{path / CONFIG_FILE}: {name} must be a positive number, got {value!r}")
    return value


def multiple_of_8_up(x: float) -> int:
    """The authors' hidden-width rounding: int() first, then up to a multiple of 8."""
    return (int(x) + 7) // 8 * 8


def check_shapes(file: Path, state: dict[str, torch.Tensor], expected: dict[str, tuple], optional: set[str]) -> None:
    """The file's keys and shapes against what config.json implies: one line naming the first disagreement."""
    missing = sorted(key for key in expected if key not in state and key not in optional)
    if missing:
        raise CheckpointError(f"{file}: weights do not match config.json: missing {missing[0]!r}"
                              + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    unexpected = sorted(key for key in state if key not in expected)
    if unexpected:
        raise CheckpointError(f"{file}: weights do not match config.json: unexpected {unexpected[0]!r}"
                              + (f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else "")
                              + " (only the MLM-head and encoder-only layouts are read, not classification heads)")
    for key, shape in expected.items():
        if key in state and tuple(state[key].shape) != tuple(shape):
            raise CheckpointError(f"{file}: {key} has shape {tuple(state[key].shape)} but config.json implies {tuple(shape)}")


def check_bucket_grid(file: Path, state: dict[str, torch.Tensor], key: str, expected_grid: torch.Tensor) -> None:
    """The authors store their bucket grid; ours is recomputed, so the two must agree exactly."""
    if key in state and not torch.equal(state[key].long(), expected_grid):
        raise CheckpointError(f"{file}: {key} is not the T5 bucket grid ({AUTHORS_RP_BUCKETS} buckets, max distance "
                              f"{AUTHORS_RP_MAX_DISTANCE}) that our relative bias computes")


def check_authors_weights(file: Path, state: dict[str, torch.Tensor], shapes: dict[str, tuple], max_length: int) -> None:
    """The authors' weights against ``shapes``, both formats: their RP bucket tables and decoder are optional
    (the decoder's weight and bias come together), and every bucket table they store is the T5 grid ours
    recomputes for ``max_length`` positions."""
    buckets = {key for key in shapes if key.endswith("bucket_indices")}
    check_shapes(file, state, shapes, optional=buckets | {"decoder.weight", "decoder.bias"})
    if ("decoder.weight" in state) != ("decoder.bias" in state):
        raise CheckpointError(f"{file}: decoder.weight and decoder.bias come together; one is missing")
    grid = t5_relative_buckets(max_length, max_length, AUTHORS_RP_BUCKETS, AUTHORS_RP_MAX_DISTANCE)
    for key in buckets:
        check_bucket_grid(file, state, key, grid)


def position_rows(table: torch.Tensor, pad_token_id: int, max_length: int) -> tuple[torch.Tensor, int]:
    """Their AP table has a padding row: the k-th real token reads row pad_token_id + k (k = 1 for the first).
    Ours is indexed by position from 0, so drop the rows before it; returns (rows, max_positions)."""
    first = pad_token_id + 1
    n_rows = min(max_length, table.shape[0] - first)
    if n_rows <= 0:
        raise CheckpointError(f"position table of {table.shape[0]} rows has none past the padding row {pad_token_id}")
    return table[first:first + n_rows].clone(), n_rows


def vocabulary_fields(data: dict, path: Path) -> dict:
    """ModelConfig fields every NeoBERT-family config gives the same way."""
    vocab_size = field(data, "vocab_size", path)
    pad_token_id = data.get("pad_token_id", 0)
    if not isinstance(pad_token_id, int) or not 0 <= pad_token_id < vocab_size:
        raise CheckpointError(f"{path / CONFIG_FILE}: pad_token_id {pad_token_id!r} is outside the vocabulary of {vocab_size}")
    return dict(vocab_size=vocab_size, pad_token_id=pad_token_id, n_layers=field(data, "num_hidden_layers", path),
                n_heads=field(data, "num_attention_heads", path),
                # NeoBERT's class default is 1e-6; their yaml and published files say 1e-5: take the file's.
                norm_eps=float(field(data, "norm_eps", path, default=1e-6)))


def make_config(path: Path, format_name: str, **fields) -> ModelConfig:
    try:
        return ModelConfig(**fields, source={"path": str(path.resolve()), "format": format_name})
    except ValueError as err:
        raise CheckpointError(f"{path / CONFIG_FILE}: cannot be expressed as a dstg-interp model ({err})") from None
