"""Tokenizer: canonical ids, determinism, specials, save/load."""

from pathlib import Path

import pytest

from dstg_interp.data import (CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, load_corpus,
                              load_tokenizer, save_tokenizer, tokenizer_hash, train_tokenizer)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def documents():
    return load_corpus(str(FIXTURES / "tiny_corpus"), progress=False)


def test_training_twice_gives_identical_ids():
    # Two-letter words with distinct counts: no two merges tie. (The HF trainer breaks count ties by
    # hash-ordered ids, so on a tiny corpus with ties the token *set* may differ between runs, see
    # tokenizer.py.) The trainer still hands out ids in hash order; ours must be canonical.
    texts = [" ".join([word] * count) for word, count in
             [("ox", 40), ("up", 33), ("at", 27), ("id", 21), ("em", 16), ("go", 11), ("we", 7), ("by", 4)]]
    first, second = train_tokenizer(texts, vocab_size=400), train_tokenizer(texts, vocab_size=400)
    assert first.get_vocab() == second.get_vocab()
    assert tokenizer_hash(first) == tokenizer_hash(second)
    vocab = first.get_vocab()
    assert [vocab[token] for token in SPECIAL_TOKENS] == [PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID] == list(range(5))
    rest = sorted(vocab, key=vocab.get)[5:]
    assert rest == sorted(rest)  # canonical order: specials first, the rest sorted


def test_ascii_alphabet_and_lowercase(documents):
    tokenizer = train_tokenizer(documents, vocab_size=150)
    assert tokenizer.get_vocab_size() <= 150 + 36
    encoding = tokenizer.encode("Dr. SMITH `quoted` ~ 42", add_special_tokens=False)
    assert UNK_ID not in encoding.ids  # backtick and tilde never occur in the fixtures
    assert tokenizer.encode("x").ids[0] == CLS_ID and tokenizer.encode("x").ids[-1] == SEP_ID
    assert tokenizer.encode("a [MASK] b", add_special_tokens=False).ids.count(MASK_ID) == 1
    assert tokenizer.decode(tokenizer.encode("the garden").ids) == "the garden"


def test_plain_strings_and_save_load(tmp_path, documents):
    tokenizer = train_tokenizer(["some plain text here.", "and more plain text."] * 5, vocab_size=80)
    path = tmp_path / "tok" / "tokenizer.json"
    save_tokenizer(tokenizer, path)
    loaded = load_tokenizer(path)
    assert tokenizer_hash(loaded) == tokenizer_hash(tokenizer)
    assert loaded.encode("plain text").ids == tokenizer.encode("plain text").ids
    assert tokenizer_hash(loaded) != tokenizer_hash(train_tokenizer(documents, vocab_size=150))
