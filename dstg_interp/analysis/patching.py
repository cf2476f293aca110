"""Activation patching and attribution patching, per stream, scored on the MLM output at masked positions.

    from dstg_interp.analysis.patching import patching_pair, patch_states, patch_heads, attribution_patch
    pair = patching_pair(encoder, tokens, attention_mask, corruption="shuffle", n_masked=3, seed=0)
    exact = patch_states(encoder, pair)          # one row per (layer, subspace, position)
    heads = patch_heads(encoder, pair)           # one row per (block, stream, head), through hook_z
    approx = attribution_patch(encoder, pair)    # the same rows as ``exact``, from one forward/backward pair
    agreement, merged = compare_attribution(exact, approx)    # Pearson r of the two, overall and per subspace

A pair is a clean input and a corrupted one of the same shape, with [MASK] at the same positions of both
(``masked_inputs.masked_batch``); the answers are the clean tokens there.  Corruptions:
    shuffle   the corrupted row holds the clean row's unmasked content tokens in a seeded random order
              ([CLS], [SEP], padding and the masks stay): the same words, another sentence;
    offset    the same tokens read ``offset`` positions later in the learned table (models of ours with one:
              DSTG, AP-NeoBERT; relative models see no difference, so it is refused for them): "the same text at
              another offset";
    or any corrupted tokens of the clean input's shape (``corrupted_tokens``).  Inputs of different lengths are
    refused in one line: patching replaces position p by position p, so the pair must align.

Denoising patching (TransformerLens' ``get_act_patch_*``): the corrupted input runs with one state replaced by
the clean run's -- (layer, subspace) at one position, every row of the batch at once; for heads, one head's mixed
values ``hook_z`` (DSTG: ``hook_z_sem`` / ``hook_z_ap``) at every position -- and the metric reads how much of
the clean output comes back:
    recovery = (m(patched) - m(corrupted)) / (m(clean) - m(corrupted))      (1 = clean output, 0 = no effect)
Metrics, over the masked positions: ``logit_diff``, the logit of the clean answer minus that of the corrupted
run's own top answer (its runner-up where that is the clean answer); ``kl``, m = -KL(clean || patched).
Subspaces: DSTG sem, ap and full (both streams at once); baselines and HF encoders their one state.
Every edit goes through ``encoders.edits`` (``edit_states`` for states, ``edit_hooks`` for heads).

Attribution patching (Nanda's, nnsight's): m(patched) - m(corrupted) ~ grad_x m(corrupted) . (x_clean - x_corrupted),
summed over the rows; the gradient comes from one corrupted forward with a zero edit ``x + delta`` on every
state and one backward, so every (layer, subspace, position) is scored at the cost of two passes.  DSTG's
``full`` is the sum of its two streams' attributions (linear in the patch).  ``compare_attribution`` reads how
well it ranks the exact patches (``experiments/fig_patching.py`` reports r on the zoo and a tiny model).

Control: ``source="other"`` patches in the clean state of *another* row of the batch (a same-size patch that
carries the wrong sentence): whatever it recovers is not the clean input's own information.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..variants import position_mechanism, variant_row
from ..encoders import Encoder, EncoderError
from ..encoders.edits import edit_hooks, edit_states
from ..encoders.hooks import head_values
from .masked_inputs import MaskedBatch, checked_batch, masked_batch, mlm_logits, require_mlm_head

CORRUPTIONS = ("shuffle", "offset")
METRICS = ("logit_diff", "kl")
SOURCES = ("clean", "other")
STATE_COLUMNS = ["layer", "subspace", "position", "masked", "metric", "value", "recovery"]
HEAD_COLUMNS = ["block", "stream", "head", "metric", "value", "recovery"]


@dataclass
class PatchingPair:
    clean: MaskedBatch  # the clean input, masked
    corrupted: torch.Tensor  # [B, T] the corrupted input, masked at the same positions
    corruption: str
    offset: int | None = None  # "offset": the corrupted input is read this many positions later

    @property
    def attention_mask(self) -> torch.Tensor:
        return self.clean.attention_mask


def patching_pair(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                  corrupted_tokens: torch.Tensor | None = None, corruption: str = "shuffle", n_masked: int = 2,
                  offset: int = 16, seed: int = 0, positions=None) -> PatchingPair:
    """A clean / corrupted pair (module docstring); ``corrupted_tokens`` overrides ``corruption``."""
    require_mlm_head(encoder, "patching (a metric on the MLM output)")
    tokens, mask = checked_batch(tokens, attention_mask)
    if corrupted_tokens is not None:
        corrupted_tokens = corrupted_tokens[None] if corrupted_tokens.dim() == 1 else corrupted_tokens
        if corrupted_tokens.shape != tokens.shape:
            raise EncoderError(f"the clean input is {list(tokens.shape)} and the corrupted one "
                               f"{list(corrupted_tokens.shape)}: patching replaces position p by position p, so "
                               "the pair must have the same batch and length (pad or cut both to one length)")
        corruption = "given"
    elif corruption not in CORRUPTIONS:
        raise EncoderError(f"unknown corruption {corruption!r}; use {', '.join(CORRUPTIONS)} or pass corrupted_tokens")
    clean = masked_batch(encoder, tokens, mask, n_masked=n_masked, seed=seed, positions=positions)
    corrupted = clean.tokens.clone()
    if corrupted_tokens is not None:
        corrupted = corrupted_tokens.to(clean.tokens.device).long().clone()
        corrupted[clean.scored] = encoder.special.mask
        return PatchingPair(clean, corrupted, corruption)
    if corruption == "offset":
        if encoder.kind == "hf" or not variant_row(encoder.variant).position_table:
            raise EncoderError(f"{encoder.name}: the 'offset' corruption reads the input further down a learned "
                               f"position table; this {encoder.variant!r} model has none (position enters "
                               f"{position_mechanism(encoder.variant)}; use 'shuffle')")
        if int(offset) <= 0 or int(offset) + tokens.shape[1] > encoder.max_positions:
            raise EncoderError(f"offset must be in 1 .. {encoder.max_positions - tokens.shape[1]} for a "
                               f"{tokens.shape[1]}-token input and {encoder.max_positions} positions, got {offset}")
        return PatchingPair(clean, corrupted, corruption, int(offset))
    generator = np.random.default_rng(seed + 1)
    lengths = mask.sum(1).tolist()
    for row, length in enumerate(lengths):
        free = np.setdiff1d(np.arange(1, length - 1), clean.positions)
        corrupted[row, free] = clean.tokens[row, generator.permutation(free)]
    return PatchingPair(clean, corrupted, corruption)


# --- the metric ---------------------------------------------------------------------------------------
@dataclass
class _Reference:
    scored: torch.Tensor  # [B, T] bool
    answers: torch.Tensor  # [n] clean answers at the scored positions
    wrong: torch.Tensor  # [n] the corrupted run's answer (runner-up where it is the clean answer)
    clean_log_probs: torch.Tensor  # [n, vocab]
    clean: float
    corrupted: float


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """Half precision up to float32; float64 kept, so a float64 model's recoveries are exact to float64."""
    return x if x.dtype == torch.float64 else x.float()


def _metric(logits: torch.Tensor, reference: _Reference, metric: str) -> torch.Tensor:
    rows = _at_least_float32(logits[reference.scored])
    if metric == "logit_diff":
        return (rows.gather(1, reference.answers[:, None]) - rows.gather(1, reference.wrong[:, None])).mean()
    log_q = rows.log_softmax(-1)
    return -(reference.clean_log_probs.exp() * (reference.clean_log_probs - log_q)).sum(-1).mean()


def _reference(encoder: Encoder, pair: PatchingPair, metric: str) -> _Reference:
    if metric not in METRICS:
        raise EncoderError(f"unknown metric {metric!r}; use {', '.join(METRICS)}")
    with torch.no_grad():
        clean = _at_least_float32(mlm_logits(encoder, pair.clean.tokens, pair.attention_mask))
        corrupted = _at_least_float32(_corrupted_logits(encoder, pair))
    scored = pair.clean.scored
    answers = pair.clean.targets[scored]
    top2 = corrupted[scored].topk(2, dim=-1).indices
    wrong = torch.where(top2[:, 0] == answers, top2[:, 1], top2[:, 0])
    partial = _Reference(scored, answers, wrong, clean[scored].log_softmax(-1), 0.0, 0.0)
    partial.clean = float(_metric(clean, partial, metric))
    partial.corrupted = float(_metric(corrupted, partial, metric))
    if abs(partial.clean - partial.corrupted) < 1e-9:
        raise EncoderError(f"{encoder.name}: the corruption does not change the {metric} ({partial.clean:.4g} both); "
                           "nothing to recover (a relative model read at another offset?)")
    return partial


def _corrupted_logits(encoder: Encoder, pair: PatchingPair) -> torch.Tensor:
    return mlm_logits(encoder, pair.corrupted, pair.attention_mask, pair.offset)


def _recovery(value: float, reference: _Reference) -> float:
    return (value - reference.corrupted) / (reference.clean - reference.corrupted)


# --- exact patching -------------------------------------------------------------------------------------
def patch_subspaces(encoder: Encoder) -> list[str]:
    """The subspaces a patch replaces: DSTG's two streams and both at once, else the one state."""
    return ["sem", "ap", "full"] if "sem" in encoder.subspaces else ["full"]


def _states(encoder: Encoder, tokens, mask, layers, subspaces) -> dict:
    with torch.no_grad():
        return {key: value.clone() for key, value in encoder.states(tokens, layers, subspaces, attention_mask=mask).items()}


def _sources(encoder, pair, layers, subspaces, source: str) -> dict:
    if source not in SOURCES:
        raise EncoderError(f"unknown patch source {source!r}; use {', '.join(SOURCES)}")
    states = _states(encoder, pair.clean.tokens, pair.attention_mask, layers, subspaces)
    if source == "other":
        if pair.clean.tokens.shape[0] < 2:
            raise EncoderError("source='other' patches in another row's state: the batch needs two rows or more")
        states = {key: value.roll(1, dims=0) for key, value in states.items()}
    return states


def _layers(encoder: Encoder, layers) -> list:
    return [layer for layer in encoder.layers if layer != "final"] if layers is None else list(layers)


def patch_states(encoder: Encoder, pair: PatchingPair, metric: str = "logit_diff", layers=None, subspaces=None,
                 positions=None, source: str = "clean", fraction: float = 1.0) -> pd.DataFrame:
    """Exact denoising patches of every (layer, subspace, position): one row each (``STATE_COLUMNS``).

    fraction: patch x_corrupted + fraction * (x_clean - x_corrupted) instead of x_clean (1 = the full patch); as it
    goes to 0, recovery / fraction goes to the attribution's recovery (its derivative), so the curve over
    ``fraction`` shows where the linear approximation breaks."""
    if not 0.0 < float(fraction) <= 1.0:
        raise EncoderError(f"fraction must be in (0, 1], got {fraction}")
    layers = _layers(encoder, layers)
    subspaces = patch_subspaces(encoder) if subspaces is None else list(subspaces)
    encoder.resolve(layers, subspaces)
    reference = _reference(encoder, pair, metric)
    sources = _sources(encoder, pair, layers, subspaces, source)
    positions = range(pair.clean.tokens.shape[1]) if positions is None else positions
    rows = []
    for layer in layers:
        for subspace in subspaces:
            state = sources[(layer, subspace)]
            for position in positions:
                def patch(x, state=state, position=position):
                    x = x.clone()
                    x[:, position] += float(fraction) * (state[:, position].to(x.dtype) - x[:, position])
                    return x
                with torch.no_grad(), edit_states(encoder, layer, subspace, patch):
                    value = float(_metric(_corrupted_logits(encoder, pair), reference, metric))
                rows.append({"layer": layer, "subspace": subspace, "position": int(position),
                             "masked": bool(position in pair.clean.positions), "metric": metric, "value": value,
                             "recovery": _recovery(value, reference)})
    return pd.DataFrame(rows, columns=STATE_COLUMNS).assign(clean=reference.clean, corrupted=reference.corrupted,
                                                            source=source, fraction=float(fraction))


def head_hooks(encoder: Encoder) -> dict[str, str]:
    """stream -> hook-name suffix of a head's mixed values under ``blocks.{l}.attn.`` ([batch, pos, head, d])."""
    if encoder.kind == "hf":
        raise EncoderError(f"{encoder.name}: per-head patching reads the heads' mixed values (hook_z) of a model of "
                           "ours; an HF encoder has no such hook (patch its hidden states with patch_states)")
    return head_values(encoder.variant)


def _capture_heads(encoder, tokens, mask, names) -> dict:
    with torch.no_grad():
        return {name: value.clone() for name, value in encoder.capture(tokens, mask, names).items()}


def patch_heads(encoder: Encoder, pair: PatchingPair, metric: str = "logit_diff", source: str = "clean") -> pd.DataFrame:
    """Exact denoising patches of every head's mixed values (every position): one row per (block, stream, head)."""
    streams = head_hooks(encoder)
    reference = _reference(encoder, pair, metric)
    names = [f"blocks.{block}.attn.{suffix}" for block in range(encoder.n_layers) for suffix in streams.values()]
    clean = _capture_heads(encoder, pair.clean.tokens, pair.attention_mask, names)
    if source == "other":
        clean = {name: value.roll(1, dims=0) for name, value in clean.items()}
    elif source != "clean":
        raise EncoderError(f"unknown patch source {source!r}; use {', '.join(SOURCES)}")
    rows = []
    for block in range(encoder.n_layers):
        for stream, suffix in streams.items():
            name = f"blocks.{block}.attn.{suffix}"
            for head in range(encoder.n_heads):
                def patch(z, state=clean[name], head=head):
                    z = z.clone()
                    z[:, :, head] = state[:, :, head].to(z.dtype)
                    return z
                with torch.no_grad(), edit_hooks(encoder, {name: patch}):
                    value = float(_metric(_corrupted_logits(encoder, pair), reference, metric))
                rows.append({"block": block, "stream": stream, "head": head, "metric": metric, "value": value,
                             "recovery": _recovery(value, reference)})
    return pd.DataFrame(rows, columns=HEAD_COLUMNS).assign(source=source)


# --- attribution patching -----------------------------------------------------------------------------------
def attribution_patch(encoder: Encoder, pair: PatchingPair, metric: str = "logit_diff", layers=None) -> pd.DataFrame:
    """Every (layer, subspace, position) of ``patch_states`` from one forward/backward pair (module docstring)."""
    layers = _layers(encoder, layers)
    streams = ["sem", "ap"] if "sem" in encoder.subspaces else ["full"]
    encoder.resolve(layers, streams)
    reference = _reference(encoder, pair, metric)
    clean = _states(encoder, pair.clean.tokens, pair.attention_mask, layers, streams)
    corrupted, deltas = {}, {}

    def zero_edit(key):
        def edit(x):
            corrupted[key] = x.detach().clone()
            deltas[key] = torch.zeros_like(x, requires_grad=True)
            return x + deltas[key]
        return edit

    with torch.enable_grad(), contextlib.ExitStack() as stack:
        for layer in layers:
            for stream in streams:
                stack.enter_context(edit_states(encoder, layer, stream, zero_edit((layer, stream))))
        value = _metric(_corrupted_logits(encoder, pair), reference, metric)
        keys = list(deltas)
        grads = torch.autograd.grad(value, [deltas[key] for key in keys], allow_unused=True)
    per_position = {}
    for key, grad in zip(keys, grads):
        grad = torch.zeros_like(deltas[key]) if grad is None else grad
        per_position[key] = (grad * (clean[key] - corrupted[key])).sum(dim=(0, 2)).double().cpu().numpy()
    if streams == ["sem", "ap"]:
        for layer in layers:
            per_position[(layer, "full")] = per_position[(layer, "sem")] + per_position[(layer, "ap")]
    span = reference.clean - reference.corrupted
    rows = []
    for (layer, subspace), effects in per_position.items():
        for position, effect in enumerate(effects):
            rows.append({"layer": layer, "subspace": subspace, "position": position,
                         "masked": bool(position in pair.clean.positions), "metric": metric,
                         "value": reference.corrupted + float(effect), "recovery": float(effect) / span})
    return pd.DataFrame(rows, columns=STATE_COLUMNS).assign(clean=reference.clean, corrupted=reference.corrupted,
                                                            source="attribution", fraction=np.nan)


def compare_attribution(exact: pd.DataFrame, approximate: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """(Pearson r of attribution against exact recovery -- "all" and per subspace --, the merged table)."""
    keys = ["layer", "subspace", "position"]
    merged = exact[keys + ["masked", "recovery"]].merge(approximate[keys + ["recovery"]], on=keys,
                                                       suffixes=("_exact", "_attribution"))
    if merged.empty:
        raise ValueError("the exact and attribution tables share no (layer, subspace, position)")

    def pearson(frame) -> float:
        a, b = frame.recovery_exact.to_numpy(), frame.recovery_attribution.to_numpy()
        if len(frame) < 3 or a.std() == 0 or b.std() == 0:
            return float("nan")
        return float(np.corrcoef(a, b)[0, 1])

    agreement = {"all": pearson(merged), **{s: pearson(g) for s, g in merged.groupby("subspace", sort=False)},
                 "n": int(len(merged))}
    return agreement, merged
