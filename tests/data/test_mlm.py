"""Collation and MLM masking: rate, specials untouched, determinism, at least one target per row."""

import numpy as np
import pytest
import torch

from dstg_interp.data import CLS_ID, IGNORE_INDEX, MASK_ID, PAD_ID, SEP_ID, collate, mask_tokens


def test_collate_pads_right_and_marks_specials():
    input_ids, attention, special = collate([np.array([CLS_ID, 7, 8, SEP_ID]), [CLS_ID, 9, SEP_ID]])
    assert input_ids.tolist() == [[CLS_ID, 7, 8, SEP_ID], [CLS_ID, 9, SEP_ID, PAD_ID]]
    assert attention.tolist() == [[True] * 4, [True, True, True, False]]
    assert special.tolist() == [[True, False, False, True], [True, False, True, True]]
    assert input_ids.dtype == torch.long and attention.dtype == torch.bool


def _padded_by_hand(rows, fill):
    """The three routines the toolkit had before data.mlm.pad_batch, written out: one row at a time."""
    width = max(len(row) for row in rows)
    values = torch.full((len(rows), width), fill, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        values[i, :len(row)] = torch.as_tensor(np.asarray(row), dtype=torch.long)
        mask[i, :len(row)] = True
    return values, mask


def test_one_padding_routine_serves_collate_the_encoders_and_the_evaluation_batches():
    from dstg_interp.data.mlm import pad_batch
    from dstg_interp.encoders import pad_batch as encoders_pad_batch
    from dstg_interp.evaluation import padded_batch

    assert encoders_pad_batch is pad_batch
    rng = np.random.default_rng(3)
    rows = [rng.integers(0, 500, n) for n in rng.integers(1, 40, 25)]
    forms = [rows, [row.tolist() for row in rows], [torch.as_tensor(row) for row in rows]]
    expected_ids, expected_mask = _padded_by_hand(rows, PAD_ID)
    for form in forms:
        ids, mask = pad_batch(form, PAD_ID)
        assert torch.equal(ids, expected_ids) and torch.equal(mask, expected_mask) and mask.dtype == torch.bool
        ids, mask, special = collate(form)
        assert torch.equal(ids, expected_ids) and torch.equal(mask, expected_mask)
        assert torch.equal(special, ~expected_mask | torch.isin(expected_ids, torch.tensor([PAD_ID, CLS_ID, SEP_ID, MASK_ID])))
    labels = [torch.as_tensor(np.where(rng.random(len(row)) < 0.3, row, IGNORE_INDEX)) for row in rows]
    ids, mask, padded_labels = padded_batch([(torch.as_tensor(row), label) for row, label in zip(rows, labels)])
    assert torch.equal(ids, expected_ids) and torch.equal(mask, expected_mask)
    assert torch.equal(padded_labels, _padded_by_hand(labels, IGNORE_INDEX)[0])
    with pytest.raises(ValueError, match="at least one sequence"):
        pad_batch([], PAD_ID)


def random_batch(seed=0, batch=64, length=256):
    rows = [np.concatenate([[CLS_ID], np.random.default_rng(seed + i).integers(5, 1000, n), [SEP_ID]])
            for i, n in enumerate(np.random.default_rng(seed).integers(1, length - 2, batch))]
    return collate(rows)


def test_mask_rate_specials_and_labels():
    input_ids, _, special = random_batch()
    masked, labels = mask_tokens(input_ids, special, torch.Generator().manual_seed(0), vocab_size=1000)
    selected = labels != IGNORE_INDEX
    rate = selected.sum().item() / (~special).sum().item()
    assert 0.18 < rate < 0.22
    assert not (selected & special).any()
    assert (masked[selected] == MASK_ID).all() and (masked[~selected] == input_ids[~selected]).all()
    assert (labels[selected] == input_ids[selected]).all()


def test_masking_is_deterministic_given_generator():
    input_ids, _, special = random_batch()
    first = mask_tokens(input_ids, special, torch.Generator().manual_seed(3), strategy="80-10-10", vocab_size=1000)
    second = mask_tokens(input_ids, special, torch.Generator().manual_seed(3), strategy="80-10-10", vocab_size=1000)
    other = mask_tokens(input_ids, special, torch.Generator().manual_seed(4), strategy="80-10-10", vocab_size=1000)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[1], other[1])


def test_at_least_one_target_per_row():
    input_ids, _, special = collate([[CLS_ID, 42, SEP_ID]] * 50 + [[CLS_ID, SEP_ID]])
    _, labels = mask_tokens(input_ids, special, torch.Generator().manual_seed(0), mask_prob=0.01)
    assert (labels[:50, 1] == 42).all()
    assert (labels[50] == IGNORE_INDEX).all()  # nothing maskable: nothing selected


def test_80_10_10_proportions():
    input_ids, _, special = random_batch(batch=128)
    masked, labels = mask_tokens(input_ids, special, torch.Generator().manual_seed(1), strategy="80-10-10",
                                 vocab_size=1000)
    selected = labels != IGNORE_INDEX
    as_mask = (masked[selected] == MASK_ID).float().mean().item()
    unchanged = (masked[selected] == input_ids[selected]).float().mean().item()
    assert 0.77 < as_mask < 0.83 and 0.08 < unchanged < 0.13
    assert not torch.isin(masked[selected], torch.tensor([PAD_ID, CLS_ID, SEP_ID])).any()
    with pytest.raises(ValueError):
        mask_tokens(input_ids, special, torch.Generator(), strategy="80-10-10")
