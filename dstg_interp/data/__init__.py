"""Data stage: corpus -> structured sequences -> tokenizer -> MLM masking.

    from dstg_interp.data import (load_corpus, split_documents, train_tokenizer,
                                  build_structured_sequences, collate, mask_tokens)
    docs = load_corpus("en-mix")
    train_docs, val_docs = split_documents(docs, val_fraction=0.05, seed=0)
    tokenizer = train_tokenizer(train_docs, vocab_size=8192)
    train_seqs = build_structured_sequences(train_docs, tokenizer, max_length=256, windows=True)

Files, each importing only those listed before it: tokenizer.py (the WordPiece tokenizer and its special ids),
corpora.py (Document, normalisation, sentence splitting, local sources, cache folder, the stable split),
en_mix.py and pydocs.py (the pinned registry corpora), catalog.py (``load_corpus`` / ``probing_documents``:
a corpus spec -> documents), labels.py (the per-token columns, one table), structure.py (structured sequences), mlm.py (masking), prepare.py (the cached
tokenizer + sequences a training run reads).  Floor 1 of the house: nothing here imports the rest of dstg_interp.
"""

from dstg_interp.data.catalog import load_corpus, probing_documents
from dstg_interp.data.corpora import (DataError, Document, default_cache_dir, normalize_text, split_documents,
                                      split_sentences)
from dstg_interp.data.mlm import IGNORE_INDEX, collate, mask_tokens
from dstg_interp.data.structure import StructuredSequences, build_structured_sequences
from dstg_interp.data.tokenizer import (CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID,
                                        build_tokenizer, load_tokenizer, save_tokenizer, tokenizer_hash,
                                        train_tokenizer)

__all__ = [
    "DataError", "Document", "default_cache_dir", "load_corpus", "normalize_text", "probing_documents", "split_documents",
    "split_sentences", "IGNORE_INDEX", "collate", "mask_tokens", "StructuredSequences",
    "build_structured_sequences", "CLS_ID", "MASK_ID", "PAD_ID", "SEP_ID", "SPECIAL_TOKENS", "UNK_ID",
    "build_tokenizer", "load_tokenizer", "save_tokenizer", "tokenizer_hash", "train_tokenizer",
]
