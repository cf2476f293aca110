"""Head classes for any encoder: each head's q.k split by the per-position mean of its queries and keys
(``analysis.head_split``), on hand-built tiny models with known answers, beside DSTG's own logit terms, and on tiny
Hugging Face encoders of the families whose queries and keys the adapter reads."""

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from transformers import AutoModel

from conftest import tiny_model
from hand_built_heads import N_HEADS, hand_built_dstg
from hf_writers import tiny_wordpiece, write_tiny_rotary
from dstg_interp.analysis.head_split import (SPLIT_TERMS, classify_split_heads, head_split_stats, layer_class_shares,
                                             read_queries_keys, split_terms, term_agreement, unread_blocks)
from dstg_interp.analysis.heads import classify_heads, head_summaries_from_cache, threshold_sweep
from dstg_interp.encoders import EncoderError, open_encoder
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)


def windows(n: int = 64, length: int = 20, seed: int = 1, vocab: int = 97) -> torch.Tensor:
    return torch.randint(5, vocab, (n, length), generator=torch.Generator().manual_seed(seed))


def strong_attention(model, scale: float, seed: int = 0):
    """The tiny model with its q/k/v weights drawn large, so its logits are far from uniform attention."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.copy_(torch.randn(block.attn.qkv.weight.shape, generator=generator) * scale)
    return model


def test_a_head_whose_queries_and_keys_read_only_a_position_ramp_is_positional():
    """AP-NeoBERT with its token embedding zeroed reads its position table alone, here a ramp a + t b: q and k are
    the same in every window, so the position term is the whole logit; with the positions shuffled (the control)
    the ramp moves into the context term."""
    model = strong_attention(tiny_model("ap"), 0.5)
    with torch.no_grad():
        model.embed.weight.zero_()
        ramp = torch.arange(model.pos_embed.weight.shape[0], dtype=torch.float32)[:, None]
        a, b = torch.randn(2, model.pos_embed.weight.shape[1], generator=torch.Generator().manual_seed(2))
        model.pos_embed.weight.copy_(a + 0.2 * ramp * b)
    stats = head_split_stats(open_encoder(model), windows(16), drop_ends=False)
    heads = classify_split_heads(stats)
    assert len(heads) == 2 * N_HEADS and (heads.label == "positional").all()
    assert np.allclose(heads.share_position, 1.0, atol=1e-9)
    assert np.allclose(heads[["js_without_context", "js_without_query_position", "js_without_key_position"]], 0,
                       atol=1e-9)
    assert (heads.js_without_position > 0.01).all()  # the softmax listens to the position term
    control = classify_split_heads(head_split_stats(open_encoder(model), windows(16), drop_ends=False,
                                                    shuffle_positions=True))
    assert (control.share_position < 0.2).all() and not (control.label == "positional").any()


def test_a_head_whose_queries_and_keys_read_only_content_is_semantic():
    """NoPE-NeoBERT has no position input: over 64 windows of random tokens its per-position means are what 64
    contexts average to, so the context term carries the logit and the cross terms only that leak."""
    model = strong_attention(tiny_model("nope"), 0.5)
    heads = classify_split_heads(head_split_stats(open_encoder(model), windows(64), drop_ends=False))
    assert (heads.label == "semantic").all()
    assert (heads.share_context > 0.9).all() and (heads.share_position < 0.01).all()
    # the leak shrinks with the windows averaged: 16 windows leave more of each context in the position part
    fewer = classify_split_heads(head_split_stats(open_encoder(model), windows(16), drop_ends=False))
    assert fewer.share_cross.mean() > 2 * heads.share_cross.mean()


@pytest.mark.parametrize("variant", ["dstg", "rope", "rp"])
def test_the_four_terms_sum_to_the_model_s_own_logit_terms(variant):
    """Whatever the position parts, the terms add up to the logit: DSTG's sem + AP + RP, RoPE's rotated q.k,
    RP-NeoBERT's q.k + bias (its bias drawn large so it is not zero)."""
    model = hand_built_dstg() if variant == "dstg" else strong_attention(tiny_model(variant), 0.5)
    if variant == "rp":
        with torch.no_grad():
            for block in model.blocks:
                block.attn.rel_bias.bias.normal_(0, 2.0, generator=torch.Generator().manual_seed(4))
    encoder = open_encoder(model)
    tokens = windows(4, 12)
    read = read_queries_keys(encoder, tokens, torch.ones_like(tokens, dtype=torch.bool), [0, 1])
    attention = encoder.attention(tokens)
    for block, (q, k, bias, scale) in read.items():
        assert (bias is not None) == (variant in ("dstg", "rp"))
        terms = split_terms(q, k, q.mean(0), k.mean(0), scale, bias)
        assert set(terms) == set(SPLIT_TERMS) and all(t.shape == (4, N_HEADS, 12, 12) for t in terms.values())
        logits = sum(term.double() for name, term in attention[block].items() if name != "pattern")
        assert torch.allclose(sum(terms.values()), logits, atol=1e-4), variant


def hf_folder(folder, family: str, documents) -> None:
    """A tiny random transformers encoder of ``family`` (d=32, 4 heads, 2 layers) and a WordPiece tokenizer."""
    tokenizer = tiny_wordpiece(documents)
    pad = tokenizer.token_to_id("[PAD]")
    if family == "distilbert":
        config = transformers.DistilBertConfig(vocab_size=tokenizer.get_vocab_size(), dim=32, n_layers=2, n_heads=4,
                                               hidden_dim=64, max_position_embeddings=64, pad_token_id=pad)
    else:
        config = getattr(transformers, {"bert": "BertConfig", "roberta": "RobertaConfig"}[family])(
            vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64, pad_token_id=pad)
    torch.manual_seed(0)
    AutoModel.from_config(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_the_terms_of_a_hugging_face_encoder_give_its_own_attention_pattern(family, tmp_path):
    """The queries and keys read from the family's own projections (``encoders.queries_keys``): the softmax of
    the four terms is the pattern transformers returns, and every head gets a class."""
    hf_folder(tmp_path / family, family, tiny_documents(n_docs=6))
    encoder = open_encoder(tmp_path / family)
    tokens = windows(6, 14, vocab=encoder.vocab_size)
    read = read_queries_keys(encoder, tokens, torch.ones_like(tokens, dtype=torch.bool), [0, 1])
    patterns = encoder.attention(tokens)
    for block, (q, k, bias, scale) in read.items():
        assert bias is None and scale == pytest.approx(8 ** -0.5)
        terms = split_terms(q, k, q.mean(0), k.mean(0), scale)
        assert torch.allclose(sum(terms.values()).softmax(-1), patterns[block]["pattern"].double(), atol=1e-5)
    heads = classify_split_heads(head_split_stats(encoder, windows(16, 14, vocab=encoder.vocab_size)))
    assert len(heads) == 2 * 4 and heads.label.isin(["positional", "semantic", "mixed"]).all()
    assert np.allclose(heads[[f"share_{t}" for t in SPLIT_TERMS]].sum(axis=1), 1.0)


def test_a_modernbert_s_sliding_window_blocks_are_not_read_and_its_global_block_is(tmp_path):
    """ModernBERT (rotary, through the adapter): block 0 attends to every key, so its rotated terms give its
    pattern; blocks 1 and 2 see 4 positions each way, fewer than a window holds: said, not read."""
    write_tiny_rotary(tmp_path / "modernbert", tiny_documents(n_docs=6))
    encoder = open_encoder(tmp_path / "modernbert")
    tokens = windows(6, 12, vocab=encoder.vocab_size)
    unread = unread_blocks(encoder, 12)
    assert sorted(unread) == [1, 2] and "sliding window" in unread[1]
    (q, k, bias, scale), = read_queries_keys(encoder, tokens, torch.ones_like(tokens, dtype=torch.bool), [0]).values()
    terms = split_terms(q, k, q.mean(0), k.mean(0), scale)
    assert torch.allclose(sum(terms.values()).softmax(-1), encoder.attention(tokens)[0]["pattern"].double(), atol=1e-5)
    assert set(head_split_stats(encoder, windows(8, 12, vocab=encoder.vocab_size)).layer) == {0}


def test_on_dstg_the_split_agrees_with_its_own_logit_terms():
    """The hand-built DSTG of the head tests: its AP-only and RP-only heads are positional, its semantic-only head
    semantic, and over every head the split's position share follows DSTG's AP + RP share and its context share
    the semantic share (the same windows, the same query-key pairs, [CLS] / [SEP] ends left out by both)."""
    model = hand_built_dstg()
    tokens = windows(64, 24)
    split = classify_split_heads(head_split_stats(open_encoder(model), tokens, model_name="dstg"))
    terms = classify_heads(head_summaries_from_cache(model, tokens, model_name="dstg", drop_ends=True))
    merged, summary = term_agreement(split, terms)
    layer0 = split[split.layer == 0].set_index("head")
    assert list(layer0.label.loc[[0, 1, 2]]) == ["positional", "semantic", "positional"]
    assert summary["n_heads"] == 2 * N_HEADS and summary["class_agreement"] == 1.0
    assert summary["r_position"] > 0.8 and summary["r_context"] > 0.8
    assert (merged.class_terms == merged.label).all()
    # a random head table the split does not follow: the agreement is a reading that can fail
    shuffled = terms.assign(share_ap=terms.share_ap.sample(frac=1, random_state=0).to_numpy())
    assert term_agreement(split, shuffled)[1]["r_position"] < summary["r_position"] - 0.2


def test_the_rule_and_the_sweep_on_a_hand_written_table():
    """DSTG's rule on the split's terms: a share >= 0.6 whose removal changes the pattern most names the head; a
    cross term or a share the softmax does not follow leaves it mixed; the sweep relabels a head at its share."""
    shares = {"positional": (0.8, 0.1, 0.05, 0.05), "semantic": (0.1, 0.7, 0.1, 0.1),
              "cross": (0.1, 0.2, 0.6, 0.1), "deaf": (0.7, 0.2, 0.05, 0.05), "edge": (0.65, 0.25, 0.05, 0.05)}
    js = {"positional": (0.3, 0.1, 0.0, 0.0), "semantic": (0.1, 0.3, 0.0, 0.0), "cross": (0.1, 0.1, 0.3, 0.0),
          "deaf": (0.1, 0.4, 0.0, 0.0), "edge": (0.3, 0.1, 0.0, 0.0)}
    rows = []
    for head, name in enumerate(shares):
        rows.append({"model": "m", "layer": 0, "head": head,
                     **{f"var_{t}": v for t, v in zip(SPLIT_TERMS, shares[name])},
                     **{f"js_without_{t}": v for t, v in zip(SPLIT_TERMS, js[name])}})
    stats = pd.DataFrame(rows)
    heads = classify_split_heads(stats)
    assert list(heads.label) == ["positional", "semantic", "mixed", "mixed", "positional"]
    assert heads.share_cross[2] == pytest.approx(0.7) and heads.cov_share.eq(0).all()
    blocks = layer_class_shares(heads)
    assert blocks.n_heads[0] == 5 and blocks.heads_positional[0] == pytest.approx(0.4)
    sweep = threshold_sweep(stats, thresholds=(0.6, 0.7), by=("model",), classify=classify_split_heads)
    positional = sweep[sweep.label == "positional"].set_index("threshold").n_heads
    assert positional[0.6] == 2 and positional[0.7] == 1  # the 0.65 head leaves the class above its share
    with pytest.raises(ValueError, match="lack the column"):
        classify_split_heads(stats.drop(columns="var_context"))


def test_what_the_split_cannot_read_is_one_clear_error(tmp_path):
    encoder = open_encoder(tiny_model("rope"))
    tokens = windows(4, 12)
    padded = torch.ones_like(tokens, dtype=torch.bool)
    padded[1, 8:] = False
    with pytest.raises(EncoderError, match="needs a full grid"):
        head_split_stats(encoder, tokens, padded)
    with pytest.raises(EncoderError, match="2 windows or more"):
        head_split_stats(encoder, tokens[:1])
    write_tiny_rotary(tmp_path / "eurobert", tiny_documents(n_docs=6), "eurobert")
    eurobert = open_encoder(tmp_path / "eurobert")
    with pytest.raises(EncoderError, match="eurobert: splitting its heads needs .* families bert, .*modernbert.* not hf:eurobert") as err:
        head_split_stats(eurobert, windows(4, 12, vocab=eurobert.vocab_size))
    assert "\n" not in str(err.value)
