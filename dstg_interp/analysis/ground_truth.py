"""DSTG as ground truth for subspace-finding methods: its AP coordinates are the position subspace by construction.

    from dstg_interp.analysis import ground_truth as gt
    true = gt.true_position_basis(encoder)                     # [d, d_ap]: the last d_ap coordinates of ``full``
    X, p = gt.position_states(encoder, layer, tokens, mask)    # held-out states [n, d] of real tokens, positions [n]
    found = gt.leace_subspace(X, p, k=true.shape[1])           # or position_means_pcs, probe_span, random_subspace
    gt.subspace_score(found, true)                             # mean_cos2, share_inside, chance, k, k_true, d
    das = gt.train_das(encoder, layer, k, tokens, mask, source_shift=8)     # das.basis [d, k], das.losses [steps]
    gt.interchange_effect(encoder, layer, das.basis, tokens, mask, source_shift=8)   # kl, top1_agreement, ...
    gt.score_method(my_method, encoder, tokens, mask, k=8)     # your method(X, p, k) -> [d, k] vs truth vs chance

DSTG's state at every layer is ``full`` = [sem | ap] (``encoders.hooks``), so the position subspace is known:
the d_ap AP coordinates.  Every method here returns an orthonormal basis [d, k] of the subspace it finds for
position, and is scored two ways against that truth:
    geometry   principal angles between the found and the true subspace: ``mean_cos2`` (mean cos^2 over the
               min(k, k_true) angles) and ``share_inside`` = ||P_AP Q||_F^2 / k, the share of the found subspace
               inside AP; a random k-subspace has E[share_inside] = k_true / d (``chance``).
    causal     ``interchange_effect``: the base input's state at a layer gets the found subspace's coordinates
               from the same tokens read ``source_shift`` positions later (``position_offset``); the MLM output
               is compared with that shifted run's own output (the counterfactual): KL(counterfactual ||
               intervened) and top-1 agreement (interchange-intervention accuracy).  At layer 0 of DSTG the
               semantic stream does not depend on position, so interchanging the true AP coordinates reproduces
               the counterfactual exactly (KL 0, agreement 1).

Methods (states of held-out tokens at one layer):
    position_means_pcs  top-k PCs of the per-position mean state (``spectra.per_position_mean``).
    probe_span          the span of ridge weights predicting position features (position, Fourier pairs).
    leace_subspace      the subspace LEACE edits to erase one-hot position (closed form, Belrose et al. 2023).
    inlp_subspace       the k directions iterative nullspace projection (Ravfogel et al. 2020) removes, one ridge of
                        position per round.
    sae_position_subspace  the decoder directions of a TopK SAE's position-tuned latents (place cells).
    random_subspace     a uniformly random k-subspace: the control every score is read against.
Methods that run the model (closures over the encoder and a layer, as ``fig_ground_truth`` passes them):
    attribution_subspace  attribution patching for a subspace: the k directions whose interchange lowers the
                        counterfactual loss most to first order (one forward and one backward pass).
    das_subspace        distributed alignment search (Geiger et al. 2024): a learned orthogonal rotation whose first
                        k axes, interchanged between base and shifted source, make the output follow the
                        counterfactual (``train_das``; the optimisation itself is ``fit_rotation``, which takes any
                        intervene-and-score closure, so a synthetic model with a planted subspace tests it).
    boundless_das_subspace  boundless DAS (Wu et al. 2023): the rotation and the interchanged width learned together
                        (``train_boundless_das``, ``fit_boundless_rotation``); its basis has the width it learned.
Your own method: ``score_method(method, encoder, tokens, mask)`` takes any ``method(X, p, k) -> basis [d, k]`` (the
signature of the state methods above, or a dict of them by name), fits it on the states of one half of the
sequences at each layer, checks what it returns, and scores it beside the two controls -- the AP coordinates
themselves and a random subspace of the same k -- in one table (docs/ground-truth.md).

pyvene is not used (it is an optional tool we do not pin): DAS here is written on our one write path into a
model, ``encoders.edits.edit_states``, with the model's weights frozen and gradients reaching the rotation only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.nn.utils.parametrizations import orthogonal

from ..encoders import Encoder, EncoderError, open_encoder
from ..encoders.edits import edit_states
from .place_cells import place_cells
from .sae import SAEConfig, train_sae_on_states
from .spectra import per_position_mean

RANK_TOLERANCE = 1e-8  # singular values below this times the largest count as zero


@dataclass
class RotationFit:
    """What ``fit_rotation`` (or ``fit_boundless_rotation``) learned: the first k axes of the rotation and the loss
    at every step; boundless DAS also the width it learned (k = the final width) and the soft width at each step."""

    basis: np.ndarray  # [d, k] orthonormal
    losses: np.ndarray  # [steps]
    widths: np.ndarray | None = None  # [steps] boundless DAS: the sum of the interchange weights; None for DAS


# --- bases and their score ------------------------------------------------------------------------
def orthonormal_basis(matrix, what: str = "basis", width: int | None = None) -> np.ndarray:
    """An orthonormal basis [d, k] of the column span of ``matrix`` [d, k] (``width``: the d it must have);
    one ValueError naming ``what`` is wrong for NaN, a wrong width, k = 0, k > d or rank below k."""
    basis = np.asarray(matrix.detach().cpu() if isinstance(matrix, torch.Tensor) else matrix, dtype=np.float64)
    if basis.ndim != 2:
        raise ValueError(f"{what} must be a matrix [d, k] (one column per direction), got shape {list(basis.shape)}")
    if not np.isfinite(basis).all():
        raise ValueError(f"{what} has NaN or infinite entries; a subspace needs finite directions")
    d, k = basis.shape
    if width is not None and d != width:
        raise ValueError(f"{what} has {d} rows but the states are {width} wide; give a basis [{width}, k]")
    if k == 0:
        raise ValueError(f"{what} has no columns (k = 0); a subspace needs at least one direction")
    if k > d:
        raise ValueError(f"{what} has {k} columns but only {d} rows: at most {d} directions are independent")
    if np.allclose(basis.T @ basis, np.eye(k), atol=1e-10):
        return basis  # already orthonormal: kept as given (the true AP basis stays exactly axis-aligned)
    u, s, _ = np.linalg.svd(basis, full_matrices=False)
    rank = int((s > RANK_TOLERANCE * max(s[0], 1e-300)).sum())
    if rank < k:
        raise ValueError(f"{what} is rank-deficient: its {k} columns span only {rank} directions; "
                         "drop the dependent columns or ask for a smaller k")
    return u


def true_position_basis(encoder: Encoder, subspace: str = "full") -> np.ndarray:
    """The AP coordinates of ``subspace`` ("full" [sem | ap] or "ap") of a DSTG encoder as a basis [d, d_ap]."""
    if not {"sem", "ap"} <= set(encoder.subspaces):
        raise EncoderError(f"{encoder.name}: a {encoder.variant!r} model has no AP stream, so its position subspace "
                           "is not known by construction; ground truth needs a DSTG model (subspaces 'sem' and 'ap': "
                           "the zoo's dstg members or a checkpoint of variant dstg; RoPE-, AP-, RP-NeoBERT and "
                           "Hugging Face encoders have none)")
    if subspace not in ("full", "ap"):
        raise EncoderError(f"the true position subspace lives in 'full' or 'ap', not {subspace!r}")
    widths = {"sem": encoder.config.d_sem, "ap": encoder.config.d_ap}
    parts = ["ap"] if subspace == "ap" else [hook.rsplit("_", 1)[-1] for hook in encoder.hooks_for(0, "full")]
    start = sum(widths[part] for part in parts[:parts.index("ap")])
    return np.eye(sum(widths[part] for part in parts))[:, start:start + widths["ap"]]


def subspace_score(found, true) -> dict:
    """Principal-angle scores of a found basis [d, k] against the true one [d, k_true] (module docstring):
    mean_cos2, share_inside, k, k_true, d, chance = k_true / d (share_inside of a random subspace)."""
    found, true = orthonormal_basis(found, "the found basis"), orthonormal_basis(true, "the true basis")
    if found.shape[0] != true.shape[0]:
        raise ValueError(f"the found basis has {found.shape[0]} rows but the true basis {true.shape[0]}: both must be "
                         "bases of the same state (e.g. true_position_basis(encoder, 'full') for 'full' states)")
    overlap = true.T @ found  # [k_true, k]
    cosines = np.clip(np.linalg.svd(overlap, compute_uv=False), 0.0, 1.0)  # cos of the min(k, k_true) angles
    d, k = found.shape
    return {"mean_cos2": float(np.mean(cosines**2)), "share_inside": float((overlap**2).sum() / k),
            "k": k, "k_true": true.shape[1], "d": d, "chance": true.shape[1] / d}


# --- methods that read states ----------------------------------------------------------------------
def position_states(encoder: Encoder, layer, tokens: torch.Tensor, mask: torch.Tensor,
                    subspace: str = "full") -> tuple[np.ndarray, np.ndarray]:
    """The states [n, d] (float64) of the real tokens of ``tokens`` [B, T] at ``layer`` and their positions [n]."""
    states = encoder.states(tokens, [layer], [subspace], attention_mask=mask)[(layer, subspace)]
    mask = mask.to(states.device).bool()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return states[mask].double().cpu().numpy(), positions[mask].cpu().numpy()


def position_means_pcs(X, p, k: int) -> np.ndarray:
    """The top-k principal directions [d, k] of the per-position mean state (the position table a layer holds)."""
    X, p = _checked_states(X, p, k)
    means, _ = per_position_mean(X, p)
    if len(means) - 1 < k:
        raise ValueError(f"the means of {len(means)} positions span at most {len(means) - 1} directions, fewer "
                         f"than k = {k}; use tokens at more positions or a smaller k")
    return _top_directions((means - means.mean(axis=0)).T, k, "the per-position means")


def position_features(p, n_pairs: int) -> np.ndarray:
    """[n, 1 + 2 n_pairs] standardised position features: the position and sin/cos of it at frequencies
    1..n_pairs cycles over the positions seen (the smooth functions of position a probe can read)."""
    p = np.asarray(p, dtype=np.float64)
    phase = 2 * np.pi * (p - p.min()) / (np.ptp(p) + 1)
    columns = [p] + [f(m * phase) for m in range(1, n_pairs + 1) for f in (np.sin, np.cos)]
    features = np.column_stack(columns)
    return (features - features.mean(axis=0)) / np.where(features.std(axis=0) > 0, features.std(axis=0), 1.0)


def probe_span(X, p, k: int, alpha: float = 1e-3) -> np.ndarray:
    """The top-k span [d, k] of ridge weights predicting ``position_features(p, ceil(k / 2))`` from ``X``
    (ridge strength ``alpha`` times the mean variance of the states)."""
    X, p = _checked_states(X, p, k)
    centred = X - X.mean(axis=0)
    targets = position_features(p, (k + 1) // 2)
    gram = centred.T @ centred / len(X)
    ridge = alpha * np.trace(gram) / X.shape[1]
    weights = np.linalg.solve(gram + ridge * np.eye(X.shape[1]), centred.T @ targets / len(X))  # [d, features]
    return _top_directions(weights, k, "the probe weights")


def leace_subspace(X, p, k: int) -> np.ndarray:
    """The k-dimensional subspace [d, k] in which LEACE erases one-hot position from ``X``.

    LEACE (Belrose et al. 2023, "LEACE: Perfect linear concept erasure in closed form", Theorem 4.3) erases
    concept Z by r(x) = x - W^+ P W (x - mean), W = (Sigma_xx^1/2)^+ the whitening, P the orthogonal projection
    onto the column space of the whitened cross-covariance W Sigma_xz; it changes x only within span(W^+ U),
    U the top-k left singular vectors of W Sigma_xz.  Written out in numpy (``probes.erasure`` has the same
    closed form; concept-erasure's ``LeaceFitter`` agrees, tests/analysis/test_ground_truth.py)."""
    X, p = _checked_states(X, p, k)
    centred = X - X.mean(axis=0)
    one_hot = (p[:, None] == np.unique(p)[None, :]).astype(np.float64)
    sigma_xx = centred.T @ centred / len(X)
    sigma_xz = centred.T @ (one_hot - one_hot.mean(axis=0)) / len(X)
    eigenvalues, vectors = np.linalg.eigh((sigma_xx + sigma_xx.T) / 2)
    kept = eigenvalues > eigenvalues[-1] * X.shape[1] * np.finfo(np.float64).eps
    root = np.sqrt(np.where(kept, eigenvalues, 1.0))
    whiten = (vectors * np.where(kept, 1 / root, 0)) @ vectors.T
    unwhiten = (vectors * np.where(kept, root, 0)) @ vectors.T
    directions = _top_directions(whiten @ sigma_xz, k, "the whitened position cross-covariance")
    return orthonormal_basis(unwhiten @ directions, "the LEACE subspace")


def inlp_subspace(X, p, k: int, alpha: float = 1e-3) -> np.ndarray:
    """The k directions [d, k] iterative nullspace projection removes to erase position (INLP, Ravfogel et al.
    2020, with a ridge regression of the standardised position as its linear predictor): each round fits the ridge
    of ``probe_span`` on the states with the directions found so far projected out, keeps its weight vector, and
    projects it out in turn -- k rounds, k directions, the first the most predictive.  ``probes.erasure.fit_inlp``
    is the same loop with a cross-validated stop, for erasing rather than for a subspace of fixed k."""
    X, p = _checked_states(X, p, k)
    centred = X - X.mean(axis=0)
    target = (p - p.mean()) / (p.std() if p.std() > 0 else 1.0)
    gram = centred.T @ centred / len(X)
    ridge = alpha * np.trace(gram) / X.shape[1]
    basis, first = np.zeros((X.shape[1], 0)), None
    for _ in range(k):
        nulled = np.eye(X.shape[1]) - basis @ basis.T  # the projection off the directions found so far
        weights = np.linalg.solve(nulled @ gram @ nulled + ridge * np.eye(X.shape[1]), nulled @ centred.T @ target / len(X))
        direction = nulled @ weights
        first = np.linalg.norm(direction) if first is None else first
        if np.linalg.norm(direction) <= RANK_TOLERANCE * max(first, 1e-300):
            raise ValueError(f"INLP found only {basis.shape[1]} directions predicting position, fewer than k = {k}; "
                             "use more tokens or a smaller k")
        basis = np.column_stack([basis, direction / np.linalg.norm(direction)])
    return orthonormal_basis(basis, "the INLP subspace")


def sae_position_subspace(X, p, k: int, num_latents: int = 128, active: int = 4, steps: int = 500,
                          seed: int = 0) -> np.ndarray:
    """The span [d, k] of the decoder directions of an SAE's position-tuned latents: a TopK SAE (``num_latents``
    latents, ``active`` per token; ``sae.train_sae_on_states``, EleutherAI's sparsify) trained on ``X``, each
    latent's receptive field over position read by ``place_cells`` (tuned: eta² above the 99th percentile of its
    eta² with positions shuffled; fewer than k tuned latents: the k of highest eta²), each chosen latent's decoder
    direction scaled by how far its mean activation moves with position (the std of its field), and the top-k
    left singular vectors of those.  The place-cell reading of a dictionary (Gurnee et al.) turned into a subspace."""
    X, p = _checked_states(X, p, k)
    states = X.astype(np.float32)
    config = SAEConfig(num_latents=max(num_latents, k), k=min(active, max(num_latents, k)), steps=steps,
                       batch_size=min(1024, len(states)), log_every=steps, seed=seed)
    trained = train_sae_on_states(states, states, config)
    cells = place_cells(trained.encode(states), p, n_shuffles=5, min_active=1, seed=seed)
    tuned = np.flatnonzero(cells.table.tuned.to_numpy())
    if len(tuned) < k:
        tuned = np.argsort(-np.nan_to_num(cells.table.eta2.to_numpy(), nan=-1.0))[:k]
    decoder = trained.sae.W_dec.detach().double().numpy()[tuned] / trained.scale  # [m, d] in the states' units
    moves = cells.fields[tuned].std(axis=1)
    return _top_directions((decoder * moves[:, None]).T, k, "the position-tuned latents' decoder directions")


def random_subspace(d: int, k: int, seed: int = 0) -> np.ndarray:
    """A uniformly random k-dimensional subspace of R^d as an orthonormal basis [d, k]."""
    _check_k(k, d)
    return orthonormal_basis(np.random.default_rng(seed).standard_normal((d, k)), "the random basis")


# --- any method, scored beside its controls --------------------------------------------------------------
CONTROLS = ("ap_coordinates", "random")  # the truth itself and a random subspace of the same k
SCORE_COLUMNS = ["layer", "method", "k", "d", "mean_cos2", "share_inside", "chance", "kl", "top1_agreement",
                 "kl_unedited", "top1_unedited", "n_tokens"]
StateMethod = Callable[[np.ndarray, np.ndarray, int], object]


def score_method(method: StateMethod | Mapping[str, StateMethod], encoder, tokens: torch.Tensor,
                 mask: torch.Tensor | None = None, layers=None, k: int | None = None, source_shift: int = 8,
                 score_tokens: torch.Tensor | None = None, score_mask: torch.Tensor | None = None,
                 seed: int = 0) -> pd.DataFrame:
    """Score ``method(X, p, k) -> basis [d, k]`` against DSTG's AP coordinates at each of ``layers``.

    ``encoder``: a DSTG model (anything ``open_encoder`` takes), or AP-NeoBERT, scored on interchange alone
    (``known_position_basis``: geometry columns NaN, no ``ap_coordinates`` row, ``k`` required); any other model
    is one EncoderError saying which models can be scored.  ``method``: a callable (named by its ``__name__``) or a dict {name:
    callable}.  At each layer (None: 0..n_layers) the method gets the ``full`` states X [n, d] of the real tokens
    of ``tokens`` [B, T] (``mask``: None = all real), their positions p [n] and ``k`` (None: d_AP); what it
    returns must be a finite [d, k] matrix of rank k (else one ValueError naming the method; a method that learns
    its own width, e.g. boundless DAS, says so by an attribute ``learns_width = True`` and returns [d, w], w its width).  The basis is then
    scored by principal angles against the truth (``subspace_score``) and by ``interchange_effect`` with the
    source read ``source_shift`` positions later, on ``score_tokens`` / ``score_mask`` -- default: the method is
    fitted on the first half of the sequences and its interchange scored on the second half (held out).

    Returns a tidy DataFrame of ``SCORE_COLUMNS``, one row per (layer, method), with two control rows per layer:
    ``ap_coordinates`` (the truth as a method: mean_cos2 1, the AP interchange) and ``random`` (a uniformly random
    k-subspace drawn with ``seed``: chance).
    """
    encoder = encoder if isinstance(encoder, Encoder) else open_encoder(encoder)
    true = known_position_basis(encoder)
    methods = _named_methods(method)
    d = int(encoder.config.d_model) if true is None else true.shape[0]
    if k is None and true is None:
        raise ValueError(f"{encoder.name} has no AP stream, so there is no d_AP to take k from: give k (the zoo's "
                         "DSTG members have d_AP = 16)")
    k = true.shape[1] if k is None else k
    _check_k(k, d)
    layers = list(range(encoder.n_layers + 1)) if layers is None else encoder.resolve(layers, ["full"])[0]
    tokens = tokens[None] if tokens.dim() == 1 else tokens
    mask = torch.ones_like(tokens, dtype=torch.bool) if mask is None else (mask[None] if mask.dim() == 1 else mask)
    if score_tokens is None:
        if len(tokens) < 2:
            raise ValueError(f"score_method fits on half of the sequences and scores on the other half, but got "
                             f"{len(tokens)} sequence; give at least 2, or held-out score_tokens")
        half = len(tokens) // 2
        (tokens, mask), (score_tokens, score_mask) = (tokens[:half], mask[:half]), (tokens[half:], mask[half:])
    elif score_mask is None:
        score_mask = torch.ones_like(score_tokens, dtype=torch.bool)
    rows = []
    for layer in layers:
        X, p = position_states(encoder, layer, tokens, mask)
        bases = {name: orthonormal_basis(call(X, p, k), f"{name}'s basis", width=d) for name, call in methods.items()}
        for name, basis in bases.items():
            if basis.shape[1] != k and not getattr(methods[name], "learns_width", False):
                raise ValueError(f"{name}'s basis has {basis.shape[1]} columns but k = {k} directions were asked "
                                 "for; a method(X, p, k) returns a basis [d, k]")
        bases.update({**({} if true is None else {"ap_coordinates": true}), "random": random_subspace(d, k, seed)})
        for name, basis in bases.items():
            geometry = NO_GEOMETRY if true is None else subspace_score(basis, true)
            effect = interchange_effect(encoder, layer, basis, score_tokens, score_mask, source_shift)
            rows.append({"layer": layer, "method": name, "k": basis.shape[1], "d": d, **geometry, **effect})
    return pd.DataFrame(rows)[SCORE_COLUMNS]


NO_GEOMETRY = {"mean_cos2": np.nan, "share_inside": np.nan, "chance": np.nan}  # a model with no known subspace


def known_position_basis(encoder: Encoder) -> np.ndarray | None:
    """DSTG's AP coordinates (``true_position_basis``); None for a model of ours whose only position input is a
    learned absolute table (AP-NeoBERT): no subspace is known there, but a shifted source still changes its output,
    so a method's interchange can be scored.  Any other model: one EncoderError saying why neither holds."""
    try:
        return true_position_basis(encoder)
    except EncoderError as error:
        if encoder.kind == "dstg-interp" and getattr(encoder.config, "has_ap_table", False):
            return None
        raise EncoderError(f"{error}. Interchange alone needs a learned absolute-position table (AP-NeoBERT): a "
                           "relative-position model's (RoPE, RP) output does not change when every position shifts, "
                           "so there is no counterfactual to interchange toward") from None


def _named_methods(method) -> dict[str, StateMethod]:
    """{name: callable} of a callable (its ``__name__``) or a dict of them; one ValueError for anything else."""
    methods = dict(method) if isinstance(method, Mapping) else {getattr(method, "__name__", type(method).__name__): method}
    if not methods or not all(callable(call) for call in methods.values()):
        raise ValueError("score_method needs a callable method(X, p, k) -> basis [d, k], or a dict {name: callable}; "
                         f"got {type(method).__name__}")
    taken = [name for name in methods if name in CONTROLS]
    if taken:
        raise ValueError(f"the method name {taken[0]!r} is a control's ({', '.join(CONTROLS)}); name it otherwise")
    return {str(name): call for name, call in methods.items()}


# --- DAS: a learned rotation, and the interchange that scores any basis --------------------------------------
def fit_rotation(intervene_and_loss: Callable[[torch.Tensor], torch.Tensor], d: int, k: int, steps: int = 200,
                 lr: float = 0.03, seed: int = 0, device: str | torch.device = "cpu") -> RotationFit:
    """Learn an orthogonal R [d, d] (``parametrizations.orthogonal`` on a Linear) by Adam on
    ``intervene_and_loss(Q)``, Q = the first k rotated axes [d, k]: the closure interchanges span(Q) and
    returns a scalar loss with gradients to Q.  Returns the final Q (orthonormal) and the loss at each step."""
    _check_k(k, d)
    if steps < 1 or lr <= 0:
        raise ValueError(f"fit_rotation needs steps >= 1 and lr > 0, got steps={steps}, lr={lr}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        rotation = orthogonal(torch.nn.Linear(d, d, bias=False)).to(device)
    optimizer = torch.optim.Adam(rotation.parameters(), lr=lr)
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = intervene_and_loss(rotation.weight[:k].T)
            if not torch.isfinite(loss):
                raise ValueError(f"the DAS loss became {float(loss)} at step {len(losses)}; lower lr")
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        basis = rotation.weight[:k].T.detach()
    return RotationFit(orthonormal_basis(basis, "the DAS rotation"), np.asarray(losses))


def train_das(encoder: Encoder, layer, k: int, base_tokens: torch.Tensor, mask: torch.Tensor, source_shift: int,
              steps: int = 200, lr: float = 0.03, seed: int = 0, restarts: int = 1) -> RotationFit:
    """DAS at ``layer``'s ``full`` state: the rotation whose first k axes, interchanged from the same tokens read
    ``source_shift`` positions later, minimise KL(counterfactual || intervened) over real tokens.  The fit is
    not convex: where the output barely depends on some position directions it can stop in a local optimum
    holding only the ones that matter, so ``restarts`` fits from seeds ``seed``, ``seed + 1``, ... are made and
    the one with the lowest final loss kept."""
    if isinstance(restarts, bool) or int(restarts) != restarts or restarts < 1:
        raise ValueError(f"restarts must be an integer >= 1, got {restarts!r}")
    intervene_and_loss, d = _das_objective(encoder, layer, base_tokens, mask, source_shift)
    with _frozen(encoder.model):  # gradients reach the rotation only
        fits = [fit_rotation(intervene_and_loss, d, k, steps, lr, seed + restart, encoder.device)
                for restart in range(int(restarts))]
    return min(fits, key=lambda fit: fit.losses[-1])


def _das_objective(encoder: Encoder, layer, base_tokens: torch.Tensor, mask: torch.Tensor,
                   source_shift: int) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """DAS's closure ``basis [d, k] -> mean KL(counterfactual || intervened)`` over real tokens, the interchange of
    span(basis) from the same tokens read ``source_shift`` positions later, and the state's width d."""
    tokens, mask = _checked_inputs(encoder, layer, base_tokens, mask, source_shift)
    source, counterfactual = _counterfactual(encoder, layer, tokens, mask, source_shift)
    target = counterfactual.double().log_softmax(-1)[mask]
    real = mask[..., None].to(source.dtype)

    def intervene_and_loss(basis: torch.Tensor) -> torch.Tensor:
        with edit_states(encoder, layer, "full", _interchange(source, basis, real)):
            logits = encoder.mlm_logits(tokens, mask)
        return _kl(target, logits.double().log_softmax(-1)[mask]).mean()

    return intervene_and_loss, int(source.shape[-1])


def das_subspace(encoder: Encoder, layer, k: int, base_tokens: torch.Tensor, mask: torch.Tensor, source_shift: int,
                 steps: int = 200, lr: float = 0.03, seed: int = 0, restarts: int = 1) -> np.ndarray:
    """The basis [d, k] DAS finds (``train_das``), as the other methods return theirs."""
    return train_das(encoder, layer, k, base_tokens, mask, source_shift, steps, lr, seed, restarts).basis


def fit_boundless_rotation(intervene_and_loss: Callable[[torch.Tensor], torch.Tensor], d: int, steps: int = 200,
                           lr: float = 0.03, width_cost: float = 0.5, seed: int = 0,
                           device: str | torch.device = "cpu") -> RotationFit:
    """Boundless DAS (Wu et al. 2023, "Interpretability at scale"): the rotation and the interchanged width learned
    together.  Rotated axis i (0-based) is interchanged with weight m_i = sigmoid((b - i - 1/2) / t), b = d sigmoid(beta)
    a learned boundary that starts at d / 2 and t a temperature annealed geometrically from d / 8 to 0.05 over the
    steps, so the soft mask hardens into "the first w axes".  The loss is ``intervene_and_loss(A sqrt(m))`` (A the
    rotation's axes [d, d]: the closure's Q Q^T is then A diag(m) A^T, the weighted interchange, so the closure of
    ``fit_rotation`` serves unchanged) plus ``width_cost`` x L0 x sum(m) / d, L0 the loss with nothing interchanged:
    the price is a share of what is at stake, so interchanging every axis costs ``width_cost`` of it and each
    direction kept must lower the loss by more than width_cost x L0 / d.  The learned width is the number of weights
    above 1/2 at the last step (at least 1); the basis is those first axes.  The width is the smallest subspace that
    carries the counterfactual to within that price, so it is read beside ``width_cost`` (interchanging every axis
    always reproduces the source)."""
    if steps < 1 or lr <= 0 or not 0 < width_cost < float("inf"):
        raise ValueError(f"fit_boundless_rotation needs steps >= 1, lr > 0 and a finite width_cost > 0, got "
                         f"steps={steps}, lr={lr}, width_cost={width_cost}")
    _check_k(1, d)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        rotation = orthogonal(torch.nn.Linear(d, d, bias=False)).to(device)
    boundary = torch.zeros((), device=device, requires_grad=True)  # b = d sigmoid(beta): d / 2 at the start
    optimizer = torch.optim.Adam([{"params": rotation.parameters(), "lr": lr}, {"params": [boundary], "lr": 0.05}])
    axes_index = torch.arange(d, device=device, dtype=torch.float32) + 0.5
    with torch.no_grad():  # L0: the loss with nothing interchanged, what the price is a share of
        at_stake = float(intervene_and_loss(torch.zeros(d, 1, device=device)))
    temperatures = np.geomspace(max(d / 8, 0.05), 0.05, steps)
    losses, widths = [], []
    with torch.enable_grad():
        for temperature in temperatures:
            optimizer.zero_grad(set_to_none=True)
            weights = torch.sigmoid((d * torch.sigmoid(boundary) - axes_index) / float(temperature))
            # sqrt's slope is infinite at 0: a weight that underflowed keeps no gradient instead of a NaN
            loss = (intervene_and_loss(rotation.weight.T * weights.clamp_min(1e-12).sqrt())
                    + width_cost * at_stake * weights.sum() / d)
            if not torch.isfinite(loss):
                raise ValueError(f"the boundless DAS loss became {float(loss.detach())} at step {len(losses)}; lower lr")
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            widths.append(float(weights.detach().sum()))
        width = max(1, int((weights.detach() > 0.5).sum()))
        basis = rotation.weight[:width].T.detach()
    return RotationFit(orthonormal_basis(basis, "the boundless DAS rotation"), np.asarray(losses), np.asarray(widths))


def train_boundless_das(encoder: Encoder, layer, base_tokens: torch.Tensor, mask: torch.Tensor, source_shift: int,
                        steps: int = 200, lr: float = 0.03, width_cost: float = 0.5, seed: int = 0) -> RotationFit:
    """Boundless DAS at ``layer``'s ``full`` state, on the interchange and loss of ``train_das``: the rotation and
    the width w whose first w axes, interchanged from the same tokens read ``source_shift`` positions later, bring
    the output to the counterfactual at the price ``width_cost`` (``fit_boundless_rotation``)."""
    intervene_and_loss, d = _das_objective(encoder, layer, base_tokens, mask, source_shift)
    with _frozen(encoder.model):
        return fit_boundless_rotation(intervene_and_loss, d, steps, lr, width_cost, seed, encoder.device)


def boundless_das_subspace(encoder: Encoder, layer, base_tokens: torch.Tensor, mask: torch.Tensor, source_shift: int,
                           steps: int = 200, lr: float = 0.03, width_cost: float = 0.5, seed: int = 0) -> np.ndarray:
    """The basis [d, w] boundless DAS finds, w its learned width (``train_boundless_das``)."""
    return train_boundless_das(encoder, layer, base_tokens, mask, source_shift, steps, lr, width_cost, seed).basis


def attribution_matrix(encoder: Encoder, layer, base_tokens: torch.Tensor, mask: torch.Tensor,
                       source_shift: int) -> np.ndarray:
    """S [d, d] = sym(sum_i delta_i g_i^T): g_i the gradient of KL(counterfactual || base run) (summed over real
    tokens) at token i's ``full`` state, delta_i = x_source,i - x_i the interchange's difference.  Interchanging
    span(Q) changes that loss by tr(Q^T S Q) to first order: attribution patching (Nanda 2023; Syed et al. 2023,
    "Attribution patching outperforms automated circuit discovery") for a subspace rather than a component."""
    tokens, mask = _checked_inputs(encoder, layer, base_tokens, mask, source_shift)
    source, counterfactual = _counterfactual(encoder, layer, tokens, mask, source_shift)
    target = counterfactual.double().log_softmax(-1)[mask]
    held: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor) -> torch.Tensor:
        held["state"] = x.detach().requires_grad_(True)
        return held["state"]

    with _frozen(encoder.model), torch.enable_grad():
        with edit_states(encoder, layer, "full", keep):
            logits = encoder.mlm_logits(tokens, mask)
        _kl(target, logits.double().log_softmax(-1)[mask]).sum().backward()
    state = held["state"]
    products = ((source - state.detach())[mask].double().T @ state.grad[mask].double()).cpu().numpy()
    return (products + products.T) / 2


def attribution_subspace(encoder: Encoder, layer, k: int, base_tokens: torch.Tensor, mask: torch.Tensor,
                         source_shift: int) -> np.ndarray:
    """Attribution patching's subspace [d, k]: DAS to first order, from one forward and one backward pass -- the k
    eigenvectors of ``attribution_matrix`` with the most negative eigenvalues, the orthonormal Q minimising
    tr(Q^T S Q) (Ky Fan), i.e. the subspace whose interchange lowers the loss most by that estimate."""
    _check_k(k, int(encoder.config.d_model))  # before the forward and backward pass it would waste
    _, vectors = np.linalg.eigh(attribution_matrix(encoder, layer, base_tokens, mask, source_shift))
    return orthonormal_basis(vectors[:, :k], "the attribution subspace")


def interchange_effect(encoder: Encoder, layer, basis, tokens: torch.Tensor, mask: torch.Tensor,
                       source_shift: int) -> dict:
    """The causal score of ``basis`` [d, k] at ``layer`` (module docstring): kl and top1_agreement of the
    interchanged run with the counterfactual, the same two for the unedited base run (``kl_unedited``,
    ``top1_unedited``: what no interchange leaves), and n_tokens."""
    tokens, mask = _checked_inputs(encoder, layer, tokens, mask, source_shift)
    source, counterfactual = _counterfactual(encoder, layer, tokens, mask, source_shift)
    basis = torch.as_tensor(orthonormal_basis(basis, "basis", width=source.shape[-1]), device=encoder.device)
    with torch.no_grad():
        unedited = encoder.mlm_logits(tokens, mask)
        with edit_states(encoder, layer, "full", _interchange(source, basis, mask[..., None].to(source.dtype))):
            intervened = encoder.mlm_logits(tokens, mask)
    target = counterfactual.double().log_softmax(-1)[mask]
    kl, agreement = _agreement(target, intervened.double().log_softmax(-1)[mask])
    kl_unedited, agreement_unedited = _agreement(target, unedited.double().log_softmax(-1)[mask])
    return {"kl": kl, "top1_agreement": agreement, "kl_unedited": kl_unedited, "top1_unedited": agreement_unedited,
            "n_tokens": int(mask.sum())}


def _agreement(target: torch.Tensor, log_q: torch.Tensor) -> tuple[float, float]:
    """Mean KL(target || q) and top-1 agreement over rows of log-probabilities [n, vocab]."""
    return float(_kl(target, log_q).mean()), float((target.argmax(-1) == log_q.argmax(-1)).double().mean())


def _interchange(source: torch.Tensor, basis: torch.Tensor, real: torch.Tensor):
    """The edit x + (x_source - x) Q Q^T on real tokens (``real`` [B, T, 1]: 1 on them, 0 on padding)."""
    def edit(x: torch.Tensor) -> torch.Tensor:
        projection = basis.to(x.dtype) @ basis.to(x.dtype).T
        return x + ((source - x) @ projection) * real
    return edit


def _counterfactual(encoder: Encoder, layer, tokens, mask, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``full`` state at ``layer`` [B, T, d] and the MLM logits [B, T, vocab] of ``tokens`` read ``shift``
    positions later (``position_offset``), from one forward without gradients."""
    held: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor) -> torch.Tensor:
        held["state"] = x.detach().clone()
        return x

    offset = torch.full((tokens.shape[0],), int(shift), dtype=torch.long, device=tokens.device)
    with torch.no_grad(), edit_states(encoder, layer, "full", keep):
        logits = encoder.model(tokens, attention_mask=mask, position_offset=offset, return_type="logits")
    return held["state"], logits


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per row of log-probabilities [n, vocab]."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


@contextlib.contextmanager
def _frozen(model: torch.nn.Module):
    """The model's parameters with requires_grad off inside the block, restored afterwards."""
    flags = [(parameter, parameter.requires_grad) for parameter in model.parameters()]
    for parameter, _ in flags:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter, flag in flags:
            parameter.requires_grad_(flag)


def _checked_inputs(encoder: Encoder, layer, tokens, mask, shift) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and mask [B, T] on the encoder's device, or one EncoderError for what a shifted interchange needs."""
    encoder.resolve([layer], ["full"])
    config = encoder.config
    if encoder.kind != "dstg-interp" or not getattr(config, "has_ap_table", False):
        raise EncoderError(f"{encoder.name}: a shifted source needs a model of ours that reads a learned absolute-"
                           f"position table (dstg, ap), not a {encoder.variant!r} model")
    if not getattr(encoder, "has_mlm_head", False):
        raise EncoderError(f"{encoder.name}: the model has no MLM head, so there is no output to interchange on")
    tokens = tokens[None] if tokens.dim() == 1 else tokens
    mask = (mask[None] if mask.dim() == 1 else mask).to(encoder.device).bool()
    if mask.shape != tokens.shape:
        raise EncoderError(f"the mask has shape {list(mask.shape)} but the tokens {list(tokens.shape)}")
    if isinstance(shift, bool) or int(shift) != shift or not 1 <= shift <= config.max_positions - tokens.shape[1]:
        raise EncoderError(f"source_shift must be an integer in [1, {config.max_positions - tokens.shape[1]}] (the "
                           f"{tokens.shape[1]}-token input read later within {config.max_positions} positions), "
                           f"got {shift!r}")
    return tokens.to(encoder.device), mask


def _check_k(k: int, d: int) -> None:
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= d:
        raise ValueError(f"k = {k!r}: a subspace of the {d}-wide states needs an integer k in [1, {d}]")


def _checked_states(X, p, k: int) -> tuple[np.ndarray, np.ndarray]:
    """States [n, d] as float64 and positions [n] as integers >= 0, k checked against d; or one ValueError."""
    X = np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    p = np.asarray(p.detach().cpu() if isinstance(p, torch.Tensor) else p)
    if X.ndim != 2 or p.shape != (X.shape[0],):
        raise ValueError(f"states must be [n, d] and positions [n]; got {list(X.shape)} and {list(p.shape)}")
    if not np.isfinite(X).all():
        raise ValueError("the states have NaN or infinite entries; drop those tokens (or check the model's dtype)")
    if p.size == 0 or not np.issubdtype(p.dtype, np.integer) or p.min() < 0:
        raise ValueError("positions must be a non-empty array of integers >= 0, one per state")
    _check_k(k, X.shape[1])
    return X, p.astype(np.int64)


def _top_directions(matrix: np.ndarray, k: int, what: str) -> np.ndarray:
    """The top-k left singular vectors [d, k] of ``matrix`` [d, m], or one ValueError if it has rank below k."""
    u, s, _ = np.linalg.svd(matrix, full_matrices=False)
    rank = int((s > RANK_TOLERANCE * max(s[0], 1e-300)).sum()) if s.size else 0
    if rank < k:
        raise ValueError(f"{what} span only {rank} directions, fewer than k = {k}; use more tokens or a smaller k")
    return u[:, :k]
