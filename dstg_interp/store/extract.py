"""Extraction: run a model over structured sequences with hooks and stream token states to disk.

    from dstg_interp import load_model, extract
    model = load_model("dstg")
    store = extract(model, sequences, out="runs/store-dstg", layers=(0, 3, 6), dtype="float16")
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
at its final size, and each batch is written with pwrite (npy_writer.py) before the next one runs.
Batches are formed from length-sorted sequences (less padding) and written back to their own rows.
Everything goes into a temporary sibling folder that is renamed onto ``out`` only once manifest.json
is in it; an error or Ctrl-C removes the temporary folder, so a folder named ``out`` is always complete.
Under torchrun (``ranks=``, distributed.py) each rank runs a share of the batches into the same files.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from dstg_interp.model.checkpoint import atomic_directory, commit_directory

from .attention import AttentionAccumulator, logit_terms
from .config import ExtractionConfig
from .distributed import Ranks
from .hf_encoder import HFEncoder
from .layout import derived_parts
from .manifest import (FORMAT_VERSION, MANIFEST_FILE, StoreError, StoreInterrupted, build_manifest, read_manifest,
                       sequences_sha256, weights_sha256, write_manifest)
from .npy_writer import NpyWriter
from .targets import Target, plan_targets

LABEL_COLUMNS = {"sequence": np.int32, "input_ids": np.int32, "token_position": np.int32,
                 "sentence_index": np.int32, "paragraph_index": np.int32, "intra_sentence_position": np.int32,
                 "intra_paragraph_position": np.int32, "doc_index": np.int32, "is_special": np.bool_}
DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


class _StopForward(Exception):
    """Raised by the last capture hook: skips the blocks and the MLM head nobody asked for."""


def extract(model, sequences, out, *, layers=None, subspaces=None, names=(), dtype="float16", batch_size: int = 32,
            attention_summaries: bool = False, max_offset: int = 32, progress: bool = True,
            overwrite: bool = False, max_length: int = 256, windows: bool = True, ranks: Ranks | None = None):
    """Extract token states of ``model`` over ``sequences`` into the store folder ``out``; returns an ActivationStore.

    model: one of ours (``load_model``/``build_model``) or an HF encoder (``load_hf_encoder``).
    sequences: StructuredSequences in the model's token ids, or a list of Documents, which are then
        tokenized with the model's tokenizer (``max_length``, ``windows`` as in build_structured_sequences).
    layers: ints (0 = embeddings) and/or "final"; None = all of 0..n_layers. subspaces: "sem", "ap",
        "full" (None = all the model has). names: extra token-level hook names to store as they are.
    A complete store with the same identity (weights, sequences, config) in ``out`` is returned as is;
    a different one raises StoreError unless ``overwrite``.
    ranks: this process's place in a torchrun job (``distributed.torchrun_ranks``); every rank calls extract
        with the same arguments and gets the same store. None = one process.
    """
    from .reader import ActivationStore

    config = ExtractionConfig(layers=layers, subspaces=subspaces, names=tuple(names), dtype=dtype,
                              batch_size=batch_size, attention_summaries=attention_summaries, max_offset=max_offset)
    is_hf = isinstance(model, HFEncoder)
    if not is_hf and not hasattr(model, "hook_dict"):
        raise StoreError(f"cannot extract from a {type(model).__name__}; pass a dstg-interp model or load_hf_encoder(path)")
    sequences = as_sequences(model, sequences, max_length, windows)
    _check_tokenizer(model, sequences)
    config = config.resolve(model.config.n_layers, tuple(model.subspaces), model.config.variant)
    if config.attention_summaries and is_hf:
        raise StoreError("attention_summaries needs the separate logit-term hooks of a dstg-interp model; "
                         "HF encoders do not have them")
    targets = plan_targets(model, config)
    widths = _probe_widths(model, targets)
    lengths = _lengths(sequences)
    if len(lengths) == 0 or lengths.sum() == 0:
        raise StoreError("no tokens to extract: the sequences are empty")
    if lengths.max() > model.config.max_positions:
        raise StoreError(f"a sequence has {lengths.max()} tokens but the model has {model.config.max_positions} "
                         "positions; rebuild the sequences with a smaller max_length")

    arrays = getattr(sequences, "arrays", None)  # StructuredSequences: check every id before any work
    if arrays is not None and len(arrays["input_ids"]) and int(arrays["input_ids"].max()) >= model.config.vocab_size:
        raise StoreError(f"token id {int(arrays['input_ids'].max())} is outside the model's vocabulary of "
                         f"{model.config.vocab_size}; the sequences were built with another tokenizer")

    out = Path(out)
    identity = {
        "format_version": FORMAT_VERSION,
        "model": {"kind": "hf" if is_hf else "dstg-interp", "weights_sha256": weights_sha256(model),
                  "config": model.config.to_dict()},
        "sequences": {"sha256": sequences_sha256(sequences), "n_sequences": len(lengths), "n_tokens": int(lengths.sum())},
        "extraction": config.to_dict(),
    }
    if _reusable(out, identity, overwrite):
        return ActivationStore(out)

    ranks = ranks or Ranks()
    tmp = ranks.broadcast(ranks.together(lambda: atomic_directory(out) if ranks.first else None))
    try:
        manifest = _extract_into(tmp, model, sequences, lengths, config, targets, widths, identity, progress, ranks)

        def commit():
            if ranks.first:
                write_manifest(tmp, manifest)
                commit_directory(tmp, out)

        ranks.together(commit)
    except KeyboardInterrupt:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StoreInterrupted(f"extraction into {out} was interrupted (Ctrl-C); the partial work was removed and no "
                               "store was written; run it again to start over") from None
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if err.errno in DISK_FULL:
            stored = sum(width for key, width in widths.items() if key not in derived_parts(targets))
            need = int(lengths.sum()) * (stored * (2 if config.dtype == "float16" else 4) + 33)
            raise StoreError(f"disk full while writing the store for {out} (it needs about {need / 2**20:.0f} MiB); "
                             "free space or choose another out folder") from None
        raise StoreError(f"cannot write the store for {out}: {err}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ActivationStore(out)


def _extract_into(folder: Path, model, sequences, lengths, config, targets, widths, identity, progress,
                  ranks: Ranks) -> dict | None:
    """Fill ``folder`` with this rank's rows; rank 0 also writes the rest and returns the manifest."""
    is_hf = isinstance(model, HFEncoder)
    n_tokens = int(lengths.sum())
    row_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # first row of each sequence
    np_dtype = np.float16 if config.dtype == "float16" else np.float32
    torch_dtype = torch.float16 if config.dtype == "float16" else torch.float32
    derived = derived_parts(targets)  # DSTG full = [sem | ap]: no file, served on read
    stored = [target for target in targets if target.key not in derived]
    files = {target.key: (target.file, (n_tokens, widths[target.key]), np_dtype) for target in stored}
    files.update({f"labels/{column}": (f"labels_{column}.npy", (n_tokens,), column_dtype)
                  for column, column_dtype in LABEL_COLUMNS.items()})

    def reserve_files():  # rank 0 sizes every file once; then each rank opens them to write its own rows
        if ranks.first:
            for file, shape, file_dtype in files.values():
                NpyWriter(folder / file, shape, file_dtype).close()

    ranks.together(reserve_files)
    writers: dict[str, NpyWriter] = {}
    accumulator = None
    if config.attention_summaries:
        accumulator = AttentionAccumulator(model.config.n_layers, model.config.n_heads,
                                           list(logit_terms(model.config.variant)), config.max_offset,
                                           model.config.max_positions)

    def run_my_batches():
        for key, (file, shape, file_dtype) in files.items():
            writers[key] = NpyWriter(folder / file, shape, file_dtype, create=False)
        pad_id = model.special_ids["pad"] if is_hf else model.config.pad_token_id
        device = next(model.parameters()).device  # batches go where the model is (cpu or cuda)
        plan = ranks.share(batch_plan(lengths, config.batch_size))
        bar = tqdm(total=int(sum(lengths[batch].sum() for batch in plan)), unit="tok", disable=not progress,
                   desc=f"extract -> {folder.name.split('.tmp-')[0].lstrip('.')}"
                        + (f" (rank {ranks.rank}/{ranks.world_size})" if ranks.grouped else ""))
        with torch.inference_mode():
            for batch in plan:
                items = [sequences[int(i)] for i in batch]
                tokens, mask = _collate([item["input_ids"] for item in items], pad_id)
                if int(tokens.max()) >= model.config.vocab_size:
                    raise StoreError(f"token id {int(tokens.max())} is outside the model's vocabulary of "
                                     f"{model.config.vocab_size}; the sequences were built with another tokenizer")
                captured = capture_states(model, targets, tokens.to(device), mask.to(device), accumulator)
                runs = _contiguous_runs(batch, lengths, row_start)
                for key, rows in _real_rows(captured, stored, mask.to(device), torch_dtype).items():
                    for first_row, start, stop in runs:
                        writers[key].write(first_row, rows[start:stop])
                for column, column_dtype in LABEL_COLUMNS.items():
                    values = np.concatenate([np.full(lengths[i], i) if column == "sequence" else item[column]
                                             for i, item in zip(batch, items)]).astype(column_dtype, copy=False)
                    for first_row, start, stop in runs:
                        writers[f"labels/{column}"].write(first_row, values[start:stop])
                bar.update(int(lengths[batch].sum()))
        bar.close()

    try:
        ranks.together(run_my_batches)
    finally:
        for writer in writers.values():
            writer.close()

    partial = ranks.gather(accumulator)  # every rank's attention sums
    if not ranks.first:
        return None
    if accumulator is not None:
        for other in partial[1:]:
            accumulator.merge(other)
    attention = accumulator.save(folder) if accumulator is not None else None
    documents = getattr(sequences, "meta", {}).get("documents", [])
    (folder / "documents.json").write_text(json.dumps(documents, ensure_ascii=False) + "\n")
    ExtractionConfig.from_dict(identity["extraction"]).to_json(folder / "extraction.json")
    arrays = {t.key: ({"parts": derived[t.key]} if t.key in derived else {"file": t.file})
              | {"shape": [n_tokens, widths[t.key]], "dtype": config.dtype, "hooks": t.hooks} for t in targets}
    labels = {"files": {column: f"labels_{column}.npy" for column in LABEL_COLUMNS}, "documents": "documents.json"}
    meta = getattr(sequences, "meta", {})
    extra = {
        "model_path": str(getattr(model, "checkpoint_path", None) or ""),
        "corpus": {key: meta.get(key) for key in ("corpus_spec", "tokenizer_hash", "max_length", "windows")},
        "layers": [layer for layer in config.layers], "subspaces": list(config.subspaces), "names": list(config.names),
    }
    return build_manifest(identity, arrays, labels, attention, n_tokens, len(lengths), extra)


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


def batch_plan(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Sequence indices of each forward batch: longest first, so a batch pads to similar lengths."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def capture_states(model, targets: list[Target], tokens, mask, accumulator) -> dict[str, torch.Tensor]:
    """One forward, returning {hook name: [batch, pos, d]} for every hook the targets read."""
    if isinstance(model, HFEncoder):
        hidden = model.hidden_states(tokens, mask)
        return {f"hidden_states.{i}": h for i, h in enumerate(hidden)}
    needed = sorted({hook for target in targets for hook in target.hooks})
    captured: dict[str, torch.Tensor] = {}

    def save(tensor, hook):
        captured[hook.name] = tensor

    def stop(tensor, hook):
        raise _StopForward

    fwd_hooks = [(name, save) for name in needed]
    wants_final = any(name.startswith("hook_final") for name in needed)
    stop_at_layer = max(target.blocks_needed for target in targets)
    if accumulator is not None:
        fwd_hooks += _attention_hooks(model, accumulator, mask)
        stop_at_layer = model.config.n_layers
    if wants_final:  # the last hook before the MLM head: stop there instead of computing logits
        fwd_hooks.append(("hook_final_sem" if model.config.variant == "dstg" else "hook_final", stop))
        stop_at_layer = None
    with model.hooks(fwd_hooks=fwd_hooks):
        try:
            model(tokens, attention_mask=mask, stop_at_layer=stop_at_layer)
        except _StopForward:
            pass
    return captured


def _attention_hooks(model, accumulator: AttentionAccumulator, mask: torch.Tensor):
    """Hooks that hand each block's logit terms and pattern to the accumulator, one block at a time."""
    lengths = mask.sum(dim=1).tolist()
    hooks, terms = [], logit_terms(model.config.variant)
    for layer in range(model.config.n_layers):
        held: dict[str, torch.Tensor] = {}

        def keep(tensor, hook, held=held):
            held[hook.name.rsplit(".", 1)[-1]] = tensor

        def summarise(pattern, hook, held=held, layer=layer):
            accumulator.update(layer, [held[suffix] for suffix in terms.values()], pattern, lengths)
            held.clear()  # drop this block's [B, H, T, T] tensors before the next block runs

        hooks += [(f"blocks.{layer}.attn.{suffix}", keep) for suffix in terms.values()]
        hooks.append((f"blocks.{layer}.attn.hook_pattern", summarise))
    return hooks


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


def _probe_widths(model, targets: list[Target]) -> dict[str, int]:
    """Run two tokens through the model once to learn each target's width and check its hooks are token states."""
    device = next(model.parameters()).device
    tokens = torch.zeros(1, 2, dtype=torch.long, device=device)
    mask = torch.ones(1, 2, dtype=torch.bool, device=device)
    with torch.inference_mode():
        captured = capture_states(model, targets, tokens, mask, accumulator=None)
    widths = {}
    for target in targets:
        for hook in target.hooks:
            if hook not in captured:
                raise StoreError(f"hook {hook!r} did not fire in a forward pass of this {model.config.variant!r} model")
            shape = tuple(captured[hook].shape)
            if len(shape) != 3 or shape[:2] != (1, 2):
                raise StoreError(f"hook {hook!r} gives shape {list(shape)}, not a token state [batch, pos, d]; "
                                 "only token-level hooks can be stored")
        widths[target.key] = sum(int(captured[hook].shape[-1]) for hook in target.hooks)
    return widths


def _collate(rows, pad_id: int):
    lengths = torch.tensor([len(row) for row in rows])
    tokens = torch.full((len(rows), int(lengths.max())), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = torch.as_tensor(np.asarray(row), dtype=torch.long)
    return tokens, torch.arange(tokens.shape[1])[None, :] < lengths[:, None]


def _lengths(sequences) -> np.ndarray:
    if hasattr(sequences, "lengths"):
        return np.asarray(sequences.lengths, dtype=np.int64)
    return np.array([len(sequences[i]["input_ids"]) for i in range(len(sequences))], dtype=np.int64)


def as_sequences(model, sequences, max_length: int, windows: bool):
    """Documents are tokenized here, with the model's own tokenizer; sequences pass through."""
    from dstg_interp.data import Document, build_structured_sequences

    if not isinstance(sequences, (list, tuple)) or not sequences or not isinstance(sequences[0], Document):
        return sequences
    if isinstance(model, HFEncoder):
        return model.structured_sequences(list(sequences), max_length=max_length, windows=windows)
    if model.tokenizer is None:
        raise StoreError("the model has no tokenizer (no tokenizer.json in its checkpoint); pass StructuredSequences "
                         "built with the tokenizer it was trained with")
    max_length = min(max_length, model.config.max_positions)
    return build_structured_sequences(list(sequences), model.tokenizer, max_length=max_length, windows=windows)


def _check_tokenizer(model, sequences) -> None:
    from dstg_interp.data import tokenizer_hash

    tokenizer = getattr(model, "tokenizer", None)
    expected = getattr(sequences, "meta", {}).get("tokenizer_hash")
    if tokenizer is None or not expected:
        return
    actual = tokenizer_hash(tokenizer)
    if actual != expected:
        raise StoreError(f"the sequences were tokenized with tokenizer {expected[:12]} but the model's tokenizer is "
                         f"{actual[:12]}; pass the documents instead (they are then tokenized with the model's own)")


def _reusable(out: Path, identity: dict, overwrite: bool) -> bool:
    """True when ``out`` already holds this exact store; raises when it holds something else."""
    if not out.exists():
        return False
    if overwrite:
        return False
    if out.is_dir() and not any(out.iterdir()):
        return False
    if not (out / MANIFEST_FILE).is_file():
        raise StoreError(f"{out} exists and is not an activation store; choose another out folder or pass overwrite=True")
    manifest = read_manifest(out)  # a store of a format version this code cannot read raises here
    # An older format that still reads holds the same arrays: reuse it rather than extract again.
    same_format = {**manifest.get("identity", {}), "format_version": identity["format_version"]}
    if same_format == json.loads(json.dumps(identity)):
        return True
    differs = [key for key in ("model", "sequences", "extraction") if manifest["identity"].get(key) != identity[key]]
    raise StoreError(f"{out} holds a different store ({', '.join(differs)} differ); choose another out folder or "
                     "pass overwrite=True")

