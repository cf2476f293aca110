"""Stores that other tools read: export a store (or some of its layers x subspaces) as a Hugging Face
``datasets`` Arrow dataset, one row per token, the labels as columns.

    from dstg_interp.store.export import export_store
    export_store("runs/store-dstg", "runs/store-dstg-hf", layers=[3], subspaces=["ap"])
    import datasets
    table = datasets.load_from_disk("runs/store-dstg-hf")      # columns: layer_3_ap, token_position, ..., doc_id
    table.with_format("numpy")["layer_3_ap"]                   # [n_tokens, d_ap], the store's values

What lands in ``out`` is what ``Dataset.save_to_disk`` writes (``data-0000i-of-0000n.arrow`` shards,
``dataset_info.json``, ``state.json``; ``config.json`` when a config is given), written directly by the library's ``ArrowWriter`` from the store's
memory-mapped files, chunk by chunk: the token states are copied once, from the store into the Arrow files,
never through an in-memory table or the datasets cache.  State columns are fixed-length lists in the store's
dtype, named ``layer_{layer}_{subspace}`` (``layer_final_sem``); label columns keep their store dtypes, and
``doc_id`` is the document's string id.  SAELens-style readers stream it with
``load_from_disk(out).to_iterable_dataset()``.  The disk space the export takes is printed before it starts
(``export_size``), and the export is refused when the disk has less free; ``out`` must not exist or be empty.
Everything is written to a temporary sibling folder renamed onto ``out`` at the end.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from dstg_interp.data.labels import label_bytes
from dstg_interp.io import check_output_location, check_outside_inputs, folder_entries, written_atomically

from .manifest import StoreError
from .reader import ActivationStore

CHUNK_ROWS = 16384
MAX_SHARD_BYTES = 500 * 2**20  # save_to_disk's default shard size


def column_name(layer, subspace: str) -> str:
    return f"layer_{layer}_{subspace}"


def export_size(store: ActivationStore, layers=None, subspaces=None) -> int:
    """Bytes the Arrow shards of ``export_store(store, ..., layers, subspaces)`` take (a close upper bound)."""
    keys = _selected(store, layers, subspaces)
    widths = sum(store.manifest["arrays"][f"{layer}/{sub}"]["shape"][1] for layer, sub in keys)
    itemsize = 2 if store.dtype == "float16" else 4
    longest_id = max((len(str(doc.get("doc_id") or "")) for doc in store.documents), default=0)
    return store.n_tokens * (widths * itemsize + label_bytes() + 4 + longest_id) + 65536  # + doc_id offset and text


def check_disk_space(folder: Path, needed: int, what: str,
                     remedy: str = "free space, choose another folder or export fewer layers / subspaces") -> None:
    """Refuse (StoreError) when the disk holding ``folder`` has less than ``needed`` bytes free; ``remedy`` says
    what to do (the export's own by default)."""
    probe = Path(folder).resolve()
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise StoreError(f"{what} needs about {needed / 2**20:.0f} MiB but {probe} has {free / 2**20:.0f} MiB free; "
                         f"{remedy}")


def export_store(store, out, layers=None, subspaces=None, progress: bool = True, config: dict | None = None) -> Path:
    """Write the Arrow dataset of ``store`` (an ActivationStore or its folder) into ``out`` (module docstring);
    ``config`` (dstg-export's, say) is written with it as ``config.json``, in the same atomic step.  A folder is
    held for reading throughout (``with ActivationStore(...)``), so no writer replaces it half-way (round 4, X5)."""
    if not isinstance(store, ActivationStore):
        with ActivationStore(store) as held:
            return export_store(held, out, layers, subspaces, progress, config)
    import datasets  # a dependency, but heavy: the store room loads it only for an export
    from datasets.arrow_writer import ArrowWriter

    out = Path(out)
    check_output_location(out)  # a file, under a file, read-only, /proc: said as such, not as a lack of space
    check_outside_inputs(out, [("the store", store.directory)], suffix="hf")
    if out.exists() and (not out.is_dir() or folder_entries(out)):
        raise StoreError(f"{out} exists and is not an empty folder; export into a new folder")
    keys = _selected(store, layers, subspaces)
    needed = export_size(store, layers, subspaces)
    if progress:
        print(f"export {store.directory} -> {out}: {store.n_tokens} tokens, {len(keys)} state column(s), "
              f"about {needed / 2**20:.1f} MiB", file=sys.stderr)
    check_disk_space(out.parent, needed, f"the export of {store.directory}")
    features = _features(store, keys, datasets)
    labels = store.labels
    row_bytes = max(needed // max(store.n_tokens, 1), 1)
    shard_rows = max(CHUNK_ROWS, (MAX_SHARD_BYTES // row_bytes) // CHUNK_ROWS * CHUNK_ROWS)
    bounds = list(range(0, store.n_tokens, shard_rows)) + [store.n_tokens]
    with written_atomically(out, owned=lambda folder: False, kind="dataset") as tmp:  # only onto nothing / empty
        files = []
        for shard, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
            name = f"data-{shard:05d}-of-{len(bounds) - 1:05d}.arrow"
            with ArrowWriter(features=features, path=str(tmp / name)) as writer:
                for first in range(start, stop, CHUNK_ROWS):
                    writer.write_table(_chunk(store, labels, keys, first, min(first + CHUNK_ROWS, stop), features))
                writer.finalize()
            files.append({"filename": name})
        datasets.DatasetInfo(features=features, description=f"dstg-interp activation store {store.directory}")\
            .write_to_directory(str(tmp))
        state = {"_data_files": files, "_fingerprint": store.manifest["identity"]["sequences"]["sha256"][:16],
                 "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
                 "_split": None}
        (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n")
        if config is not None:
            (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def _selected(store: ActivationStore, layers, subspaces) -> list[tuple]:
    layers = list(store.layers) if layers is None else list(layers)
    subspaces = list(store.subspaces) if subspaces is None else list(subspaces)
    for layer in layers:
        for subspace in subspaces:
            store._key(layer, subspace)  # one clear StoreError for a layer or subspace the store lacks
    return [(layer, subspace) for layer in layers for subspace in subspaces]


def _features(store: ActivationStore, keys, datasets):
    columns = {}
    for layer, subspace in keys:
        width = store.manifest["arrays"][f"{layer}/{subspace}"]["shape"][1]
        columns[column_name(layer, subspace)] = datasets.List(datasets.Value(store.dtype), length=width)
    for column, array in store.labels.items():
        columns[column] = datasets.Value("string") if column == "doc_id" else datasets.Value(str(array.dtype))
    return datasets.Features(columns)


def _chunk(store, labels, keys, start: int, stop: int, features) -> pa.Table:
    arrays, names = [], []
    for layer, subspace in keys:
        block = np.ascontiguousarray(store.states(layer, subspace)[start:stop])
        arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(block.reshape(-1)), block.shape[1]))
        names.append(column_name(layer, subspace))
    for column in labels.columns:
        values = labels[column].to_numpy()[start:stop]
        arrays.append(pa.array(values.astype(str) if column == "doc_id" else values))
        names.append(column)
    return pa.Table.from_arrays(arrays, names=names).cast(features.arrow_schema)
