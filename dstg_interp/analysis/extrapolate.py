"""Length extrapolation along the AP manifold: extend a learned position table past ``max_positions``.

    from dstg_interp import load_model
    from dstg_interp.analysis.extrapolate import extend_positions, fit_ap_curve
    fit = fit_ap_curve(load_model("dstg").ap_table)           # leading PCs in a small cosine basis
    fit.relative_error, fit.evaluate(range(256)).shape         # in-range fit quality; rows for any positions
    long_model = extend_positions(load_model("dstg"), factor=2, method="curve")   # 256 positions
    long_model.save("runs/dstg-x2")                            # loads like any checkpoint (extension.json beside)

    dstg-extend --model dstg --factor 2 --method curve --out runs/dstg-x2

Methods (rows ``0 .. max_positions-1`` are the learned table, untouched, except for ``stretch``):

- ``curve``: the spectral model of the table (``spectra``: PCA over positions, DCT of the PC curves).  The
  table is centred, its leading ``n_components`` PCs kept, and each PC's score curve fitted with the first
  ``n_frequencies`` DCT-II basis functions cos(pi k (n + 1/2) / P) (an orthonormal projection: it is the
  truncated DCT).  New rows are the fitted curve evaluated at n >= P.  That basis is even about n = P - 1/2
  and periodic in 2P, so the continuation runs back along the manifold (row P + j resembles row P - 1 - j)
  and a 4x table returns to its start: it is the continuation the low-frequency model implies, and the
  extrapolation experiment measures what that is worth.
- ``repeat``: every new row is the last learned row (positions beyond the table look like its end).
- ``stretch``: linear interpolation of the whole table to the new length (position interpolation): the
  new row j is the table at fractional position j (P - 1) / (P_new - 1); every row moves.

Only variants with a learned table (``dstg``, ``ap``) need extending.  RoPE and RP models are relative and
run at any length: ``with_max_positions(model, n)`` rebuilds them with more positions (RP offsets past
``rp_max_distance`` fall into the last bucket, as in training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..variants import position_mechanism, variant_row, variants_where
from ..model.checkpoint import build_model, save_checkpoint

METHODS = ("curve", "repeat", "stretch")
DEFAULT_COMPONENTS = 4
DEFAULT_FREQUENCIES = 6
EXTENSION_FILE = "extension.json"


@dataclass
class CurveFit:
    """A low-frequency model of a position table: mean + sum_k basis_k(n) coefficients_k @ components.

    ``components``: [n_components, d] PC directions; ``coefficients``: [n_frequencies, n_components] DCT
    coefficients of each PC's score curve; ``explained``: share of the table's variance in the kept PCs;
    ``relative_error``: ||table - fit|| / ||table - mean|| over the fitted rows (what the dropped PCs and
    frequencies leave); ``curve_error``: the same for the kept PCs' score curves alone (the DCT truncation).
    """

    mean: np.ndarray
    components: np.ndarray
    coefficients: np.ndarray
    n_positions: int
    explained: float
    relative_error: float
    curve_error: float

    def basis(self, positions) -> np.ndarray:
        """DCT-II basis of the fitted range evaluated at any (integer or fractional) positions: [len, n_frequencies]."""
        positions = np.asarray(positions, dtype=np.float64)
        k = np.arange(self.coefficients.shape[0])
        scale = np.where(k == 0, np.sqrt(1.0 / self.n_positions), np.sqrt(2.0 / self.n_positions))
        return np.cos(np.pi * k[None, :] * (positions[:, None] + 0.5) / self.n_positions) * scale

    def evaluate(self, positions) -> np.ndarray:
        """The fitted table rows at ``positions``: [len(positions), d]."""
        return self.mean + self.basis(positions) @ self.coefficients @ self.components

    def to_dict(self) -> dict:
        return {"n_positions": self.n_positions, "n_components": int(self.components.shape[0]),
                "n_frequencies": int(self.coefficients.shape[0]), "explained": self.explained,
                "relative_error": self.relative_error, "curve_error": self.curve_error}


def fit_ap_curve(table, n_components: int = DEFAULT_COMPONENTS, n_frequencies: int = DEFAULT_FREQUENCIES) -> CurveFit:
    """Fit the leading PCs of a [positions, d] table with the first ``n_frequencies`` DCT-II basis functions."""
    table = _as_table(table)
    n_positions, width = table.shape
    if not 1 <= n_components <= min(width, n_positions - 1):
        raise ValueError(f"n_components must be in [1, {min(width, n_positions - 1)}] for a {n_positions}x{width} "
                         f"table, got {n_components}")
    if not 1 <= n_frequencies <= n_positions:
        raise ValueError(f"n_frequencies must be in [1, {n_positions}], got {n_frequencies}")
    mean = table.mean(axis=0)
    centred = table - mean
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    scores = u[:, :n_components] * s[:n_components]  # [P, k] PC score curves
    total = float((s**2).sum())
    fit = CurveFit(mean=mean, components=vt[:n_components], coefficients=np.zeros((n_frequencies, n_components)),
                   n_positions=n_positions, explained=float((s[:n_components] ** 2).sum() / total) if total else 0.0,
                   relative_error=0.0, curve_error=0.0)
    basis = fit.basis(np.arange(n_positions))  # orthonormal columns: projection = truncated DCT
    fit.coefficients = basis.T @ scores
    scores_norm = np.linalg.norm(scores)
    fit.curve_error = float(np.linalg.norm(scores - basis @ fit.coefficients) / scores_norm) if scores_norm else 0.0
    residual = np.linalg.norm(table - fit.evaluate(np.arange(n_positions)))
    fit.relative_error = float(residual / np.linalg.norm(centred)) if total else 0.0
    return fit


def extend_table(table, new_length: int, method: str = "curve", n_components: int = DEFAULT_COMPONENTS,
                 n_frequencies: int = DEFAULT_FREQUENCIES) -> tuple[np.ndarray, dict]:
    """A [new_length, d] table from a learned [P, d] one by ``method``; returns (table, what was done)."""
    table = _as_table(table)
    n_positions = table.shape[0]
    if method not in METHODS:
        raise ValueError(f"unknown extension method {method!r}; choose one of {', '.join(METHODS)}")
    if new_length <= n_positions:
        raise ValueError(f"the new length must exceed the table's {n_positions} positions (an extension factor > 1), "
                         f"got {new_length}")
    info = {"method": method, "from_positions": n_positions, "to_positions": int(new_length)}
    if method == "repeat":
        extended = np.concatenate([table, np.repeat(table[-1:], new_length - n_positions, axis=0)])
    elif method == "stretch":
        where = np.arange(new_length) * (n_positions - 1) / (new_length - 1)
        left = np.floor(where).astype(int).clip(max=n_positions - 2)
        weight = (where - left)[:, None]
        extended = table[left] * (1 - weight) + table[left + 1] * weight
    else:
        fit = fit_ap_curve(table, n_components, n_frequencies)
        extended = np.concatenate([table, fit.evaluate(np.arange(n_positions, new_length))])
        info["fit"] = fit.to_dict()
    return extended, info


def with_max_positions(model, new_length: int):
    """A copy of ``model`` rebuilt for ``new_length`` positions, weights copied; a learned table is zero-padded
    here (``extend_positions`` fills it).  For RoPE/RP models this is the whole extension."""
    config = type(model.config).from_dict({**model.config.to_dict(), "max_positions": int(new_length)})
    longer = build_model(config)
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    table_key = _table_key(model)
    if table_key is not None:
        old = state[table_key]
        state[table_key] = torch.cat([old, old.new_zeros(new_length - old.shape[0], old.shape[1])])
    longer.load_state_dict(state)
    longer.tokenizer = getattr(model, "tokenizer", None)
    parameter = next(model.parameters())
    return longer.to(device=parameter.device, dtype=parameter.dtype).eval()


def extend_positions(model, factor: float | None = None, *, new_length: int | None = None, method: str = "curve",
                     n_components: int = DEFAULT_COMPONENTS, n_frequencies: int = DEFAULT_FREQUENCIES):
    """A model with ``factor`` x (or ``new_length``) positions whose learned table is extended by ``method``.

    The returned model carries ``model.extension`` (a dict: method, lengths, curve fit quality), which
    ``save_extended`` writes as extension.json beside the checkpoint.
    """
    variant = getattr(getattr(model, "config", None), "variant", None)
    if variant is None or not hasattr(model, "state_dict"):
        raise ValueError(f"cannot extend a {type(model).__name__}: pass a dstg-interp model (load_model)")
    old_length = model.config.max_positions
    new_length = _new_length(old_length, factor, new_length)
    # Validate the longer config before any table is built: an absurd length is refused in one line.
    type(model.config).from_dict({**model.config.to_dict(), "max_positions": new_length})
    if _table_key(model) is None:
        kind = "a relative model" if variant_row(variant).has_position_input else \
            f"position enters {position_mechanism(variant)}; it"
        raise ValueError(f"variant {variant!r} has no learned AP table to extend (only "
                         f"{' and '.join(map(repr, variants_where(position_table=True)))} do); {kind} "
                         f"runs at any length: use with_max_positions(model, {new_length})")
    table, info = extend_table(model.ap_table.detach().cpu().double().numpy(), new_length, method, n_components,
                               n_frequencies)
    longer = with_max_positions(model, new_length)
    with torch.no_grad():
        longer.state_dict()[_table_key(model)].copy_(torch.as_tensor(table))
    longer.extension = {**info, "variant": variant, "factor": new_length / old_length,
                        "source": str(getattr(model, "checkpoint_path", "") or "")}
    return longer


def save_extended(model, path, dtype: torch.dtype | None = None) -> Path:
    """Save an extended model as a checkpoint (config.json has the new max_positions) + extension.json."""
    extension = getattr(model, "extension", None)
    extra = {EXTENSION_FILE: extension} if extension else None
    return save_checkpoint(model, path, dtype=dtype, tokenizer=getattr(model, "tokenizer", None), extra_files=extra)


def _new_length(old_length: int, factor, new_length) -> int:
    if (factor is None) == (new_length is None):
        raise ValueError("give exactly one of factor (e.g. 2) or new_length (e.g. 256)")
    if factor is not None:
        if not factor > 1:
            raise ValueError(f"the extension factor must be > 1 (the table grows past its {old_length} positions), "
                             f"got {factor}")
        if not math.isfinite(factor):
            raise ValueError(f"the extension factor must be a finite number > 1, got {factor}")
        new_length = int(round(old_length * factor))
    if int(new_length) <= old_length:
        raise ValueError(f"new_length must exceed the model's max_positions={old_length}, got {new_length}")
    return int(new_length)


def _table_key(model) -> str | None:
    spec = model.config.spec
    if spec.ap_stream:
        return "ap_embed.weight"
    if spec.position_table:
        return "pos_embed.weight"
    return None


def _as_table(table) -> np.ndarray:
    if isinstance(table, torch.Tensor):
        table = table.detach().cpu().double().numpy()
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 2:
        raise ValueError(f"a position table must be [positions >= 2, d], got shape {table.shape}")
    if not np.isfinite(table).all():
        raise ValueError("the position table has NaN or inf entries")
    return table
