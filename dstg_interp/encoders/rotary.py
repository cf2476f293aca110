"""Rotary heads of a Hugging Face encoder, read per family from a table (``ROTARY_FAMILIES``, data): where a
block makes its queries and keys, how that output splits into heads, the rotation the block applies and the keys
a query may see.  The HF adapter serves the queries and keys under our hook names (``HFEncoder.capture``, through
``queries_keys.recording_queries_keys``, which also reads the absolute-position families); ``analysis.rope_bands``
splits their q.k by frequency band.

    encoder = open_encoder("path/to/modernbert")
    captured = encoder.capture(tokens, mask, ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k"])  # [B, T, H, d]
    table = rotary_table(encoder.model, 0, positions=tokens.shape[1])    # cos, sin [T, d]; window

Queries and keys are read **before** the rotation, in TransformerLens' layout [batch, pos, head, d_head], from
a forward hook on the block's own projection (the tensor the model computed, reshaped as its attention module
reshapes it).  The rotation is the block's own: the model's rotary module called for the block's layer type, so
its inverse frequencies (and any scaling its RoPE type applies) are the ones the forward uses.

ModernBERT: ``layers.{l}.attn.Wqkv`` -> [.., 3, H, d] (q, k, v); rotate-half form, plane i pairing dims i and
i + d / 2 as ours; ``global_rope_theta`` on full-attention layers, ``local_rope_theta`` on the sliding ones
(``config.layer_types``), whose queries see keys at most ``config.sliding_window`` (= local_attention / 2)
positions away.  Another HF encoder with rotary heads (EuroBERT, NomicBERT, RoFormer, ...) is recognised
(``is_rotary``) and refused in one line naming the families read; a family is one row of the table.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

HEAD_HOOK = re.compile(r"blocks\.(\d+)\.attn\.hook_([qk])")
# rotary families whose config names no RoPE parameters (rope_theta / rope_parameters)
ROTARY_WITHOUT_ROPE_CONFIG = frozenset({"roformer"})


@dataclass(frozen=True)
class RotaryTable:
    """The rotation a block applies, rotate-half form: cos, sin [positions, d_head] (plane i pairs dims i and
    i + d_head / 2); ``window``: a query sees keys at most this many positions away (None: every key)."""

    cos: torch.Tensor
    sin: torch.Tensor
    window: int | None = None


@dataclass(frozen=True)
class RotaryFamily:
    """How one transformers family's rotary heads are read (see the module docstring)."""

    attention: Callable[[torch.nn.Module, int], torch.nn.Module]  # base model, block -> its attention module
    projections: tuple[str, ...]  # the attention module's submodules whose outputs hold the queries and keys
    queries_keys: Callable[[torch.nn.Module, list], tuple[torch.Tensor, torch.Tensor]]  # -> q, k [B, T, H, d]
    rotation: Callable[[torch.nn.Module, int, int], RotaryTable]  # base model, block, positions -> its rotation


def _modernbert_queries_keys(attention: torch.nn.Module, outputs: list) -> tuple[torch.Tensor, torch.Tensor]:
    qkv = outputs[0]
    qkv = qkv.view(*qkv.shape[:-1], 3, -1, attention.head_dim)  # as ModernBertAttention.forward
    return qkv[..., 0, :, :], qkv[..., 1, :, :]


def _modernbert_rotation(base: torch.nn.Module, block: int, positions: int) -> RotaryTable:
    layer_type = base.config.layer_types[block]
    device = next(base.parameters()).device
    anchor = torch.zeros((), dtype=torch.float32, device=device)  # the rotary module reads its device and dtype
    cos, sin = base.rotary_emb(anchor, torch.arange(positions, device=device)[None], layer_type)
    window = base.config.sliding_window if layer_type == "sliding_attention" else None
    return RotaryTable(cos[0].double(), sin[0].double(), window)


ROTARY_FAMILIES: dict[str, RotaryFamily] = {
    "modernbert": RotaryFamily(attention=lambda base, block: base.layers[block].attn, projections=("Wqkv",),
                               queries_keys=_modernbert_queries_keys, rotation=_modernbert_rotation),
}


def is_rotary(model: torch.nn.Module) -> bool:
    """A transformers model whose heads are rotary: its config has RoPE parameters, or its family always is."""
    config = getattr(model, "config", None)
    return (getattr(config, "model_type", None) in ROTARY_FAMILIES.keys() | ROTARY_WITHOUT_ROPE_CONFIG
            or any(getattr(config, key, None) is not None for key in ("rope_parameters", "rope_theta")))


def rotary_family(model: torch.nn.Module) -> RotaryFamily | None:
    """The table's row for a transformers model (its ``model_type``), None for a family not in the table."""
    return ROTARY_FAMILIES.get(getattr(getattr(model, "config", None), "model_type", None))


def families_read() -> str:
    return ", ".join(sorted(ROTARY_FAMILIES))


def rotary_table(model: torch.nn.Module, block: int, positions: int) -> RotaryTable:
    """The rotation block ``block`` of a table family's model applies to positions 0..positions-1."""
    family = rotary_family(model)
    if family is None:
        raise KeyError(f"{getattr(model.config, 'model_type', None)!r} is not a rotary family of the table")
    return family.rotation(model.base_model, block, max(int(positions), 2))
