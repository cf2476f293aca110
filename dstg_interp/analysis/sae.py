"""Sparse autoencoders on one stream: EleutherAI's sparsify (``eai-sparsify``) TopK SAE trained on the states of
one layer x subspace of an activation store.

    from dstg_interp.analysis.sae import SAEConfig, train_sae
    trained = train_sae(store, 3, "ap", SAEConfig(num_latents=64, k=4, steps=2000))   # store: an ActivationStore
    trained.fvu, trained.fvu_pca, trained.fvu_mean     # held-out FVU beside rank-k PCA and the mean (1.0)
    trained.curve                                      # DataFrame: step, fvu (the training batch's), dead share
    codes = trained.encode(store.states(3, "ap")[rows]) # [n, num_latents] float32: the latents' activations
    trained.save("saes/dstg-l3-ap")                    # sparsify's own folder (sae.safetensors, cfg.json) + ours
    SparseCoder.load_from_disk("saes/dstg-l3-ap")      # read back by the library itself

Install: ``pip install -e ".[sae]"`` (``eai-sparsify``; it adds four small packages beside the pinned CPU torch).
Why sparsify and not SAELens, and what each needed from us: docs/field-tools.md.

What sparsify gives: the TopK sparse coder (``SparseCoder``: encoder, unit-norm decoder, pre-encoder bias,
its FVU and AuxK losses, ``save_to_disk``).  What is ours: the loop.  sparsify's ``Trainer`` reads activations
only by running a Hugging Face ``PreTrainedModel`` on token ids with forward hooks (``model.base_model``,
``dummy_inputs``, no attention mask), so it cannot train on a store; the loop here does what its hook body does
for one hookpoint (decoder bias set to the training mean at step 0, decoder rows kept at unit norm, the
gradient parallel to them removed, FVU + ``auxk_alpha`` * AuxK over latents dead for ``dead_tokens`` tokens)
with Adam at sparsify's learning-rate rule, over rows of the store.

Tokens: every token of the store but [CLS] / [SEP] (as the position probes), split by whole documents
(``test_fraction`` of them held out, a seeded draw); the held-out FVU is sum ||x - x_hat||^2 over sum
||x - mean||^2 on the held-out tokens.  Two references on the same tokens: ``fvu_mean`` (the training mean,
about 1) and ``fvu_pca`` (the best k-dimensional linear reconstruction: the top-k principal components of the
training tokens), so a number says whether the sparse code beats a dense code of the same size.  The states
are scaled by one number (mean squared centred norm = d), which FVU does not see; ``encode`` applies it.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp.config import ConfigIO
from dstg_interp.encoders.hooks import DSTG_SUBSPACES
from dstg_interp.io import written_atomically
from dstg_interp.store import ActivationStore

try:  # the [sae] extra; everything but training imports without it
    # sparsify prints a line to stdout on import when triton is missing (always on CPU): kept out of our commands'
    # output, where stdout is a result
    with contextlib.redirect_stdout(io.StringIO()):
        import sparsify
        from sparsify import SparseCoder, SparseCoderConfig
except ImportError:  # pragma: no cover - exercised only where the extra is missing
    sparsify = None

STREAMS = DSTG_SUBSPACES  # sem, ap (DSTG), full (every model)
SAE_FILES = ("sae.safetensors", "cfg.json", "sae_config.json", "metrics.json")


class SAEError(ValueError):
    """Bad input to the SAE code: an unknown stream, a store without the stream asked for, the extra missing."""


@dataclass
class SAEConfig(ConfigIO):
    """How one SAE is trained; saved next to it (``sae_config.json``).

    Args:
        num_latents: dictionary size.  k: latents active per token (TopK).
        steps, batch_size: Adam steps over batches of training tokens drawn with replacement.
        lr: Adam's learning rate; None = sparsify's rule, 2e-4 / sqrt(num_latents / 2^14).
        auxk_alpha: weight of the AuxK loss on latents that fired on none of the last ``dead_tokens`` tokens.
        max_tokens: a seeded subsample of the training tokens (None: all of them).
        test_fraction: share of documents held out for the reported FVU.
        log_every: steps between the curve's points.  seed: split, initialisation and batches.
    """

    num_latents: int = 64
    k: int = 4
    steps: int = 2000
    batch_size: int = 1024
    lr: float | None = None
    auxk_alpha: float = 1 / 32
    dead_tokens: int = 200_000
    max_tokens: int | None = None
    test_fraction: float = 0.2
    log_every: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_latents", "k", "steps", "batch_size", "dead_tokens", "log_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SAEError(f"SAEConfig.{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.k > self.num_latents:
            raise SAEError(f"SAEConfig.k ({self.k}) cannot exceed num_latents ({self.num_latents})")
        if not 0.0 < self.test_fraction < 1.0:
            raise SAEError(f"SAEConfig.test_fraction must lie in (0, 1), got {self.test_fraction}")
        if self.lr is not None and not self.lr > 0:
            raise SAEError(f"SAEConfig.lr must be positive, got {self.lr}")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else 2e-4 / (self.num_latents / 2**14) ** 0.5


@dataclass
class TrainedSAE:
    """An SAE trained on one layer x stream, and how well it reconstructs held-out tokens."""

    sae: SparseCoder
    config: SAEConfig
    layer: object
    stream: str
    scale: float  # the states are multiplied by this before the SAE reads them
    train_rows: np.ndarray  # store rows of the training and held-out tokens
    test_rows: np.ndarray
    curve: pd.DataFrame  # step, fvu (training batch), dead_share
    fvu: float  # held-out
    fvu_pca: float  # held-out FVU of the top-k principal components of the training tokens
    fvu_mean: float  # held-out FVU of the training mean
    seconds: float
    facts: dict = field(default_factory=dict)  # model name, store, versions

    @torch.no_grad()
    def encode(self, states) -> np.ndarray:
        """[n, num_latents] float32 activations of the latents (zero but for each token's top k)."""
        x = torch.as_tensor(np.asarray(states, dtype=np.float32)) * self.scale
        codes = torch.zeros(len(x), self.sae.num_latents)
        for start in range(0, len(x), 65_536):
            top_acts, top_indices, _ = self.sae.encode(x[start:start + 65_536])
            codes[start:start + 65_536].scatter_(1, top_indices, top_acts)
        return codes.numpy()

    def metrics(self) -> dict:
        return {"layer": self.layer, "stream": self.stream, "d_in": self.sae.d_in, "num_latents": self.sae.num_latents,
                "k": self.config.k, "fvu": self.fvu, "fvu_pca": self.fvu_pca, "fvu_mean": self.fvu_mean,
                "final_train_fvu": float(self.curve.fvu.iloc[-1]), "dead_share": float(self.curve.dead_share.iloc[-1]),
                "scale": self.scale, "n_train": len(self.train_rows), "n_test": len(self.test_rows),
                "seconds": round(self.seconds, 2), **self.facts}

    def save(self, folder: str | Path) -> Path:
        """sparsify's folder (``sae.safetensors``, ``cfg.json``: ``SparseCoder.load_from_disk`` reads it) plus
        ``sae_config.json`` and ``metrics.json`` (held-out FVU, scale, versions); written aside, then renamed."""
        folder = Path(folder)
        with written_atomically(folder, owned=lambda path: _is_sae_folder(path), kind="SAE folder") as tmp:
            self.sae.save_to_disk(tmp)
            self.config.to_json(tmp / "sae_config.json")
            (tmp / "metrics.json").write_text(json.dumps(self.metrics(), indent=1, default=str) + "\n")
        return folder


def _is_sae_folder(path: Path) -> bool:
    return path.is_dir() and {p.name for p in path.iterdir()} <= set(SAE_FILES)


def check_stream(stream: str, available, where: str) -> None:
    """One clear SAEError for a stream the SAE code does not know, or one ``where`` (a store, a model) lacks."""
    if stream not in STREAMS:
        raise SAEError(f"unknown stream {stream!r}: an SAE reads one of {', '.join(STREAMS)} "
                       "(sem / ap: DSTG's semantic and AP streams; full: any model's state)")
    if stream not in available:
        raise SAEError(f"{where} has no {stream!r} stream (it has {', '.join(available)}): "
                       f"{'only DSTG has separate sem / ap streams; read full' if 'full' in available else 'pick one it has'}")


def document_split(doc_index: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) positions into ``doc_index``, whole documents on each side (a seeded draw of documents)."""
    documents = np.unique(doc_index)
    if len(documents) < 2:
        raise SAEError(f"an SAE's held-out FVU needs tokens of at least 2 documents, got {len(documents)}")
    n_test = min(max(int(round(test_fraction * len(documents))), 1), len(documents) - 1)
    held_out = np.random.default_rng(seed).permutation(documents)[:n_test]
    is_test = np.isin(doc_index, held_out)
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def fvu(x: np.ndarray, reconstruction: np.ndarray) -> float:
    """Fraction of variance unexplained: sum ||x - x_hat||^2 / sum ||x - mean(x)||^2."""
    x = np.asarray(x, dtype=np.float64)
    return float(((x - reconstruction) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())


def pca_fvu(train: np.ndarray, test: np.ndarray, k: int) -> float:
    """Held-out FVU of the best rank-k linear code: the training mean plus the top-k principal components."""
    mean = train.mean(0)
    _, _, vt = np.linalg.svd(train - mean, full_matrices=False)
    basis = vt[:k]
    return fvu(test, mean + (test - mean) @ basis.T @ basis)


def train_sae(store: ActivationStore, layer, stream: str, config: SAEConfig | None = None) -> TrainedSAE:
    """Train a TopK SAE (sparsify's ``SparseCoder``) on ``stream`` of ``layer`` in ``store`` (module doc)."""
    config = config or SAEConfig()
    check_stream(stream, store.subspaces, f"the store {store.directory} ({store.model_name or 'its model'})")
    if sparsify is None:
        raise SAEError('the SAE code needs EleutherAI\'s sparsify: pip install -e ".[sae]" (eai-sparsify)')
    states = store.states(layer, stream)
    labels = store.labels
    rows = np.flatnonzero(~labels.is_special.to_numpy())
    train, test = document_split(labels.doc_index.to_numpy()[rows], config.test_fraction, config.seed)
    train_rows, test_rows = rows[train], rows[test]
    if config.max_tokens is not None and config.max_tokens < len(train_rows):
        chosen = np.random.default_rng(config.seed).choice(len(train_rows), config.max_tokens, replace=False)
        train_rows = train_rows[np.sort(chosen)]
    facts = {"model": store.model_name, "store": str(store.directory), "sparsify": sparsify.__version__,
             "torch": torch.__version__}
    return train_sae_on_states(np.asarray(states[train_rows], dtype=np.float32),
                               np.asarray(states[test_rows], dtype=np.float32), config, layer, stream,
                               train_rows, test_rows, facts)


def train_sae_on_states(train: np.ndarray, test: np.ndarray, config: SAEConfig, layer=None, stream: str = "full",
                        train_rows=None, test_rows=None, facts: dict | None = None) -> TrainedSAE:
    """The loop of ``train_sae`` on states already read: ``train`` / ``test`` [n, d] float32."""
    if sparsify is None:
        raise SAEError('the SAE code needs EleutherAI\'s sparsify: pip install -e ".[sae]" (eai-sparsify)')
    started = time.perf_counter()
    d_in = train.shape[1]
    centred = train - train.mean(0)
    scale = float(np.sqrt(d_in / max((centred.astype(np.float64) ** 2).sum(1).mean(), 1e-30)))
    x_train = torch.from_numpy(train * scale)
    generator = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)  # SparseCoder draws its encoder from the global generator
    sae = SparseCoder(d_in, SparseCoderConfig(num_latents=config.num_latents, k=config.k, normalize_decoder=True),
                      device="cpu", dtype=torch.float32)
    sae.b_dec.data = x_train.mean(0)  # sparsify's Trainer: pre-activations centred at initialisation
    optimizer = torch.optim.Adam(sae.parameters(), lr=config.learning_rate)
    since_fired = torch.zeros(config.num_latents, dtype=torch.long)
    points = []
    for step in range(1, config.steps + 1):
        batch = x_train[torch.randint(len(x_train), (config.batch_size,), generator=generator)]
        dead = since_fired > config.dead_tokens
        out = sae(batch, dead_mask=dead if config.auxk_alpha > 0 else None)
        loss = out.fvu + config.auxk_alpha * out.auxk_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sae.remove_gradient_parallel_to_decoder_directions()
        optimizer.step()
        sae.set_decoder_norm_to_unit_norm()
        fired = torch.zeros(config.num_latents, dtype=torch.bool)
        fired[out.latent_indices.flatten()] = True
        since_fired = torch.where(fired, 0, since_fired + config.batch_size)
        if step % config.log_every == 0 or step in (1, config.steps):
            points.append({"step": step, "fvu": out.fvu.item(), "dead_share": float(dead.float().mean())})
    trained = TrainedSAE(sae.eval(), config, layer, stream, scale,
                         np.asarray(train_rows if train_rows is not None else np.arange(len(train))),
                         np.asarray(test_rows if test_rows is not None else np.arange(len(test))),
                         pd.DataFrame(points), np.nan, np.nan, np.nan, 0.0, dict(facts or {}))
    with torch.no_grad():
        x_test = torch.from_numpy(test * scale)
        reconstruction = sae(x_test).sae_out.numpy() / scale
    trained.fvu = fvu(test, reconstruction)
    trained.fvu_pca = pca_fvu(train.astype(np.float64), test.astype(np.float64), min(config.k, d_in))
    trained.fvu_mean = fvu(test, np.broadcast_to(train.mean(0), test.shape))
    trained.seconds = time.perf_counter() - started
    return trained
