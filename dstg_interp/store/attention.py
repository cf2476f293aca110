"""Streaming attention statistics for head analysis: per (layer, head), never a [T, T] map on disk.

The one accumulator of the toolkit: the store's summaries (attention.npz) and the head statistics of a batch
(``analysis.heads.head_summaries_from_cache``) are both ``AttentionAccumulator``; the one Jensen-Shannon
divergence is ``jensen_shannon``, in **bits** (log base 2, so it lies in [0, 1]) everywhere: the store's
``js_removal``, the heads' ``js_without_*`` and dstg-erase's ``attention_js``.

Over every valid (query, key) pair (both real tokens) of every sequence:
  mean, var, cov    of the logit terms as they enter softmax (DSTG: sem, ap, rp; baselines: content,
                    plus rp for RP-NeoBERT) -- float64 sums merged per sequence with Chan et al.'s
                    parallel update, so a million pairs do not lose precision to cancellation;
                    ``variance_over="query"`` takes each term minus its mean over the query's keys first
                    (what softmax sees), the default ``"pair"`` the terms as they are (the store's)
  offset_*          the attention pattern by relative offset key - query, clipped to +-max_offset:
                    offset_mean_weight = mean weight of a pair at that offset, offset_mass = mean
                    attention mass a query puts on that offset (sums to 1 over offsets)
  weight_sq_mean    mean squared attention weight over pairs (with offset_mean_weight: how much of the
                    pattern's variance relative offset alone explains)
  js_removal        mean over queries of the Jensen-Shannon divergence (bits) between the softmax of
                    all terms and the softmax with one term removed: how much the pattern depends on
                    that term. A term that is identically zero (RP bias at init) gives exactly 0.
                    (Stores written before the unit was bits say nothing of it in attention.json; their
                    nats are converted to bits on load, once, in ``AttentionSummaries.load``.)

    summaries = store.attention                 # AttentionSummaries
    summaries.mean.shape                        # [n_layers, n_heads, n_terms]
    summaries.to_dataframe()                    # one row per (layer, head, term)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dstg_interp.encoders.hooks import logit_terms

__all__ = ["AttentionAccumulator", "AttentionSummaries", "jensen_shannon", "logit_terms"]

ATTENTION_FILE, ATTENTION_DESCRIPTION = "attention.npz", "attention.json"
JS_UNIT = "bits"
VARIANCE_OVER = ("pair", "query")


class AttentionAccumulator:
    """Running float64 statistics of one model's attention, per (layer, head), over sequences (module docstring)."""

    def __init__(self, n_layers: int, n_heads: int, terms: list[str], max_offset: int, max_positions: int,
                 variance_over: str = "pair"):
        if variance_over not in VARIANCE_OVER:
            raise ValueError(f"variance_over must be 'query' or 'pair', got {variance_over!r}")
        n_terms, n_bins = len(terms), 2 * max_offset + 1
        self.terms, self.max_offset, self.variance_over = list(terms), max_offset, variance_over
        self.pairs = np.zeros(n_layers)  # valid (query, key) pairs seen per layer
        self.queries = np.zeros(n_layers)
        self.mean = np.zeros((n_layers, n_heads, n_terms))
        self.comoment = np.zeros((n_layers, n_heads, n_terms, n_terms))  # sum of centred outer products
        self.offset_weight = np.zeros((n_layers, n_heads, n_bins))
        self.offset_pairs = np.zeros((n_layers, n_bins))
        self.js_sum = np.zeros((n_layers, n_heads, n_terms))
        self.weight_sq_sum = np.zeros((n_layers, n_heads))  # for the R² of weights on offset (heads.py)
        positions = torch.arange(max_positions)
        # [T, T] bin of (key - query): 0 .. 2 * max_offset
        self.offset_bin = (positions[None, :] - positions[:, None]).clamp(-max_offset, max_offset) + max_offset

    @torch.no_grad()
    def update(self, layer: int, terms: list[torch.Tensor], pattern: torch.Tensor | None, lengths: list[int]) -> None:
        """terms: one [batch, head, T, T] tensor per term; pattern: [batch, head, T, T] (None: the softmax of
        the summed terms, in float64); lengths: real tokens of each right-padded sequence."""
        n_bins = 2 * self.max_offset + 1
        for b, n in enumerate(lengths):
            # one sequence at a time, cropped to its real tokens: no padding enters any statistic
            x = torch.stack([t[b, :, :n, :n] for t in terms], dim=-1).double().cpu()  # [H, n(query), n(key), K]
            # "query": softmax is blind to anything constant along a query's keys
            centred_in_query = x - x.mean(dim=2, keepdim=True) if self.variance_over == "query" else x
            flat = centred_in_query.reshape(x.shape[0], n * n, -1)  # [H, n*n, K]
            batch_mean = flat.mean(dim=1)  # [H, K]
            centred = flat - batch_mean[:, None, :]
            batch_comoment = centred.transpose(1, 2) @ centred  # [H, K, K]
            self._merge(layer, n * n, batch_mean.numpy(), batch_comoment.numpy())

            total = x.sum(dim=-1)  # [H, n, n]
            p = total.softmax(dim=-1)
            for k in range(x.shape[-1]):
                q = (total - x[..., k]).softmax(dim=-1)
                self.js_sum[layer, :, k] += jensen_shannon(p, q).sum(dim=-1).numpy()

            bins = self.offset_bin[:n, :n].reshape(-1)  # [n*n]
            weights = (p if pattern is None else pattern[b, :, :n, :n].double().cpu()).reshape(x.shape[0], -1)  # [H, n*n]
            per_bin = torch.zeros(x.shape[0], n_bins, dtype=torch.float64).index_add_(1, bins, weights)
            self.offset_weight[layer] += per_bin.numpy()
            self.weight_sq_sum[layer] += (weights**2).sum(dim=1).numpy()
            self.offset_pairs[layer] += np.bincount(bins.numpy(), minlength=n_bins)
            self.queries[layer] += n

    def _merge(self, layer: int, n_new: int, mean_new: np.ndarray, comoment_new: np.ndarray) -> None:
        n_old = self.pairs[layer]
        n_total = n_old + n_new
        delta = mean_new - self.mean[layer]  # [H, K]
        self.mean[layer] += delta * (n_new / n_total)
        self.comoment[layer] += comoment_new + delta[:, :, None] * delta[:, None, :] * (n_old * n_new / n_total)
        self.pairs[layer] = n_total

    def merge(self, other: "AttentionAccumulator") -> None:
        """Fold in the statistics of other sequences (another rank's share of a sharded extraction)."""
        if other.variance_over != self.variance_over:
            raise ValueError(f"cannot merge {other.variance_over!r} statistics into {self.variance_over!r} ones")
        for layer in range(len(self.pairs)):
            if other.pairs[layer]:
                self._merge(layer, other.pairs[layer], other.mean[layer], other.comoment[layer])
        self.queries += other.queries
        self.offset_weight += other.offset_weight
        self.offset_pairs += other.offset_pairs
        self.js_sum += other.js_sum
        self.weight_sq_sum += other.weight_sq_sum

    def arrays(self) -> dict[str, np.ndarray]:
        pairs = np.maximum(self.pairs, 1)[:, None, None, None]
        cov = self.comoment / pairs  # population covariance over pairs
        return {
            "pairs": self.pairs, "queries": self.queries, "mean": self.mean, "cov": cov,
            "var": np.diagonal(cov, axis1=-2, axis2=-1).copy(),
            "offsets": np.arange(-self.max_offset, self.max_offset + 1),
            "offset_pairs": self.offset_pairs,
            "offset_mean_weight": self.offset_weight / np.maximum(self.offset_pairs, 1)[:, None, :],
            "offset_mass": self.offset_weight / np.maximum(self.queries, 1)[:, None, None],
            "js_removal": self.js_sum / np.maximum(self.queries, 1)[:, None, None],
            "weight_sq_mean": self.weight_sq_sum / np.maximum(self.pairs, 1)[:, None],
        }

    def summaries(self) -> "AttentionSummaries":
        return AttentionSummaries(terms=list(self.terms), arrays=self.arrays(), variance_over=self.variance_over)

    def save(self, folder: Path) -> dict:
        arrays = self.arrays()
        np.savez(folder / ATTENTION_FILE, allow_pickle=False, **arrays)
        description = {
            "terms": self.terms,
            "max_offset": self.max_offset,
            "variance_over": self.variance_over,
            "js_unit": JS_UNIT,
            "arrays": {name: list(array.shape) for name, array in arrays.items()},
            "notes": "mean/var/cov over valid (query, key) pairs of the scaled logit terms; offsets = key - query "
                     "clipped to +-max_offset; js_removal in bits, mean over queries; all float64",
        }
        (folder / ATTENTION_DESCRIPTION).write_text(json.dumps(description, indent=1) + "\n")
        return {"file": ATTENTION_FILE, "description": ATTENTION_DESCRIPTION, "terms": self.terms}


def jensen_shannon(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The toolkit's one Jensen-Shannon divergence, in bits (in [0, 1]), between distributions on the last
    axis: [..., T] -> [...].  0 log 0 = 0; exactly 0 when p and q are equal; 0 (not NaN) for a row that is
    all NaN (the softmax of a query with no valid key)."""
    m = 0.5 * (p + q)
    kl_pm = (torch.xlogy(p, p) - torch.xlogy(p, m)).sum(dim=-1)
    kl_qm = (torch.xlogy(q, q) - torch.xlogy(q, m)).sum(dim=-1)
    return (0.5 * (kl_pm + kl_qm) / math.log(2.0)).nan_to_num(0.0).clamp(min=0.0)


@dataclass
class AttentionSummaries:
    """The arrays of attention.npz (see the module docstring) and the term names of their last axis."""

    terms: list[str]
    arrays: dict[str, np.ndarray]
    variance_over: str = "pair"

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    @classmethod
    def load(cls, folder: Path) -> "AttentionSummaries":
        description = json.loads((folder / ATTENTION_DESCRIPTION).read_text())
        with np.load(folder / ATTENTION_FILE, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        if description.get("js_unit") != JS_UNIT and "js_removal" in arrays:  # written in nats, before bits
            arrays["js_removal"] = arrays["js_removal"] / math.log(2.0)
        return cls(terms=description["terms"], arrays=arrays, variance_over=description.get("variance_over", "pair"))

    def to_dataframe(self):
        """One row per (layer, head, term): mean, var, js_removal (layer = block index)."""
        n_layers, n_heads, n_terms = self.arrays["mean"].shape
        layer, head, term = np.meshgrid(np.arange(n_layers), np.arange(n_heads), np.arange(n_terms), indexing="ij")
        return pd.DataFrame({
            "layer": layer.ravel(), "head": head.ravel(), "term": np.array(self.terms)[term.ravel()],
            "mean": self.arrays["mean"].ravel(), "var": self.arrays["var"].ravel(),
            "js_removal": self.arrays["js_removal"].ravel(),
        })
