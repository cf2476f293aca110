"""Activation store: stored states vs run_with_cache, labels, atomicity, reuse, bad input, CLI."""

import errno
import importlib
import json

import numpy as np
import pytest
import torch

from conftest import VARIANTS, tiny_model, write_synthetic_corpus
from dstg_interp import ActivationStore, StoreError, extract
from dstg_interp.data import build_structured_sequences, build_tokenizer, load_corpus, train_tokenizer
from dstg_interp.store import FORMAT_VERSION, StoreInterrupted, npy_writer
from dstg_interp.encoders import length_sorted_batches as batch_plan
from dstg_interp.store.targets import layer_hooks

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = write_synthetic_corpus(tmp_path_factory.mktemp("corpus") / "docs", n_docs=8)
    documents = load_corpus(str(folder), progress=False)
    tokenizer = train_tokenizer(documents, vocab_size=97)
    sequences = build_structured_sequences(documents, tokenizer, max_length=24, windows=True)
    return documents, tokenizer, sequences


def model_for(variant, tokenizer, **overrides):
    model = tiny_model(variant, vocab_size=tokenizer.get_vocab_size(), **overrides).eval()
    model.tokenizer = tokenizer
    return model


def expected_states(model, sequences, hooks, batch_size):
    """Brute force: run_with_cache on the same batches, rows of real tokens put back in sequence order."""
    rows = {}
    for batch in batch_plan(sequences.lengths, batch_size):
        ids = [sequences[int(i)]["input_ids"] for i in batch]
        length = max(len(x) for x in ids)
        tokens = torch.zeros(len(ids), length, dtype=torch.long)
        mask = torch.zeros(len(ids), length, dtype=torch.bool)
        for j, x in enumerate(ids):
            tokens[j, :len(x)], mask[j, :len(x)] = torch.as_tensor(x, dtype=torch.long), True
        with torch.no_grad():  # with autograd on, SDPA picks another kernel (differences ~4e-9)
            _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=hooks)
        for j, i in enumerate(batch):
            rows[int(i)] = {h: cache[h][j, :len(ids[j])] for h in hooks}
    return {h: torch.cat([rows[i][h] for i in range(len(sequences))]).numpy() for h in hooks}


@pytest.mark.parametrize("variant", VARIANTS)
def test_states_bit_identical_to_run_with_cache(variant, corpus, tmp_path):
    _, tokenizer, sequences = corpus
    model = model_for(variant, tokenizer)
    store = extract(model, sequences, tmp_path / "store", layers=(0, 1, 2, "final"), dtype="float32",
                    batch_size=3, progress=False)
    hooks = sorted({h for layer in store.layers for s in store.subspaces for h in layer_hooks(variant, layer, s)})
    expected = expected_states(model, sequences, hooks, batch_size=3)
    for layer in store.layers:
        for subspace in store.subspaces:
            want = np.concatenate([expected[h] for h in layer_hooks(variant, layer, subspace)], axis=1)
            got = store.states(layer, subspace)
            assert got.dtype == np.float32 and got.shape == (sequences.n_tokens, want.shape[1])
            assert np.array_equal(got, want), (layer, subspace)


def test_dstg_full_is_sem_then_ap(corpus, tmp_path):
    _, tokenizer, sequences = corpus
    store = extract(model_for("dstg", tokenizer), sequences, tmp_path / "s", dtype="float16", progress=False)
    assert store.subspaces == ("sem", "ap", "full") and store.layers == (0, 1, 2)
    for layer in store.layers:
        full = store.states(layer, "full")
        assert full.shape[1] == 24 + 8
        assert np.array_equal(full, np.concatenate([store.states(layer, "sem"), store.states(layer, "ap")], axis=1))
    # AP rows at layer 0 are the position table rows of each token's position
    table = model_for("dstg", tokenizer).ap_table.detach().half().numpy()
    assert np.array_equal(store.states(0, "ap"), table[store.labels["token_position"].to_numpy()])


def test_labels_align_token_by_token(corpus, tmp_path):
    _, tokenizer, sequences = corpus
    store = extract(model_for("rope", tokenizer), sequences, tmp_path / "s", layers=1, progress=False)
    expected = sequences.to_dataframe()
    labels = store.labels
    assert len(labels) == sequences.n_tokens == store.n_tokens
    for column in expected.columns:
        assert np.array_equal(labels[column].to_numpy(), expected[column].to_numpy()), column
    # each stored row belongs to the token its labels name: layer-0 state is that token's embedding
    store0 = extract(model_for("rope", tokenizer), sequences, tmp_path / "s0", layers=0, dtype="float32", progress=False)
    embed = model_for("rope", tokenizer).embed.weight.detach().numpy()
    assert np.array_equal(store0.states(0), embed[labels["input_ids"].to_numpy()])


def test_subsample_and_torch_view(corpus, tmp_path):
    _, tokenizer, sequences = corpus
    store = extract(model_for("ap", tokenizer), sequences, tmp_path / "s", layers=(2,), progress=False)
    rows = store.subsample(50, seed=3)
    assert np.array_equal(rows, store.subsample(50, seed=3)) and not np.array_equal(rows, store.subsample(50, seed=4))
    assert len(rows) == 50 and np.all(np.diff(rows) > 0) and not store.labels["is_special"].to_numpy()[rows].any()
    assert len(store.subsample(10**9, exclude_special=False)) == store.n_tokens
    tensor = store.states(2, as_torch=True)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (store.n_tokens, 32)
    tensor[0] = 0  # copy-on-write: the file does not change
    assert store.states(2)[0].any()


def test_interrupted_then_rerun_gives_the_same_store(corpus, tmp_path, monkeypatch):
    _, tokenizer, sequences = corpus
    model = model_for("dstg", tokenizer)
    reference = extract(model, sequences, tmp_path / "reference", batch_size=2, progress=False)
    calls = {"n": 0}
    real_write = npy_writer.NpyWriter.write

    def write_then_ctrl_c(self, start_row, rows):
        calls["n"] += 1
        if calls["n"] == 40:
            raise KeyboardInterrupt
        return real_write(self, start_row, rows)

    monkeypatch.setattr(npy_writer.NpyWriter, "write", write_then_ctrl_c)
    with pytest.raises(StoreInterrupted, match="interrupted") as caught:
        extract(model, sequences, tmp_path / "store", batch_size=2, progress=False)
    assert isinstance(caught.value, KeyboardInterrupt) and isinstance(caught.value, StoreError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reference"]  # no store, no temporary folder left
    monkeypatch.setattr(npy_writer.NpyWriter, "write", real_write)
    store = extract(model, sequences, tmp_path / "store", batch_size=2, progress=False)
    files = sorted(p.name for p in reference.directory.iterdir())
    assert files == sorted(p.name for p in store.directory.iterdir())
    for name in files:
        if name != "manifest.json":
            assert (reference.directory / name).read_bytes() == (store.directory / name).read_bytes(), name
    assert store.manifest["identity"] == reference.manifest["identity"]


def test_rerun_reuses_and_refuses_a_different_store(corpus, tmp_path, monkeypatch):
    _, tokenizer, sequences = corpus
    model = model_for("rp", tokenizer)
    first = extract(model, sequences, tmp_path / "s", layers=(1,), progress=False)
    extract_module = importlib.import_module("dstg_interp.store.extract")  # the package re-exports `extract`
    monkeypatch.setattr(extract_module, "_extract_into", lambda *a, **k: pytest.fail("recomputed a complete store"))
    again = extract(model, sequences, tmp_path / "s", layers=(1,), progress=False)
    assert again.manifest == first.manifest
    with pytest.raises(StoreError, match="different store .*extraction"):
        extract(model, sequences, tmp_path / "s", layers=(2,), progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not an activation store"):
        extract(model, sequences, tmp_path / "other", progress=False)


def test_disk_full_is_one_clear_error(corpus, tmp_path, monkeypatch):
    _, tokenizer, sequences = corpus

    def full_disk(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npy_writer.os, "pwrite", full_disk)
    with pytest.raises(StoreError, match="disk full"):
        extract(model_for("dstg", tokenizer), sequences, tmp_path / "s", progress=False)
    assert list(tmp_path.iterdir()) == []

    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.undo()
    monkeypatch.setattr(npy_writer.os, "posix_fallocate", no_room, raising=False)
    with pytest.raises(StoreError, match="disk full"):
        extract(model_for("dstg", tokenizer), sequences, tmp_path / "s", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_input_errors(corpus, tmp_path):
    documents, tokenizer, sequences = corpus
    dstg, rope = model_for("dstg", tokenizer), model_for("rope", tokenizer)
    cases = [
        (dict(model=dstg, names=("blocks.0.hook_resid_post_semm",)), "unknown hook name .*did you mean 'blocks.0.hook_resid_post_sem'"),
        (dict(model=dstg, names=("blocks.0.attn.hook_pattern",)), "attention map"),
        (dict(model=dstg, layers=(5,)), "layer 5 does not exist"),
        (dict(model=dstg, layers=("middle",)), "unknown layer 'middle'"),
        (dict(model=rope, subspaces=("ap",)), "subspace 'ap' does not exist in a 'rope' model"),
        (dict(model=dstg, dtype="bfloat16"), "dtype 'bfloat16'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(StoreError, match=message):
            extract(sequences=sequences, out=tmp_path / "s", progress=False, **kwargs)
    other_tokenizer = build_tokenizer(list("abcdefghijklmnopqrstuvwxyz"))
    mismatched = model_for("dstg", other_tokenizer)
    with pytest.raises(StoreError, match="tokenized with tokenizer"):
        extract(mismatched, sequences, tmp_path / "s", progress=False)
    mismatched.tokenizer = None  # no tokenizer to compare: the ids themselves do not fit
    with pytest.raises(StoreError, match="outside the model's vocabulary"):
        extract(mismatched, sequences, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_other_format_version_is_refused(corpus, tmp_path):
    _, tokenizer, sequences = corpus
    model = model_for("ap", tokenizer)
    store = extract(model, sequences, tmp_path / "s", layers=(0,), progress=False)
    manifest = json.loads((store.directory / "manifest.json").read_text())
    manifest["format_version"] = 99
    (store.directory / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match="format version 99"):
        ActivationStore(store.directory)
    with pytest.raises(StoreError, match="format version 99"):
        extract(model, sequences, tmp_path / "s", layers=(0,), progress=False)
    assert extract(model, sequences, tmp_path / "s", layers=(0,), progress=False, overwrite=True).manifest["format_version"] == FORMAT_VERSION


def test_documents_are_tokenized_with_the_model_tokenizer(corpus, tmp_path):
    documents, tokenizer, sequences = corpus
    store = extract(model_for("dstg", tokenizer), documents, tmp_path / "s", layers=(0,), max_length=24, progress=False)
    assert store.n_tokens == sequences.n_tokens
    assert np.array_equal(store.labels["input_ids"].to_numpy(), sequences.arrays["input_ids"])


def test_cli(corpus, tmp_path, capsys):
    from dstg_interp.cli.cache import main

    documents, tokenizer, _ = corpus
    checkpoint = model_for("dstg", tokenizer).save(tmp_path / "ckpt", tokenizer=tokenizer)
    corpus_folder = write_synthetic_corpus(tmp_path / "docs", n_docs=4)
    args = ["--model", str(checkpoint), "--corpus", str(corpus_folder), "--max-length", "24", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "s"), "--layers", "0,2,final", "--subspaces", "ap"]) == 0
    store = ActivationStore(tmp_path / "s")
    assert store.layers == (0, 2, "final") and store.subspaces == ("ap",)
    assert store.manifest["model_path"] == str(checkpoint)
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "bad"), "--layers", "0,7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dstg-cache: error: layer 7 does not exist") and "\n" not in err
    assert main(["--model", str(tmp_path / "nope"), "--corpus", str(corpus_folder), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "bad").exists() and not (tmp_path / "x").exists()
