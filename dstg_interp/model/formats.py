"""Checkpoints of other authors, recognised from config.json and key names and mapped onto our models.

    model = load_model("path/to/fulldecoding-PosBERT")     # any folder below; same as our own checkpoints
    dstg-convert path/to/NeoBERT runs/neobert               # writes our format once, source recorded

| format | written by | becomes |
|---|---|---|
| ``posneobert`` | the authors' transformers fork (``LequeuISIR/transformers``), LM head (keys under ``model.``) or encoder only | ``dstg`` |
| ``posneobert-training`` | their training code (``LequeuISIR/PosNeoBERT``, A2: per-head interleaved ``qk_pos``/``qk_sem``) | ``dstg`` |
| ``neobert-baseline`` | the fork's AP / RP / RoPE NeoBERT (``posneobert=false``) | ``ap``, ``rp``, ``rope`` |
| ``neobert`` | ``chandar-lab/NeoBERT`` (hub layout, ``auto_map``) | ``rope`` |

Refused, with one line each: the oldest training code's fused ``qk`` projection (A1), and options whose
forward none of our models computes (GELU FFN, LayerNorm, nGPT, other attention activations...).
The per-format readers live in ``posneobert_format.py`` and ``neobert_format.py``; every conversion
detail (why each permutation) is in ../shared/notes/interop.md §3 and is reproduced to ~3e-6 by
tests/model/test_formats.py on fixtures holding the authors' own outputs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .files import CheckpointError, read_weights
from .mapping import ForeignCheckpoint, check_supported
from .neobert_format import read_neobert
from .posneobert_format import read_posneobert

FORMAT_DESCRIPTIONS = {
    "posneobert": "the authors' PosNeoBERT (transformers fork)",
    "posneobert-training": "the authors' PosNeoBERT training code (A2)",
    "neobert-baseline": "the authors' NeoBERT baseline (transformers fork)",
    "neobert": "NeoBERT (chandar-lab hub layout)",
}


def is_neobert_family(data: dict) -> bool:
    """A config.json of NeoBERT or the authors' PosNeoBERT (whose training-code configs may lack model_type)."""
    return data.get("model_type") == "neobert" or ("posneobert" in data and "hidden_size" in data)


def strip_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``NeoBERTLMHead`` saves the encoder under ``model.``; the decoder and encoder-only files have no prefix."""
    return {key[len("model."):] if key.startswith("model.") else key: value for key, value in state.items()}


def detect_format(path: Path, data: dict, keys: set[str]) -> str:
    """The format name of a NeoBERT-family folder, from its config and (prefix-stripped) key names."""
    if any(key.endswith(".qk.weight") for key in keys):
        raise CheckpointError(
            f"{path}: the oldest PosNeoBERT layout (one fused 'qk' projection over [AP | sem], training code 0365188) "
            "mixes the two streams inside attention, which no two-stream model can represent; it cannot be loaded")
    if data.get("posneobert"):
        return "posneobert-training" if any(key.endswith(".qk_pos.weight") for key in keys) else "posneobert"
    return "neobert" if "rope" not in data else "neobert-baseline"


def read_foreign_checkpoint(path: Path, data: dict) -> ForeignCheckpoint:
    """Read and map a NeoBERT-family folder (``is_neobert_family(data)``) onto our model's keys."""
    state, files = read_weights(path, allow_torch=True)
    state = strip_prefix(state)
    format_name = detect_format(path, data, set(state))
    check_supported(path, data)
    reader = read_posneobert if format_name.startswith("posneobert") else read_neobert
    foreign = reader(path, files[0], data, state, format_name)
    foreign.config.source["files"] = [file.name for file in files]
    return foreign
