"""``open_encoder``: the one way from "a model" to an encoder adapter, for the library and every CLI.

    encoder = open_encoder("dstg")                           # a zoo name
    encoder = open_encoder("runs/dstg/checkpoint")            # a dstg-interp checkpoint folder
    encoder = open_encoder("path/to/all-MiniLM-L6-v2")        # a local Hugging Face encoder folder
    encoder = open_encoder("sentence-transformers/all-MiniLM-L6-v2")   # a hub id, through the HF cache (hub.py)
    encoder = open_encoder(model, device="cuda")              # a model in memory (a copy is moved)

What a folder is decides the route: what ``load_model`` reads -- zoo names, our checkpoints, the authors'
PosNeoBERT / NeoBERT folders (``recognised_checkpoint``) -- becomes one of our models behind hook points
(hooked.py); any other Hugging Face folder goes through transformers' Auto classes (hf.py).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dstg_interp.model import load_model, recognised_checkpoint
from dstg_interp.model.checkpoint import ZOO_NAMES

from .base import Encoder, EncoderError
from .hf import is_hf_directory, load_hf_encoder
from .hooked import HookedEncoder
from .hub import looks_like_hub_id, resolve_hub_id
from .inputs import special_tokens


def open_encoder(model_or_path: str | os.PathLike | torch.nn.Module | Encoder, tokenizer: Tokenizer | None = None, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None, name: str | None = None,
                 mlm_head: bool = False) -> Encoder:
    """An Encoder for ``model_or_path`` (see the module docstring).

    tokenizer: a tokenizers.Tokenizer to use instead of the one the model ships (or for one that has none).
    device, dtype: where and in what the model runs (None = as loaded: cpu, float32; or as the model is).
        A model or encoder passed in is never moved or cast itself: a copy is, when they differ.
    name: how results name the model (default: ``naming.model_name``: zoo name, hub id, model-card title or
        the folder's own name).
    mlm_head: a Hugging Face folder or hub id is loaded with its masked-LM head (``AutoModelForMaskedLM``), so
        ``mlm_logits`` works; one without the head is refused (EncoderError). Our models always have theirs.
    Raises EncoderError / CheckpointError (both ValueError) with one line for anything it cannot open.
    """
    if isinstance(model_or_path, Encoder):
        encoder = model_or_path
    elif isinstance(model_or_path, (str, os.PathLike)):
        encoder = _open_path(model_or_path, device or "cpu", dtype or torch.float32, name, mlm_head)
    elif isinstance(model_or_path, torch.nn.Module) and hasattr(model_or_path, "hook_dict"):
        encoder = HookedEncoder(model_or_path, name=name)
    else:
        raise EncoderError(f"cannot encode with a {type(model_or_path).__name__}: pass a zoo name, a checkpoint "
                           "folder, a Hugging Face encoder folder, a dstg-interp model or an Encoder")
    encoder = encoder.to(device=device, dtype=dtype)
    if tokenizer is not None:
        encoder = _with_tokenizer(encoder, tokenizer)
    if name is not None and encoder.name != name:
        encoder = _renamed(encoder, name)
    return encoder


def _open_path(spec, device, dtype, name, mlm_head: bool = False) -> Encoder:
    path = Path(spec)
    if looks_like_hub_id(spec) and str(spec) not in ZOO_NAMES:
        path = resolve_hub_id(str(spec))  # through the Hugging Face cache; the folder then goes the same way
        spec = path
    if path.is_dir() and is_hf_directory(path) and not recognised_checkpoint(path):
        return load_hf_encoder(path, device=device, dtype=dtype, mlm_head=mlm_head)
    model = load_model(spec, device=device, dtype=dtype)
    return HookedEncoder(model, name=name)


def _with_tokenizer(encoder: Encoder, tokenizer) -> Encoder:
    if tokenizer.get_vocab_size() > encoder.vocab_size:
        raise EncoderError(f"the tokenizer has {tokenizer.get_vocab_size()} tokens but {encoder.name} has a vocabulary "
                           f"of {encoder.vocab_size}; they do not belong together")
    twin = copy.copy(encoder)  # shares the model; only what the tokenizer decides changes
    twin.tokenizer = tokenizer
    twin.special = special_tokens(tokenizer, where="the tokenizer passed to open_encoder")
    return twin


def _renamed(encoder: Encoder, name: str) -> Encoder:
    twin = copy.copy(encoder)
    twin.name = name
    return twin

