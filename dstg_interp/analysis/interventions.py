"""AP-stream interventions: replace the absolute-position state at a layer and measure what changes downstream.

    from dstg_interp.analysis.interventions import intervene
    result = intervene(encoder, tokens, mask, layer=2, kind="interchange", position_map=torch.arange(T).flip(0))
    result = intervene(encoder, tokens, mask, layer=2, kind="shift", shift=16)
    result = intervene(encoder, tokens, mask, layer=2, kind="mean", position_means=table)    # [positions, d_ap]
    result.summary          # mlm_kl (nats), top1_agreement, output_change, n_tokens
    result.heads            # one row per (block, head, term): mean |change| of the logit term, relative to |term|

Where position lives as a state of its own (``position_hooks``): DSTG's AP stream at any layer (``hooks.py``:
``hook_embed_ap``, ``blocks.{l-1}.hook_resid_post_ap``, ``hook_final_ap``); AP-NeoBERT's position embedding at its
input (``hook_pos_embed``, layer 0 only: above it position is entangled with meaning, which erasure covers);
the same for Hugging Face encoders with a learned absolute table (BERT-style ``embeddings.position_embeddings``,
e.g. all-MiniLM-L6-v2), whose output rows are replaced.  Every edit is handed to ``encoders.edits``
(``edit_hooks``, ``edit_position_rows``), the one module that hooks a model.  RoPE, RP-NeoBERT and HF encoders without such a table have no such
state (position enters inside attention): asking for one is an EncoderError.

Kinds (pyvene's "interchange" on one stream), for every real token i of the base input:
    interchange   state[i] <- the state of ``source_tokens`` (default: the base input) at position position_map[i]
    shift         state[i] <- the state at i of the same tokens read at positions i + shift (``position_offset``)
    mean          state[i] <- position_means[i], the per-position mean of the state over a store
                  (``position_basis.position_basis(store, l, "ap").means``): keeps position, drops what the tokens wrote there.
Measured: ``output_change``, 1 - cosine of the mean-pooled last-layer output (``pooled_output``; the same
definition dstg-erase uses, what a sentence encoder returns), for every model; where the model has an MLM head,
the KL divergence of the MLM distributions (clean || intervened) and their top-1 agreement over real tokens
(NaN for an HF encoder loaded without one and for a checkpoint of ours saved encoder-only); and for every block after the layer, every head and every logit
term (``logit_terms``), the mean absolute change of the term over valid (query, key) pairs divided by the clean
term's mean absolute value -- models of ours only: HF encoders expose no separate logit terms, so their
``heads`` table is empty.  Interchanging a state with an identical one (the identity map, or the layer-0 AP
state of other tokens) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..variants import variant_row
from ..encoders import Encoder, EncoderError, logit_terms
from ..encoders.edits import RowsEdit, edit_hooks, edit_position_rows, position_rows_module
from ..encoders.hf import HFEncoder
from ..encoders.hooks import FINAL

KINDS = ("interchange", "shift", "mean")


@dataclass
class InterventionResult:
    summary: dict
    heads: pd.DataFrame


def position_hooks(encoder: Encoder, layer) -> list[str]:
    """The hook names whose tensor is the absolute-position state at ``layer``, or one clear EncoderError."""
    variant = encoder.variant
    spec = variant_row(variant) if encoder.kind == "dstg-interp" else None
    if spec is not None and spec.ap_stream:
        encoder.resolve([layer], ["ap"])
        return encoder.hooks_for(layer, "ap")
    if spec is not None and spec.position_table:
        if layer != 0:
            raise EncoderError(f"{encoder.name}: AP-NeoBERT carries position as a state of its own only at its input "
                               f"(hook_pos_embed, layer 0), not at layer {layer!r}; erase it there instead (dstg-erase)")
        return ["hook_pos_embed"]
    if isinstance(encoder, HFEncoder) and encoder.position_offset is not None and position_rows_module(encoder) is not None:
        if layer != 0:
            raise EncoderError(f"{encoder.name}: an HF encoder carries position as a state of its own only at its input "
                               f"(embeddings.position_embeddings, layer 0), not at layer {layer!r}; erase it there "
                               "instead (dstg-erase)")
        return ["embeddings.position_embeddings"]
    raise EncoderError(f"{encoder.name}: this {variant!r} model has no hook that holds an absolute-position state "
                       f"(position enters {'inside attention' if spec is None or spec.has_position_input else spec.mechanism}); AP interventions need DSTG's AP stream, AP-NeoBERT's "
                       "hook_pos_embed or an HF encoder's learned position table")


def intervene(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor, layer, kind: str, *,
              position_map=None, source_tokens: torch.Tensor | None = None, shift: int | None = None,
              position_means=None) -> InterventionResult:
    """Run ``tokens`` [B, T] clean and with the position state at ``layer`` replaced (see the module docstring)."""
    if kind not in KINDS:
        raise EncoderError(f"unknown intervention {kind!r}; use {', '.join(KINDS)}")
    hooks = position_hooks(encoder, layer)
    tokens, mask = tokens.to(encoder.device), attention_mask.to(encoder.device).bool()
    if encoder.kind == "hf":  # its position table's rows: they do not depend on the tokens
        edit = edit_position_rows(encoder, _rows_edit(encoder, tokens, kind, position_map, source_tokens, shift,
                                                      position_means))
    else:
        edit = edit_hooks(encoder, dict(zip(hooks, _state_edits(encoder, hooks, tokens, mask, kind, position_map,
                                                                 source_tokens, shift, position_means))))
    has_mlm = getattr(encoder, "has_mlm_head", False)  # False: an HF encoder without its head, a checkpoint saved encoder-only
    has_terms = encoder.kind != "hf"  # HF encoders expose no separate logit terms
    with torch.inference_mode():
        clean_logits = encoder.mlm_logits(tokens, mask) if has_mlm else None
        clean_output = pooled_output(encoder, tokens, mask)
        clean_terms = encoder.attention(tokens, mask) if has_terms else {}
        with edit:
            logits = encoder.mlm_logits(tokens, mask) if has_mlm else None
            output = pooled_output(encoder, tokens, mask)
            terms = encoder.attention(tokens, mask) if has_terms else {}
    mlm = _mlm_change(clean_logits, logits, mask) if has_mlm else _mlm_not_measured(mask)
    summary = {**mlm, "output_change": output_change(clean_output, output)}
    return InterventionResult(summary, _term_change(encoder, clean_terms, terms, mask,
                                                    None if layer == FINAL else int(layer)))


def pooled_output(encoder: Encoder, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, d] mean over real tokens of the last layer's states (what a sentence encoder returns; DSTG: its
    semantic stream, the one the MLM head reads)."""
    last = encoder.n_layers
    subspace = "sem" if "sem" in encoder.subspaces else "full"
    states = encoder.states(tokens, [last], [subspace], attention_mask=mask)[(last, subspace)]
    weights = mask[..., None].to(states.dtype)
    return (states * weights).sum(dim=1) / weights.sum(dim=1)


def output_change(clean: torch.Tensor, edited: torch.Tensor) -> float:
    """1 - cosine of two [B, d] pooled outputs (``pooled_output``), mean over the B sequences; clipped at 0, since
    identical outputs give a cosine a rounding error above 1 (-4e-17 seen) and the change is never negative."""
    cosine = torch.nn.functional.cosine_similarity(edited.double(), clean.double(), dim=-1).clamp(max=1.0)
    return float((1 - cosine).mean())


# --- the edits, one per kind (handed to encoders.edits, the one place that hooks the model) ---------------
def _rows_edit(encoder, tokens, kind, position_map, source_tokens, shift, position_means) -> RowsEdit:
    """The edit of an HF encoder's position-table rows (one per input position) for ``kind``."""
    seq_len = tokens.shape[1]
    if kind == "mean":
        means = _checked_means(encoder, position_means, seq_len)
        return lambda rows, ids: means[:seq_len][None].to(rows.dtype).expand_as(rows).clone()
    if kind == "shift":
        _check_shift(shift)
        if seq_len + int(shift) > encoder.max_positions:
            raise EncoderError(f"{encoder.name}: a shift of {int(shift)} moves a {seq_len}-token input past its "
                               f"{encoder.max_positions}-row position table (at most {encoder.max_positions - seq_len})")
        table = position_rows_module(encoder)
        assert table is not None  # position_hooks refused an HF encoder without one
        # the rows the same tokens read shift positions later
        return lambda rows, ids: table.weight[ids + int(shift)].to(rows.dtype).expand_as(rows).clone()
    if source_tokens is not None and source_tokens.shape != tokens.shape:
        raise EncoderError(f"source_tokens must have the base input's shape {list(tokens.shape)}, "
                           f"got {list(source_tokens.shape)}")
    # the position embedding does not depend on the tokens: a source input's rows are the base input's own
    position_map = _checked_map(position_map, seq_len)
    return lambda rows, ids: rows[:, position_map.to(rows.device)].clone()


def _state_edits(encoder, hooks, tokens, mask, kind, position_map, source_tokens, shift, position_means) -> list:
    """The edits of the position hooks (models of ours) for ``kind``, one per hook."""
    seq_len = tokens.shape[1]
    if kind == "mean":
        means = _checked_means(encoder, position_means, seq_len)
        return [_replace_with(means[:seq_len][None])]  # every position hook is one tensor (DSTG ap, AP's embedding)
    if kind == "shift":
        _check_shift(shift)
        offset = torch.full((tokens.shape[0],), int(shift), dtype=torch.long, device=encoder.device)
        return [_replace_with(state) for state in _captured(encoder, hooks, tokens, mask, offset)]
    source = tokens if source_tokens is None else source_tokens.to(encoder.device)
    if source.shape != tokens.shape:
        raise EncoderError(f"source_tokens must have the base input's shape {list(tokens.shape)}, got {list(source.shape)}")
    position_map = _checked_map(position_map, seq_len)
    if source_tokens is None:  # the base input's own states, permuted inside the same forward
        return [lambda tensor: tensor[:, position_map.to(tensor.device)].clone() for _ in hooks]
    states = _captured(encoder, hooks, source, mask, None)
    return [_replace_with(state[:, position_map.to(state.device)]) for state in states]


def _replace_with(state: torch.Tensor):
    """An edit that hands on ``state`` (broadcast over the batch) instead of the hook's own tensor."""
    return lambda tensor: state.to(tensor.dtype).expand_as(tensor).clone()


def _captured(encoder, hooks, tokens, mask, offset) -> list:
    """The position hooks' tensors in a clean forward (``offset``: read at shifted positions)."""
    held: dict[str, torch.Tensor] = {}

    def keeping(name):  # an edit that changes nothing and keeps a copy
        def keep(tensor):
            held[name] = tensor.detach().clone()
            return tensor
        return keep

    with torch.inference_mode(), edit_hooks(encoder, {name: keeping(name) for name in hooks}):
        encoder.model(tokens, attention_mask=mask, position_offset=offset)
    return [held[name] for name in hooks]


def _mlm_not_measured(mask: torch.Tensor) -> dict:
    """The MLM columns of a model without an MLM head: not measured."""
    return {"mlm_kl": np.nan, "top1_agreement": np.nan, "n_tokens": int(mask.sum())}


def _checked_means(encoder, position_means, seq_len: int) -> torch.Tensor:
    """The 'mean' intervention's per-position means as a tensor on the encoder's device, or one EncoderError."""
    if position_means is None:
        raise EncoderError("intervention 'mean' needs position_means, the per-position mean state [positions, d]")
    means = torch.as_tensor(np.asarray(position_means), dtype=torch.float32, device=encoder.device)
    if means.shape[0] < seq_len:
        raise EncoderError(f"position_means has {means.shape[0]} positions, the input {seq_len}")
    return means


def _checked_map(position_map, seq_len: int) -> torch.Tensor:
    """The 'interchange' source position of every position (None: the identity), or one EncoderError."""
    position_map = torch.arange(seq_len) if position_map is None else torch.as_tensor(position_map, dtype=torch.long)
    if position_map.shape != (seq_len,) or int(position_map.min()) < 0 or int(position_map.max()) >= seq_len:
        raise EncoderError(f"position_map must give a source position in [0, {seq_len}) for each of the {seq_len} positions")
    return position_map


def _check_shift(shift) -> None:
    if shift is None or int(shift) < 0:
        raise EncoderError(f"intervention 'shift' needs shift >= 0 positions, got {shift!r}")


def _mlm_change(clean: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> dict:
    log_p, log_q = clean.double().log_softmax(-1)[mask], logits.double().log_softmax(-1)[mask]
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    agreement = (log_p.argmax(-1) == log_q.argmax(-1)).double()
    return {"mlm_kl": float(kl.mean()), "top1_agreement": float(agreement.mean()), "n_tokens": int(mask.sum())}


def _term_change(encoder, clean: dict, intervened: dict, mask: torch.Tensor, first_block: int | None) -> pd.DataFrame:
    pairs = (mask[:, None, :, None] & mask[:, None, None, :]).double()  # [B, 1, T, T]
    rows = []
    for block in sorted(clean):
        if first_block is None or block < first_block:
            continue
        for term in logit_terms(encoder.variant):
            before, after = clean[block][term].double(), intervened[block][term].double()
            change = ((after - before).abs() * pairs).sum(dim=(0, 2, 3))
            size = (before.abs() * pairs).sum(dim=(0, 2, 3))
            for head in range(before.shape[1]):
                rows.append({"block": block, "head": head, "term": term, "mean_abs_change": float(change[head] / pairs.sum()),
                             "relative_change": float(change[head] / size[head]) if size[head] > 0 else np.nan})
    return pd.DataFrame(rows, columns=["block", "head", "term", "mean_abs_change", "relative_change"])
