"""Passage invariance (dstg_interp.analysis.invariance): exactness where position cannot reach a state,
retrieval recall on hand-made cases, clear errors (experiments/fig_invariance.py --tiny runs in test_experiments)."""

import numpy as np
import pytest
import torch
from conftest import tiny_model

from dstg_interp.analysis.invariance import (CONDITIONS, INVARIANCE_COLUMNS, RETRIEVAL_COLUMNS, Passage,
                                             build_encodings, measure_invariance, recall_at_k, retrieval_ranks,
                                             select_passages)
from dstg_interp.data import train_tokenizer
from dstg_interp.data.tokenizer import CLS_ID, SEP_ID
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
MAX_POSITIONS = 64


@pytest.fixture(scope="module")
def corpus():
    documents = tiny_documents(n_docs=40, seed=0)
    return documents, train_tokenizer(documents, vocab_size=150)


@pytest.fixture(scope="module")
def passages(corpus):
    documents, tokenizer = corpus
    return select_passages(documents, tokenizer, n_passages=12, seed=0)


def float64_model(variant: str, tokenizer):
    return tiny_model(variant, vocab_size=tokenizer.get_vocab_size(), max_positions=MAX_POSITIONS).double().eval()


def position_blind_sem(model):
    """Cut every path from the AP stream into the semantic one: zero the AP query/key rows of each block's
    qkv_ap and the w_in columns that read the AP stream; a random (relative) bias stays."""
    hidden = model.config.n_heads * model.config.d_head
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv_ap.weight[:2 * hidden] = 0
            block.mlp.w_in.weight[:, model.config.d_sem:] = 0
            block.attn.rel_bias.bias.normal_(std=0.5)  # relative: must not break the invariance
    return model


# --- passages and encodings --------------------------------------------------------------------
def test_passages_are_whole_sentences_with_context(corpus, passages):
    documents, tokenizer = corpus
    by_id = {d.doc_id: d for d in documents}
    assert len(passages) == 12 and len({p.doc_id for p in passages}) == 12  # at most one per document
    for p in passages:
        assert 16 <= len(p.tokens) <= 48 and len(p.preceding) >= 24
        sentences = by_id[p.doc_id].sentences
        text = " ".join(sentences[p.first_sentence:p.first_sentence + p.n_sentences])
        assert p.tokens == tokenizer.encode(text, add_special_tokens=False).ids
        assert p.document_tokens == tokenizer.encode(" ".join(sentences), add_special_tokens=False).ids
    again = select_passages(documents, tokenizer, n_passages=12, seed=0)
    assert [(p.doc_id, p.first_sentence) for p in again] == [(p.doc_id, p.first_sentence) for p in passages]


def test_encodings_share_one_offset_and_fit(passages):
    encodings = build_encodings(passages, MAX_POSITIONS, seed=0)
    for p, e in zip(passages, encodings):
        o = e["shift"].pad
        assert o == min(len(p.preceding), MAX_POSITIONS - 2 - len(p.tokens)) and o >= 1
        assert e["alone"].tokens == e["shift"].tokens == [CLS_ID] + p.tokens + [SEP_ID]
        assert e["prefix"].start == e["inside"].start == e["context"].start == 1 + o  # same positions for the passage
        for condition in ("alone", *CONDITIONS):
            enc = e[condition]
            assert enc.pad + len(enc.tokens) <= MAX_POSITIONS
            assert enc.tokens[enc.start:enc.start + len(p.tokens)] == p.tokens
            assert enc.tokens[0] == CLS_ID and enc.tokens[-1] == SEP_ID
        assert e["context"].tokens[1:1 + o] == p.preceding[-o:]
        assert e["prefix"].tokens[1:1 + o] != p.preceding[-o:]
        # inside: the prefix's foreign text before the passage, more of it after, as long as context's
        assert e["inside"].tokens[:1 + o] == e["prefix"].tokens[:1 + o]
        assert len(e["inside"].tokens) == len(e["context"].tokens)


# --- exactness -----------------------------------------------------------------------------------
def test_position_blind_dstg_sem_is_exactly_shift_invariant(corpus, passages):
    model = position_blind_sem(float64_model("dstg", corpus[1]))
    invariance, retrieval = measure_invariance(model, passages, conditions=("shift",), dtype=torch.float64)
    sem, ap = invariance[invariance.subspace == "sem"], invariance[invariance.subspace == "ap"]
    assert list(sem.layer) == [0, 1, 2]
    for column in ("token_cosine", "pooled_cosine"):
        np.testing.assert_allclose(sem[column], 1.0, rtol=0, atol=1e-10)
        assert (ap[column] < 0.999).all()  # the AP stream does move with the offset
    for column in ("token_rel_l2", "pooled_rel_l2"):
        np.testing.assert_allclose(sem[column], 0.0, rtol=0, atol=1e-10)
        assert (ap[column] > 1e-3).all()
    sem_recall = retrieval[(retrieval.subspace == "sem")]
    assert (sem_recall.recall == 1.0).all()


def test_untouched_dstg_sem_is_not_shift_invariant(corpus, passages):
    model = float64_model("dstg", corpus[1])  # the AP q/k and the SwiGLU carry position into sem
    invariance, _ = measure_invariance(model, passages, conditions=("shift",), dtype=torch.float64)
    sem = invariance[invariance.subspace == "sem"].set_index("layer")
    assert sem.loc[0, "token_rel_l2"] < 1e-12  # the token embedding itself has no position
    assert (sem.loc[[1, 2], "token_rel_l2"] > 1e-6).all()


@pytest.mark.parametrize("variant, tolerance", [("rp", 1e-10), ("rope", 1e-6)])
def test_relative_models_are_shift_invariant(corpus, passages, variant, tolerance):
    # RoPE's cos/sin tables are stored in float32, so rotations at two offsets agree only to float32
    # rounding (~1e-10 in the states of this tiny model), not to float64's
    model = float64_model(variant, corpus[1])
    invariance, _ = measure_invariance(model, passages, conditions=("shift", "prefix"), dtype=torch.float64)
    shift, prefix = invariance[invariance.condition == "shift"], invariance[invariance.condition == "prefix"]
    assert list(shift.subspace.unique()) == ["full"]
    assert (shift.token_rel_l2 < tolerance).all() and (1 - shift.token_cosine < tolerance).all()
    assert (prefix[prefix.layer > 0].token_rel_l2 > 1e-3).all()  # other text before it does change the states


def test_absolute_model_is_not_shift_invariant(corpus, passages):
    model = float64_model("ap", corpus[1])
    invariance, _ = measure_invariance(model, passages, conditions=("shift",), dtype=torch.float64)
    assert (invariance.token_rel_l2 > 1e-2).all() and (invariance.token_cosine < 0.999).all()


def test_tables_are_tidy_and_float32_by_default(corpus, passages):
    model = tiny_model("dstg", vocab_size=corpus[1].get_vocab_size(), max_positions=MAX_POSITIONS).eval()
    invariance, retrieval = measure_invariance(model, passages, name="dstg-tiny", layers=[2, "final"])
    assert list(invariance.columns) == INVARIANCE_COLUMNS and list(retrieval.columns) == RETRIEVAL_COLUMNS
    assert len(invariance) == 2 * 3 * 4 and len(retrieval) == 2 * 3 * 4 * 3  # layers x subspaces x conditions (x k)
    assert set(invariance.model) == {"dstg-tiny"} and set(retrieval.k) == {1, 5, 10}
    assert invariance[["token_cosine", "pooled_cosine"]].le(1 + 1e-6).all().all()
    assert next(model.parameters()).dtype == torch.float32


# --- retrieval -----------------------------------------------------------------------------------
def test_recall_identical_queries_is_one():
    database = np.random.default_rng(0).normal(size=(20, 8))
    assert recall_at_k(database.copy(), database) == {1: 1.0, 5: 1.0, 10: 1.0}


def test_recall_on_a_hand_made_case():
    database = np.eye(4)
    queries = np.array([[1.0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, -1]])
    # own similarities 1, 0, 1, -1; only strictly closer rows push a passage down (ties do not)
    assert list(retrieval_ranks(queries, database)) == [0, 1, 0, 3]
    assert recall_at_k(queries, database, ks=(1, 2, 4)) == {1: 0.5, 2: 0.75, 4: 1.0}
    shifted = np.roll(np.eye(6), 1, axis=0)  # each query is exactly another passage
    assert recall_at_k(shifted, np.eye(6), ks=(1, 2)) == {1: 0.0, 2: 1.0}


# --- clear errors ----------------------------------------------------------------------------------
def _passage(doc_id: str, n_tokens: int, n_context: int) -> Passage:
    return Passage(doc_id, 1, 1, list(range(10, 10 + n_tokens)), [7] * n_context, [8] * 5)


def test_offset_that_does_not_fit_is_a_clear_error():
    passages = [_passage("a", 20, 30), _passage("b", 20, 30)]
    with pytest.raises(ValueError, match=r"10 \+ passage \+ \[CLS\]/\[SEP\] = 32 positions, the model has 30"):
        build_encodings(passages, max_positions=30, offset=10)
    with pytest.raises(ValueError, match="fewer than offset=40"):
        build_encodings(passages, max_positions=128, offset=40)
    with pytest.raises(ValueError, match="the model has 20"):  # the passage alone does not fit
        build_encodings([_passage("a", 30, 30), _passage("b", 30, 30)], max_positions=20)


def test_too_few_documents_or_passages_is_a_clear_error(corpus):
    documents, tokenizer = corpus
    with pytest.raises(ValueError, match="comes from one document"):
        build_encodings([_passage("a", 20, 30), _passage("a", 20, 30)], max_positions=64)
    with pytest.raises(ValueError, match="at least 2 passages"):
        build_encodings([_passage("a", 20, 30)], max_positions=64)
    with pytest.raises(ValueError, match=r"found \d+ passages .* need 500"):
        select_passages(documents, tokenizer, n_passages=500)
    with pytest.raises(ValueError, match="found 0 passages"):
        select_passages(documents[:3], tokenizer, min_context=1000)


def test_missing_subspace_and_foreign_tokens_are_clear_errors(corpus, passages):
    rope = float64_model("rope", corpus[1])
    with pytest.raises(ValueError, match=r"subspace 'sem' does not exist in a 'rope' model .*: it has full"):
        measure_invariance(rope, passages, subspaces=["sem"])
    with pytest.raises(ValueError, match="layers 0..2"):
        measure_invariance(rope, passages, layers=[5])
    small_vocab = tiny_model("rope", vocab_size=20, max_positions=MAX_POSITIONS)
    with pytest.raises(ValueError, match="outside the model's vocabulary of 20"):
        measure_invariance(small_vocab, passages)
