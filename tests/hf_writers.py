"""Hugging Face folders written by the tests: a tiny random BERT saved the way the Hub ships it, and a Hub
cache laid out as huggingface_hub lays out a download (test_hf_encoder_offline, test_hub_ids and the tests that
read an HF encoder)."""

import hashlib
import os

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertForMaskedLM, BertModel

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_tiny_bert(folder, documents, tokenizer: Tokenizer | None = None, mlm_head: bool = False,
                    max_positions: int = 64) -> None:
    """A 2-layer, d=32 BERT and its WordPiece tokenizer (or ``tokenizer``), saved the way the Hub ships them;
    ``mlm_head``: a BertForMaskedLM (the encoder and its masked-LM head), as masked-LM checkpoints ship."""
    if tokenizer is None:
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.train_from_iterator((d.text for d in documents), trainers.WordPieceTrainer(vocab_size=120,
                                                                                              special_tokens=SPECIALS))
        cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                                 special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=max_positions,
                        pad_token_id=tokenizer.token_to_id("[PAD]"))
    (BertForMaskedLM if mlm_head else BertModel)(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(cache, repo_id: str, source) -> None:
    """Put the files of ``source`` into ``cache`` the way huggingface_hub stores a download."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in source.iterdir():
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        blob.write_bytes(file.read_bytes())
        os.symlink(os.path.relpath(blob, snapshot), snapshot / file.name)
