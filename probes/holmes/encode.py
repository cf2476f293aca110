"""Frozen-encoder features for a Holmes dataset, pooled as the reference code does.

    from probes.holmes.encode import encode_dataset
    features = encode_dataset(model, dataset)                      # last layer, every subspace
    features[(6, "ap")]                                            # [n_rows, d_ap * num_inputs]

Pooling (as the Holmes reference code pools):
- SENTENCE: mean over every non-pad token, [CLS]/[SEP] included (the reference's attention-mask mean).
- SENTENCE_PAIR_BI: each sentence encoded and pooled on its own, the two vectors concatenated.
- SENTENCE_PAIR_CROSS: one sequence `[CLS] a [SEP] b [SEP]`, mean-pooled. The reference joins the
  strings with " <sep> "; our WordPiece vocab has a real [SEP], so we use it (a deliberate deviation).
- token tasks: mean over the sub-words whose character offsets overlap [char_start, char_end) (what
  `char_to_token` over every character of the span gives), one vector per target, concatenated; for
  SENTENCE_SPANS the pieces of one span id are averaged first. Pair-token tasks encode the two
  contexts separately (BI) or as `[CLS] c0 [SEP] c1 [SEP]` (CROSS).

The model is anything `dstg_interp.encoders.open_encoder` takes (ours, a zoo name, a checkpoint or a
local HF encoder folder); its tokenizer names the [CLS]/[SEP]/[PAD] ids. Layers are 0 (embeddings) ..
n_layers (last block's output); "last" = n_layers.  The reference reads `hidden_states[-1]`, which
transformers fills with the *final-normed* state for pre-norm models (and with the last block's output
for post-norm BERT): ``last_state="final"`` (the reference protocol's setting in ``probes.holmes.run``)
reads layer n_layers from the model's final norm (`hook_final_*`) where it has one, and keeps the label
n_layers; ``last_state="block"`` reads the last block's residual stream.  Subspaces: DSTG `ap`, `sem`, `full` (= concat(sem,
ap)); baselines and HF encoders `full` (AP-NeoBERT layer 0 = token + position embedding, what the first
block reads).
"""

from __future__ import annotations

import os
from collections import abc
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer
from dstg_interp.progress import progress_bar

from dstg_interp.encoders import FINAL, Encoder, SpecialTokens, open_encoder, selection, special_tokens
from dstg_interp.encoders.selection import LayerSelection
from probes.holmes.format import HolmesDataset, HolmesRow, TaskType

__all__ = ["encode_dataset", "HOLMES_LAYERS", "holmes_layers", "tokenize_segments", "UnpoolableRow"]


class UnpoolableRow(ValueError):
    """A target span that no sub-word covers (e.g. it fell past the model's max_positions)."""


@dataclass
class Sequence:
    ids: list[int]
    spans: list[tuple[int, int, int]]  # per token: (segment index, char start, char end); specials (-1, 0, 0)


def tokenize_segments(tokenizer: Tokenizer, segments: tuple[str, ...], max_length: int,
                      special: SpecialTokens | None = None) -> Sequence:
    """`[CLS] seg0 [SEP] (seg1 [SEP])`, truncated to max_length, with per-token character spans; the
    special ids are the tokenizer's own unless ``special`` is given."""
    special = special or special_tokens(tokenizer)
    ids, spans = [special.cls], [(-1, 0, 0)]
    budget = max_length - 1 - len(segments)
    per_segment = budget if len(segments) == 1 else budget // len(segments)
    for index, text in enumerate(segments):
        encoding = tokenizer.encode(text, add_special_tokens=False)
        kept = min(len(encoding.ids), per_segment)
        ids += encoding.ids[:kept]
        spans += [(index, s, e) for s, e in encoding.offsets[:kept]]
        ids.append(special.sep)
        spans.append((-1, 0, 0))
    return Sequence(ids, spans)


def span_token_indices(sequence: Sequence, segment: int, start: int, end: int) -> list[int]:
    """Sub-words of `segment` whose characters overlap [start, end)."""
    return [i for i, (seg, s, e) in enumerate(sequence.spans) if seg == segment and e > s and s < end and e > start]


def _row_plan(row: HolmesRow, task_type: TaskType):
    """(segments per sequence, groups); a group is a list of pieces (sequence slot, segment, start, end),
    start=None meaning 'the whole sequence'. One group -> one concatenated vector block."""
    if task_type == TaskType.SENTENCE:
        return [row.sentences], [[(0, None, None, None)]]
    if task_type == TaskType.SENTENCE_PAIR_BI:
        return [row.sentences[:1], row.sentences[1:]], [[(0, None, None, None)], [(1, None, None, None)]]
    if task_type == TaskType.SENTENCE_PAIR_CROSS:
        return [row.sentences], [[(0, None, None, None)]]
    cross = task_type == TaskType.SENTENCE_PAIR_TOKENS_CROSS
    bi = task_type == TaskType.SENTENCE_PAIR_TOKENS_BI
    if cross:
        sequences = [row.contexts[:2]]
    elif bi:
        sequences = [row.contexts[:1], row.contexts[1:2]]
    else:
        sequences = [row.contexts]  # SENTENCE_TOKENS / SPANS use context 0 (all targets point there)
    groups: dict[int, list] = {}
    spans = task_type == TaskType.SENTENCE_SPANS  # elsewhere every target is its own vector
    for k, target in enumerate(row.targets):
        if cross:
            piece = (0, target.context_index, target.char_start, target.char_end)
        elif bi:
            piece = (target.context_index, 0, target.char_start, target.char_end)
        else:
            piece = (0, target.context_index, target.char_start, target.char_end)
        groups.setdefault(target.span_id if spans else k, []).append(piece)
    return sequences, [groups[k] for k in sorted(groups)]


# The Holmes protocol's layer, the default of every Holmes entry (run_holmes, encode_dataset, dstg-holmes run,
# dstg-probe --task holmes): the last block, which holmes-evaluation reads as hidden_states[-1].
HOLMES_LAYERS = selection.LAST


def holmes_layers(encoder: Encoder, layers: LayerSelection) -> list[int]:
    """Concrete, sorted layers of ``layers`` (``Encoder.resolve``: the grammar of ``dstg_interp.encoders.selection``;
    None = ``HOLMES_LAYERS``).  ``final`` is refused: it is how layer n_layers is read under the reference
    protocol (``last_state``), not a layer of its own."""
    chosen, _ = encoder.resolve(layers, default=HOLMES_LAYERS)
    if selection.FINAL in chosen:
        n_layers = encoder.n_layers
        raise ValueError("layer 'final' is not a Holmes layer: the reference protocol (the default) reads the last "
                         f"layer ({n_layers}) as hidden_states[-1], the final-normed state; ask for 'last' or indices "
                         f"0..{n_layers}")
    return sorted(int(layer) for layer in chosen)


LAST_STATES = ("block", "final")


def _plan_pieces(encoder, dataset: HolmesDataset, row_indices: list[int]):
    """The distinct sequences to encode (token tasks often probe many targets of one context sentence: each
    is encoded once), the pieces to pool ((sequence id, token indices)) and, per row, its groups of piece ids."""
    tokenizer, max_length = encoder.tokenizer, encoder.max_positions
    sequence_ids: dict[tuple[str, ...], int] = {}
    sequences: list[Sequence] = []
    pieces: list[tuple[int, list[int]]] = []  # (sequence id, token indices)
    row_groups: list[list[list[int]]] = []  # per row: groups of piece ids
    for row_index in row_indices:
        row = dataset.rows[row_index]
        segment_lists, groups = _row_plan(row, dataset.task_type)
        slots = []
        for segments in segment_lists:
            key = tuple(segments)
            if key not in sequence_ids:
                sequence_ids[key] = len(sequences)
                sequences.append(tokenize_segments(tokenizer, key, max_length, encoder.special))
            slots.append(sequence_ids[key])
        groups_out = []
        for group in groups:
            piece_ids = []
            for slot, segment, start, end in group:
                sequence = sequences[slots[slot]]
                if start is None:
                    indices = list(range(len(sequence.ids)))
                else:
                    indices = span_token_indices(sequence, segment, start, end)
                    if not indices:
                        raise UnpoolableRow(
                            f"holmes dataset {dataset.name!r}: row id {row.id}, column 'inputs': span [{start}, "
                            f"{end}) covers no sub-word (beyond max_positions={max_length}?)")
                pieces.append((slots[slot], indices))
                piece_ids.append(len(pieces) - 1)
            groups_out.append(piece_ids)
        row_groups.append(groups_out)
    return sequences, pieces, row_groups


def _pool_pieces(encoder, sequences, pieces, layers, subspaces, batch_size: int, progress: bool, name: str) -> dict:
    """{(layer, subspace): {piece id: mean state over its tokens}}, one pooling matmul per batch."""
    pieces_of_sequence: list[list[int]] = [[] for _ in sequences]
    for piece_id, (sequence_id, _) in enumerate(pieces):
        pieces_of_sequence[sequence_id].append(piece_id)
    piece_vectors: dict = {}
    for batch, tokens, mask in progress_bar(encoder.batches([sequence.ids for sequence in sequences], batch_size),
                                            desc=f"encode {name}", disable=not progress, leave=False,
                                            total=-(-len(sequences) // batch_size)):
        batch, width = batch.tolist(), tokens.shape[1]
        states = encoder.states(tokens, layers, subspaces, attention_mask=mask)
        # One pooling matrix [n_pieces, batch*pos] per batch: all piece means in one matmul.
        batch_pieces = [p for i in batch for p in pieces_of_sequence[i]]
        pool = torch.zeros(len(batch_pieces), len(batch) * width)
        slot_of = {i: b for b, i in enumerate(batch)}
        for r, piece_id in enumerate(batch_pieces):
            sequence_id, indices = pieces[piece_id]
            columns = torch.tensor(indices) + slot_of[sequence_id] * width
            pool[r, columns] = 1.0 / len(indices)
        pool = pool.to(encoder.device)
        for key, value in states.items():
            pooled = (pool @ value.float().reshape(len(batch) * width, -1)).cpu().numpy()
            store = piece_vectors.setdefault(key, {})
            for r, piece_id in enumerate(batch_pieces):
                store[piece_id] = pooled[r]
    return piece_vectors


def encode_dataset(model: str | os.PathLike | torch.nn.Module | Encoder, dataset: HolmesDataset,
                   layers: LayerSelection = HOLMES_LAYERS, subspaces: abc.Sequence[str] | None = None,
                   rows: abc.Sequence[int] | np.ndarray | None = None,
                   batch_size: int = 64, progress: bool = False, last_state: str = "block") -> dict[tuple[int, str], np.ndarray]:
    """Pooled float32 features per (layer, subspace), one row per dataset row (or per index in `rows`).

    model: anything `open_encoder` takes.  last_state: "block" or "final" (module docstring: what layer
    n_layers reads).  Raises `UnpoolableRow` naming the row when a target span covers no sub-word after
    truncation.
    """
    if last_state not in LAST_STATES:
        raise ValueError(f"last_state must be one of {LAST_STATES}, got {last_state!r}")
    encoder = open_encoder(model)
    if encoder.tokenizer is None:
        raise ValueError(f"{encoder.name} has no tokenizer; load a checkpoint that ships tokenizer.json")
    layers = holmes_layers(encoder, layers)
    n_layers = encoder.n_layers
    from_final = last_state == "final" and n_layers in layers and FINAL in encoder.layers
    if from_final:  # hidden_states[-1] of a pre-norm model: its final norm's output, labelled n_layers
        layers = [FINAL if layer == n_layers else layer for layer in layers]
    layers, subspaces = encoder.resolve(layers, subspaces)
    row_indices = list(range(len(dataset.rows))) if rows is None else list(rows)
    sequences, pieces, row_groups = _plan_pieces(encoder, dataset, row_indices)
    piece_vectors = _pool_pieces(encoder, sequences, pieces, layers, subspaces, batch_size, progress, dataset.name)
    features = {}
    for key, store in piece_vectors.items():  # (layer, subspace) -> piece vectors
        blocks = []
        for groups in row_groups:
            blocks.append(np.concatenate([np.mean([store[p] for p in group], axis=0) for group in groups]))
        layer, subspace = key
        features[(n_layers if layer == FINAL else layer, subspace)] = np.stack(blocks).astype(np.float32)
    return features
