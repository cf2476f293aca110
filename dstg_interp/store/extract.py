"""Extraction: run a model over structured sequences with hooks and stream token states to disk.

    from dstg_interp import load_model, extract
    model = load_model("dstg")
    store = extract(model, sequences, out="runs/store-dstg", layers=(0, 3, 6), dtype="float16")   # or:
    store = extract(model, sequences, "runs/store-dstg", ExtractionConfig(layers=(0, 3, 6), dtype="float16"))
    store.states(6, "ap")                       # np.memmap [n_tokens, d_ap], real tokens only

What lands in ``out`` (flat, one file per array; see manifest.json for the list):
    layer{l:02d}_{subspace}.npy / final_{subspace}.npy / hook.{name}.npy   [n_tokens, d]
        (DSTG ``full`` has no file when ``sem`` and ``ap`` are stored: it is read as [sem | ap], layout.py)
    labels_{column}.npy                                                    [n_tokens] per-token labels
    documents.json, extraction.json (the ExtractionConfig), attention.npz + attention.json (optional)
    manifest.json                                                          written last
Rows are the real (non-pad) tokens of every sequence, sequence after sequence, in sequence order.
In float32 they are bit-identical to ``model.run_with_cache`` on the same batches under ``torch.no_grad()``
(with autograd on, PyTorch picks another attention kernel and the last bits differ, ~1e-9).

Memory stays flat: the total token count is known before the first forward, every file is reserved
at its final size, and each batch is written with pwrite (npy_writer.py) by a writer thread while the
next one runs, at most two batches behind (background.py).
Batches are formed from length-sorted sequences (less padding) and written back to their own rows.
Everything goes into a temporary sibling folder that is renamed onto ``out`` only once manifest.json
is in it; an error or Ctrl-C removes the temporary folder, so a folder named ``out`` is always complete.
Under torchrun (``ranks=``, distributed.py) each rank runs a share of the batches into the same files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from dstg_interp.progress import progress_bar

from dstg_interp.config import config_or_fields
from dstg_interp.data.labels import label_bytes, label_dtypes
from dstg_interp.data.structure import DEFAULT_MAX_LENGTH
from dstg_interp.encoders import Encoder
from dstg_interp.encoders.inputs import length_sorted_batches, sequence_lengths
from dstg_interp.io import DISK_FULL, atomic_directory, commit_directory, remove_tree

from .attention import AttentionAccumulator
from .background import BackgroundWrites
from .checksums import store_checksums
from .config import ExtractionConfig
from .distributed import Ranks
from .export import check_disk_space
from .identity import extraction_identity, is_reusable, store_foreign_entries
from .inputs import as_sequences, check_tokenizer, store_encoder
from .layout import derived_parts
from .manifest import StoreError, StoreInterrupted, build_manifest, write_manifest
from .npy_writer import NpyWriter
from .reader import ActivationStore
from .targets import Target, plan_targets



def extract(model, sequences, out, config: ExtractionConfig | None = None, *, progress: bool = True,
            overwrite: bool = False, max_length: int = DEFAULT_MAX_LENGTH, windows: bool = True, ranks: Ranks | None = None,
            **fields) -> ActivationStore:
    """Extract token states of ``model`` over ``sequences`` into the store folder ``out``; returns an ActivationStore.

    model: anything ``open_encoder`` takes: one of ours (``load_model``/``build_model``), an Encoder
        (``open_encoder``, ``load_hf_encoder``), a zoo name or a folder. Runs where the model is.
    sequences: StructuredSequences in the model's token ids, or a list of Documents, which are then
        tokenized with the model's tokenizer (``max_length``, ``windows`` as in build_structured_sequences).
    config: what to extract (``ExtractionConfig``: layers, subspaces, names, dtype, batch_size,
        attention_summaries, max_offset), or its fields as keywords (``layers=(0, 3), dtype="float32"``).
    A complete store with the same identity (weights, sequences, config) in ``out`` is returned as is;
    a different one raises StoreError unless ``overwrite``.
    ranks: this process's place in a torchrun job (``distributed.torchrun_ranks``); every rank calls extract
        with the same arguments and gets the same store. None = one process.
    """
    config = config_or_fields(ExtractionConfig, config, fields)
    encoder = store_encoder(model)
    sequences = as_sequences(encoder, sequences, max_length, windows)
    check_tokenizer(encoder, sequences)
    config = config.resolve(encoder.n_layers, tuple(encoder.subspaces), encoder.variant)
    if config.attention_summaries and encoder.kind == "hf":
        raise StoreError("attention_summaries needs the separate logit-term hooks of a dstg-interp model; "
                         "HF encoders do not have them")
    targets = plan_targets(encoder, config)
    widths = _probe_widths(encoder, targets)
    lengths = sequence_lengths(sequences)
    _check_sequences(encoder, sequences, lengths)
    out = Path(out)
    identity = extraction_identity(encoder, sequences, lengths, config)
    if is_reusable(out, identity, overwrite):
        return ActivationStore(out)

    ranks = ranks or Ranks()
    needed = _store_bytes(lengths, widths, targets, config.dtype)
    if progress and ranks.first:
        print(f"extract -> {out}: {int(lengths.sum())} tokens, about {needed / 2**20:.1f} MiB on disk", file=sys.stderr)
    # before any file is reserved; the store may be one dstg-probe caches (DSTG_CACHE/stores, N88), not --out
    check_disk_space(out.parent, needed, f"the store {out}",
                     remedy=f"free space on the disk that holds {out.parent}, put the store elsewhere (another --out; "
                            "for the stores dstg-probe caches, another DSTG_CACHE) or extract fewer layers / subspaces")
    _write_store(out, needed, ranks, lambda tmp: _extract_into(tmp, encoder, sequences, lengths, config, targets,
                                                               widths, identity, progress, ranks))
    return ActivationStore(out)


def _check_sequences(encoder: Encoder, sequences, lengths: np.ndarray) -> None:
    """Tokens to extract, none past the model's positions, every id in its vocabulary: one StoreError each."""
    if len(lengths) == 0 or lengths.sum() == 0:
        raise StoreError("no tokens to extract: the sequences are empty")
    if lengths.max() > encoder.max_positions:
        raise StoreError(f"a sequence has {lengths.max()} tokens but the model has {encoder.max_positions} "
                         "positions; rebuild the sequences with a smaller max_length")
    arrays = getattr(sequences, "arrays", None)  # StructuredSequences: check every id before any work
    if arrays is not None and len(arrays["input_ids"]) and int(arrays["input_ids"].max()) >= encoder.vocab_size:
        raise StoreError(f"token id {int(arrays['input_ids'].max())} is outside the model's vocabulary of "
                         f"{encoder.vocab_size}; the sequences were built with another tokenizer")


def _write_store(out: Path, needed: int, ranks: Ranks, fill: Callable[[Path], dict]) -> None:
    """``fill(tmp)`` writes the store into a temporary sibling and returns its manifest; rank 0 then writes the
    manifest and swaps the folder onto ``out``.  Interrupted or failed: the temporary folder is removed, one line."""
    tmp = ranks.broadcast(ranks.together(lambda: atomic_directory(out) if ranks.first else None))

    def discard():  # rank 0 owns the temporary folder: two ranks removing one tree race and can leave half of it
        if ranks.first:
            remove_tree(tmp)  # not cut short by the signal torchrun sends next

    try:
        manifest = fill(tmp)

        def commit():
            if ranks.first:
                write_manifest(tmp, manifest)
                commit_directory(tmp, out, store_foreign_entries, "activation store")

        ranks.together(commit)
    except KeyboardInterrupt:
        discard()
        raise StoreInterrupted(f"extraction into {out} was interrupted; the partial work was removed and no "
                               "store was written; run it again to start over") from None
    except OSError as err:
        discard()
        if err.errno in DISK_FULL:
            # the store may be a cached one (DSTG_CACHE/stores, N88), not --out: name the place that is full
            raise StoreError(f"disk full while writing the store {out} (it needs about {needed / 2**20:.0f} MiB); free "
                             f"space on the disk that holds {Path(out).parent}, or put the store elsewhere (another "
                             "--out; for the stores dstg-probe caches, another DSTG_CACHE)") from None
        raise StoreError(f"cannot write the store for {out}: {err}") from None
    except BaseException:
        discard()
        raise


@dataclass
class _Plan:
    """What one extraction writes where: the files (key -> (file name, shape, dtype)), the targets stored
    as files, the hooks to capture, and where each sequence's rows start."""

    folder: Path
    encoder: Encoder
    sequences: object
    lengths: np.ndarray
    row_start: np.ndarray
    files: dict
    stored: list
    hooks: list
    torch_dtype: torch.dtype


def _plan(folder: Path, encoder: Encoder, sequences, lengths, config, targets, widths) -> _Plan:
    n_tokens = int(lengths.sum())
    row_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # first row of each sequence
    np_dtype = np.float16 if config.dtype == "float16" else np.float32
    torch_dtype = torch.float16 if config.dtype == "float16" else torch.float32
    derived = derived_parts(targets)  # DSTG full = [sem | ap]: no file, served on read
    stored = [target for target in targets if target.key not in derived]
    files: dict[str, tuple] = {target.key: (target.file, (n_tokens, widths[target.key]), np_dtype) for target in stored}
    files.update({f"labels/{column}": (f"labels_{column}.npy", (n_tokens,), column_dtype)
                  for column, column_dtype in label_dtypes().items()})
    hooks = sorted({hook for target in targets for hook in target.hooks})
    return _Plan(folder, encoder, sequences, lengths, row_start, files, stored, hooks, torch_dtype)


def _reserve_files(plan: _Plan) -> None:
    """Every file at its final size, written once (rank 0); each rank then opens them for its own rows."""
    for file, shape, file_dtype in plan.files.values():
        NpyWriter(plan.folder / file, shape, file_dtype).close()


def _write_batch(plan: _Plan, writers: dict, batch, accumulator, writes: BackgroundWrites) -> None:
    """Run one batch through the encoder and queue its real tokens' rows and labels for the writer thread."""
    encoder, lengths = plan.encoder, plan.lengths
    items = [plan.sequences[int(i)] for i in batch]
    tokens, mask = encoder.pad([item["input_ids"] for item in items])  # on the encoder's device
    if int(tokens.max()) >= encoder.vocab_size:
        raise StoreError(f"token id {int(tokens.max())} is outside the model's vocabulary of "
                         f"{encoder.vocab_size}; the sequences were built with another tokenizer")
    captured = encoder.capture(tokens, mask, plan.hooks, _summarise(accumulator, mask))
    runs = _contiguous_runs(batch, lengths, plan.row_start)
    jobs = [(writers[key], first_row, rows[start:stop])
            for key, rows in _real_rows(captured, plan.stored, mask, plan.torch_dtype).items()
            for first_row, start, stop in runs]
    for column, column_dtype in label_dtypes().items():
        values = np.concatenate([np.full(lengths[i], i) if column == "sequence" else item[column]
                                 for i, item in zip(batch, items)]).astype(column_dtype, copy=False)
        jobs += [(writers[f"labels/{column}"], first_row, values[start:stop]) for first_row, start, stop in runs]
    writes.submit(jobs)  # written while the next batch runs (background.py)


def _write_my_batches(plan: _Plan, config, accumulator, progress: bool, ranks: Ranks) -> None:
    """This rank's share of the length-sorted batches, written into the reserved files."""
    writers: dict[str, NpyWriter] = {}
    try:
        for key, (file, shape, file_dtype) in plan.files.items():
            writers[key] = NpyWriter(plan.folder / file, shape, file_dtype, create=False, direct=True)
        batches = ranks.share(length_sorted_batches(plan.lengths, config.batch_size))
        bar = progress_bar(total=int(sum(plan.lengths[batch].sum() for batch in batches)), unit="tok", disable=not progress,
                           desc=f"extract -> {plan.folder.name.split('.tmp-')[0].lstrip('.')}"
                                + (f" (rank {ranks.rank}/{ranks.world_size})" if ranks.grouped else ""))
        with torch.inference_mode(), BackgroundWrites() as writes:  # every write done before the files close
            for batch in batches:
                _write_batch(plan, writers, batch, accumulator, writes)
                bar.update(int(plan.lengths[batch].sum()))
        bar.close()
    finally:
        for writer in writers.values():
            writer.close()


def _finish(plan: _Plan, config, targets, widths, identity, attention) -> dict:
    """documents.json, extraction.json and the manifest (returned, written by the caller) of a full store."""
    folder, sequences, lengths = plan.folder, plan.sequences, plan.lengths
    n_tokens, derived = int(lengths.sum()), derived_parts(targets)
    documents = getattr(sequences, "meta", {}).get("documents", [])
    (folder / "documents.json").write_text(json.dumps(documents, ensure_ascii=False) + "\n")
    ExtractionConfig.from_dict(identity["extraction"]).to_json(folder / "extraction.json")
    arrays = {t.key: ({"parts": derived[t.key]} if t.key in derived else {"file": t.file})
              | {"shape": [n_tokens, widths[t.key]], "dtype": config.dtype, "hooks": t.hooks} for t in targets}
    labels = {"files": {column: f"labels_{column}.npy" for column in label_dtypes()}, "documents": "documents.json"}
    meta = getattr(sequences, "meta", {})
    extra = {
        "model_path": str(plan.encoder.checkpoint_path or ""),
        "model_name": plan.encoder.name,  # how the model was named when the store was written (naming.py, --name)
        "corpus": {key: meta.get(key) for key in ("corpus_spec", "tokenizer_hash", "max_length", "windows")},
        "layers": [layer for layer in config.layers], "subspaces": list(config.subspaces), "names": list(config.names),
        # every file but the manifest, read back once while still in the page cache (checksums.py)
        "checksums": store_checksums(folder, sorted(path.name for path in folder.iterdir() if path.is_file())),
    }
    return build_manifest(identity, arrays, labels, attention, n_tokens, len(lengths), extra)


def _extract_into(folder: Path, encoder: Encoder, sequences, lengths, config, targets, widths, identity, progress,
                  ranks: Ranks) -> dict | None:
    """Fill ``folder`` with this rank's rows; rank 0 also writes the rest and returns the manifest."""
    plan = _plan(folder, encoder, sequences, lengths, config, targets, widths)
    ranks.together(lambda: _reserve_files(plan) if ranks.first else None)
    accumulator = None
    if config.attention_summaries:
        accumulator = AttentionAccumulator(encoder.n_layers, encoder.n_heads, list(encoder.logit_terms),
                                           config.max_offset, encoder.max_positions)
    ranks.together(lambda: _write_my_batches(plan, config, accumulator, progress, ranks))
    partial = ranks.gather(accumulator)  # every rank's attention sums
    if not ranks.first:
        return None
    if accumulator is not None:
        for other in partial[1:]:
            accumulator.merge(other)
    attention = accumulator.save(folder) if accumulator is not None else None
    return _finish(plan, config, targets, widths, identity, attention)


def _store_bytes(lengths, widths: dict, targets, dtype: str) -> int:
    """Bytes a store takes: every stored array (a derived DSTG ``full`` has no file) and the label columns."""
    stored = sum(width for key, width in widths.items() if key not in derived_parts(targets))
    return int(lengths.sum()) * (stored * (2 if dtype == "float16" else 4) + label_bytes())


def _contiguous_runs(batch: np.ndarray, lengths: np.ndarray, row_start: np.ndarray) -> list[tuple[int, int, int]]:
    """(first store row, start, stop) of each run of batch rows that lands on consecutive store rows.

    Equal-length sequences keep their order in the length sort, so a windowed corpus gives one run per
    batch: one pwrite per array instead of one per sequence."""
    batch_rows = np.concatenate([[0], np.cumsum(lengths[batch])])
    runs, j = [], 0
    while j < len(batch):
        k = j + 1
        while k < len(batch) and batch[k] == batch[k - 1] + 1:
            k += 1
        runs.append((int(row_start[batch[j]]), int(batch_rows[j]), int(batch_rows[k])))
        j = k
    return runs


def _summarise(accumulator: AttentionAccumulator | None, mask: torch.Tensor):
    """The on_attention callback that feeds each block's logit terms and pattern to the accumulator."""
    if accumulator is None:
        return None
    lengths = mask.sum(dim=1).tolist()
    return lambda layer, terms, pattern: accumulator.update(layer, list(terms.values()), pattern, lengths)


def _real_rows(captured, targets: list[Target], mask: torch.Tensor, dtype: torch.dtype) -> dict[str, np.ndarray]:
    """{target key: [n_real, d] rows} from [batch, pos, d] tensors; each hook is selected and cast once,
    and a concatenated target (DSTG ``full``) is built from the cast rows. Rows are batch-major, so
    each sequence's rows are contiguous."""
    needed = {hook for target in targets for hook in target.hooks}
    all_real = bool(mask.all())  # windowed corpora: most batches have no padding, skip the boolean gather
    rows_of_hook = {}
    for hook in needed:
        states = captured[hook]
        rows = states.reshape(-1, states.shape[-1]) if all_real else states[mask]
        if dtype == torch.float16:
            low, high = torch.aminmax(rows)
            if max(-float(low), float(high)) > torch.finfo(torch.float16).max:
                raise StoreError(f"{hook}: activations exceed the float16 range (max |x| = "
                                 f"{max(-float(low), float(high)):.3g}); extract with dtype='float32'")
        rows_of_hook[hook] = rows.to(dtype).cpu()
    return {target.key: (rows_of_hook[target.hooks[0]] if len(target.hooks) == 1
                         else torch.cat([rows_of_hook[h] for h in target.hooks], dim=-1)).numpy()
            for target in targets}


def _probe_widths(encoder: Encoder, targets: list[Target]) -> dict[str, int]:
    """Run two tokens through the model once to learn each target's width and check its hooks are token states."""
    tokens = torch.zeros(1, 2, dtype=torch.long, device=encoder.device)
    mask = torch.ones(1, 2, dtype=torch.bool, device=encoder.device)
    with torch.inference_mode():
        captured = encoder.capture(tokens, mask, sorted({hook for target in targets for hook in target.hooks}))
    widths = {}
    for target in targets:
        for hook in target.hooks:
            if hook not in captured:
                raise StoreError(f"hook {hook!r} did not fire in a forward pass of this {encoder.variant!r} model")
            shape = tuple(captured[hook].shape)
            if len(shape) != 3 or shape[:2] != (1, 2):
                raise StoreError(f"hook {hook!r} gives shape {list(shape)}, not a token state [batch, pos, d]; "
                                 "only token-level hooks can be stored")
        widths[target.key] = sum(int(captured[hook].shape[-1]) for hook in target.hooks)
    return widths
