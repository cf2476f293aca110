"""RoPE heads classified by frequency band: each head's q.k split over its rotation planes (Barbero et al. 2025,
"Round and Round We Go! What makes Rotary Positional Encodings useful?").

    from dstg_interp.analysis.rope_bands import band_stats, classify_band_heads, band_sweep
    stats = band_stats(encoder, tokens, attention_mask, n_bands=4)    # one row per (layer, head, band)
    heads = classify_band_heads(stats)                                # one row per head: shares and a label
    band_sweep(stats)                                                 # label counts for every threshold

A rotary head's logit is a sum over its d_head / 2 rotation planes, plane i turning at frequency
theta^(-2i / d_head) radians per token (plane 0 the fastest):
    logit(q, k) = sum_i (R_q q)_i . (R_k k)_i / sqrt(d_head)      (the pair of dimensions i and i + d_head / 2)
read from the head's queries and keys before the rotation (``blocks.{l}.attn.hook_q`` / ``hook_k``), rotated
with the block's own rotation (``rotary_of``); the planes sum to the head's logit exactly (tests check it against
``hook_logits`` and against a Hugging Face ModernBERT's own pre-softmax scores).  The planes are
grouped into ``n_bands`` contiguous bands, band 0 the highest frequencies.  As for DSTG's logit terms
(``analysis.heads``), what counts is each band's variance **over a query's keys** (the band minus its mean over
the query's valid keys, pooled over valid pairs): softmax ignores what is constant along a query's keys.
``share`` = band variance / the summed band variances (covariances reported apart as ``cov_share``).

Rule (Barbero et al.: high frequencies build positional heads, low frequencies carry semantics): the planes are
split in two halves, ``high_share`` = var(high-half logit) / (var(high) + var(low));
    high_share >= threshold        -> "positional"
    high_share <= 1 - threshold    -> "semantic"
    otherwise                      -> "mixed"
with ``threshold`` = ``DOMINANT_SHARE`` (0.6) as for DSTG, and ``band_sweep`` relabelling the heads from 0.5 to
0.9.  A head whose queries and keys do not depend on the token reads only position: its logit moves with the
offset, and over a window the fast planes move most, so it scores positional (the known-answer test).
``positional_score`` beside it is the share of the head's logit variance (within query) explained by the
offset alone, the pattern-free cousin of ``heads.positional_score``.  Models without rotary heads (DSTG, AP,
RP, BERT-family HF encoders) are refused in one line.  The authors' NeoBERT (``chandar-lab/NeoBERT`` layout)
loads as a model of ours with rotary heads and is read the same way.  A Hugging Face RoPE encoder is read
through the HF adapter when its family is a row of ``encoders.rotary.ROTARY_FAMILIES`` (ModernBERT: each
layer's own inverse frequencies, global or local theta; a sliding-window layer's variance is over the keys its
window lets a query see); another HF rotary family (EuroBERT, RoFormer, ...) is refused in one line naming the
families read.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..variants import position_mechanism, variant_row
from ..encoders import Encoder, EncoderError
from ..encoders.rotary import RotaryTable, families_read, is_rotary, rotary_family, rotary_table
from .heads import DOMINANT_SHARE
from .masked_inputs import checked_batch

BAND_COLUMNS = ["layer", "head", "band", "first_plane", "last_plane", "frequency_high", "frequency_low",
                "variance", "share"]
SWEEP_THRESHOLDS = tuple(np.round(np.arange(0.50, 0.901, 0.05), 2))


def hf_rope(encoder: Encoder) -> bool:
    """An HF encoder with rotary heads (ModernBERT, EuroBERT, RoFormer, ...), read by the split or not."""
    return encoder.kind == "hf" and is_rotary(encoder.model)


def rotary_of(encoder: Encoder, block: int, positions: int | None = None) -> RotaryTable:
    """The rotation block ``block`` applies (``positions`` rows; default the model's positions), or one clear
    EncoderError for a model without rotary heads, or an HF rotary family the table does not read."""
    if hf_rope(encoder):
        if rotary_family(encoder.model) is None:
            raise EncoderError(f"{encoder.name}: a Hugging Face RoPE encoder ({encoder.variant}) whose heads the "
                               f"frequency-band split does not read: of Hugging Face families it reads {families_read()} "
                               "(one row each in dstg_interp/encoders/rotary.py), besides RoPE models of ours and the "
                               "authors' NeoBERT layout (chandar-lab/NeoBERT)")
        return rotary_table(encoder.model, block, encoder.max_positions if positions is None else positions)
    if encoder.kind == "hf" or not variant_row(encoder.variant).rotary:
        raise EncoderError(f"{encoder.name}: the frequency-band split needs rotary (RoPE) heads; this "
                           f"{encoder.variant!r} model has none (position enters {position_mechanism(encoder.variant)})")
    rotary = encoder.model.blocks[block].attn.rotary
    return RotaryTable(rotary.cos, rotary.sin)


def plane_logits(q: torch.Tensor, k: torch.Tensor, rotary) -> torch.Tensor:
    """q, k [B, T, H, d] before the rotation -> [B, H, T, T, d / 2]: each rotation plane's part of q.k / sqrt(d)."""
    q, k = q.transpose(1, 2).double(), k.transpose(1, 2).double()  # [B, H, T, d]
    rotated_q, rotated_k = rotate(q, rotary), rotate(k, rotary)
    half = q.shape[-1] // 2
    products = rotated_q[:, :, :, None, :] * rotated_k[:, :, None, :, :]  # [B, H, T, T, d]
    return (products[..., :half] + products[..., half:]) / math.sqrt(q.shape[-1])


def rotate(x: torch.Tensor, rotary) -> torch.Tensor:
    seq_len = x.shape[-2]
    cos, sin = rotary.cos[:seq_len].double(), rotary.sin[:seq_len].double()
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def plane_frequencies(rotary, d_head: int) -> np.ndarray:
    """[d_head / 2] radians per token of each plane, read from the block's cos table (plane 0 the fastest)."""
    angles = torch.atan2(rotary.sin[1, : d_head // 2].double(), rotary.cos[1, : d_head // 2].double())
    return angles.abs().numpy()


def band_planes(n_planes: int, n_bands: int) -> list[np.ndarray]:
    if not 1 <= n_bands <= n_planes:
        raise EncoderError(f"n_bands must be in 1 .. {n_planes} (the heads' rotation planes), got {n_bands}")
    return np.array_split(np.arange(n_planes), n_bands)


def _within_query(values: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """values [B, H, T, T, m] minus their mean over each query's valid keys, zero off the valid pairs."""
    weights = pairs[..., None]
    mean = (values * weights).sum(3, keepdim=True) / weights.sum(3, keepdim=True).clamp(min=1)
    return (values - mean) * weights


def band_stats(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
               n_bands: int = 4, layers=None) -> pd.DataFrame:
    """One row per (layer, head, band) (``BAND_COLUMNS``) plus per-head columns (``high_share``, ``cov_share``,
    ``positional_score``) repeated on each of its rows; see the module docstring."""
    rotary_of(encoder, 0)
    tokens, mask = checked_batch(tokens, attention_mask)
    blocks = list(range(encoder.n_layers)) if layers is None else [int(b) for b in layers]
    names = [f"blocks.{b}.attn.hook_{x}" for b in blocks for x in "qk"]
    with torch.no_grad():
        captured = encoder.capture(tokens.to(encoder.device), mask.to(encoder.device), names)
    mask = mask.to(encoder.device)
    valid = (mask[:, None, :, None] & mask[:, None, None, :]).double()  # [B, 1, T, T]
    offsets = (torch.arange(tokens.shape[1])[None, :] - torch.arange(tokens.shape[1])[:, None]).to(encoder.device)
    rows = []
    for block in blocks:
        rotary = rotary_of(encoder, block, positions=tokens.shape[1])
        # a local-attention block (ModernBERT's sliding layers) scores only the keys within its window
        pairs = valid if rotary.window is None else valid * (offsets.abs() <= rotary.window)
        n_pairs = float(pairs.sum())
        planes = plane_logits(captured[f"blocks.{block}.attn.hook_q"], captured[f"blocks.{block}.attn.hook_k"], rotary)
        d_head = 2 * planes.shape[-1]
        frequencies = plane_frequencies(rotary, d_head)
        groups = band_planes(planes.shape[-1], n_bands)
        bands = torch.stack([planes[..., g].sum(-1) for g in groups], dim=-1)  # [B, H, T, T, n_bands]
        halves = torch.stack([planes[..., : planes.shape[-1] // 2].sum(-1), planes[..., planes.shape[-1] // 2:].sum(-1)], -1)
        centred = _within_query(bands, pairs)
        covariance = torch.einsum("bhqka,bhqkc->hac", centred, centred) / n_pairs  # [H, n_bands, n_bands]
        half_centred = _within_query(halves, pairs)
        half_variance = (half_centred**2).sum(dim=(0, 2, 3)) / n_pairs  # [H, 2]
        total = _within_query(planes.sum(-1, keepdim=True), pairs)[..., 0]  # [B, H, T, T]
        offset_score = _offset_eta_squared(total, pairs, offsets)
        for head in range(planes.shape[1]):
            variances = covariance[head].diagonal()
            summed = float(variances.sum())
            off_diagonal = float(covariance[head].sum() - variances.sum())
            halves_sum = float(half_variance[head].sum())
            per_head = {"high_share": float(half_variance[head, 0]) / halves_sum if halves_sum > 0 else np.nan,
                        "cov_share": off_diagonal / summed if summed > 0 else np.nan,
                        "positional_score": float(offset_score[head]), "d_head": d_head, "n_pairs": int(n_pairs)}
            for band, group in enumerate(groups):
                rows.append({"layer": block, "head": head, "band": band, "first_plane": int(group[0]),
                             "last_plane": int(group[-1]), "frequency_high": float(frequencies[group[0]]),
                             "frequency_low": float(frequencies[group[-1]]), "variance": float(variances[band]),
                             "share": float(variances[band]) / summed if summed > 0 else np.nan, **per_head})
    return pd.DataFrame(rows)


def _offset_eta_squared(centred: torch.Tensor, pairs: torch.Tensor, offsets: torch.Tensor) -> np.ndarray:
    """[H] share of the within-query logit variance explained by the key's offset from the query alone."""
    index = (offsets - offsets.min()).reshape(-1)  # [T*T]
    n_bins = int(index.max()) + 1
    weights = pairs.expand(centred.shape[0], 1, -1, -1).reshape(centred.shape[0], -1).sum(0)  # [T*T]
    values = centred.permute(1, 0, 2, 3).reshape(centred.shape[1], centred.shape[0], -1).sum(1)  # [H, T*T]
    counts = torch.zeros(n_bins, dtype=torch.double, device=centred.device).index_add_(0, index, weights)
    sums = torch.zeros(centred.shape[1], n_bins, dtype=torch.double, device=centred.device).index_add_(1, index, values)
    means = sums / counts.clamp(min=1)
    between = (counts * means**2).sum(-1)
    total = (centred**2).sum(dim=(0, 2, 3))
    return torch.where(total > 1e-12, (between / total).clamp(0, 1), torch.zeros_like(total)).cpu().numpy()


def classify_band_heads(stats: pd.DataFrame, threshold: float = DOMINANT_SHARE) -> pd.DataFrame:
    """One row per head: model columns kept, ``share_band{i}``, high_share, cov_share, positional_score, label."""
    if not 0.5 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0.5, 1], got {threshold}")
    keys = [c for c in ("model", "seed", "layer", "head") if c in stats]
    wide = stats.pivot_table(index=keys, columns="band", values="share").add_prefix("share_band").reset_index()
    per_head = stats.groupby(keys, sort=False)[["high_share", "cov_share", "positional_score"]].first().reset_index()
    heads = per_head.merge(wide, on=keys)
    heads["label"] = np.where(heads.high_share >= threshold, "positional",
                              np.where(heads.high_share <= 1 - threshold, "semantic", "mixed"))
    return heads


def band_sweep(stats: pd.DataFrame, thresholds=SWEEP_THRESHOLDS, by=("model", "seed")) -> pd.DataFrame:
    """Head counts per label for every threshold: one row per (``by`` groups, threshold, label)."""
    by = [c for c in by if c in stats]
    tables = []
    for threshold in thresholds:
        heads = classify_band_heads(stats, float(threshold))
        counts = heads.groupby(by + ["label"], sort=False).size().rename("n_heads").reset_index()
        counts["n_total"] = counts.groupby(by)["n_heads"].transform("sum") if by else counts.n_heads.sum()
        tables.append(counts.assign(threshold=float(threshold)))
    return pd.concat(tables, ignore_index=True)


# --- Frequency Entropy of each rotation plane's query norm along the sequence -------------------------------
ENTROPY_COLUMNS = ["layer", "head", "plane", "frequency", "mean_norm", "norm_rank", "frequency_entropy",
                   "noise_entropy", "noise_entropy_q05"]
NOISE_DRAWS = 200  # white-noise signals of the window's length: the control a periodic norm is read against


def spectral_entropy(signal) -> float:
    """The Shannon entropy of a 1-D signal's power spectrum, normalised to [0, 1]: the power at
    frequencies 1 .. T // 2 of the mean-removed signal as a distribution, entropy / log(number of frequencies).
    0: all power at one frequency (a pure sinusoid); near 1: power spread evenly (white noise); NaN for a
    constant signal (no power to distribute)."""
    signal = np.asarray(signal, dtype=np.float64)
    if signal.ndim != 1 or signal.size < 4:
        raise ValueError(f"spectral_entropy needs a 1-D signal of at least 4 values, got shape {list(signal.shape)}")
    power = np.abs(np.fft.rfft(signal - signal.mean()))[1: signal.size // 2 + 1] ** 2
    if power.sum() <= 0:
        return float("nan")
    p = power / power.sum()
    nonzero = p[p > 0]
    return float(-(nonzero * np.log(nonzero)).sum() / np.log(len(p)))


def frequency_entropy(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      layers=None) -> pd.DataFrame:
    """One row per (layer, head, rotation plane) (``ENTROPY_COLUMNS``): each plane's query norm along the sequence
    (the norm of the plane's two query coordinates at each position, averaged over the real tokens there; the
    rotation leaves it unchanged), its ``spectral_entropy`` (Frequency Entropy, after "Probing Rotary Position
    Embeddings through Frequency Entropy", ICLR 2026 submission: low = the norm rises and falls periodically along
    the sequence), the plane's ``frequency`` (radians per token), its ``mean_norm`` and ``norm_rank`` within the
    head (0 = the highest-norm plane: where the head's high-norm frequency band lies), and the control: the mean
    and 5th percentile of the entropy of ``NOISE_DRAWS`` white-noise signals of the same length (seed 0); a plane
    below ``noise_entropy_q05`` has a norm more periodic than noise.  Rotary models only (one EncoderError
    otherwise, as ``band_stats``)."""
    rotary_of(encoder, 0)
    tokens, mask = checked_batch(tokens, attention_mask)
    if tokens.shape[1] < 4:
        raise EncoderError(f"Frequency Entropy needs windows of at least 4 tokens, got {tokens.shape[1]}")
    blocks = list(range(encoder.n_layers)) if layers is None else [int(b) for b in layers]
    with torch.no_grad():
        captured = encoder.capture(tokens.to(encoder.device), mask.to(encoder.device),
                                   [f"blocks.{b}.attn.hook_q" for b in blocks])
    real = mask.to(encoder.device).double()[:, :, None, None]  # [B, T, 1, 1]
    counts = real.sum(0)  # [T, 1, 1]
    if bool((counts == 0).any()):
        raise EncoderError("every position needs at least one real token to read a norm along the sequence; "
                           "give full windows")
    noise = [spectral_entropy(x) for x in np.random.default_rng(0).standard_normal((NOISE_DRAWS, tokens.shape[1]))]
    control = {"noise_entropy": float(np.mean(noise)), "noise_entropy_q05": float(np.quantile(noise, 0.05))}
    rows = []
    for block in blocks:
        rotary = rotary_of(encoder, block, positions=tokens.shape[1])
        q = captured[f"blocks.{block}.attn.hook_q"].double()  # [B, T, H, d]
        half = q.shape[-1] // 2
        norms = (q[..., :half] ** 2 + q[..., half:] ** 2).sqrt()  # [B, T, H, planes]
        along = ((norms * real).sum(0) / counts).cpu().numpy()  # [T, H, planes]: the mean norm at each position
        frequencies = plane_frequencies(rotary, q.shape[-1])
        for head in range(along.shape[1]):
            mean_norm = along[:, head].mean(axis=0)
            rank = np.argsort(np.argsort(-mean_norm))
            for plane in range(along.shape[2]):
                rows.append({"layer": block, "head": head, "plane": plane, "frequency": float(frequencies[plane]),
                             "mean_norm": float(mean_norm[plane]), "norm_rank": int(rank[plane]),
                             "frequency_entropy": spectral_entropy(along[:, head, plane]), **control})
    return pd.DataFrame(rows, columns=ENTROPY_COLUMNS)
