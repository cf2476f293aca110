"""Hugging Face folders written by the tests: a tiny random BERT saved the way the Hub ships it, tiny random
rotary encoders (ModernBERT, which the band split reads; EuroBERT and RoFormer, which it refuses) with the BERT's
tokenizer, and a Hub cache laid out as huggingface_hub lays out a download (test_hf_encoder_offline,
test_hub_ids and the tests that read an HF encoder)."""

import hashlib
import os

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (BertConfig, BertForMaskedLM, BertModel, EuroBertConfig, EuroBertModel, ModernBertConfig,
                          ModernBertForMaskedLM, RoFormerConfig, RoFormerModel)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_wordpiece(documents) -> Tokenizer:
    """A WordPiece tokenizer of 120 tokens trained on ``documents``, [CLS] ... [SEP] around each text."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator((d.text for d in documents), trainers.WordPieceTrainer(vocab_size=120,
                                                                                          special_tokens=SPECIALS))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                             special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer


def write_tiny_bert(folder, documents, tokenizer: Tokenizer | None = None, mlm_head: bool = False,
                    max_positions: int = 64) -> None:
    """A 2-layer, d=32 BERT and its WordPiece tokenizer (or ``tokenizer``), saved the way the Hub ships them;
    ``mlm_head``: a BertForMaskedLM (the encoder and its masked-LM head), as masked-LM checkpoints ship."""
    tokenizer = tiny_wordpiece(documents) if tokenizer is None else tokenizer
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=max_positions,
                        pad_token_id=tokenizer.token_to_id("[PAD]"))
    (BertForMaskedLM if mlm_head else BertModel)(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))


# family -> (config class, model class, its own config fields): ModernBERT a masked LM whose layers 1 and 2 are
# local (a window of 8 tokens, local_rope_theta) and layer 0 global (global_rope_theta)
ROTARY_ENCODERS = {
    "modernbert": (ModernBertConfig, ModernBertForMaskedLM, {"local_attention": 8, "global_attn_every_n_layers": 3}),
    "eurobert": (EuroBertConfig, EuroBertModel, {"num_key_value_heads": 4}),
    "roformer": (RoFormerConfig, RoFormerModel, {}),
}


def write_tiny_rotary(folder, documents, family: str = "modernbert", **fields) -> None:
    """A tiny random rotary encoder of ``family`` (``ROTARY_ENCODERS``: 3 layers, d=32, 4 heads of 8) and the
    tiny BERT's WordPiece tokenizer, saved the way the Hub ships them; ``fields`` replace config defaults."""
    tokenizer = tiny_wordpiece(documents)
    config_class, model_class, own = ROTARY_ENCODERS[family]
    special = {f"{name}_token_id": tokenizer.token_to_id(f"[{name.upper()}]") for name in ("pad", "cls", "sep")}
    config = config_class(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                          num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=64,
                          **(special | own | fields))
    torch.manual_seed(0)
    model_class(config).eval().save_pretrained(folder, safe_serialization=True)
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
