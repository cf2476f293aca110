"""Position erasure: linear erasers fitted on a layer x subspace of a store, that remove a position target.

    from probes.erasure import fit_eraser, LinearEraser
    eraser = fit_eraser(store, layer=3, subspace="ap", method="leace")         # token position, DCT features
    erased = eraser(store.states(3, "ap")[rows])                               # numpy or torch, any leading shape
    eraser.save("runs/erasers/dstg-3-ap"); LinearEraser.load("runs/erasers/dstg-3-ap")

An eraser is an affine map ``x -> x - (x - mean) @ right.T @ left.T`` of rank r = ``left.shape[1]``: it
changes the states only inside an r-dimensional subspace.  Three methods, one form:

- ``leace`` -- LEACE (Belrose et al. 2023, "LEACE: Perfect linear concept erasure in closed form"): the
  smallest change (in the states' own covariance metric) after which no linear function of the states has
  any covariance with the concept.  With W = (Sigma_xx^1/2)^+ and U an orthonormal basis of the column space
  of W Sigma_xz (canonical correlations below ``svd_tol`` dropped): left = W^+ U, right = U' W.  Computed by
  the ``concept-erasure`` package when it is installed (``LeaceFitter(shrinkage=False,
  constrain_cov_trace=False)``), else by the closed form written out here; the tests check both agree.
- ``inlp`` -- iterated nulling (Ravfogel et al. 2020, regression form): fit a ridge probe of the concept
  (``probes.ridge.RidgeProbe``, grouped CV), remove the row space of its weights by an orthogonal projection,
  repeat until the probe's cross-validated R² falls below ``inlp_min_r2`` (or ``inlp_iterations`` rounds).
- ``random`` -- the control: an orthogonal projection off a random subspace of the same rank as LEACE's, so
  "erasing position costs X" is read against "erasing as many arbitrary directions costs Y".

The concept is a function of a position label of the store (``target``: token_position, sentence_index, ...):
``linear`` = the value itself; ``dct`` (default) = the value and the first ``n_features - 1`` DCT-II cosines of
it over [0, period), so every smooth (low-frequency) function of position is erased, not only the ramp --
the spectra put the zoo's position manifolds in the first four bins.  Every eraser carries its identity (the
weights hash of the model whose store it was fitted on, layer, subspace, target), and ``check_model`` refuses
a model with other weights.
"""

from __future__ import annotations

from numpy.typing import ArrayLike
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from dstg_interp.data.labels import position_labels
from dstg_interp.store import ActivationStore

from probes.ridge import RidgeProbe

METHODS = ("leace", "inlp", "random")
ENCODINGS = ("linear", "dct")
BACKENDS = ("auto", "concept-erasure", "closed-form")
SVD_TOL = 0.01  # canonical correlations below this are noise at store sizes (1/sqrt(20k) ~ 0.007)
ERASER_FILES = ("eraser.safetensors", "eraser.json")
MAX_ERASER_WIDTH = 1 << 16  # a saved eraser's width is read from its json and bounded before any tensor loads


class ErasureError(ValueError):
    """An eraser that cannot be fitted or applied here; one line: what, where, what to do."""


@dataclass
class LinearEraser:
    """``x -> x - (x - mean) @ right.T @ left.T`` (see the module docstring); ``identity`` says where it belongs."""

    mean: np.ndarray  # [d]
    left: np.ndarray  # [d, r]
    right: np.ndarray  # [r, d]
    method: str
    identity: dict = field(default_factory=dict)  # model_sha256, variant, layer, subspace, target, encoding, ...

    @property
    def rank(self) -> int:
        return int(self.left.shape[1])

    @property
    def width(self) -> int:
        return int(self.mean.shape[0])

    def __call__(self, x):
        """Erase rows of ``x`` ([..., d], numpy or torch; the result has its type, dtype and device)."""
        if isinstance(x, torch.Tensor):
            mean, left, right = (torch.as_tensor(a, device=x.device, dtype=torch.float32) for a in (self.mean, self.left, self.right))
            shifted = x.float() - mean
            return (x.float() - (shifted @ right.T) @ left.T).to(x.dtype)
        x = np.asarray(x)
        if x.shape[-1] != self.width:
            raise ErasureError(f"the eraser is {self.width} wide but the states are {x.shape[-1]} wide")
        out = x.astype(np.float64) - ((x.astype(np.float64) - self.mean) @ self.right.T) @ self.left.T
        return out.astype(x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64)

    def check_model(self, weights_sha256: str, name: str = "the model") -> None:
        fitted_on = self.identity.get("model_sha256")
        if fitted_on is not None and fitted_on != weights_sha256:
            raise ErasureError(f"this eraser was fitted on a store of another model (weights {fitted_on[:12]}, "
                               f"{name} has {weights_sha256[:12]}); fit it on a store of {name}")

    def save(self, folder: str | Path) -> Path:
        """``eraser.safetensors`` (mean, left, right) + ``eraser.json`` (method, identity) in ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({"mean": self.mean, "left": np.ascontiguousarray(self.left), "right": np.ascontiguousarray(self.right)},
                  str(folder / ERASER_FILES[0]))
        meta = {"method": self.method, "width": self.width, "rank": self.rank, "identity": self.identity}
        (folder / ERASER_FILES[1]).write_text(json.dumps(meta, indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> LinearEraser:
        folder = Path(folder)
        try:
            meta = json.loads((folder / ERASER_FILES[1]).read_text())
            width, rank = int(meta["width"]), int(meta["rank"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ErasureError(f"{folder}: not a saved eraser ({err}); save one with LinearEraser.save") from None
        if not (0 < width <= MAX_ERASER_WIDTH and 0 <= rank <= width):
            raise ErasureError(f"{folder}: eraser.json says width {width}, rank {rank}; not a valid eraser")
        expected = (width + 2 * width * rank) * 8 + 4096  # three float64 arrays plus the safetensors header
        path = folder / ERASER_FILES[0]
        if not path.is_file() or path.stat().st_size > expected:
            raise ErasureError(f"{path}: missing or larger than an eraser of width {width} and rank {rank}")
        arrays = load_file(str(path))
        shapes = {"mean": (width,), "left": (width, rank), "right": (rank, width)}
        if set(arrays) != set(shapes) or any(arrays[k].shape != s for k, s in shapes.items()):
            raise ErasureError(f"{path}: arrays do not match eraser.json (width {width}, rank {rank})")
        return cls(arrays["mean"], arrays["left"], arrays["right"], str(meta["method"]), dict(meta.get("identity") or {}))

    def to_dict(self) -> dict:
        return {"method": self.method, "width": self.width, "rank": self.rank, **self.identity}


# --- the concept ----------------------------------------------------------------------------------
def position_features(values: ArrayLike, encoding: str = "dct", n_features: int = 8, period: float | None = None) -> np.ndarray:
    """[n, k] concept features of position labels ``values`` (see the module docstring)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    if encoding not in ENCODINGS:
        raise ErasureError(f"unknown encoding {encoding!r}; use {', '.join(ENCODINGS)}")
    if encoding == "linear":
        return values[:, None]
    if n_features < 1:
        raise ErasureError(f"n_features must be at least 1, got {n_features}")
    period = float(period if period is not None else values.max() + 1)
    cosines = [np.cos(np.pi * f * (values + 0.5) / period) for f in range(1, n_features)]
    return np.column_stack([values, *cosines])


# --- fitting ---------------------------------------------------------------------------------------
def fit_leace(X: np.ndarray, Z: np.ndarray, backend: str = "auto", svd_tol: float = SVD_TOL) -> tuple[LinearEraser, str]:
    """LEACE of concept ``Z`` [n, k] from states ``X`` [n, d]; returns (eraser, backend used)."""
    X, Z = _as_float64(X), _standardised(Z)
    if backend not in BACKENDS:
        raise ErasureError(f"unknown backend {backend!r}; use {', '.join(BACKENDS)}")
    if backend in ("auto", "concept-erasure"):
        try:
            from concept_erasure import (
                LeaceFitter,  # optional dependency: pip install concept-erasure
            )
        except ImportError:
            if backend == "concept-erasure":
                raise ErasureError("backend 'concept-erasure' asked for but the package is not installed; "
                                   "pip install concept-erasure, or use backend='closed-form'") from None
        else:
            fitter = LeaceFitter(X.shape[1], Z.shape[1], method="leace", affine=True, constrain_cov_trace=False,
                                 shrinkage=False, svd_tol=svd_tol, dtype=torch.float64)
            eraser = fitter.update(torch.from_numpy(X), torch.from_numpy(Z)).eraser
            left, right = eraser.proj_left.numpy(), eraser.proj_right.numpy()
            kept = np.abs(left).sum(axis=0) > 0  # the package zeroes the columns it drops
            return LinearEraser(eraser.bias.numpy().copy(), left[:, kept].copy(), right[kept].copy(), "leace"), "concept-erasure"
    return _leace_closed_form(X, Z, svd_tol), "closed-form"


def _leace_closed_form(X: np.ndarray, Z: np.ndarray, svd_tol: float) -> LinearEraser:
    n, d = X.shape
    mean = X.mean(axis=0)
    centred = X - mean
    sigma_xx = centred.T @ centred / (n - 1)
    sigma_xz = centred.T @ (Z - Z.mean(axis=0)) / (n - 1)
    eigenvalues, vectors = np.linalg.eigh((sigma_xx + sigma_xx.T) / 2)
    kept = eigenvalues > eigenvalues[-1] * d * np.finfo(np.float64).eps
    root = np.sqrt(np.clip(eigenvalues, 0, None))
    whiten = (vectors * np.where(kept, 1 / np.where(kept, root, 1), 0)) @ vectors.T  # (Sigma^1/2)^+
    unwhiten = (vectors * np.where(kept, root, 0)) @ vectors.T
    u, s, _ = np.linalg.svd(whiten @ sigma_xz, full_matrices=False)
    u = u[:, s > svd_tol]
    return LinearEraser(mean, unwhiten @ u, u.T @ whiten, "leace")


def fit_inlp(X: np.ndarray, Z: np.ndarray, groups: np.ndarray, iterations: int = 16, min_r2: float = 0.01, n_splits: int = 5) -> LinearEraser:
    """Iterated nulling of ridge probes of ``Z`` until their grouped-CV R² (mean over columns) < ``min_r2``."""
    X, Z = _as_float64(X), _standardised(Z)
    mean = X.mean(axis=0)
    centred = X - mean
    basis = np.zeros((X.shape[1], 0))
    for _ in range(iterations):
        # float32, the precision the model runs in: float64 rounding residue in the nulled directions is
        # deterministic in x, and a standardising probe would read position back out of it
        projected = (centred - (centred @ basis) @ basis.T).astype(np.float32)
        probe = RidgeProbe(n_splits=n_splits).fit(projected, Z, groups=groups)
        if float(np.mean(probe.cv_scores_.max(axis=0))) < min_r2:
            break
        directions = np.atleast_2d(probe.coef_ / probe.scale_).T  # [d, k] in raw coordinates
        directions = directions - basis @ (basis.T @ directions)
        q, r = np.linalg.qr(directions)
        q = q[:, np.abs(np.diag(r)) > 1e-10 * max(np.abs(np.diag(r)).max(), 1e-300)]
        if q.shape[1] == 0 or basis.shape[1] + q.shape[1] > X.shape[1]:
            break
        basis = np.column_stack([basis, q])
    return LinearEraser(mean, basis, basis.T.copy(), "inlp")


def random_eraser(mean: np.ndarray, rank: int, seed: int = 0) -> LinearEraser:
    """Orthogonal projection off a random ``rank``-dimensional subspace (the same-rank control)."""
    mean = np.asarray(mean, dtype=np.float64)
    if rank == 0:
        return LinearEraser(mean, np.zeros((len(mean), 0)), np.zeros((0, len(mean))), "random")
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((len(mean), rank)))
    return LinearEraser(mean, q, q.T.copy(), "random")


def fit_erasers(X: np.ndarray, Z: np.ndarray, groups: np.ndarray, methods: Sequence[str] = METHODS, backend: str = "auto", seed: int = 0, inlp_iterations: int = 16,
                inlp_min_r2: float = 0.01) -> dict[str, LinearEraser]:
    """{method: eraser} for one feature set; ``random`` takes the rank of ``leace`` (fitted for it if not asked)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ErasureError(f"unknown erasure method(s) {unknown or list(methods)}; use {', '.join(METHODS)}")
    erasers: dict[str, LinearEraser] = {}
    leace, used = fit_leace(X, Z, backend)
    leace.identity["backend"] = used
    if "leace" in methods:
        erasers["leace"] = leace
    if "inlp" in methods:
        erasers["inlp"] = fit_inlp(X, Z, groups, inlp_iterations, inlp_min_r2)
    if "random" in methods:
        erasers["random"] = random_eraser(leace.mean, leace.rank, seed)
    return erasers


def fit_eraser(store: ActivationStore, layer: int | str, subspace: str, method: str = "leace", target: str = "token_position",
               encoding: str = "dct", n_features: int = 8, rows: np.ndarray | None = None, backend: str = "auto", seed: int = 0) -> LinearEraser:
    """One eraser of ``target`` fitted on ``store``'s (layer, subspace) states at ``rows`` (default: every
    non-special token), carrying the store's model identity."""
    check_request(store, [layer], [subspace], target)
    rows = store.subsample(store.n_tokens, seed=seed) if rows is None else np.asarray(rows)
    labels = store.labels
    Z = position_features(labels[target].to_numpy()[rows], encoding, n_features, period=store_period(store, target))
    eraser = fit_erasers(store.states(layer, subspace)[rows], Z, labels["doc_index"].to_numpy()[rows], (method,),
                         backend, seed)[method]
    eraser.identity.update(store_identity(store, layer, subspace, target, encoding, n_features))
    return eraser


# --- stores ----------------------------------------------------------------------------------------
def check_request(store: ActivationStore, layers: Sequence[int | str], subspaces: Sequence[str], target: str) -> None:
    """Layers, subspaces and target must be in ``store``: one clear ErasureError otherwise."""
    missing = [layer for layer in layers if layer not in store.layers]
    if missing:
        raise ErasureError(f"layer(s) {missing} are not in the store {store.directory} (it has {list(store.layers)}); "
                           "extract them first")
    missing = [s for s in subspaces if s not in store.subspaces]
    if missing:
        raise ErasureError(f"subspace {missing[0]!r} is not in the store {store.directory} (it has "
                           f"{', '.join(store.subspaces)})")
    if target not in position_labels():
        raise ErasureError(f"unknown target {target!r}; use {', '.join(position_labels())}")


def store_period(store: ActivationStore, target: str) -> float:
    """The DCT period of a target: the model's positions for token position, else the largest value + 1."""
    if target == "token_position":
        config = store.manifest["identity"]["model"]["config"]
        return float(config.get("max_positions") or store.labels[target].max() + 1)
    return float(store.labels[target].max() + 1)


def store_identity(store: ActivationStore, layer: int | str, subspace: str, target: str, encoding: str, n_features: int) -> dict:
    model = store.manifest["identity"]["model"]
    return {"model_sha256": model["weights_sha256"], "variant": model["config"].get("variant"), "layer": layer,
            "subspace": subspace, "target": target, "encoding": encoding,
            "n_features": 1 if encoding == "linear" else n_features, "store": str(store.directory)}


def _as_float64(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or len(X) < 3:
        raise ErasureError(f"states must be [n >= 3, d], got shape {list(X.shape)}")
    if not np.isfinite(X).all():
        raise ErasureError("the states contain NaN or inf; re-extract them before fitting an eraser")
    return X


def _standardised(Z) -> np.ndarray:
    Z = np.asarray(Z, dtype=np.float64)
    Z = Z.reshape(len(Z), -1)
    spread = Z.std(axis=0)
    varying = spread > 1e-12 * max(float(np.abs(Z).max()), 1.0)  # a cosine past the target's own levels is flat
    if not varying.any():
        raise ErasureError("the concept is constant on the fitting tokens; nothing to erase")
    return (Z[:, varying] - Z[:, varying].mean(axis=0)) / spread[varying]

