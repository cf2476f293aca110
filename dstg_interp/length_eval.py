"""Evaluating a model on sequences longer than it was trained on: MLM by position bucket, probes by range.

    from dstg_interp.length_eval import long_windows, mlm_by_position, probe_by_range
    windows = long_windows(documents, model.tokenizer, length=256)        # full 256-token windows only
    mlm = mlm_by_position(long_model, windows, bucket_width=32)           # loss / accuracy per bucket
    chunked = mlm_by_position(model, windows, chunk_length=128)           # same masks, 128-token chunks
    store = extract(long_model, windows, "runs/store-256")
    ranges = probe_by_range(store, trained_length=128)                     # R² inside vs beyond 128

``long_windows`` cuts held-out documents into windows that start at sentence starts (as in training) and
keeps only those filled to exactly ``length`` tokens, so every bucket has the same tokens for every model.

``mlm_by_position`` masks ``mask_rate`` of the non-special tokens (all to [MASK], seeded per draw: every
model sees the same masks) and reports cross-entropy and top-1 accuracy of the masked tokens grouped by
their position in the window.  With ``chunk_length`` the masked window is instead cut into consecutive
chunks of that many tokens (each with its own [CLS]/[SEP]) and run chunk by chunk: the reference a user
without extrapolation has -- the same predictions, with only the context a chunk holds.

``probe_by_range`` fits a ridge probe (``probes.ridge.fit_ridge_grid``: documents split into train/test,
penalty by grouped CV) on token position and sentence index, and reports held-out R² separately for the
tokens inside the trained range and beyond it.  ``fit_on="all"`` trains on every position (is position
still decodable out there?); ``fit_on="inside"`` trains on positions inside the trained range only (does
the representation continue the in-range code, so that an in-range probe transfers?).  R² is computed
within each range (against that range's own mean), so a probe whose predictions beyond the range are
merely offset scores below 0 there; ``mae`` (mean absolute error, in positions or sentences) says by how much.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .data.mlm import collate, mask_tokens
from .data.structure import StructuredSequences, build_structured_sequences
from .data.tokenizer import CLS_ID, PAD_ID, SEP_ID

PROBE_TARGETS = ("token_position", "sentence_index")


def long_windows(documents, tokenizer, length: int, max_windows: int | None = None, seed: int = 0) -> StructuredSequences:
    """Windows of exactly ``length`` tokens cut from ``documents`` (a seeded subset of ``max_windows``)."""
    if length < 3:
        raise ValueError(f"length must be at least 3, got {length}")
    sequences = build_structured_sequences(list(documents), tokenizer, max_length=length, windows=True)
    full = np.flatnonzero(sequences.lengths == length)
    if full.size == 0:
        longest = int(sequences.lengths.max()) if len(sequences) else 0
        raise ValueError(f"no document is long enough for a {length}-token window (the longest gives {longest} tokens); "
                         f"the extrapolation test needs documents longer than the training length: pass longer documents")
    if max_windows is not None and full.size > max_windows:
        full = np.sort(np.random.default_rng(seed).choice(full, size=max_windows, replace=False))
    return select_sequences(sequences, full)


def select_sequences(sequences: StructuredSequences, indices) -> StructuredSequences:
    """The sequences at ``indices``, as a new StructuredSequences (documents table kept)."""
    indices = np.asarray(indices, dtype=np.int64)
    parts = [np.arange(sequences.offsets[i], sequences.offsets[i + 1]) for i in indices]
    rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    lengths = sequences.lengths[indices]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return StructuredSequences({name: array[rows] for name, array in sequences.arrays.items()}, offsets,
                               dict(sequences.meta))


def mlm_by_position(model, sequences: StructuredSequences, bucket_width: int = 32, mask_rate: float = 0.15,
                    n_draws: int = 2, seed: int = 0, batch_size: int = 16, chunk_length: int | None = None,
                    progress: bool = False) -> pd.DataFrame:
    """Masked-token loss and accuracy per position bucket: columns bucket_start, bucket_end, n_masked, loss, accuracy."""
    lengths = sequences.lengths
    if len(lengths) == 0:
        raise ValueError("no sequences to evaluate")
    window = int(lengths.max())
    limit = chunk_length if chunk_length is not None else window
    if limit > model.config.max_positions:
        raise ValueError(f"sequences of {limit} tokens exceed the model's max_positions={model.config.max_positions}; "
                         "extend it first (dstg_interp.extrapolate) or pass chunk_length")
    if chunk_length is not None and chunk_length < 3:
        raise ValueError(f"chunk_length must be at least 3, got {chunk_length}")
    if bucket_width < 1:
        raise ValueError(f"bucket_width must be >= 1, got {bucket_width}")
    device = next(model.parameters()).device
    n_buckets = -(-window // bucket_width)
    loss_sum, correct, count = np.zeros(n_buckets), np.zeros(n_buckets), np.zeros(n_buckets)
    batches = [np.arange(start, min(start + batch_size, len(lengths))) for start in range(0, len(lengths), batch_size)]
    for draw in range(n_draws):
        generator = torch.Generator().manual_seed(seed * 1000 + draw)  # masks depend on the data only, not the model
        for batch in tqdm(batches, desc=f"mlm draw {draw}", disable=not progress, leave=False):
            ids, attention_mask, special = collate([sequences[int(i)]["input_ids"] for i in batch])
            masked, labels = mask_tokens(ids, special, generator, mask_prob=mask_rate)
            positions = torch.arange(ids.shape[1]).expand_as(ids)
            if chunk_length is not None:
                masked, attention_mask, labels, positions = _chunk(masked, attention_mask, labels, chunk_length)
            with torch.inference_mode():
                logits = model(masked.to(device), attention_mask=attention_mask.to(device)).logits.float().cpu()
            selected = labels != -100
            token_loss = F.cross_entropy(logits[selected], labels[selected], reduction="none").numpy()
            hit = (logits[selected].argmax(-1) == labels[selected]).numpy()
            bucket = positions[selected].numpy() // bucket_width
            np.add.at(loss_sum, bucket, token_loss)
            np.add.at(correct, bucket, hit)
            np.add.at(count, bucket, 1)
    starts = np.arange(n_buckets) * bucket_width
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({"bucket_start": starts, "bucket_end": np.minimum(starts + bucket_width, window),
                             "n_masked": count.astype(int), "loss": loss_sum / count, "accuracy": correct / count})


def _chunk(masked, attention_mask, labels, chunk_length: int):
    """Cut each (right-padded) row's content into chunks of chunk_length - 2 tokens, each wrapped in
    [CLS] ... [SEP]; returns the chunk batch and each chunk token's position in the original window."""
    capacity = chunk_length - 2
    rows, masks, row_labels, row_positions = [], [], [], []
    for i in range(masked.shape[0]):
        n = int(attention_mask[i].sum())
        content = np.arange(1, n - 1)  # drop the window's own [CLS] and [SEP]
        for start in range(0, len(content), capacity):
            span = content[start:start + capacity]
            rows.append(torch.cat([torch.tensor([CLS_ID]), masked[i, span], torch.tensor([SEP_ID])]))
            row_labels.append(torch.cat([torch.tensor([-100]), labels[i, span], torch.tensor([-100])]))
            row_positions.append(torch.cat([torch.tensor([0]), torch.as_tensor(span), torch.tensor([0])]))
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    out_labels = torch.full((len(rows), width), -100, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for j, (row, lab, pos) in enumerate(zip(rows, row_labels, row_positions)):
        tokens[j, :len(row)], out_labels[j, :len(row)], positions[j, :len(row)] = row, lab, pos
        masks.append(len(row))
    chunk_mask = torch.arange(width)[None, :] < torch.tensor(masks)[:, None]
    return tokens, chunk_mask, out_labels, positions


def probe_by_range(store, trained_length: int, targets=PROBE_TARGETS, layers=None, subspaces=None,
                   fit_on=("all", "inside"), max_tokens: int | None = None, test_fraction: float = 0.25,
                   n_splits: int = 5, seed: int = 0) -> pd.DataFrame:
    """Held-out R² and MAE of ridge probes, inside vs beyond ``trained_length``: one row per (layer, subspace,
    target, fit_on, range) with r2, mae, n_test, alpha.  ``max_tokens``: a seeded subsample of the
    (non-special) tokens."""
    from probes.ridge import DEFAULT_ALPHAS, fit_ridge_grid
    from probes.splits import grouped_train_test_split

    labels = store.labels
    if max_tokens is not None:
        tokens = store.subsample(max_tokens, seed=seed, exclude_special=True)
    else:
        tokens = np.flatnonzero(~labels["is_special"].to_numpy())
    position = labels["token_position"].to_numpy()[tokens]
    if position.max() < trained_length:
        raise ValueError(f"no token of the store lies beyond the trained length {trained_length} "
                         f"(the longest position is {int(position.max())}); extract longer windows")
    groups = labels["doc_index"].to_numpy()[tokens]
    train_idx, test_idx = grouped_train_test_split(groups, test_fraction=test_fraction, seed=seed)
    inside_test = position[test_idx] < trained_length
    layers = list(layers) if layers is not None else list(store.layers)
    subspaces = list(subspaces) if subspaces is not None else list(store.subspaces)
    values = {name: labels[name].to_numpy()[tokens].astype(np.float64) for name in targets}
    features = {(layer, sub): (lambda layer=layer, sub=sub: np.asarray(store.states(layer, sub)[tokens]))
                for layer in layers for sub in subspaces}
    rows = []
    for fit in fit_on:
        if fit not in ("all", "inside"):
            raise ValueError(f"fit_on must be 'all' or 'inside', got {fit!r}")
        train = train_idx if fit == "all" else train_idx[position[train_idx] < trained_length]
        fitted = fit_ridge_grid(features, values, groups, train, test_idx, alphas=DEFAULT_ALPHAS, n_splits=n_splits,
                                seed=seed, keep_predictions=True)
        for record in fitted.itertuples():
            y_true = values[record.target][test_idx]
            for name, part in (("inside", inside_test), ("beyond", ~inside_test)):
                rows.append({"layer": record.key[0], "subspace": record.key[1], "target": record.target,
                             "fit_on": fit, "range": name, "r2": _r2(y_true[part], record.y_pred_test[part]),
                             "mae": float(np.abs(y_true[part] - record.y_pred_test[part]).mean()) if part.any() else np.nan,
                             "n_test": int(part.sum()), "alpha": record.alpha})
    return pd.DataFrame(rows)


def _r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    if y_true.size < 2:
        return float("nan")
    total = ((y_true - y_true.mean()) ** 2).sum()
    return float(1.0 - ((y_true - y_pred) ** 2).sum() / total) if total > 0 else float("nan")
