"""Evaluating a model on sequences longer than it was trained on: MLM by position bucket.

    from dstg_interp.analysis.length_eval import long_windows, mlm_by_position
    windows = long_windows(documents, model.tokenizer, length=256)        # full 256-token windows only
    mlm = mlm_by_position(long_model, windows, bucket_width=32)           # loss / accuracy per bucket
    chunked = mlm_by_position(model, windows, chunk_length=128)           # same masks, 128-token chunks
    store = extract(long_model, windows, "runs/store-256")
    ranges = probe_by_range(store, trained_length=128)                     # probes/by_range.py: R² inside vs beyond

``long_windows`` cuts held-out documents into windows that start at sentence starts (as in training) and
keeps only those filled to exactly ``length`` tokens, so every bucket has the same tokens for every model.

``mlm_by_position`` masks ``mask_rate`` of the non-special tokens (all to [MASK], seeded per draw: every
model sees the same masks) and reports cross-entropy and top-1 accuracy of the masked tokens grouped by
their position in the window; the special ids are the model's own (``dstg_interp.encoders``).  With
``chunk_length`` the masked window is instead cut into consecutive chunks of that many tokens (each with
its own [CLS]/[SEP]) and run chunk by chunk: the reference a user without extrapolation has -- the same
predictions, with only the context a chunk holds.

The probes by range (inside vs beyond the trained length) are ``probes.by_range.probe_by_range``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from dstg_interp.progress import progress_bar

from ..data.mlm import collate, mask_tokens
from ..data.structure import StructuredSequences, build_structured_sequences
from ..encoders import EncoderError, SpecialTokens, open_encoder


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
    """Masked-token loss and accuracy per position bucket: columns bucket_start, bucket_end, n_masked, loss, accuracy.

    model: anything ``open_encoder`` takes that has an MLM head."""
    encoder = open_encoder(model)
    special = encoder.special
    if special.mask is None:
        raise EncoderError(f"{encoder.name}: the tokenizer has no [MASK] token; MLM evaluation needs one")
    lengths = sequences.lengths
    if len(lengths) == 0:
        raise ValueError("no sequences to evaluate")
    window = int(lengths.max())
    limit = chunk_length if chunk_length is not None else window
    if limit > encoder.max_positions:
        raise ValueError(f"sequences of {limit} tokens exceed the model's max_positions={encoder.max_positions}; "
                         "extend it first (dstg_interp.analysis.extrapolate) or pass chunk_length")
    if chunk_length is not None and chunk_length < 3:
        raise ValueError(f"chunk_length must be at least 3, got {chunk_length}")
    if bucket_width < 1:
        raise ValueError(f"bucket_width must be >= 1, got {bucket_width}")
    n_buckets = -(-window // bucket_width)
    loss_sum, correct, count = np.zeros(n_buckets), np.zeros(n_buckets), np.zeros(n_buckets)
    batches = [np.arange(start, min(start + batch_size, len(lengths))) for start in range(0, len(lengths), batch_size)]
    for draw in range(n_draws):
        generator = torch.Generator().manual_seed(seed * 1000 + draw)  # masks depend on the data only, not the model
        for batch in progress_bar(batches, desc=f"mlm draw {draw}", disable=not progress, leave=False):
            ids, attention_mask, is_special = collate([sequences[int(i)]["input_ids"] for i in batch], special.pad,
                                                      special.ids)
            masked, labels = mask_tokens(ids, is_special, generator, mask_prob=mask_rate, mask_token_id=special.mask)
            positions = torch.arange(ids.shape[1]).expand_as(ids)
            if chunk_length is not None:
                masked, attention_mask, labels, positions = _chunk(masked, attention_mask, labels, chunk_length, special)
            with torch.inference_mode():
                logits = encoder.mlm_logits(masked, attention_mask).float().cpu()
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


def _chunk(masked, attention_mask, labels, chunk_length: int, special: SpecialTokens):
    """Cut each (right-padded) row's content into chunks of chunk_length - 2 tokens, each wrapped in
    [CLS] ... [SEP]; returns the chunk batch and each chunk token's position in the original window."""
    capacity = chunk_length - 2
    rows, masks, row_labels, row_positions = [], [], [], []
    for i in range(masked.shape[0]):
        n = int(attention_mask[i].sum())
        content = np.arange(1, n - 1)  # drop the window's own [CLS] and [SEP]
        for start in range(0, len(content), capacity):
            span = content[start:start + capacity]
            rows.append(torch.cat([torch.tensor([special.cls]), masked[i, span], torch.tensor([special.sep])]))
            row_labels.append(torch.cat([torch.tensor([-100]), labels[i, span], torch.tensor([-100])]))
            row_positions.append(torch.cat([torch.tensor([0]), torch.as_tensor(span), torch.tensor([0])]))
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), special.pad, dtype=torch.long)
    out_labels = torch.full((len(rows), width), -100, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for j, (row, lab, pos) in enumerate(zip(rows, row_labels, row_positions)):
        tokens[j, :len(row)], out_labels[j, :len(row)], positions[j, :len(row)] = row, lab, pos
        masks.append(len(row))
    chunk_mask = torch.arange(width)[None, :] < torch.tensor(masks)[:, None]
    return tokens, chunk_mask, out_labels, positions
