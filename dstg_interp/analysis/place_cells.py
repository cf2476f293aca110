"""Place cells: each latent of a dictionary (an SAE's codes) as a receptive field over token position, and whether
position explains its activation beyond what a position-blind latent of the same sparsity would show.

    from dstg_interp.analysis.place_cells import place_cells, tiling
    cells = place_cells(codes, positions, groups=token_ids)   # codes [n, m]; positions, groups [n]
    cells.table        # one row per latent: latent, n_active, mean_activation, peak, peak_activation, width, cut,
                       # eta2, tuned
    cells.fields       # [m, n_positions] mean activation of each latent at each position of cells.positions
    cells.threshold    # the eta2 a latent must exceed to count as position-tuned (the shuffled control's quantile)
    curve, points, share = tiling(decoder, cells, states, positions)   # the latents on the position curve's PC plane

Definitions (latent j, activation a_j over the n tokens, position t among the positions seen):
    receptive field  f_j(t) = mean of a_j over the tokens at position t (zeros included).
    peak             the position t where f_j(t) is largest (the first such one on a tie); ``peak_activation``
                     = f_j(peak).
    width            full width at half maximum, in positions: with baseline b = min_t f_j(t) and half level
                     h = (f_j(peak) + b) / 2, the contiguous run of positions around the peak where f_j >= h,
                     extended on each side by linear interpolation to the point where the field crosses h
                     between the run's last position and the next position seen.  A Gaussian bump of standard
                     deviation sigma has width 2 sqrt(2 ln 2) sigma ~ 2.355 sigma.  Where the run reaches the
                     first or last position seen the field is cut there (``cut`` True: the width is a lower bound).
    eta2             the share of the latent's activation variance explained by position (the correlation ratio):
                     sum_t n_t (f_j(t) - mean a_j)^2 / sum_i (a_ij - mean a_j)^2; NaN for a latent of no variance.
    tuned            live (active on at least ``min_active`` tokens) and eta2 above ``threshold``.
    threshold        the ``quantile`` (0.99) of eta2 over the live latents and ``n_shuffles`` draws of the same codes
                     with positions permuted among the tokens of each group (``groups``; None: over all tokens).
                     eta2 of a latent with n tokens over T positions is biased upward by about (T - 1) / (n - 1) even
                     when it ignores position, and more so for a sparse latent, so the bar is what latents with these
                     very activations reach once position is made meaningless; about 1 % of position-blind latents
                     pass it.  The groups say which alternative the control rules out: groups = token ids (positions
                     exchanged only among occurrences of the same token) rule out a latent that reads the token,
                     whose frequency varies with position in real text (sentence starts); groups = documents rule out
                     a latent that tracks its document (long documents alone reach late positions).

``tiling`` places the latents on the position curve (the LessWrong layer-0 GPT-2 figure; Gurnee et al. 2026):
the curve is the per-position mean state, centred, in its top-2 principal plane; each latent's point is
(f_j(peak) - mean a_j) times its decoder direction in that plane -- its share of the centred mean state at its
peak position, since an SAE's reconstruction is linear in the codes (the curve of the reconstruction is exactly
the sum over latents of (f_j(t) - mean a_j) w_j).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .spectra import per_position_mean

TABLE_COLUMNS = ["latent", "n_active", "mean_activation", "peak", "peak_activation", "width", "cut", "eta2", "tuned"]
FWHM_PER_SD = 2 * np.sqrt(2 * np.log(2))  # the width of a Gaussian bump per standard deviation


@dataclass
class PlaceCells:
    """What ``place_cells`` measured (module docstring)."""

    table: pd.DataFrame  # one row per latent, TABLE_COLUMNS
    fields: np.ndarray  # [m, n_positions] mean activation per position
    positions: np.ndarray  # [n_positions] the positions seen, sorted
    counts: np.ndarray  # [n_positions] tokens at each
    threshold: float  # eta2 a latent must exceed to be tuned
    null: np.ndarray  # [n_shuffles, m] eta2 with positions permuted (NaN for a latent of no variance)


def place_cells(codes, positions, groups=None, n_shuffles: int = 5, quantile: float = 0.99, min_active: int = 20,
                seed: int = 0) -> PlaceCells:
    """Receptive field, peak, width, eta2 and tuning of every latent of ``codes`` [n, m] over ``positions`` [n]
    (``groups`` [n]: each token's group -- its token id or document -- within which the control permutes positions;
    None: over all tokens); module docstring."""
    codes, positions, groups = _checked(codes, positions, groups)
    if isinstance(n_shuffles, bool) or int(n_shuffles) != n_shuffles or n_shuffles < 1:
        raise ValueError(f"n_shuffles must be an integer >= 1, got {n_shuffles!r}")
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must lie in (0, 1), got {quantile!r}")
    seen, index, counts = np.unique(positions, return_inverse=True, return_counts=True)
    fields = _field_sums(codes, index, len(seen)) / counts[:, None]  # [T, m]
    eta2 = _eta2(codes, fields, counts)
    rng = np.random.default_rng(seed)
    null = np.stack([_eta2(codes, _field_sums(codes, shuffled, len(seen)) / counts[:, None], counts)
                     for shuffled in (_shuffled(index, groups, rng) for _ in range(int(n_shuffles)))])
    n_active = (codes != 0).sum(axis=0)
    live = n_active >= min_active
    pooled = null[:, live][np.isfinite(null[:, live])]
    threshold = float(np.quantile(pooled, quantile)) if pooled.size else np.nan
    peaks, widths, cut = peaks_and_widths(fields.T, seen)
    table = pd.DataFrame({"latent": np.arange(codes.shape[1]), "n_active": n_active,
                          "mean_activation": codes.mean(axis=0), "peak": peaks,
                          "peak_activation": fields.max(axis=0), "width": widths, "cut": cut, "eta2": eta2,
                          "tuned": live & np.isfinite(eta2) & (eta2 > threshold)})
    return PlaceCells(table[TABLE_COLUMNS], fields.T, seen, counts, threshold, null)


def peaks_and_widths(fields, positions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Peak position [m], full width at half maximum [m] (module docstring) and whether the field is cut by the
    positions seen [m], of receptive fields [m, T] over ``positions`` [T] (sorted); a flat field has width NaN."""
    fields, positions = np.asarray(fields, dtype=np.float64), np.asarray(positions, dtype=np.float64)
    peaks, widths, cut = np.full(len(fields), np.nan), np.full(len(fields), np.nan), np.zeros(len(fields), bool)
    for j, field in enumerate(fields):
        top, base = int(np.argmax(field)), field.min()
        peaks[j] = positions[top]
        if not field[top] > base:
            continue
        half = (field[top] + base) / 2
        left, right = top, top
        while left > 0 and field[left - 1] >= half:
            left -= 1
        while right < len(field) - 1 and field[right + 1] >= half:
            right += 1
        cut[j] = left == 0 or right == len(field) - 1
        start = positions[0] if left == 0 else _crossing(positions, field, left - 1, left, half)
        end = positions[-1] if right == len(field) - 1 else _crossing(positions, field, right + 1, right, half)
        widths[j] = end - start
    return peaks, widths, cut


def tiling(decoder, cells: PlaceCells, states, positions) -> tuple[pd.DataFrame, np.ndarray, float]:
    """The position curve and the latents in its top-2 principal plane (module docstring).

    ``decoder`` [m, d]: each latent's direction in the units of ``states`` [n, d] (an SAE's decoder rows divided
    by the scale its inputs were multiplied by); ``positions`` [n] those of the states.  Returns the curve
    (DataFrame: position, pc1, pc2 of the centred per-position mean state), the latents' points [m, 2] and the
    share of the per-position means' variance the plane holds."""
    decoder = np.asarray(decoder, dtype=np.float64)
    states, positions = _checked(states, positions, None)[:2]
    if decoder.ndim != 2 or decoder.shape != (len(cells.table), states.shape[1]):
        raise ValueError(f"the decoder must be [m, d] = [{len(cells.table)}, {states.shape[1]}] (one direction per "
                         f"latent, in the states' width), got {list(decoder.shape)}")
    means, seen = per_position_mean(states, positions)
    if len(seen) < 3:
        raise ValueError(f"a position curve in a plane needs states at 3 positions or more, got {len(seen)}")
    centred = means - means.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    plane = vt[:2].T  # [d, 2]
    share = float((singular[:2] ** 2).sum() / max((singular**2).sum(), 1e-300))
    lift = cells.table.peak_activation.to_numpy() - cells.table.mean_activation.to_numpy()
    points = (lift[:, None] * decoder) @ plane
    curve = pd.DataFrame({"position": seen, "pc1": centred @ plane[:, 0], "pc2": centred @ plane[:, 1]})
    return curve, points, share


def _crossing(positions: np.ndarray, field: np.ndarray, outside: int, inside: int, half: float) -> float:
    """The position between ``outside`` (below ``half``) and ``inside`` (at or above it) where the field,
    linearly interpolated, equals ``half``."""
    low, high = field[outside], field[inside]
    return float(positions[outside] + (half - low) / (high - low) * (positions[inside] - positions[outside]))


def _field_sums(codes: np.ndarray, index: np.ndarray, n_positions: int) -> np.ndarray:
    """[T, m] sums of each latent's activation over the tokens at each position index."""
    return np.stack([np.bincount(index, weights=column, minlength=n_positions) for column in codes.T], axis=1)


def _eta2(codes: np.ndarray, fields: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[m] between-position over total sum of squares (NaN where the total is zero)."""
    mean = codes.mean(axis=0)
    total = ((codes - mean) ** 2).sum(axis=0)
    between = (counts[:, None] * (fields - mean) ** 2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, between / np.where(total > 0, total, 1.0), np.nan)


def _shuffled(index: np.ndarray, groups: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """``index`` permuted at random, within each group when ``groups`` is given."""
    if groups is None:
        return rng.permutation(index)
    by_group = np.argsort(groups, kind="stable")
    random_within = np.lexsort((rng.random(len(index)), groups))  # the same group blocks, random order inside
    shuffled = np.empty_like(index)
    shuffled[by_group] = index[random_within]
    return shuffled


def _checked(codes, positions, groups):
    """codes [n, m] float64, positions [n] int64 (>= 0, at least 2 distinct), groups [n] or None; or ValueError."""
    codes = np.asarray(codes.detach().cpu() if hasattr(codes, "detach") else codes, dtype=np.float64)
    positions = np.asarray(positions.detach().cpu() if hasattr(positions, "detach") else positions)
    if codes.ndim != 2 or positions.ndim != 1 or len(positions) != len(codes):
        raise ValueError(f"codes must be [n, m] and positions [n] (one per token); got {list(codes.shape)} and "
                         f"{list(positions.shape)}")
    if not np.isfinite(codes).all():
        raise ValueError("the codes have NaN or infinite entries; drop those tokens (or check the dictionary)")
    if positions.size and (not np.issubdtype(positions.dtype, np.integer) or positions.min() < 0):
        raise ValueError("positions must be integers >= 0, one per token")
    if len(np.unique(positions)) < 2:
        raise ValueError(f"a receptive field over position needs tokens at 2 positions or more, got "
                         f"{len(np.unique(positions))}")
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != positions.shape:
            raise ValueError(f"groups must give one group (token id, document) per token ({len(positions)}), got shape "
                             f"{list(groups.shape)}")
    return codes, positions.astype(np.int64), groups
