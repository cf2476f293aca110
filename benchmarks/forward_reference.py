"""The reference every "x plain forward" ratio of a command benchmark divides: a model's forward over some
sequences, no hooks, no probes, in length-sorted batches as the commands batch them (bench_probe_cli.py and
bench_figures.py time it in a child process of their own, so torch loads only there)."""

from __future__ import annotations

import time

import torch

from dstg_interp.encoders.base import Encoder
from dstg_interp.encoders.hooked import HookedEncoder
from dstg_interp.encoders.inputs import length_sorted_batches, sequence_lengths


def timed_plain_forward(encoder: Encoder, sequences, batch_size: int) -> tuple[float, int]:
    """(seconds, tokens): ``encoder``'s plain forward over ``sequences`` (StructuredSequences); our models up to
    their last block (the MLM head left out, as the commands read the states), an HF encoder through its model."""
    lengths = sequence_lengths(sequences)
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in length_sorted_batches(lengths, batch_size):
            ids, mask = encoder.pad([sequences[int(i)]["input_ids"] for i in batch])
            if isinstance(encoder, HookedEncoder):
                encoder.model(ids, attention_mask=mask, stop_at_layer=encoder.model.config.n_layers)
            else:
                encoder.model(input_ids=ids, attention_mask=mask.long())
    return time.perf_counter() - start, int(lengths.sum())
