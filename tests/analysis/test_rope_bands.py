"""RoPE heads by frequency band (analysis/rope_bands.py): the planes add up to the head's logit, a head that
reads only position scores positional, a low-frequency content head semantic; the authors' NeoBERT layout is
read; a model without rotary heads is one clear error."""

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hf_writers import write_tiny_bert
from tokenizers import Tokenizer
from transformers import ModernBertConfig, ModernBertForMaskedLM

from dstg_interp import EncoderError
from dstg_interp.analysis import band_stats, band_sweep, classify_band_heads, logit_lens
from dstg_interp.analysis.rope_bands import plane_logits
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.edits import edit_hooks
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
AUTHORS = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"


def batch(rows=3, length=24):
    return torch.randint(5, 97, (rows, length), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def rope():
    return open_encoder(tiny_model("rope", init_std=0.2).eval())


def test_the_planes_add_up_to_the_heads_logit(rope):
    tokens = batch()
    _, cache = rope.model.run_with_cache(tokens, names_filter=lambda n: n.endswith(("hook_q", "hook_k", "hook_logits")))
    for block in range(rope.n_layers):
        planes = plane_logits(cache[f"blocks.{block}.attn.hook_q"], cache[f"blocks.{block}.attn.hook_k"],
                              rope.model.blocks[block].attn.rotary)
        torch.testing.assert_close(planes.sum(-1).float(), cache[f"blocks.{block}.attn.hook_logits"], atol=1e-5, rtol=1e-5)


def test_a_head_that_reads_only_position_is_positional_and_a_slow_content_head_semantic(rope):
    tokens = batch()
    constant = torch.randn(8, generator=torch.Generator().manual_seed(1))

    def position_only(x):  # head 0: the same query and key for every token, so only the offset moves its logit
        x = x.clone()
        x[:, :, 0] = constant
        return x

    def slow_content(x):  # head 1: the token's query / key, in the slowest plane only
        x = x.clone()
        keep = torch.zeros(8, dtype=torch.bool)
        keep[[3, 7]] = True
        x[:, :, 1] = torch.where(keep, x[:, :, 1], torch.zeros(()))
        return x

    edits = {"blocks.0.attn.hook_q": lambda x: slow_content(position_only(x)),
             "blocks.0.attn.hook_k": lambda x: slow_content(position_only(x))}
    with edit_hooks(rope, edits):
        stats = band_stats(rope, tokens, n_bands=4)
    heads = classify_band_heads(stats).set_index(["layer", "head"])
    assert heads.loc[(0, 0), "label"] == "positional" and heads.loc[(0, 0), "high_share"] > 0.99
    # the offset explains nearly all of it (not all: each query centres over its own keys)
    assert heads.loc[(0, 0), "positional_score"] > 0.99 > heads.loc[(0, 1), "positional_score"]
    assert heads.loc[(0, 1), "label"] == "semantic" and heads.loc[(0, 1), "share_band3"] == pytest.approx(1.0)
    shares = stats.groupby(["layer", "head"]).share.sum()
    np.testing.assert_allclose(shares, 1.0)
    sweep = band_sweep(stats.assign(model="rope"))
    assert set(sweep.threshold) == {0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9}
    assert (sweep.groupby("threshold").n_heads.sum() == 2 * rope.n_heads).all()


def test_the_authors_neobert_layout_is_read():
    encoder = open_encoder(AUTHORS / "neobert-hf")
    ids = torch.from_numpy(np.load(AUTHORS / "inputs" / "input_ids_a.npy"))
    mask = torch.from_numpy(np.load(AUTHORS / "inputs" / "attention_mask_a.npy"))
    heads = classify_band_heads(band_stats(encoder, ids, mask, n_bands=2))
    assert len(heads) == encoder.n_layers * encoder.n_heads and heads.high_share.between(0, 1).all()


def test_a_model_without_rotary_heads_is_one_clear_error(tmp_path):
    for encoder in (open_encoder(tiny_model("dstg").eval()), open_encoder(AUTHORS / "posneobert-baseline-ap")):
        with pytest.raises(EncoderError, match="needs rotary"):
            band_stats(encoder, batch())
    write_tiny_bert(tmp_path / "bert", tiny_documents(n_docs=6))
    with pytest.raises(EncoderError, match="needs rotary .* has none"):
        band_stats(open_encoder(tmp_path / "bert"), batch() % 20)
    with pytest.raises(EncoderError, match="n_bands"):
        band_stats(open_encoder(tiny_model("rope").eval()), batch(), n_bands=9)


def test_a_hugging_face_rope_encoder_is_refused_saying_why(tmp_path):
    """A tiny random ModernBERT (rotary heads, read by the HF adapter): its hidden states are read (the lens at the
    last layer is its output), but its heads' queries and keys are not exposed, and the refusal says so."""
    write_tiny_bert(tmp_path / "bert", tiny_documents(n_docs=6))  # for its tokenizer
    tokenizer = Tokenizer.from_file(str(tmp_path / "bert" / "tokenizer.json"))
    special = {f"{name}_token_id": tokenizer.token_to_id(f"[{name.upper()}]") for name in ("pad", "cls", "sep")}
    config = ModernBertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, **special)
    torch.manual_seed(0)
    ModernBertForMaskedLM(config).eval().save_pretrained(tmp_path / "modernbert", safe_serialization=True)
    tokenizer.save(str(tmp_path / "modernbert" / "tokenizer.json"))
    encoder = open_encoder(tmp_path / "modernbert", mlm_head=True)
    tokens = batch(length=12) % encoder.vocab_size
    with pytest.raises(EncoderError, match="Hugging Face RoPE encoder .* does not expose"):
        band_stats(encoder, tokens)
    lens = logit_lens(encoder, tokens, n_masked=2)
    assert lens.kl_to_final.iloc[-1] == pytest.approx(0.0, abs=1e-5) and lens.top1_agreement.iloc[-1] == 1.0
