"""A BERT-style uncased WordPiece tokenizer with reproducible ids.

    from dstg_interp.data import train_tokenizer, save_tokenizer, load_tokenizer, tokenizer_hash
    tokenizer = train_tokenizer(train_docs, vocab_size=8192)   # train on the training split only
    save_tokenizer(tokenizer, "runs/tok/tokenizer.json")
    tokenizer = load_tokenizer("runs/tok/tokenizer.json")

The HF WordPiece trainer assigns ids in hash order, so we rebuild the model from a canonical vocab
(specials first, the rest sorted). WordPiece lookup is greedy longest-match, so ids do not change
tokenization. The trainer also breaks ties between equally frequent merges by the ids of the symbols,
and it numbers the continuation symbols ("##e") in the hash order of the words, which changes from
process to process: two processes used to learn different token sets from the same text (en-mix at
8,192: 5 tokens differ, tokenizer sha256 8104f001... or cb52c2bc... by chance).  ``train_tokenizer``
therefore trains twice: the first pass finds the continuation symbols, the second numbers them first,
in sorted order, so the same text gives the same tokenizer in every process (``TOKENIZER_TRAINING``
names this procedure in the prepared-data recipe).
"""

from __future__ import annotations

import hashlib
import string
from pathlib import Path
from typing import Iterable

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from dstg_interp.io import written_file

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
# Seeding the alphabet keeps characters that are rare in training text (e.g. the backtick) out of [UNK].
INITIAL_ALPHABET = list(string.ascii_letters + string.digits + string.punctuation)
# What decides a trained tokenizer besides its text and size: this procedure and the trainer's version.
TOKENIZER_TRAINING = f"wordpiece-sorted-continuations-v1/tokenizers-{tokenizers.__version__}"


def canonical_vocab(tokens: Iterable[str]) -> dict[str, int]:
    """Specials at ids 0..4 in SPECIAL_TOKENS order, every other token sorted by its string."""
    others = sorted(set(tokens) - set(SPECIAL_TOKENS))
    return {token: index for index, token in enumerate(SPECIAL_TOKENS + others)}


def build_tokenizer(tokens: Iterable[str]) -> Tokenizer:
    """The full pipeline (lowercasing BERT normalizer, BERT pre-tokenizer, WordPiece `##`) around a
    canonical vocab. `encode(text)` adds [CLS] ... [SEP]; pass add_special_tokens=False for raw ids."""
    tokenizer = Tokenizer(models.WordPiece(vocab=canonical_vocab(tokens), unk_token="[UNK]",
                                           continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True,
                                                      handle_chinese_chars=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(SPECIAL_TOKENS)  # so "[MASK]" in text stays one token
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)])
    return tokenizer


def _texts(documents_or_texts) -> Iterable[str]:
    for item in documents_or_texts:
        if isinstance(item, str):
            yield item
        else:  # a Document: one text per paragraph keeps batches small
            for paragraph in item.paragraphs:
                yield " ".join(paragraph)


def _trained_vocab(texts: list[str], vocab_size: int, min_frequency: int, numbered_first: list[str]) -> list[str]:
    trainer_tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trainer_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    trainer_tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=SPECIAL_TOKENS + numbered_first, initial_alphabet=INITIAL_ALPHABET,
                                        continuing_subword_prefix="##", show_progress=False)
    trainer_tokenizer.train_from_iterator(texts, trainer=trainer)
    return list(trainer_tokenizer.get_vocab())


def train_tokenizer(documents_or_texts, vocab_size: int = 8192, min_frequency: int = 2) -> Tokenizer:
    """Train WordPiece on Documents or plain strings and return it with canonical ids; the same text and
    sizes give the same tokenizer in every process (two passes, see the module docstring)."""
    texts = list(_texts(documents_or_texts))
    first = _trained_vocab(texts, vocab_size, min_frequency, [])
    continuation_symbols = sorted(token for token in first if token.startswith("##") and len(token) == 3)
    vocab = _trained_vocab(texts, vocab_size, min_frequency, continuation_symbols)
    # The trainer only adds "##c" for characters it saw inside words; without them any word holding an
    # unseen ASCII letter/digit would be one [UNK]. (On en-mix none is missing, so the size is unchanged.)
    continuations = ["##" + c for c in string.ascii_lowercase + string.digits]
    return build_tokenizer(vocab + continuations)


def save_tokenizer(tokenizer: Tokenizer, path: str | Path) -> None:
    """Write tokenizer.json atomically (this process's temp name, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_file(path) as temporary:
        tokenizer.save(str(temporary))


def load_tokenizer(path: str | Path) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for a file that is not tokenizer JSON
        raise ValueError(f"{path}: not a readable tokenizer.json ({(str(err).splitlines() or [type(err).__name__])[0]}); pass a tokenizer.json "
                         "saved by dstg-interp or the tokenizers library") from None
    for token, expected_id in zip(SPECIAL_TOKENS, range(len(SPECIAL_TOKENS))):
        if tokenizer.token_to_id(token) != expected_id:
            raise ValueError(f"{path}: {token} has id {tokenizer.token_to_id(token)}, expected {expected_id}; "
                             "not a dstg-interp tokenizer")
    return tokenizer


def tokenizer_hash(tokenizer: Tokenizer) -> str:
    """sha256 of the vocab in id order (one token per line): equal hashes mean equal ids."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens_in_id_order = sorted(vocab, key=vocab.__getitem__)
    return hashlib.sha256("\n".join(tokens_in_id_order).encode("utf-8")).hexdigest()
