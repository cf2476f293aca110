"""The MLM logit lens (analysis/mlm_lens.py): at the last layer it is the model's own output, for ours, the
authors' formats and a tiny HF masked LM; a model without an MLM head is one clear error."""

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hf_writers import write_tiny_bert

from dstg_interp import EncoderError
from dstg_interp.analysis import logit_lens, masked_batch
from dstg_interp.encoders import open_encoder
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
AUTHORS = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"


def batch(rows=3, length=12, vocab=97):
    tokens = torch.randint(5, vocab, (rows, length), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = 2, 3
    return tokens


def final_answers(encoder, tokens, n_masked=3):
    masked = masked_batch(encoder, tokens, n_masked=n_masked, seed=0)
    with torch.no_grad():
        logits = encoder.mlm_logits(masked.tokens, masked.attention_mask)[masked.scored]
    return masked, logits


@pytest.mark.parametrize("variant", ["dstg", "rope", "ap", "rp"])
def test_the_lens_at_the_last_layer_is_the_models_output(variant):
    encoder = open_encoder(tiny_model(variant, init_std=0.2).eval())
    tokens = batch()
    table = logit_lens(encoder, tokens, n_masked=3)
    masked, logits = final_answers(encoder, tokens)
    last = table[table.layer == encoder.n_layers].iloc[0]
    assert last.kl_to_final == pytest.approx(0.0, abs=1e-6) and last.top1_agreement == 1.0
    answers = masked.targets[masked.scored]
    assert last.top1_accuracy == pytest.approx(float((logits.argmax(-1) == answers).double().mean()))
    assert list(table.layer) == list(range(encoder.n_layers + 1))
    assert table.subspace.iloc[0] == ("sem" if variant == "dstg" else "full")
    assert (table.kl_to_final[:-1] > 0).all()  # earlier layers are not the output


def test_authors_formats_full_head_and_tiny_hf_masked_lm(tmp_path):
    ids = torch.from_numpy(np.load(AUTHORS / "inputs" / "input_ids_a.npy"))[:2, :16]
    for folder, subspaces in (("posneobert-dstg", {"sem"}), ("posneobert-mixedffn-fulldecoding", {"sem", "full"})):
        encoder = open_encoder(AUTHORS / folder)
        table = logit_lens(encoder, ids, n_masked=3)
        assert set(table.subspace) == subspaces
        last = table[(table.layer == encoder.n_layers) & (table.subspace == table.subspace.iloc[0])].iloc[0]
        assert last.kl_to_final == pytest.approx(0.0, abs=1e-5)
    write_tiny_bert(tmp_path, tiny_documents(n_docs=6), mlm_head=True)
    bert = open_encoder(tmp_path, mlm_head=True)
    table = logit_lens(bert, batch(vocab=bert.vocab_size), n_masked=3)
    assert table.kl_to_final.iloc[-1] == pytest.approx(0.0, abs=1e-6) and table.top1_agreement.iloc[-1] == 1.0


def test_a_model_without_an_mlm_head_is_one_clear_error(tmp_path):
    with pytest.raises(EncoderError, match="the logit lens needs a masked-LM head"):
        logit_lens(open_encoder(AUTHORS / "posneobert-dstg-encoder"), batch())
    write_tiny_bert(tmp_path, tiny_documents(n_docs=6))
    with pytest.raises(EncoderError, match="mlm_head=True"):
        logit_lens(open_encoder(tmp_path), batch(vocab=20))
