"""Tokenizer: canonical ids, determinism (in every process), specials, save/load, one tokenizer per
recipe key (the zoo recipe's and the data cache's)."""

from pathlib import Path

import pytest

from dstg_interp.data import (CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, load_corpus,
                              load_tokenizer, save_tokenizer, tokenizer_hash, train_tokenizer)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


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


# --- one tokenizer per recipe key (N68) -----------------------------------------------------------
TRAIN_IN_A_PROCESS = """
import sys
from dstg_interp.data import load_corpus
from dstg_interp.data.tokenizer import tokenizer_hash, train_tokenizer
print(tokenizer_hash(train_tokenizer(load_corpus(sys.argv[1], progress=False), vocab_size=400)))
"""


def test_training_a_tokenizer_gives_the_same_one_in_every_process():
    """N68's cause: the trainer numbered continuation symbols in hash order, so two processes preparing the
    same recipe trained different tokenizers (en-mix: 8104f001... or cb52c2bc..., by chance)."""
    import subprocess
    import sys

    from reliability_setup import subprocess_env

    corpus = str(FIXTURES / "tiny_corpus.jsonl")
    hashes = {subprocess.run([sys.executable, "-c", TRAIN_IN_A_PROCESS, corpus], env=subprocess_env(), check=True,
                             capture_output=True, text=True, timeout=120).stdout.strip() for _ in range(4)}
    assert len(hashes) == 1 and len(next(iter(hashes))) == 64


def test_the_zoo_recipe_prepares_the_shipped_zoos_tokenizer(tmp_path):
    from dstg_interp.data.prepare import prepare_data
    from dstg_interp.data.tokenizer import load_tokenizer, tokenizer_hash
    from dstg_interp.model.checkpoint import ZOO_TOKENIZER
    from experiments.pretrain_zoo import zoo_config

    shipped = tokenizer_hash(load_tokenizer(ZOO_TOKENIZER))
    cfg = zoo_config("dstg", tmp_path / "runs", steps=10, threads=1)
    assert cfg.tokenizer == str(ZOO_TOKENIZER)
    for member in ("rope", "ap-seed1", "rp-seed2"):  # every member holds the one tokenizer
        assert tokenizer_hash(load_tokenizer(ZOO_TOKENIZER.parent.parent / member / "tokenizer.json")) == shipped
    from conftest import write_synthetic_corpus

    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=30)
    prepared = prepare_data(str(corpus), max_length=32, vocab_size=cfg.vocab_size, tokenizer_path=cfg.tokenizer,
                            cache_dir=tmp_path / "cache", progress=False)
    assert tokenizer_hash(prepared.tokenizer) == shipped


def test_a_cache_entry_with_another_tokenizer_names_itself(tmp_path):
    from dstg_interp.data.corpora import DataError
    from dstg_interp.data.prepare import prepare_data
    from dstg_interp.data.tokenizer import build_tokenizer, save_tokenizer

    from conftest import write_synthetic_corpus

    corpus = str(write_synthetic_corpus(tmp_path / "corpus", n_docs=30))
    first = prepare_data(corpus, max_length=32, vocab_size=120, cache_dir=tmp_path / "cache", progress=False)
    save_tokenizer(build_tokenizer(["a", "b"]), first.directory / "tokenizer.json")  # damaged from outside
    with pytest.raises(DataError, match=f"remove {first.directory} and run again"):
        prepare_data(corpus, max_length=32, vocab_size=120, cache_dir=tmp_path / "cache", progress=False)
