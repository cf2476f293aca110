"""The queries and keys of a Hugging Face encoder's heads, read per family from tables (data): the rotary families
of ``rotary.ROTARY_FAMILIES`` (their rotation beside them) and the absolute-position families of
``QUERY_KEY_FAMILIES`` (the BERT family: a learned position table added at the input, so a head's logit is its q.k
scaled by 1 / sqrt(d_head) and nothing else).  The HF adapter serves them under our hook names
(``HFEncoder.capture``):

    encoder = open_encoder("path/to/all-MiniLM-L6-v2")
    captured = encoder.capture(tokens, mask, ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k"])  # [B, T, H, d]

Each is read from a forward hook on the block's own projection (the tensor the model computed, reshaped as its
attention module reshapes it), in TransformerLens' layout [batch, pos, head, d_head]; a rotary family's before its
rotation.  BERT, RoBERTa, XLM-RoBERTa, ELECTRA, CamemBERT, Data2Vec-text and RoBERTa-PreLayerNorm make them in
``encoder.layer.{l}.attention.self.query`` / ``.key``, DistilBERT in ``transformer.layer.{l}.attention.q_lin`` /
``.k_lin``.  A family with another logit term (MPNet's relative bias) is in neither table: its q.k is not its logit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch

from .rotary import ROTARY_FAMILIES, RotaryFamily, rotary_family


@dataclass(frozen=True)
class QueryKeyFamily:
    """How one absolute-position family's queries and keys are read (see the module docstring)."""

    attention: Callable[[torch.nn.Module, int], torch.nn.Module]  # base model, block -> its attention module
    projections: tuple[str, ...]  # the attention module's submodules whose outputs are the queries and the keys
    queries_keys: Callable[[torch.nn.Module, list], tuple[torch.Tensor, torch.Tensor]]  # -> q, k [B, T, H, d]


def _heads(attention: torch.nn.Module, outputs: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Separate query and key projections [B, T, H * d] -> [B, T, H, d], as their attention module splits them."""
    width = getattr(attention, "attention_head_size", None) or attention.dim // attention.n_heads  # BERT / DistilBERT
    q, k = outputs
    return q.view(*q.shape[:-1], -1, width), k.view(*k.shape[:-1], -1, width)


_BERT = QueryKeyFamily(attention=lambda base, block: base.encoder.layer[block].attention.self,
                       projections=("query", "key"), queries_keys=_heads)
QUERY_KEY_FAMILIES: dict[str, QueryKeyFamily] = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra", "camembert", "data2vec-text", "roberta-prelayernorm"),
                    _BERT),
    "distilbert": QueryKeyFamily(attention=lambda base, block: base.transformer.layer[block].attention,
                                 projections=("q_lin", "k_lin"), queries_keys=_heads),
}


def query_key_family(model: torch.nn.Module) -> QueryKeyFamily | RotaryFamily | None:
    """The table row of a transformers model (its ``model_type``) whose heads' queries and keys are read: a rotary
    family's or an absolute-position family's; None for a family in neither table."""
    return rotary_family(model) or QUERY_KEY_FAMILIES.get(getattr(getattr(model, "config", None), "model_type", None))


def query_key_families() -> str:
    """The families whose queries and keys are read, for messages."""
    return ", ".join(sorted(ROTARY_FAMILIES.keys() | QUERY_KEY_FAMILIES.keys()))


@contextmanager
def recording_queries_keys(model: torch.nn.Module, blocks: Sequence[int]) -> Iterator[dict]:
    """While inside, every forward of ``model`` (a family of either table) records {block: (q, k)}, each
    [B, T, H, d] (a rotary family's before the rotation), into the dict it yields (the last forward's); no
    blocks: nothing is hooked."""
    family = query_key_family(model)
    if family is None and blocks:
        raise KeyError(f"{getattr(model.config, 'model_type', None)!r} is not a family whose queries and keys are read")
    recorded: dict = {}
    handles = []
    for block in blocks if family is not None else ():
        attention = family.attention(model.base_model, block)
        outputs: list = [None] * len(family.projections)
        for slot, name in enumerate(family.projections):
            def keep(module, args, output, outputs=outputs, slot=slot, attention=attention, block=block):
                outputs[slot] = output
                if all(part is not None for part in outputs):
                    recorded[block] = family.queries_keys(attention, list(outputs))
                    outputs[:] = [None] * len(outputs)
            handles.append(getattr(attention, name).register_forward_hook(keep))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()
