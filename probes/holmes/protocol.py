"""The Holmes probe protocol on precomputed features: a linear probe trained for several seeds at once.

    from probes.holmes.protocol import HolmesProbe, HolmesProbeConfig, evaluate_features
    probe = HolmesProbe(n_labels=2).fit(X_train, y_train, X_dev, y_dev)   # seeds 0-4 in one go
    probe.score(X_test, y_test)                                            # mean macro-F1 over seeds

Two protocols (``HolmesProbeConfig.protocol``), both the reference's training loop (holmes-evaluation,
``GeneralProbeWorker``):
- probe = Dropout(0.2) -> Linear(d_in, K), or one output for regression (`num_labels: 1`), SmoothL1/Huber;
- Adam lr 1e-3, batch 16, linear warm-up over 10% of `20 x steps_per_epoch`, then linear decay to 0;
- at most 20 epochs, early stopping on dev loss (patience 5), the best-dev-loss weights go to test;
- seeds 0-4, score = mean macro-F1 (classification) or Pearson r (regression; 0 for a constant prediction,
  where the reference gives NaN and its pandas mean then skips the seed).

``reference`` (the default): what holmes-evaluation computes, so scores compare with the benchmark's --
raw features and raw regression targets, and the cross-entropy taken of the *softmaxed* outputs (the
reference applies softmax before ``CrossEntropyLoss``, which softmaxes again; training and dev loss
alike).  The runner reads the layer the reference reads, ``hidden_states[-1]``: for pre-norm models
(ours) the final-normed state (``probes.holmes.encode``).  ``standardised``: our variant -- features (and
regression targets) z-scored with train statistics and cross-entropy on plain logits.  It scores
higher on regression and multi-class tasks (a pre-norm residual stream carries a large shared offset
that Adam spends the 20-epoch budget on, and Huber's sign-like gradient never reaches a 0-100 target)
and keeps a small, low-scale subspace such as DSTG's AP part from collapsing to a constant prediction;
its numbers do not compare with the leaderboard's.

Why one batched model: a probe is a [d, K] matrix, so a Python loop over seeds (and over the
randomised-label control) would pay the per-step overhead R times for almost no arithmetic. Here the
R runs are one [R, d, K] tensor trained with `baddbmm`; Adam is element-wise, so run r's trajectory
is exactly its own. Each run has its own generator (init, shuffling, dropout), so seed s gives the
same probe whether it trains alone or next to others.
"""

from __future__ import annotations

from collections.abc import Sequence
from numpy.typing import ArrayLike
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator
from sklearn.metrics import f1_score

from dstg_interp.config import ConfigIO

PROTOCOLS = ("reference", "standardised")

__all__ = ["PROTOCOLS", "HolmesProbeConfig", "HolmesProbe", "train_linear_probes", "flash_subsample", "standardize", "evaluate_features",
           "online_code_length", "probe_metric"]


@dataclass
class HolmesProbeConfig(ConfigIO):
    """Hyper-parameters of the protocol; saved next to every result table."""

    dropout: float = 0.2
    learning_rate: float = 1e-3
    batch_size: int = 16
    max_epochs: int = 20
    patience: int = 5
    warmup_fraction: float = 0.1
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    flash_fraction: float | None = None  # None = the train split as it is (FlashHolmes files are already cut)
    randomized_control: bool = True  # Hewitt & Liang style label permutation -> selectivity
    mdl: bool = False  # online code length (classification only)
    huber_beta: float = 1.0
    protocol: str = "reference"  # or "standardised" (module docstring)
    # Derived from ``protocol`` when None: z-score features (and regression targets) with train statistics;
    # softmax the outputs before the cross-entropy, as the reference does.
    standardize: bool | None = None
    double_softmax: bool | None = None

    def __post_init__(self):
        self.seeds = tuple(int(s) for s in self.seeds)
        if not self.seeds:
            raise ValueError("HolmesProbeConfig.seeds must not be empty")
        if len(set(self.seeds)) != len(self.seeds):  # a repeated seed is no second opinion (round 4, HO4)
            raise ValueError(f"HolmesProbeConfig.seeds: each seed once, got {list(self.seeds)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.learning_rate <= 0 or self.batch_size < 1 or self.max_epochs < 1 or self.patience < 1:
            raise ValueError("learning_rate, batch_size, max_epochs and patience must be positive")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.flash_fraction is not None and not 0.0 < self.flash_fraction <= 1.0:
            raise ValueError(f"flash_fraction must be in (0, 1] or None, got {self.flash_fraction}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown Holmes protocol {self.protocol!r}; choose {' or '.join(PROTOCOLS)}")
        reference = self.protocol == "reference"
        if self.standardize is None:
            self.standardize = not reference
        if self.double_softmax is None:
            self.double_softmax = reference


# ----------------------------------------------------------------------------- training

def _lr_factor(step: int, total: int, warmup: int) -> float:
    """transformers' get_linear_schedule_with_warmup, as the reference uses."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def _loss_per_run(logits, targets, regression: bool, n_out: int, config: HolmesProbeConfig):
    """logits [R, B, K], targets [R, B] -> the mean loss of each run [R]."""
    if regression:
        return F.smooth_l1_loss(logits[..., 0], targets, reduction="none", beta=config.huber_beta).mean(1)
    outputs = logits.softmax(-1) if config.double_softmax else logits  # the reference's softmax-then-CE
    flat = F.cross_entropy(outputs.reshape(-1, n_out), targets.reshape(-1), reduction="none")
    return flat.view(targets.shape).mean(1)


def _initial_probes(generators, d: int, n_out: int):
    """nn.Linear's default init for every run, each from its own generator: weight [R, d, K], bias [R, K]."""
    bound = 1.0 / math.sqrt(d)
    weight = torch.stack([(torch.rand(d, n_out, generator=g) * 2 - 1) * bound for g in generators])
    bias = torch.stack([(torch.rand(n_out, generator=g) * 2 - 1) * bound for g in generators])
    return weight.requires_grad_(True), bias.requires_grad_(True)


def _train_epoch(X, Y_train, train_idx, weight, bias, optimizer, generators, step: int, total_steps: int,
                 warmup: int, regression: bool, n_out: int, config: HolmesProbeConfig) -> int:
    """One epoch of every run (its own order and dropout masks); returns the step count after it."""
    runs, d, n_train = len(generators), X.shape[1], len(train_idx)
    run_index = torch.arange(runs)[:, None]
    keep = 1.0 - config.dropout
    order = torch.stack([torch.randperm(n_train, generator=g) for g in generators])  # [R, n_train]
    for start in range(0, n_train, config.batch_size):
        local = order[:, start:start + config.batch_size]  # [R, B]
        xb = X[train_idx[local]]  # [R, B, d]
        if config.dropout > 0:
            masks = torch.stack([torch.rand(local.shape[1], d, generator=g) < keep for g in generators])
            xb = xb * masks / keep
        yb = Y_train[run_index, local]
        for group in optimizer.param_groups:
            group["lr"] = config.learning_rate * _lr_factor(step, total_steps, warmup)
        loss = _loss_per_run(torch.baddbmm(bias[:, None, :], xb, weight), yb, regression, n_out, config).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
    return step


def train_linear_probes(X: torch.Tensor, Y: torch.Tensor, train_idx: np.ndarray, dev_idx: np.ndarray,
                        seeds: Sequence[int], n_out: int,
                        regression: bool, config: HolmesProbeConfig):
    """Train R = len(seeds) probes on shared features X [n, d] with per-run labels Y [R, n].

    Returns (weight [R, d, K], bias [R, K], best dev loss [R], epochs run [R]) with the best-dev-loss
    weights of every run.
    """
    runs = len(seeds)
    train_idx = torch.as_tensor(np.asarray(train_idx), dtype=torch.long)
    dev_idx = torch.as_tensor(np.asarray(dev_idx), dtype=torch.long)
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    weight, bias = _initial_probes(generators, X.shape[1], n_out)
    optimizer = torch.optim.Adam([weight, bias], lr=config.learning_rate)
    total_steps = math.ceil(len(train_idx) / config.batch_size) * config.max_epochs
    warmup = int(config.warmup_fraction * total_steps)
    X_dev, Y_dev, Y_train = X[dev_idx], Y[:, dev_idx], Y[:, train_idx]
    best_loss = torch.full((runs,), float("inf"))
    best_weight, best_bias = weight.detach().clone(), bias.detach().clone()
    waiting = torch.zeros(runs, dtype=torch.long)
    active = torch.ones(runs, dtype=torch.bool)
    epochs = torch.zeros(runs, dtype=torch.long)
    step = 0
    for _ in range(config.max_epochs):
        step = _train_epoch(X, Y_train, train_idx, weight, bias, optimizer, generators, step, total_steps, warmup,
                            regression, n_out, config)
        with torch.no_grad():  # early stopping per run on its dev loss
            dev_logits = torch.baddbmm(bias[:, None, :], X_dev.expand(runs, -1, -1), weight)
            dev_loss = _loss_per_run(dev_logits, Y_dev, regression, n_out, config)
            epochs += active.long()
            improved = active & (dev_loss < best_loss)
            best_loss = torch.where(improved, dev_loss, best_loss)
            best_weight[improved] = weight.detach()[improved]
            best_bias[improved] = bias.detach()[improved]
            waiting = torch.where(improved, torch.zeros_like(waiting), waiting + active.long())
            active &= waiting < config.patience
        if not active.any():
            break
    return best_weight, best_bias, best_loss.numpy(), epochs.numpy()


def probe_metric(predictions: np.ndarray, targets: np.ndarray, regression: bool) -> float:
    """Macro-F1 (classification) or Pearson r (regression; 0 for a constant prediction)."""
    if regression:
        if np.std(predictions) == 0 or np.std(targets) == 0:
            return 0.0
        return float(np.corrcoef(predictions, targets)[0, 1])
    return float(f1_score(targets, predictions, average="macro", zero_division=0))


class HolmesProbe(BaseEstimator):
    """Dropout + linear probe trained with the Holmes protocol for every seed in `seeds` at once.

    `fit(X, y, X_dev, y_dev)`; `y` may be [n] (shared by all seeds) or [n_runs, n] with n_runs a multiple
    of len(seeds) (e.g. true labels and a permuted-label control stacked). Learned: `coef_`
    [n_runs, d, K], `intercept_` [n_runs, K], `best_dev_loss_`, `n_epochs_`.  ``protocol`` picks the loss
    (``reference``: softmax before the cross-entropy; ``standardised``: plain logits); features are used as
    given (z-score them first for the standardised protocol).
    """

    def __init__(self, n_labels: int | None = None, dropout: float = 0.2, learning_rate: float = 1e-3,
                 batch_size: int = 16, max_epochs: int = 20, patience: int = 5, warmup_fraction: float = 0.1,
                 seeds=(0, 1, 2, 3, 4), huber_beta: float = 1.0, protocol: str = "reference"):
        self.n_labels = n_labels
        self.dropout = dropout
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.warmup_fraction = warmup_fraction
        self.seeds = seeds
        self.huber_beta = huber_beta
        self.protocol = protocol

    @property
    def regression(self) -> bool:
        return self.n_labels == 1

    def _config(self) -> HolmesProbeConfig:
        return HolmesProbeConfig(dropout=self.dropout, learning_rate=self.learning_rate, batch_size=self.batch_size,
                           max_epochs=self.max_epochs, patience=self.patience,
                           warmup_fraction=self.warmup_fraction, seeds=tuple(self.seeds),
                           huber_beta=self.huber_beta, protocol=self.protocol, standardize=False)

    def fit(self, X: ArrayLike, y: ArrayLike, X_dev: ArrayLike, y_dev: ArrayLike) -> HolmesProbe:
        X, X_dev = np.asarray(X, np.float32), np.asarray(X_dev, np.float32)
        y, y_dev = np.atleast_2d(np.asarray(y)), np.atleast_2d(np.asarray(y_dev))
        seeds = list(self.seeds)
        if y.shape[0] == 1:
            y, y_dev = np.repeat(y, len(seeds), 0), np.repeat(y_dev, len(seeds), 0)
        if y.shape[0] % len(seeds):
            raise ValueError(f"y has {y.shape[0]} label rows, not a multiple of {len(seeds)} seeds")
        seeds = seeds * (y.shape[0] // len(seeds))
        n_out = 1 if self.regression else int(self.n_labels or max(y.max(), y_dev.max()) + 1)
        dtype = torch.float32 if self.regression else torch.long
        features = torch.from_numpy(np.concatenate([X, X_dev]))
        labels = torch.from_numpy(np.concatenate([y, y_dev], axis=1)).to(dtype)
        train_idx, dev_idx = np.arange(len(X)), np.arange(len(X), len(X) + len(X_dev))
        weight, bias, self.best_dev_loss_, self.n_epochs_ = train_linear_probes(
            features, labels, train_idx, dev_idx, seeds, n_out, self.regression, self._config())
        self.coef_, self.intercept_ = weight.numpy(), bias.numpy()
        self.n_outputs_ = n_out
        return self

    def decision_function(self, X: ArrayLike) -> np.ndarray:
        """[n_runs, n, K] logits (or [n_runs, n, 1] regression outputs)."""
        X = np.asarray(X, np.float32)
        return np.einsum("nd,rdk->rnk", X, self.coef_) + self.intercept_[:, None, :]

    def predict(self, X: ArrayLike) -> np.ndarray:
        """[n_runs, n]: class ids or regression values, one row per run."""
        scores = self.decision_function(X)
        return scores[..., 0] if self.regression else scores.argmax(-1)

    def scores(self, X: ArrayLike, y: ArrayLike) -> np.ndarray:
        """Metric per run; `y` is [n] or [n_runs, n]."""
        predictions = self.predict(X)
        y = np.broadcast_to(np.atleast_2d(np.asarray(y)), predictions.shape)
        return np.array([probe_metric(p, t, self.regression) for p, t in zip(predictions, y)])

    def score(self, X: ArrayLike, y: ArrayLike) -> float:
        return float(self.scores(X, y).mean())


# ----------------------------------------------------------------------------- protocol on a dataset

def standardize(features: np.ndarray, train_idx: np.ndarray) -> np.ndarray:
    """z-score with the train rows' mean and std (constant columns keep scale 1)."""
    mean = features[train_idx].mean(0)
    std = features[train_idx].std(0)
    return ((features - mean) / np.where(std > 1e-8, std, 1.0)).astype(np.float32)


def flash_subsample(train_idx: np.ndarray, fraction: float | None, seed: int = 0) -> np.ndarray:
    """FlashHolmes: a fixed 1/32 of the train rows (at least 2), the same for every model and seed."""
    if fraction is None or fraction >= 1.0:
        return train_idx
    k = max(2, math.ceil(len(train_idx) * fraction))
    chosen = np.random.default_rng(seed).permutation(len(train_idx))[:k]
    return np.sort(train_idx[chosen])


def online_code_length(X: np.ndarray, y: np.ndarray, train_idx: np.ndarray, dev_idx: np.ndarray, n_labels: int, config: HolmesProbeConfig) -> dict:
    """Online code (Voita & Titov 2020) in bits, blocks at 2^-10 .. 2^-1 of the train rows in file order
    plus the final block to N; each block's probe is trained on everything before it (same protocol,
    all seeds at once) and codes the next block with log2-probabilities of plain logits."""
    n = len(train_idx)
    bounds = sorted({int(n * 2.0 ** -k) for k in range(10, 0, -1)} | {n})
    bounds = [b for b in bounds if b >= 1]
    seeds = list(config.seeds)
    Xt = torch.from_numpy(np.asarray(X, np.float32))
    Y = torch.from_numpy(np.repeat(np.asarray(y)[None], len(seeds), 0)).long()
    online = np.full(len(seeds), bounds[0] * math.log2(n_labels))
    for left, right in zip(bounds[:-1], bounds[1:]):
        weight, bias, _, _ = train_linear_probes(Xt, Y, train_idx[:left], dev_idx, seeds, n_labels, False, config)
        with torch.no_grad():
            block = torch.as_tensor(train_idx[left:right])
            logits = torch.baddbmm(bias[:, None, :], Xt[block].expand(len(seeds), -1, -1), weight)
            nats = F.cross_entropy(logits.reshape(-1, n_labels), Y[:, block].reshape(-1), reduction="none")
            online += nats.view(len(seeds), -1).sum(1).numpy() / math.log(2)
    uniform = n * math.log2(n_labels)
    return {"mdl_online_bits": float(online.mean()), "mdl_uniform_bits": uniform,
            "mdl_compression": float(uniform / online.mean())}


def evaluate_features(features: np.ndarray, labels: np.ndarray, splits: dict[str, np.ndarray], n_labels: int,
                      config: HolmesProbeConfig, label_seed: int = 0) -> pd.DataFrame:
    """Run the protocol on one feature matrix: one row per (control, seed) with the test metric.

    `splits` holds row indices for train/dev/test (train already Flash-subsampled if wanted). The
    randomised-label control permutes the labels of the whole file (all splits, as the reference does),
    with one permutation per seed, and trains in the same batch as the real runs.
    """
    regression = n_labels == 1
    seeds = list(config.seeds)
    label_rows = [np.repeat(labels[None], len(seeds), 0)]
    controls = ["none"] * len(seeds)
    if config.randomized_control:
        label_rows.append(np.stack([np.random.default_rng([label_seed, s]).permutation(labels) for s in seeds]))
        controls += ["randomization"] * len(seeds)
    Y = np.concatenate(label_rows)
    dtype = torch.float32 if regression else torch.long
    features = np.asarray(features, np.float32)
    if config.standardize:
        features = standardize(features, splits["train"])
        if regression:  # Pearson ignores an affine map of the target; Huber's budget does not (see config)
            train = labels[splits["train"]]
            Y = (Y - train.mean()) / (train.std() if train.std() > 0 else 1.0)
    weight, bias, dev_loss, epochs = train_linear_probes(
        torch.from_numpy(np.asarray(features, np.float32)), torch.from_numpy(Y).to(dtype),
        splits["train"], splits["dev"], seeds * (len(controls) // len(seeds)), 1 if regression else n_labels,
        regression, config)
    test = splits["test"]
    with torch.no_grad():
        out = torch.baddbmm(bias[:, None, :], torch.from_numpy(np.asarray(features[test], np.float32))
                            .expand(len(controls), -1, -1), weight).numpy()
    predictions = out[..., 0] if regression else out.argmax(-1)
    metric = "pearson" if regression else "f1_macro"
    rows = [{"control": control, "seed": seed, "metric": metric,
             "score": probe_metric(predictions[r], Y[r, test], regression),
             "best_dev_loss": float(dev_loss[r]), "epochs": int(epochs[r]), "n_train": len(splits["train"])}
            for r, (control, seed) in enumerate(zip(controls, seeds * (len(controls) // len(seeds))))]
    if config.mdl and not regression:  # on the (standardised) features the task probes used
        code = online_code_length(features, labels, splits["train"], splits["dev"], n_labels, config)
        rows += [{"control": "none", "seed": -1, "metric": key, "score": value, "n_train": len(splits["train"])}
                 for key, value in code.items()]  # seed -1: already the mean over seeds
    return pd.DataFrame(rows)
