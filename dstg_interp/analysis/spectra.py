"""Spectra of position tables: PCA over positions, DCT-II of the leading PCs, and a random-table control.

    from dstg_interp import load_model
    from dstg_interp.analysis.spectra import position_table, analyze_table
    spectrum = analyze_table(position_table(load_model("dstg")), name="dstg AP table")
    spectrum.summary["pc1_pc2"], spectrum.summary["low_freq_share"]     # paper: 0.941, "nearly all"
    spectrum.variance, spectrum.curves, spectrum.dct                      # tidy DataFrames for plots

A *position table* is any [positions, d] matrix whose rows are indexed by position: DSTG's AP table,
AP-NeoBERT's entangled table, MiniLM's 512x384 table (a numpy array), or the per-position mean of a layer's
states (``per_position_mean``), which is the only version RoPE/RP models have.

Method (the paper's first finding, arXiv 2605.30022):
- PCA: rows are samples, centred over positions; explained-variance ratios from the SVD; the
  participation ratio (sum lambda)^2 / sum lambda^2 is an effective dimension that, unlike "PC1+PC2",
  can be compared across widths (48-d vs 768-d tables).
- DCT: ``scipy.fft.dct(type=2, norm='ortho')`` of each leading PC's score curve along position; power =
  squared coefficients, normalised per PC.  A cosine with f full periods over P positions,
  cos(2 pi f (n + 1/2) / P), is exactly DCT basis 2f, so "first 4 bins" = up to 1.5 periods.  The curves are
  centred (they are PC scores), so bin 0 holds ~no power; it is kept so bin k means the same everywhere.
  The combined share over the leading PCs weights each PC by its variance (sum of powers / sum of totals).
- Control: i.i.d. Gaussian tables of the same shape, seeded, averaged over ``n_control_draws``.  Expected
  values for P positions x d dims: PC1+PC2 ~ 2/d (a bit more, Marchenko-Pastur), participation ratio
  ~ d / (1 + d/P), share of the first k DCT bins ~ (k-1)/(P-1) (a centred white-noise curve).
  ``excess_*`` = the table's number minus its control's.
- Smooth controls (``smooth_controls``; in ``analyze_table``'s summary beside the Gaussian one): any smooth
  curve reads high on PC1+PC2 and the low-bin share, so "above a Gaussian table" says only "smooth".  Two
  structureless smooth families of the table's shape, 200 seeded draws each: random walks (``walk_*``) and white
  noise smoothed to the table's own lag-1 autocorrelation (``smoothed_*``); mean, q05 and q95 of PC1+PC2, PC3,
  PCs to 95%, participation ratio and the low-bin share.  A 128x16 random walk reads PC1+PC2 0.79 (q95 0.86).
- Width matching: PC1+PC2 and the participation ratio depend on the width (chance PC1+PC2 is ~2/d), so a
  16-wide table and a 128-wide one cannot be compared raw.  ``width_matched`` projects a table onto
  ``n_projections`` (default 50) random orthonormal subspaces of the narrower width and reports the mean
  and spread of every number over them, next to the Gaussian control of the projected shape
  (``matched_*``; ``analyze_table(..., match_width=w)`` adds them to the summary).  A projection to the
  table's own width is a rotation, which changes no PCA or DCT number.
- Per PC: the DCT share of each leading PC on its own (``pc1_low_freq_share``, ``pc2_low_freq_share``),
  beside the variance-weighted pooled share (``low_freq_share``), which the larger PC dominates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.fft import dct
from scipy.linalg import eigh
from scipy.ndimage import gaussian_filter1d

DEFAULT_LOW_BINS = 4  # the paper's "first four bins"
DEFAULT_N_PCS = 2  # the paper's 2-D manifold
DEFAULT_CONTROL_DRAWS = 20
DEFAULT_PROJECTIONS = 50  # random subspaces per width-matched reading
MATCHED_KEYS = ("pc1_pc2", "participation_ratio", "low_freq_share", "pc1_low_freq_share", "pc2_low_freq_share")


@dataclass
class TableSpectrum:
    """PCA + DCT numbers of one position table.

    ``variance``: one row per component (component 1-based, ratio, cumulative).
    ``curves``: one row per (position, pc) with the PC score.  ``dct``: one row per (pc, bin) with power and
    share of that PC's total power.  ``summary``: scalars (JSON-ready), control numbers under ``control``.
    """

    name: str
    shape: tuple[int, int]
    variance: pd.DataFrame
    curves: pd.DataFrame
    dct: pd.DataFrame
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Everything as plain JSON types (lists/dicts/floats)."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "summary": self.summary,
            "variance": self.variance.to_dict(orient="list"),
            "curves": self.curves.to_dict(orient="list"),
            "dct": self.dct.to_dict(orient="list"),
        }


# --- inputs ------------------------------------------------------------------------------------------
def position_table(model) -> np.ndarray:
    """A model's learned position table as float64 numpy, [max_positions, d].

    DSTG: the AP stream table; AP-NeoBERT: the entangled table added to token embeddings.  RoPE/RP have
    none: a ValueError points to ``per_position_mean`` on a layer's states instead.
    """
    try:
        table = model.ap_table
    except ValueError as err:
        raise ValueError(
            f"{err} -- e.g. spectra.per_position_mean(store.states(layer, 'full'), "
            "store.labels['token_position']) then spectra.analyze_table(...)"
        ) from None
    return table.detach().float().cpu().numpy().astype(np.float64)


def per_position_mean(states, token_positions, min_count: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean state per token position: the position table a layer implicitly holds.

    Args:
        states: [n_tokens, d] a layer's states (any subspace), numpy or torch.
        token_positions: [n_tokens] integer position of each token in its sequence.
        min_count: drop positions seen fewer times (late positions in short corpora are noisy).
    Returns:
        (table [n_positions_kept, d], positions [n_positions_kept]) sorted by position.
    """
    states = _as_numpy(states)
    token_positions = np.asarray(_as_numpy(token_positions)).astype(np.int64).ravel()
    if states.ndim != 2 or states.shape[0] != token_positions.shape[0]:
        raise ValueError(
            f"per_position_mean needs states [n_tokens, d] and token_positions [n_tokens]; "
            f"got {states.shape} and {token_positions.shape}"
        )
    if token_positions.size and token_positions.min() < 0:
        raise ValueError("token_positions must be >= 0")
    n_positions = int(token_positions.max()) + 1 if token_positions.size else 0
    counts = np.bincount(token_positions, minlength=n_positions)  # [n_positions]
    sums = np.zeros((n_positions, states.shape[1]))
    np.add.at(sums, token_positions, states)  # [n_positions, d]
    kept = np.flatnonzero(counts >= max(min_count, 1))
    return sums[kept] / counts[kept, None], kept


# --- the numbers -------------------------------------------------------------------------------------
def pca(table) -> tuple[np.ndarray, np.ndarray]:
    """PCA over positions. Returns (explained-variance ratios [r], scores [positions, r]), r = min(P-1, d)."""
    table = _check_table(table)
    centred = table - table.mean(axis=0, keepdims=True)  # [P, d], centred over positions
    u, s, _ = np.linalg.svd(centred, full_matrices=False)  # u: [P, min(P, d)]
    rank = min(table.shape[0] - 1, table.shape[1])  # centring removes one degree of freedom
    variances = s[:rank] ** 2
    total = variances.sum()
    ratios = variances / total if total > 0 else np.zeros_like(variances)
    scores = u[:, :rank] * s[:rank]  # [P, rank]
    return ratios, _fix_signs(scores)


def participation_ratio(ratios) -> float:
    """(sum lambda)^2 / sum lambda^2: 1 for a rank-1 table, d for an isotropic one."""
    ratios = np.asarray(ratios, dtype=np.float64)
    denom = float((ratios**2).sum())
    return float(ratios.sum() ** 2 / denom) if denom > 0 else 0.0


def dct_power(curves) -> np.ndarray:
    """Power per DCT-II bin of each curve along position. curves: [P, n_curves] -> power [P bins, n_curves]."""
    curves = np.asarray(curves, dtype=np.float64)
    return dct(curves, type=2, norm="ortho", axis=0) ** 2


def low_frequency_share(power, n_low_bins: int = DEFAULT_LOW_BINS) -> np.ndarray:
    """Share of each curve's power in bins [0, n_low_bins). power: [bins, n_curves] -> [n_curves]."""
    total = power.sum(axis=0)
    return np.where(total > 0, power[:n_low_bins].sum(axis=0) / np.where(total > 0, total, 1.0), 0.0)


def analyze_table(
    table,
    name: str = "table",
    positions=None,
    n_pcs: int = DEFAULT_N_PCS,
    n_low_bins: int = DEFAULT_LOW_BINS,
    n_control_draws: int = DEFAULT_CONTROL_DRAWS,
    seed: int = 0,
    match_width: int | None = None,
    n_projections: int = DEFAULT_PROJECTIONS,
) -> TableSpectrum:
    """PCA, PC curves, DCT of the leading ``n_pcs`` PCs and a Gaussian control, for one position table.

    Args:
        table: [positions, d] numpy array or torch tensor (rows = positions).
        name: label carried into every output (e.g. "dstg AP table", "rope layer 6 full").
        positions: [positions] labels of the rows (default 0..P-1); only used for the curves.
        n_pcs: leading PCs whose curves and spectra are reported.
        n_low_bins: k of "share of power in the first k bins".
        n_control_draws: Gaussian tables averaged for the control (0 = no control).
        seed: seed of the control draws.
        match_width: also report the numbers width-matched to this many dims (``width_matched``).
        n_projections: random subspaces for that.
    """
    table = _check_table(table)
    n_positions, width = table.shape
    positions = np.arange(n_positions) if positions is None else np.asarray(positions)
    if positions.shape != (n_positions,):
        raise ValueError(f"positions has shape {positions.shape}, expected ({n_positions},)")
    ratios, scores = pca(table)
    n_pcs = min(n_pcs, scores.shape[1])
    power = dct_power(scores[:, :n_pcs])  # [P bins, n_pcs]
    shares = low_frequency_share(power, n_low_bins)  # [n_pcs]

    variance, curves, dct_table = _spectrum_tables(ratios, scores[:, :n_pcs], power, positions)
    summary = {
        "name": name,
        "n_positions": int(n_positions),
        "width": int(width),
        "n_low_bins": int(n_low_bins),
        **_summary_numbers(ratios, power, n_low_bins),
        "low_freq_share_per_pc": [float(x) for x in shares],
    }
    if n_control_draws > 0:
        summary["control"] = random_control((n_positions, width), n_pcs, n_low_bins, n_control_draws, seed)
        for key in ("pc1_pc2", "participation_ratio", "low_freq_share"):
            summary[f"excess_{key}"] = summary[key] - summary["control"][key]
        if n_positions >= MIN_CONTROL_POSITIONS and summary["pc1_pc2"] > 0:
            summary.update(smooth_controls(table, n_pcs, n_low_bins, seed=seed))
    if match_width is not None:
        summary.update(width_matched(table, match_width, n_projections, n_pcs, n_low_bins,
                                     max(n_control_draws, 1), seed))
    return TableSpectrum(name=name, shape=(n_positions, width), variance=variance, curves=curves, dct=dct_table,
                         summary=summary)


def _spectrum_tables(ratios, scores, power, positions) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``analyze_table``'s three tidy tables: explained variance per component, the leading PCs' curves over
    position (``scores`` [P, n_pcs]) and their DCT power per bin (``power`` [P bins, n_pcs]) with its share."""
    n_positions, n_pcs = scores.shape
    variance = pd.DataFrame(
        {"component": np.arange(1, len(ratios) + 1), "ratio": ratios, "cumulative": np.cumsum(ratios)}
    )
    curves = pd.DataFrame(
        {
            "position": np.tile(positions, n_pcs),
            "pc": np.repeat(np.arange(1, n_pcs + 1), n_positions),
            "score": scores.T.ravel(),
        }
    )
    totals = power.sum(axis=0, keepdims=True)
    dct_table = pd.DataFrame(
        {
            "pc": np.repeat(np.arange(1, n_pcs + 1), n_positions),
            "bin": np.tile(np.arange(n_positions), n_pcs),
            "power": power.T.ravel(),
            "share": (power / np.where(totals > 0, totals, 1.0)).T.ravel(),
        }
    )
    return variance, curves, dct_table


def random_control(
    shape: tuple[int, int],
    n_pcs: int = DEFAULT_N_PCS,
    n_low_bins: int = DEFAULT_LOW_BINS,
    n_draws: int = DEFAULT_CONTROL_DRAWS,
    seed: int = 0,
) -> dict:
    """Mean (and std over draws) of the summary numbers for i.i.d. Gaussian tables of ``shape``."""
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_draws):
        ratios, scores = pca(rng.standard_normal(shape))
        draws.append(_summary_numbers(ratios, dct_power(scores[:, :n_pcs]), n_low_bins))
    frame = pd.DataFrame(draws)
    result = {f"{key}": float(frame[key].mean()) for key in frame.columns}
    result.update({f"{key}_std": float(frame[key].std(ddof=0)) for key in frame.columns})
    result["n_draws"] = int(n_draws)
    result["seed"] = int(seed)
    return result


SMOOTH_CONTROL_DRAWS = 200  # draws for a table of DSTG's AP shape (128 x 16); wider tables get fewer, at least 20
SMOOTH_DRAW_BUDGET = 400_000  # table cells drawn per family: the draws shrink as P x d grows
MIN_SMOOTH_DRAWS = 20
SMOOTH_FAMILIES = ("walk", "smoothed")
SMOOTH_KEYS = ("pc1_pc2", "pc3", "pcs_95", "participation_ratio", "low_freq_share")
MIN_CONTROL_POSITIONS = 8  # fewer rows leave no curve to call smooth
MAX_CONTROL_DRAWS = 100_000


def lag1_autocorrelation(table) -> float:
    """How smooth a table is along position: sum_i <x_i, x_{i+1}> / sum_i |x_i|^2 over its centred rows (1 for a
    curve that barely moves from row to row, ~0 for white noise).  A constant table has none (ValueError)."""
    table = _check_table(table)
    centred = table - table.mean(axis=0, keepdims=True)
    total = float((centred ** 2).sum())
    if total <= 0:
        raise ValueError("the table is constant: every row is the same, so it has no spectrum or smoothness to read")
    return float((centred[:-1] * centred[1:]).sum() / total)


def random_walk_table(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A structureless smooth curve of ``shape`` ([P, d], or a stack [n, P, d]): each column the cumulative sum of
    i.i.d. Gaussian steps along position.  PCA of such a curve returns cosines of rising frequency (PC1 ~ DCT bin 1, PC2 ~ bin 2), so it
    reads high on PC1+PC2 and the low-bin DCT share without being a 2-D manifold: the null for "smooth"."""
    return np.cumsum(rng.standard_normal(shape), axis=-2)


def smoothing_width(roughness: float) -> float:
    """The Gaussian kernel sd (in positions) whose smoothed white noise has lag-1 autocorrelation ``roughness``:
    exp(-1 / (4 sd^2)) = rho, so sd = sqrt(-1 / (4 ln rho)) (rho clipped to [0.05, 0.9999])."""
    rho = float(np.clip(roughness, 0.05, 0.9999))
    return float(np.sqrt(-1.0 / (4.0 * np.log(rho))))


def smoothed_noise_table(shape: tuple[int, ...], rng: np.random.Generator, roughness: float) -> np.ndarray:
    """White noise smoothed along position by a Gaussian kernel matched to ``roughness`` (``smoothing_width``):
    a structureless curve exactly as smooth, row to row, as the table it controls for ([P, d] or [n, P, d])."""
    return gaussian_filter1d(rng.standard_normal(shape), smoothing_width(roughness), axis=-2, mode="reflect")


def smooth_control(
    shape: tuple[int, int],
    family: str = "walk",
    roughness: float | None = None,
    n_pcs: int = DEFAULT_N_PCS,
    n_low_bins: int = DEFAULT_LOW_BINS,
    n_draws: int = SMOOTH_CONTROL_DRAWS,
    seed: int = 0,
) -> dict:
    """The summary numbers of structureless smooth tables of ``shape``: ``walk`` (random walks) or ``smoothed``
    (white noise smoothed to the lag-1 autocorrelation ``roughness`` of the table controlled for).  Mean, and the
    5% and 95% quantiles over ``n_draws`` seeded draws (``<key>_q05``, ``<key>_q95``).  A table clears the
    control on a number when it lies above that number's q95; the stronger of the two families is the null for
    a "smooth low-dimensional manifold"."""
    rows, width = (int(n) for n in shape)
    if rows < MIN_CONTROL_POSITIONS or width < 1:
        raise ValueError(f"a smooth control needs a table of at least {MIN_CONTROL_POSITIONS} positions and one "
                         f"column, got {rows}x{width}")
    if isinstance(n_draws, bool) or not 1 <= int(n_draws) <= MAX_CONTROL_DRAWS:
        raise ValueError(f"control draws must be 1 to {MAX_CONTROL_DRAWS:,}, got {n_draws}")
    if family not in SMOOTH_FAMILIES:
        raise ValueError(f"unknown smooth control {family!r}; choose from {', '.join(SMOOTH_FAMILIES)}")
    if family == "smoothed" and (roughness is None or not np.isfinite(roughness)):
        raise ValueError("the smoothed-noise control needs the table's roughness (lag1_autocorrelation)")
    key = round(float(roughness) * 50) / 50 if family == "smoothed" else None  # to 0.02: near tables share draws
    return dict(_smooth_control((rows, width), family, key, n_pcs, n_low_bins, int(n_draws), seed))


@lru_cache(maxsize=256)
def _smooth_control(shape, family, roughness, n_pcs, n_low_bins, n_draws, seed) -> tuple:
    rng = np.random.default_rng(seed)
    draws = []
    chunk = max(1, min(n_draws, int(2e7 // (shape[0] * shape[1]))))  # ~160 MB of float64 at most
    for start in range(0, n_draws, chunk):
        stack = (min(chunk, n_draws - start), *shape)
        tables = random_walk_table(stack, rng) if family == "walk" else smoothed_noise_table(stack, rng, roughness)
        for ratios, scores in _batched_pca(tables, n_pcs):
            draws.append(_summary_numbers(ratios, dct_power(scores), n_low_bins))
    frame = pd.DataFrame(draws)
    result: dict = {key: float(frame[key].mean()) for key in frame.columns}
    result.update({f"{key}_q05": float(frame[key].quantile(0.05)) for key in frame.columns})
    result.update({f"{key}_q95": float(frame[key].quantile(0.95)) for key in frame.columns})
    result.update(family=family, roughness=roughness, n_draws=n_draws, seed=seed)
    return tuple(result.items())


def _batched_pca(tables: np.ndarray, n_pcs: int):
    """``pca`` of each table of a [draws, P, d] stack: the explained-variance ratios from the eigenvalues of the
    smaller Gram matrix (batched), the leading ``n_pcs`` score curves from its top eigenvectors alone (signs as
    they come: a control reads no sign).  Much faster than a full SVD of every draw for wide tables, and than a
    full eigh, which a heavily smoothed table sends into very slow iterations."""
    centred = tables - tables.mean(axis=1, keepdims=True)
    n_positions, width = tables.shape[1:]
    rank = min(n_positions - 1, width)
    wide = width > n_positions
    gram = centred @ centred.transpose(0, 2, 1) if wide else centred.transpose(0, 2, 1) @ centred
    size = gram.shape[1]
    values = np.clip(np.linalg.eigvalsh(gram)[:, ::-1][:, :rank], 0, None)
    totals = values.sum(axis=1, keepdims=True)
    ratios = np.where(totals > 0, values / np.where(totals > 0, totals, 1.0), 0.0)
    for draw in range(len(tables)):
        top, vectors = eigh(gram[draw], subset_by_index=[size - n_pcs, size - 1])
        top, vectors = np.clip(top[::-1], 0, None), vectors[:, ::-1]
        yield ratios[draw], vectors * np.sqrt(top) if wide else centred[draw] @ vectors


def smooth_draws(shape: tuple[int, int]) -> int:
    """How many draws a smooth control of ``shape`` takes by default: SMOOTH_CONTROL_DRAWS for a table of up to
    SMOOTH_DRAW_BUDGET / 200 cells, fewer for wider ones (their spread over draws is narrower), at least
    MIN_SMOOTH_DRAWS; the summary says how many (``<family>_n_draws``)."""
    return int(np.clip(SMOOTH_DRAW_BUDGET // (shape[0] * shape[1]), MIN_SMOOTH_DRAWS, SMOOTH_CONTROL_DRAWS))


def smooth_controls(table, n_pcs: int = DEFAULT_N_PCS, n_low_bins: int = DEFAULT_LOW_BINS,
                    n_draws: int | None = None, seed: int = 0) -> dict:
    """Both smooth families for ``table`` (its shape, and its own roughness for the smoothed noise), flat:
    ``walk_<key>``, ``walk_<key>_q95``, ``smoothed_<key>``, ... for SMOOTH_KEYS, and ``lag1_autocorrelation``."""
    table = _check_table(table)
    roughness = lag1_autocorrelation(table)
    result: dict = {"lag1_autocorrelation": roughness}
    n_draws = smooth_draws(table.shape) if n_draws is None else n_draws
    for family in SMOOTH_FAMILIES:
        control = smooth_control(table.shape, family, roughness, n_pcs, n_low_bins, n_draws, seed)
        result[f"{family}_n_draws"] = n_draws
        for key in SMOOTH_KEYS:
            for suffix in ("", "_q05", "_q95"):
                result[f"{family}_{key}{suffix}"] = control[f"{key}{suffix}"]
    return result


def random_projections(width: int, target_width: int, n_projections: int, seed: int = 0) -> np.ndarray:
    """[n_projections, width, target_width] bases of random subspaces (orthonormal columns, Haar-distributed)."""
    if not 1 <= target_width <= width:
        raise ValueError(f"projection width {target_width} does not fit a table {width} columns wide: project onto "
                         f"1..{width} dims (the narrower table's width)")
    if n_projections < 1:
        raise ValueError(f"n_projections must be at least 1, got {n_projections}")
    gaussian = np.random.default_rng(seed).standard_normal((n_projections, width, target_width))
    q, r = np.linalg.qr(gaussian)
    return q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]  # sign fix: uniform over subspaces


def width_matched(
    table,
    width: int,
    n_projections: int = DEFAULT_PROJECTIONS,
    n_pcs: int = DEFAULT_N_PCS,
    n_low_bins: int = DEFAULT_LOW_BINS,
    n_control_draws: int = DEFAULT_CONTROL_DRAWS,
    seed: int = 0,
) -> dict:
    """The summary numbers of ``table`` projected onto ``n_projections`` random ``width``-dim subspaces of its
    columns: ``matched_<key>`` (mean) and ``matched_<key>_std`` (spread over projections) for MATCHED_KEYS,
    the Gaussian control of the projected shape (``matched_control_<key>``) and the excess over it
    (``matched_excess_<key>``).  A width larger than the table raises ValueError."""
    table = _check_table(table)
    n_positions, table_width = table.shape
    bases = random_projections(table_width, width, n_projections, seed)
    if width == table_width:  # a rotation: every projection gives the table's own numbers
        bases = bases[:1]
    draws = []
    for basis in bases:
        ratios, scores = pca(table @ basis)
        draws.append(_summary_numbers(ratios, dct_power(scores[:, :n_pcs]), n_low_bins))
    frame = pd.DataFrame(draws)
    control = random_control((n_positions, width), n_pcs, n_low_bins, n_control_draws, seed)
    result: dict = {"matched_width": int(width), "matched_projections": int(n_projections)}
    for key in (k for k in MATCHED_KEYS if k in frame):
        result[f"matched_{key}"] = float(frame[key].mean())
        result[f"matched_{key}_std"] = float(frame[key].std(ddof=0))
        result[f"matched_control_{key}"] = control[key]
        result[f"matched_excess_{key}"] = result[f"matched_{key}"] - control[key]
    return result


def spectra_table(spectra: list[TableSpectrum]) -> pd.DataFrame:
    """One row per analysed table: the summary scalars side by side with their Gaussian control."""
    rows = []
    for spectrum in spectra:
        row = {k: v for k, v in spectrum.summary.items() if not isinstance(v, (list, dict))}
        for key, value in spectrum.summary.get("control", {}).items():
            if not key.endswith("_std") and key not in ("n_draws", "seed"):
                row[f"control_{key}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


# --- internals ---------------------------------------------------------------------------------------
def _summary_numbers(ratios: np.ndarray, power: np.ndarray, n_low_bins: int) -> dict:
    padded = np.pad(ratios, (0, max(0, 5 - len(ratios))))
    total_power = power.sum()
    cumulative = np.cumsum(ratios)
    return {
        "pc1": float(padded[0]),
        "pc2": float(padded[1]),
        "pc3": float(padded[2]),
        # the fewest PCs that hold 90% / 95% of the variance (an effective dimension read off the scree)
        "pcs_90": int(np.searchsorted(cumulative, 0.90 - 1e-12) + 1) if len(ratios) else 0,
        "pcs_95": int(np.searchsorted(cumulative, 0.95 - 1e-12) + 1) if len(ratios) else 0,
        "pc1_pc2": float(padded[:2].sum()),
        "top5": float(padded[:5].sum()),
        "participation_ratio": participation_ratio(ratios),
        # variance-weighted over the leading PCs: a PC's curve power equals its variance
        "low_freq_share": float(power[:n_low_bins].sum() / total_power) if total_power > 0 else 0.0,
        # each PC on its own (the pooled share hides a weak PC2)
        **{f"pc{j + 1}_low_freq_share": float(share) for j, share in enumerate(low_frequency_share(power, n_low_bins))},
    }


def _fix_signs(scores: np.ndarray) -> np.ndarray:
    """SVD signs are arbitrary; make each PC curve rise from its first to its last position, so
    figures of different models (and reruns) are comparable."""
    flip = np.sign(scores[-1] - scores[0])
    flip[flip == 0] = 1.0
    return scores * flip


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().float().cpu().numpy()
    return np.asarray(x)


def _check_table(table) -> np.ndarray:
    table = np.asarray(_as_numpy(table), dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 3 or table.shape[1] < 1:
        raise ValueError(f"a position table must be [positions >= 3, d >= 1], got shape {table.shape}")
    if not np.isfinite(table).all():
        raise ValueError("the position table contains NaN or inf")
    return table
