"""Store format 2 (DSTG ``full`` served as [sem | ap] on read) and reading format-1 stores."""

import importlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import RandomSequences, tiny_model
from dstg_interp import ActivationStore, extract
from dstg_interp.store import FORMAT_VERSION
from dstg_interp.store.extract import _contiguous_runs
from dstg_interp.store.layout import ConcatenatedRows
from dstg_interp.store.manifest import weights_sha256

torch.set_num_threads(1)
V1_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "store_v1"


def V1Sequences():
    """The five sequences the format-1 fixture was extracted from (random ids, simple structure labels)."""
    return RandomSequences([9, 12, 5, 12, 7], sentence=4, paragraph=8)


def cached_states(model, store):
    """run_with_cache over each stored sequence alone, real rows in store order: {hook: [n_tokens, d]}."""
    labels = store.labels
    rows = {}
    for _sequence, table in labels.groupby("sequence", sort=True):
        tokens = torch.tensor(table["input_ids"].to_numpy(), dtype=torch.long)[None]
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, attention_mask=torch.ones_like(tokens, dtype=torch.bool))
        for name, value in cache.items():
            if value.ndim == 3 and value.shape[1] == tokens.shape[1]:
                rows.setdefault(name, []).append(value[0].numpy())
    return {name: np.concatenate(parts) for name, parts in rows.items()}


def test_new_dstg_store_writes_each_stream_once_and_serves_full(tmp_path):
    model = tiny_model("dstg").eval()
    store = extract(model, V1Sequences(), tmp_path / "s", layers=(0, 1, 2, "final"), dtype="float32",
                    batch_size=2, progress=False)
    assert store.manifest["format_version"] == FORMAT_VERSION == 2
    assert not list(store.directory.glob("*_full.npy"))  # the bytes of sem and ap are on disk once
    expected = cached_states(model, store)
    for layer, (sem_hook, ap_hook) in {0: ("hook_embed_sem", "hook_embed_ap"),
                                       2: ("blocks.1.hook_resid_post_sem", "blocks.1.hook_resid_post_ap"),
                                       "final": ("hook_final_sem", "hook_final_ap")}.items():
        entry = store.manifest["arrays"][f"{layer}/full"]
        assert "file" not in entry and entry["parts"] == [f"{layer}/sem", f"{layer}/ap"]
        full = store.states(layer, "full")
        assert isinstance(full, ConcatenatedRows) and full.shape == (store.n_tokens, 32) and full.dtype == np.float32
        sem_ap = np.concatenate([store.states(layer, "sem"), store.states(layer, "ap")], axis=1)
        assert np.array_equal(np.asarray(full), sem_ap)
        np.testing.assert_allclose(np.asarray(full), np.concatenate([expected[sem_hook], expected[ap_hook]], axis=1),
                                   rtol=0, atol=1e-5)
        tensor = store.states(layer, "full", as_torch=True)
        assert isinstance(tensor, torch.Tensor) and np.array_equal(tensor.numpy(), sem_ap)


def test_full_alone_is_still_written_as_a_file(tmp_path):
    store = extract(tiny_model("dstg").eval(), V1Sequences(), tmp_path / "s", layers=(1,), subspaces=("full",),
                    dtype="float32", progress=False)
    assert store.manifest["arrays"]["1/full"]["file"] == "layer01_full.npy"
    assert isinstance(store.states(1, "full"), np.memmap) and store.states(1).shape == (store.n_tokens, 32)


def test_concatenated_rows_index_like_an_array():
    rng = np.random.default_rng(0)
    sem, ap = rng.normal(size=(50, 6)).astype(np.float16), rng.normal(size=(50, 2)).astype(np.float16)
    full, view = np.concatenate([sem, ap], axis=1), ConcatenatedRows([sem, ap])
    rows, mask = np.array([3, 0, 49, 3]), rng.random(50) < 0.3
    assert view.shape == full.shape and len(view) == 50 and view.dtype == np.float16 and view.nbytes == full.nbytes
    for key in (7, -1, slice(None), slice(10, 20, 3), rows, mask, (rows, 7), (slice(2, 9), slice(5, 8)), (4, [0, 6])):
        assert np.array_equal(view[key], full[key]), key
    assert np.array_equal(np.asarray(view, dtype=np.float64), full.astype(np.float64))
    assert np.array_equal(np.stack(list(view)), full)
    with pytest.raises(IndexError):
        view[..., 0]
    with pytest.raises(ValueError, match="same number of rows"):
        ConcatenatedRows([sem, ap[:10]])


def test_format_1_store_still_reads():
    store = ActivationStore(V1_STORE)
    assert store.manifest["format_version"] == 1 and store.subspaces == ("sem", "ap", "full")
    model = tiny_model("dstg").eval()
    assert store.manifest["identity"]["model"]["weights_sha256"] == weights_sha256(model)  # the model that wrote it
    expected = cached_states(model, store)
    for layer in store.layers:
        full = store.states(layer, "full")
        assert isinstance(full, np.memmap)  # format 1: its own file
        assert np.array_equal(full, np.concatenate([store.states(layer, "sem"), store.states(layer, "ap")], axis=1))
    np.testing.assert_allclose(store.states(2, "full")[:, 24:], expected["blocks.1.hook_resid_post_ap"], rtol=0, atol=1e-5)
    assert store.labels["doc_id"].tolist()[:3] == ["doc-0"] * 3


def test_format_1_store_is_reused_not_extracted_again(tmp_path, monkeypatch):
    out = tmp_path / "store_v1"
    shutil.copytree(V1_STORE, out)
    extract_module = importlib.import_module("dstg_interp.store.extract")
    monkeypatch.setattr(extract_module, "_extract_into", lambda *a, **k: pytest.fail("re-extracted a readable store"))
    store = extract(tiny_model("dstg").eval(), V1Sequences(), out, layers=(0, 1, 2, "final"), dtype="float32",
                    batch_size=2, progress=False)
    assert store.manifest["format_version"] == 1
    assert json.loads((out / "manifest.json").read_text()) == json.loads((V1_STORE / "manifest.json").read_text())


def test_contiguous_runs_merge_consecutive_sequences():
    lengths = np.array([4, 4, 4, 2, 4])
    row_start = np.concatenate([[0], np.cumsum(lengths)])
    # sequences 0, 1, 2 are consecutive in the store; 4 is not next to 2
    assert _contiguous_runs(np.array([0, 1, 2, 4]), lengths, row_start) == [(0, 0, 12), (14, 12, 16)]
    assert _contiguous_runs(np.array([4, 0]), lengths, row_start) == [(14, 0, 4), (0, 4, 8)]
