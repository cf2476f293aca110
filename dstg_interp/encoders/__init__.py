"""Encoders: run any encoder and get its states by layer and subspace -- ours, other authors', HF.

    from dstg_interp.encoders import open_encoder
    encoder = open_encoder("dstg")                       # zoo name, checkpoint folder, HF folder or model
    encoder.layers, encoder.subspaces, encoder.special   # (0..4, "final"), ("sem", "ap", "full"), ids
    states = encoder.states(token_id_lists, layers=[0, 4], subspaces=["ap"])   # {(4, "ap"): [B, T, d]}
    for batch in encoder.iter_states(sequences, layers=[4]): ...                # length-sorted batches
    encoder.attention(tokens, attention_mask)[0]["ap"]   # [B, H, T, T] logit term (ours) / "pattern"

Files: hooks.py (the hook-name table), edits.py (edit a layer's states in the forward pass: the table's write
side), inputs.py (special tokens, batching, padding), base.py (the shared API), hooked.py (models with hook
points), hf.py (transformers Auto classes), rotary.py (an HF family's rotary heads: queries, keys and rotation,
one table row per family), queries_keys.py (where an HF family's heads make their queries and keys: rotary and
BERT-family rows), hub.py (hub ids through the Hugging Face cache), naming.py (how a
model is named in tables and messages), selection.py (the layer grammar, the device check), open.py
(open_encoder).
"""

from .base import EncodedBatch, Encoder, EncoderError
from .hf import HFEncoder, HFEncoderConfig, fetch_minilm, is_hf_directory, load_hf_encoder
from .hooked import HookedEncoder
from .hooks import FINAL, layer_hooks, logit_terms, subspaces_of
from .inputs import SpecialTokens, length_sorted_batches, pad_batch, special_tokens
from .open import open_encoder

__all__ = ["open_encoder", "Encoder", "EncoderError", "EncodedBatch", "HookedEncoder", "HFEncoder", "HFEncoderConfig",
           "load_hf_encoder", "is_hf_directory", "fetch_minilm", "FINAL", "layer_hooks", "logit_terms",
           "subspaces_of", "SpecialTokens", "special_tokens", "length_sorted_batches", "pad_batch"]
