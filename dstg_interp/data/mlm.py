"""Batching and masked-language-model corruption, as in NeoBERT (20% masking, all -> [MASK]).

    from dstg_interp.data import collate, mask_tokens
    input_ids, attention_mask, special_mask = collate([sequences[i]["input_ids"] for i in batch])
    generator = torch.Generator().manual_seed(0)
    masked_ids, labels = mask_tokens(input_ids, special_mask, generator, vocab_size=8192)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)

`strategy="80-10-10"` gives BERT's corruption instead: of the selected tokens 80% become [MASK], 10% a
random non-special token, 10% stay as they are.
"""

from __future__ import annotations

import numpy as np
import torch

from dstg_interp.data.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index


def pad_batch(rows, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The one right-padding routine: id (or label) sequences -- lists, arrays or CPU tensors -- to
    values LongTensor[B, T] filled with ``pad_id`` past each row's end, and mask BoolTensor[B, T] (True on a
    row's own entries).  ``collate``, the encoders' ``pad_batch`` and the evaluation batches all call it."""
    if len(rows) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    lengths = torch.tensor([len(row) for row in rows])
    values = torch.full((len(rows), int(lengths.max())), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        values[i, :len(row)] = torch.as_tensor(np.asarray(row), dtype=torch.long)
    return values, torch.arange(values.shape[1])[None, :] < lengths[:, None]


def collate(sequences_ids, pad_id: int = PAD_ID,
            special_ids: tuple[int, ...] = (PAD_ID, CLS_ID, SEP_ID, MASK_ID)):
    """Right-pad a list of 1-D id arrays (numpy, lists or tensors).

    Returns input_ids LongTensor[B, T], attention_mask BoolTensor[B, T] (True on real tokens) and
    special_mask BoolTensor[B, T] (True on padding and on ids in `special_ids`: never masked).
    """
    if len(sequences_ids) == 0:
        raise ValueError("collate needs at least one sequence")
    input_ids, attention_mask = pad_batch(sequences_ids, pad_id)
    special_mask = ~attention_mask | torch.isin(input_ids, torch.tensor(special_ids))
    return input_ids, attention_mask, special_mask


def pad_width_to_multiple(input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor,
                           multiple: int, limit: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad a masked batch to the next multiple of ``multiple`` positions, at most ``limit`` (the
    longest a batch may be): [PAD] ids, False in the mask, ``IGNORE_INDEX`` labels, so no real token, mask
    or loss term changes.  A batch already that wide (or wider) is returned as it is.

    Padding after masking keeps the masks those of the unpadded batch.  Used under bf16 (``TrainConfig.
    pad_to_multiple_of``): oneDNN builds a kernel for each new matmul shape it meets, so batch widths that
    come in a few sizes save that cost on most steps.
    """
    if multiple < 1:
        raise ValueError(f"pad_width_to_multiple: multiple must be a positive integer, got {multiple}")
    width = input_ids.shape[1]
    extra = min(-(-width // multiple) * multiple, max(limit, width)) - width
    if extra <= 0:
        return input_ids, attention_mask, labels
    pad = torch.nn.functional.pad
    return (pad(input_ids, (0, extra), value=PAD_ID), pad(attention_mask, (0, extra), value=False),
            pad(labels, (0, extra), value=IGNORE_INDEX))


def mask_tokens(input_ids: torch.Tensor, special_mask: torch.Tensor, generator: torch.Generator,
                mask_prob: float = 0.2, mask_token_id: int = MASK_ID, vocab_size: int | None = None,
                strategy: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """Select each non-special token with probability `mask_prob` (at least one per sequence that has a
    non-special token) and corrupt it. Returns (masked_ids, labels), labels = -100 where not selected.
    Deterministic given the generator's state; draws happen on the generator's device."""
    if strategy not in ("all", "80-10-10"):
        raise ValueError(f"strategy must be 'all' or '80-10-10', got {strategy!r}")
    if strategy == "80-10-10" and vocab_size is None:
        raise ValueError("strategy='80-10-10' needs vocab_size to draw random replacement tokens")
    eligible = ~special_mask.to(torch.bool)
    scores = torch.rand(input_ids.shape, generator=generator, device=generator.device).to(input_ids.device)
    selected = (scores < mask_prob) & eligible
    # Guarantee one target per row: pick the eligible position with the highest score (a uniform choice).
    needs_one = eligible.any(dim=1) & ~selected.any(dim=1)
    if needs_one.any():
        forced = scores.masked_fill(~eligible, -1.0).argmax(dim=1)
        rows = needs_one.nonzero(as_tuple=True)[0]
        selected[rows, forced[rows]] = True
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    masked_ids = input_ids.clone()
    if strategy == "all":
        masked_ids[selected] = mask_token_id
        return masked_ids, labels
    corruption = torch.rand(input_ids.shape, generator=generator, device=generator.device).to(input_ids.device)
    to_mask = selected & (corruption < 0.8)
    to_random = selected & (corruption >= 0.8) & (corruption < 0.9)
    # random replacements skip the special ids so no fake [CLS]/[PAD] appears mid-sequence
    random_ids = torch.randint(len(SPECIAL_TOKENS), vocab_size, input_ids.shape, generator=generator,
                               device=generator.device).to(input_ids.device)
    masked_ids[to_mask] = mask_token_id
    masked_ids[to_random] = random_ids[to_random]
    return masked_ids, labels
