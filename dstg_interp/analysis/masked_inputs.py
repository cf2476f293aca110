"""Masked inputs for the studies that score an encoder's MLM output: which positions are masked, and the logits.

    from dstg_interp.analysis.masked_inputs import masked_batch, mlm_logits, require_mlm_head
    batch = masked_batch(encoder, tokens, attention_mask, n_masked=3, seed=0)
    batch.tokens          # [B, T] with the encoder's [MASK] id at batch.positions (the same in every row)
    batch.targets         # [B, T] the original ids there, -100 elsewhere
    logits = mlm_logits(encoder, batch.tokens, batch.attention_mask)          # [B, T, vocab]

The masked positions are the same in every row (drawn among the content positions 1 .. L-2 of the shortest
row, so [CLS] / [SEP] and padding are never masked): a figure by position then has one column per masked
position. ``logit_lens`` and ``patching`` score only these positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..encoders import Encoder, EncoderError


@dataclass
class MaskedBatch:
    tokens: torch.Tensor  # [B, T] long, [MASK] at ``positions``
    attention_mask: torch.Tensor  # [B, T] bool
    targets: torch.Tensor  # [B, T] long, the original ids at ``positions``, -100 elsewhere
    positions: np.ndarray  # [n_masked] the masked positions (the same in every row)

    @property
    def scored(self) -> torch.Tensor:
        """[B, T] bool: the scored (masked) positions."""
        return self.targets != -100


def require_mlm_head(encoder: Encoder, what: str) -> None:
    """One clear EncoderError when ``encoder`` has no masked-LM head (an encoder-only checkpoint, an HF model
    loaded with AutoModel): ``what`` names the study that needs one."""
    if getattr(encoder, "has_mlm_head", False):
        return
    how = ("load it with open_encoder(path, mlm_head=True)" if encoder.kind == "hf"
           else "this checkpoint was saved without its MLM decoder; use one saved with it")
    raise EncoderError(f"{encoder.name}: {what} needs a masked-LM head, and this model has none ({how})")


def checked_batch(tokens: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] long tokens and a bool mask (None = all real) whose rows are right-padded, or one clear error."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() not in (1, 2):
        raise EncoderError("tokens must be a [batch, pos] tensor of token ids")
    tokens = tokens[None] if tokens.dim() == 1 else tokens
    mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
    mask = mask[None] if mask.dim() == 1 else mask
    if mask.shape != tokens.shape:
        raise EncoderError(f"attention_mask has shape {list(mask.shape)}, tokens {list(tokens.shape)}")
    lengths = mask.sum(1)
    if not torch.equal(mask, torch.arange(tokens.shape[1], device=mask.device)[None, :] < lengths[:, None]):
        raise EncoderError("each attention_mask row must be True, then False (right-padded sequences)")
    return tokens.long(), mask


def masked_batch(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 n_masked: int = 2, seed: int = 0, positions=None) -> MaskedBatch:
    """``tokens`` with ``n_masked`` content positions (or the given ``positions``) replaced by [MASK] in every row."""
    tokens, mask = checked_batch(tokens, attention_mask)
    if encoder.special.mask is None:
        raise EncoderError(f"{encoder.name}: its tokenizer has no [MASK] token; masked-LM scoring needs one")
    shortest = int(mask.sum(1).min())
    content = np.arange(1, shortest - 1)  # [CLS] at 0 and [SEP] at the end are never scored
    if positions is None:
        if not 1 <= n_masked <= len(content):
            raise EncoderError(f"cannot mask {n_masked} of the {len(content)} content positions of the shortest row "
                               f"({shortest} tokens)")
        positions = np.sort(np.random.default_rng(seed).choice(content, size=n_masked, replace=False))
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == 0 or not np.isin(positions, content).all():
        raise EncoderError(f"masked positions must lie in 1 .. {shortest - 2} (content of the shortest row), "
                           f"got {positions.tolist()}")
    targets = torch.full_like(tokens, -100)
    targets[:, positions] = tokens[:, positions]
    masked = tokens.clone()
    masked[:, positions] = encoder.special.mask
    return MaskedBatch(masked.to(encoder.device), mask.to(encoder.device), targets.to(encoder.device), positions)


def mlm_logits(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor,
               position_offset: int | None = None) -> torch.Tensor:
    """[B, T, vocab] logits; ``position_offset``: the input read at absolute positions offset .. (models of ours
    with a learned table: DSTG, AP-NeoBERT; see ``EncoderForMLM.forward``)."""
    if position_offset is None:
        return encoder.mlm_logits(tokens, attention_mask)
    if encoder.kind == "hf":
        raise EncoderError(f"{encoder.name}: reading an input at another absolute offset needs a model of ours")
    offset = torch.full((tokens.shape[0],), int(position_offset), dtype=torch.long, device=encoder.device)
    return encoder.model(tokens.to(encoder.device), attention_mask=attention_mask.to(encoder.device),
                         position_offset=offset, return_type="logits")
