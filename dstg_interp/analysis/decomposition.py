"""Position / context decomposition of hidden states (Song & Zhong 2023, "Uncovering hidden geometry in transformers
via disentangling position and context", arXiv 2310.04861).

    from dstg_interp.analysis.decomposition import decompose, decomposition_by_layer
    parts = decompose(states)                        # states [C contexts, T positions, d]; a dict of numbers
    table = decomposition_by_layer(encoder, tokens)  # one row per (layer, subspace), every layer of any encoder

For C sequences (contexts) of T positions each, every state splits as
    h[c, t] = mu + pos[t] + ctx[c] + resid[c, t]
with mu the global mean, pos[t] = mean_c h[c, t] - mu, ctx[c] = mean_t h[c, t] - mu and resid the rest.  On a full
grid (every context at every position) the four parts are orthogonal in the sum of squares, so their shares of
sum ||h||^2 add to 1 (``share_mean``, ``share_position``, ``share_context``, ``share_residual``); the centred
shares (``centred_share_*``) leave mu out.  The position part's rank: the singular values of the [T, d] matrix
of pos[t] -- ``position_rank_95`` / ``_99`` components for 95% / 99% of its sum of squares and the
participation ratio -- and the same for the [C, d] context part.  Incoherence, the paper's "nearly orthogonal":
    max_cos_vectors   max |cos(pos[t], ctx[c])| over every pair (their ``visz_gram_pos_cbasis.py`` Gram)
    max_cos_bases     the cosine of the smallest principal angle between the span of the leading
                      ``position_rank_95`` directions of pos and the leading as many directions of ctx
Chance for both: the same numbers for Gaussian vectors of the same counts and width (``chance_max_cos_*``,
seeded), so "small" is read against what unrelated directions in d dimensions give.

``decomposition_by_layer`` needs equal-length rows with no padding (full windows); the first and last position
([CLS] / [SEP], a constant token) are dropped unless ``drop_ends=False``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..encoders import Encoder, EncoderError


def _rank(matrix: np.ndarray) -> dict:
    singular = np.linalg.svd(matrix, compute_uv=False)
    energy = singular**2
    total = energy.sum()
    if total <= 0:
        return {"rank_95": 0, "rank_99": 0, "participation_ratio": 0.0}
    cumulative = np.cumsum(energy) / total
    return {"rank_95": int(np.searchsorted(cumulative, 0.95) + 1), "rank_99": int(np.searchsorted(cumulative, 0.99) + 1),
            "participation_ratio": float(total**2 / (energy**2).sum())}


def _max_cos_vectors(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-30)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-30)
    return float(np.abs(a @ b.T).max())


def _max_cos_bases(a: np.ndarray, b: np.ndarray, k: int) -> float:
    if k < 1:
        return float("nan")
    basis_a = np.linalg.svd(a, full_matrices=False)[2][:k]
    basis_b = np.linalg.svd(b, full_matrices=False)[2][:k]
    return float(np.linalg.svd(basis_a @ basis_b.T, compute_uv=False).max())


def decompose(states, seed: int = 0) -> dict:
    """The decomposition's numbers (module docstring) for ``states`` [C contexts, T positions, d]."""
    h = np.asarray(states, dtype=np.float64)
    if h.ndim != 3 or h.shape[0] < 2 or h.shape[1] < 2:
        raise ValueError(f"states must be [contexts >= 2, positions >= 2, d], got {list(h.shape)}")
    n_contexts, n_positions, width = h.shape
    mu = h.mean(axis=(0, 1))
    position = h.mean(axis=0) - mu  # [T, d]
    context = h.mean(axis=1) - mu  # [C, d]
    residual = h - mu - position[None] - context[:, None]
    sums = {"mean": n_contexts * n_positions * float(mu @ mu), "position": n_contexts * float((position**2).sum()),
            "context": n_positions * float((context**2).sum()), "residual": float((residual**2).sum())}
    total, centred = sum(sums.values()), sum(sums.values()) - sums["mean"]
    position_rank, context_rank = _rank(position), _rank(context)
    k = min(position_rank["rank_95"], context_rank["rank_95"]) if position_rank["rank_95"] else 0
    generator = np.random.default_rng(seed)
    random_position, random_context = generator.standard_normal(position.shape), generator.standard_normal(context.shape)
    out = {"n_contexts": n_contexts, "n_positions": n_positions, "width": width,
           **{f"share_{part}": value / total if total > 0 else np.nan for part, value in sums.items()},
           **{f"centred_share_{part}": sums[part] / centred if centred > 0 else np.nan
              for part in ("position", "context", "residual")},
           **{f"position_{key}": value for key, value in position_rank.items()},
           **{f"context_{key}": value for key, value in context_rank.items()},
           "bases_k": k, "max_cos_vectors": _max_cos_vectors(position, context),
           "max_cos_bases": _max_cos_bases(position, context, k),
           "chance_max_cos_vectors": _max_cos_vectors(random_position, random_context),
           "chance_max_cos_bases": _max_cos_bases(random_position, random_context, k)}
    return out


def decomposition_by_layer(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                           layers=None, subspaces=None, drop_ends: bool = True, seed: int = 0) -> pd.DataFrame:
    """``decompose`` at every (layer, subspace) of ``encoder`` over the rows of ``tokens`` [C, T] (full windows)."""
    tokens = tokens[None] if tokens.dim() == 1 else tokens
    if attention_mask is not None and not bool(attention_mask.to(torch.bool).all()):
        raise EncoderError("the position / context decomposition needs a full grid: every row as long as the "
                           "others, no padding (pass full windows of one length)")
    layers, subspaces = encoder.resolve(layers, subspaces)
    if tokens.shape[0] < 2 or tokens.shape[1] < (5 if drop_ends else 3):
        raise EncoderError(f"the decomposition needs 2 rows or more of at least {5 if drop_ends else 3} tokens, "
                           f"got {list(tokens.shape)}")
    states = encoder.states(tokens, layers, subspaces)
    rows = []
    for (layer, subspace), value in states.items():
        grid = value.float().cpu().numpy()
        if drop_ends:
            grid = grid[:, 1:-1]
        rows.append({"layer": layer, "subspace": subspace, **decompose(grid, seed=seed)})
    return pd.DataFrame(rows)
