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

Layers are 0 (embeddings) .. n_layers (last block's `resid_post`); "last" = n_layers. We read the last
block's residual stream, not the MLM head's final RMSNorm output (`hook_final_*`): a per-token norm
rescales each token, and the reference reads `hidden_states[-1]`, which is the block output.
Subspaces: DSTG `ap`, `sem`, `full` (= concat(sem, ap)); baselines `full` (AP-NeoBERT layer 0 =
token + position embedding, what the first block reads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from probes.holmes.format import HolmesDataset, HolmesRow, TaskType

__all__ = ["encode_dataset", "resolve_layers", "tokenize_segments", "hidden_states", "UnpoolableRow"]

CLS_ID, SEP_ID, PAD_ID = 2, 3, 0


class UnpoolableRow(ValueError):
    """A target span that no sub-word covers (e.g. it fell past the model's max_positions)."""


@dataclass
class Sequence:
    ids: list[int]
    spans: list[tuple[int, int, int]]  # per token: (segment index, char start, char end); specials (-1, 0, 0)


def tokenize_segments(tokenizer, segments: tuple[str, ...], max_length: int) -> Sequence:
    """`[CLS] seg0 [SEP] (seg1 [SEP])`, truncated to max_length, with per-token character spans."""
    ids, spans = [CLS_ID], [(-1, 0, 0)]
    budget = max_length - 1 - len(segments)
    per_segment = budget if len(segments) == 1 else budget // len(segments)
    for index, text in enumerate(segments):
        encoding = tokenizer.encode(text, add_special_tokens=False)
        kept = min(len(encoding.ids), per_segment)
        ids += encoding.ids[:kept]
        spans += [(index, s, e) for s, e in encoding.offsets[:kept]]
        ids.append(SEP_ID)
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


def resolve_layers(model, layers) -> list[int]:
    n_layers = model.config.n_layers
    if layers is None or layers == "last":
        return [n_layers]
    if layers == "all":
        return list(range(n_layers + 1))
    out = sorted({n_layers if layer == "last" else int(layer) for layer in layers})
    if out[0] < 0 or out[-1] > n_layers:
        raise ValueError(f"layers must be in 0..{n_layers} (0 = embeddings), got {layers}")
    return out


def _hook_names(model, layer: int) -> dict[str, str]:
    dstg = "ap" in model.subspaces
    if dstg:
        if layer == 0:
            return {"sem": "hook_embed_sem", "ap": "hook_embed_ap"}
        return {"sem": f"blocks.{layer - 1}.hook_resid_post_sem", "ap": f"blocks.{layer - 1}.hook_resid_post_ap"}
    if layer == 0:
        names = {"full": "hook_embed"}
        if getattr(model, "hook_pos_embed", None) is not None:
            names["pos"] = "hook_pos_embed"
        return names
    return {"full": f"blocks.{layer - 1}.hook_resid_post"}


@torch.no_grad()
def hidden_states(model, tokens, attention_mask, layers: list[int], subspaces) -> dict:
    """{(layer, subspace): [batch, pos, d]} from one forward pass stopped after the deepest layer."""
    names = {layer: _hook_names(model, layer) for layer in layers}
    wanted = [name for per_layer in names.values() for name in per_layer.values()]
    _, cache = model.run_with_cache(tokens, attention_mask=attention_mask, names_filter=wanted,
                                    stop_at_layer=max(layers))
    out = {}
    for layer, per_layer in names.items():
        parts = {key: cache[name] for key, name in per_layer.items()}
        if "pos" in parts:  # AP-NeoBERT layer 0: what the first block reads
            parts = {"full": parts["full"] + parts["pos"]}
        if "sem" in parts:
            parts["full"] = torch.cat([parts["sem"], parts["ap"]], dim=-1)
        for subspace in subspaces:
            out[(layer, subspace)] = parts[subspace].float()
    return out


def encode_dataset(model, dataset: HolmesDataset, layers="last", subspaces=None, rows=None,
                   batch_size: int = 64, progress: bool = False) -> dict[tuple[int, str], np.ndarray]:
    """Pooled float32 features per (layer, subspace), one row per dataset row (or per index in `rows`).

    Raises `UnpoolableRow` naming the row when a target span covers no sub-word after truncation.
    """
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("the model has no tokenizer; load a checkpoint that ships tokenizer.json")
    layers = resolve_layers(model, layers)
    subspaces = tuple(subspaces or model.subspaces)
    unknown = set(subspaces) - set(model.subspaces)
    if unknown:
        raise ValueError(f"subspaces {sorted(unknown)} not in this model's {model.subspaces}")
    max_length = model.config.max_positions
    row_indices = list(range(len(dataset.rows))) if rows is None else list(rows)

    # Deduplicate sequences: token tasks often probe many targets of one context sentence.
    sequence_ids: dict[tuple[str, ...], int] = {}
    sequences: list[Sequence] = []
    pieces: list[tuple[int, list[int]]] = []  # (sequence id, token indices)
    row_groups: list[list[list[int]]] = []  # per row: groups of piece ids
    for out_index, row_index in enumerate(row_indices):
        row = dataset.rows[row_index]
        segment_lists, groups = _row_plan(row, dataset.task_type)
        slots = []
        for segments in segment_lists:
            key = tuple(segments)
            if key not in sequence_ids:
                sequence_ids[key] = len(sequences)
                sequences.append(tokenize_segments(tokenizer, key, max_length))
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

    pieces_of_sequence: list[list[int]] = [[] for _ in sequences]
    for piece_id, (sequence_id, _) in enumerate(pieces):
        pieces_of_sequence[sequence_id].append(piece_id)
    piece_vectors: dict = {}
    # Sorting by length keeps padding (and wasted attention) small.
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].ids))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    device = next(model.parameters()).device
    for batch in tqdm(batches, desc=f"encode {dataset.name}", disable=not progress, leave=False):
        width = max(len(sequences[i].ids) for i in batch)
        tokens = torch.full((len(batch), width), PAD_ID, dtype=torch.long)
        for b, i in enumerate(batch):
            tokens[b, :len(sequences[i].ids)] = torch.tensor(sequences[i].ids)
        mask = torch.zeros(len(batch), width, dtype=torch.bool)
        for b, i in enumerate(batch):
            mask[b, :len(sequences[i].ids)] = True
        states = hidden_states(model, tokens.to(device), mask.to(device), layers, subspaces)
        # One pooling matrix [n_pieces, batch*pos] per batch: all piece means in one matmul.
        batch_pieces = [p for i in batch for p in pieces_of_sequence[i]]
        pool = torch.zeros(len(batch_pieces), len(batch) * width)
        slot_of = {i: b for b, i in enumerate(batch)}
        for r, piece_id in enumerate(batch_pieces):
            sequence_id, indices = pieces[piece_id]
            columns = torch.tensor(indices) + slot_of[sequence_id] * width
            pool[r, columns] = 1.0 / len(indices)
        pool = pool.to(device)
        for key, value in states.items():
            pooled = (pool @ value.reshape(len(batch) * width, -1)).cpu().numpy()
            store = piece_vectors.setdefault(key, {})
            for r, piece_id in enumerate(batch_pieces):
                store[piece_id] = pooled[r]
    features = {}
    for key, store in piece_vectors.items():
        blocks = []
        for groups in row_groups:
            blocks.append(np.concatenate([np.mean([store[p] for p in group], axis=0) for group in groups]))
        features[key] = np.stack(blocks).astype(np.float32)
    return features
