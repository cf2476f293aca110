"""What every encoder adapter offers: states by (layer, subspace), batching, tokenization, identity.

    encoder.layers, encoder.subspaces                  # (0, 1, .., n_layers[, "final"]), ("sem", "ap", "full")
    states = encoder.states([[2, 7, 9, 3], [2, 5, 3]], layers=[0, 4], subspaces=["ap"])
    states[(4, "ap")]                                  # [batch, pos, d_ap], padded positions included
    for batch in encoder.iter_states(sequences, layers=[4]):   # length-sorted batches
        batch.indices, batch.attention_mask, batch.states

Subclasses (``hooked.py`` for models with TransformerLens hook points, ``hf.py`` for transformers'
Auto classes) implement ``capture``: one forward returning the named tensors of the hook table
(``hooks.py``), stopped as early as the deepest name allows. Everything else is shared, so the store,
the Holmes encoder, heads, invariance and length evaluation batch, pad and read states the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from dstg_interp.progress import progress_bar

from tokenizers import Tokenizer

from dstg_interp.data import Document, StructuredSequences, build_structured_sequences
from dstg_interp.data.structure import DEFAULT_MAX_LENGTH
from dstg_interp.model.checkpoint import missing_tokenizer_message

from .hooks import FINAL, layer_hooks, logit_terms
from .selection import ALL, LayerSelection, missing_layer, missing_subspace, resolve_layers
from .inputs import SpecialTokens, length_sorted_batches, pad_batch, sequence_ids, sequence_lengths

# on_attention(layer, terms, pattern): terms = {term: [B, H, T, T]} in logit_terms order, pattern [B, H, T, T]
AttentionCallback = Callable[[int, dict, torch.Tensor], None]


class EncoderError(ValueError):
    """A model that cannot be opened or a request it cannot serve; the message is one line."""


class MissingBlockError(EncoderError, KeyError):
    """A block asked of ``attention(...)``'s result that the model does not have (or that was not computed)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class BlockAttention(dict):
    """``attention``'s result, {block: {term: [B, H, T, T]}}; a missing block is one line naming those that exist."""

    def __init__(self, blocks: dict, model_name: str, n_blocks: int):
        super().__init__(blocks)
        self.model_name, self.n_blocks = model_name, n_blocks

    def __missing__(self, block):
        computed = f"; computed here: {sorted(self)}" if len(self) < self.n_blocks else ""
        raise MissingBlockError(f"{self.model_name} has no attention block {block!r}: its blocks are "
                                f"0..{self.n_blocks - 1} (block l feeds layer l + 1){computed}")


@dataclass
class EncodedBatch:
    """One forward of ``iter_states``: rows ``indices`` of the input, right-padded."""

    indices: np.ndarray  # [B] positions in the sequences passed to iter_states
    attention_mask: torch.Tensor  # [B, T] bool, True on real tokens (on the encoder's device)
    states: dict  # {(layer, subspace): [B, T, d]}


class Encoder:
    """Base adapter; see the module docstring. ``model`` is the wrapped torch module."""

    kind = "abstract"  # recorded in a store's identity: "dstg-interp" or "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer | None, special: SpecialTokens, name: str, path: Path | None = None):
        self.model = model
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer, or None (then only token ids can be encoded)
        self.special = special
        self.name = name  # what a reader recognises (naming.py): zoo name, hub id, model-card title, folder name
        self.checkpoint_path = path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, variant={self.variant!r}, layers=0..{self.n_layers})"

    # --- what the model is -------------------------------------------------------------------
    @property
    def config(self):
        """The model's config: ModelConfig for ours, HFEncoderConfig for HF encoders (both have to_dict)."""
        raise NotImplementedError

    @property
    def variant(self) -> str:
        return self.config.variant

    @property
    def n_layers(self) -> int:
        return self.config.n_layers

    @property
    def logit_terms(self) -> dict[str, str]:
        """term -> hook suffix of this model's additive attention-logit terms (``encoders.hooks.logit_terms``)."""
        return logit_terms(self.variant)

    @property
    def n_heads(self) -> int:
        return self.config.n_heads

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def layers(self) -> tuple:
        """0 = embeddings, l = after block l-1 (and "final" where the model has a final norm)."""
        return tuple(range(self.n_layers + 1))

    @property
    def subspaces(self) -> tuple[str, ...]:
        raise NotImplementedError

    @property
    def ap_table(self) -> torch.Tensor:
        """The learned absolute-position table, rows = positions: [max_positions, d]."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def weights_module(self) -> torch.nn.Module:
        """The module whose state dict identifies the weights (a store's ``weights_sha256``)."""
        return self.model

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> "Encoder":
        """This encoder on ``device`` in ``dtype``: itself when nothing changes, else a copy (the caller's
        model is never moved or cast behind its back)."""
        wanted = None if device is None else torch.device(device)
        same_device = wanted is None or (wanted.type == self.device.type and wanted.index in (None, self.device.index))
        if same_device and (dtype is None or dtype == self.dtype):
            return self
        twin = copy.copy(self)
        twin.model = copy.deepcopy(self.model).to(device=device, dtype=dtype)
        return twin

    def random_init(self, seed: int | None = None) -> "Encoder":
        """Same architecture, tokenizer and device, freshly initialised weights (the random-init control);
        ``seed`` None = the config's seed (ours: the initialisation the model was trained from)."""
        raise NotImplementedError

    # --- inputs ------------------------------------------------------------------------------
    def pad(self, rows: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
        """Id sequences -> tokens [B, T], attention mask [B, T] on this encoder's device, padded with its PAD."""
        tokens, mask = pad_batch(rows, self.special.pad)
        return tokens.to(self.device), mask.to(self.device)

    def batches(self, sequences: StructuredSequences | Sequence, batch_size: int = 32) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        """(indices, tokens [B, T], mask [B, T]) over length-sorted batches of ``sequences`` (StructuredSequences
        or a list of id sequences)."""
        for indices in length_sorted_batches(sequence_lengths(sequences), batch_size):
            tokens, mask = self.pad([sequence_ids(sequences, i) for i in indices])
            yield indices, tokens, mask

    def structured_sequences(self, documents: Sequence[Document], max_length: int = DEFAULT_MAX_LENGTH, windows: bool = True,
                             corpus_spec: str = "") -> StructuredSequences:
        """Documents -> StructuredSequences in this model's token ids, at most ``max_length`` (and
        max_positions) tokens each, with this tokenizer's [CLS]/[SEP] ids where ours would go."""
        if self.tokenizer is None:
            raise EncoderError(missing_tokenizer_message(self.checkpoint_path) if self.checkpoint_path else
                               f"{self.name}: the model has no tokenizer; pass StructuredSequences built with the "
                               "tokenizer it was trained with, or open_encoder(model, tokenizer=...)")
        sequences = build_structured_sequences(list(documents), self.tokenizer, max_length=min(max_length, self.max_positions),
                                               windows=windows, corpus_spec=corpus_spec)
        ids, offsets = sequences.arrays["input_ids"], sequences.offsets
        ids[offsets[:-1]] = self.special.cls  # build_structured_sequences writes our tokenizer's ids
        ids[offsets[1:] - 1] = self.special.sep
        sequences.meta["special_ids"] = self.special.to_dict()
        return sequences

    # --- states ------------------------------------------------------------------------------
    def hooks_for(self, layer: int | str, subspace: str) -> list[str]:
        """The hook names whose tensors, concatenated, are ``subspace`` at ``layer`` (hooks.py)."""
        return layer_hooks(self.variant, layer, subspace)

    def resolve(self, layers: LayerSelection = None, subspaces: Sequence[str] | None = None,
                default: LayerSelection = ALL) -> tuple[list, list[str]]:
        """The one resolution of a request against this model: concrete layers (ints, ``final``; the grammar of
        ``selection``, None = ``default``) and subspaces (None = all it has), or one clear EncoderError."""
        layers = resolve_layers(layers, self.n_layers, default)
        bad = [layer for layer in layers if layer not in self.layers or isinstance(layer, bool)]
        if bad or not layers:
            raise EncoderError(missing_layer(bad[0], self.n_layers, FINAL in self.layers, self.name) if bad else
                               f"no layer asked of {self.name}; it has layers 0..{self.n_layers} (0 = embeddings)")
        subspaces = list(self.subspaces) if subspaces is None else list(subspaces)
        missing = [s for s in subspaces if s not in self.subspaces]
        if missing or not subspaces:
            raise EncoderError(missing_subspace(missing[0] if missing else None, self.variant, self.subspaces, self.name))
        return layers, subspaces


    def capture(self, tokens: torch.Tensor, attention_mask: torch.Tensor, hooks: Sequence[str], on_attention: AttentionCallback | None = None) -> dict:
        """One forward -> {hook name: tensor} for ``hooks`` (names of hooks.py); tokens, mask [B, T] on device."""
        raise NotImplementedError

    def states(self, tokens: torch.Tensor, layers: Sequence[int | str] | None = None,
               subspaces: Sequence[str] | None = None, *, attention_mask: torch.Tensor | None = None) -> dict:
        """{(layer, subspace): [B, T, d]} in the model's dtype, from one forward.

        tokens: a [B, T] tensor (with ``attention_mask``, None = all real) or a list of id sequences, which
        are right-padded with this tokenizer's PAD. layers / subspaces: None = all (see ``resolve``)."""
        layers, subspaces = self.resolve(layers, subspaces)
        if isinstance(tokens, torch.Tensor):
            tokens = tokens[None] if tokens.dim() == 1 else tokens
            mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
            tokens, mask = tokens.to(self.device), mask.to(self.device)
        else:
            tokens, mask = self.pad(tokens)
        plan = {(layer, subspace): self.hooks_for(layer, subspace) for layer in layers for subspace in subspaces}
        with torch.inference_mode():
            captured = self.capture(tokens, mask, sorted({h for hooks in plan.values() for h in hooks}))
        return {key: captured[hooks[0]] if len(hooks) == 1 else torch.cat([captured[h] for h in hooks], dim=-1)
                for key, hooks in plan.items()}

    def iter_states(self, sequences: StructuredSequences | Sequence, layers: Sequence[int | str] | None = None,
                    subspaces: Sequence[str] | None = None, *, batch_size: int = 32, progress: bool = False,
                    desc: str | None = None) -> Iterator[EncodedBatch]:
        """``states`` over length-sorted batches of ``sequences`` (StructuredSequences or id sequences)."""
        layers, subspaces = self.resolve(layers, subspaces)
        total = len(sequence_lengths(sequences))
        with progress_bar(total=total, unit="seq", desc=desc or f"encode {self.name}", disable=not progress, leave=False) as bar:
            for indices, tokens, mask in self.batches(sequences, batch_size):
                yield EncodedBatch(indices, mask, self.states(tokens, layers, subspaces, attention_mask=mask))
                bar.update(len(indices))

    def attention(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None, layers: Sequence[int] | None = None,
                  on_layer: AttentionCallback | None = None) -> dict:
        """{block: {term: [B, H, T, T], ..., "pattern": [B, H, T, T]}} (with ``on_layer``: streamed, {})."""
        raise NotImplementedError

    def mlm_logits(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, T, vocab] masked-language-model logits."""
        raise NotImplementedError
