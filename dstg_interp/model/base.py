"""What every encoder of the zoo shares: input checks, the MLM head and loss, and the hook plumbing.

Subclasses implement ``encode(tokens, attention_mask, stop_at_layer, position_offset)`` and return the
normed state the MLM head reads (``None`` when stopped early).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import HookedRootModule

from ..config import ModelConfig
from ..variants import position_mechanism
from .cache import StreamActivationCache
from .layers import RelativePositionBias, init_weights
from .saving import save_checkpoint
from .text import TextInputs


@dataclass
class MaskedLMOutput:
    """``logits``: [batch, pos, vocab] (or [n_masked, vocab] with ``masked_logits_only``); ``loss``: scalar
    mean cross-entropy over labels != -100 (None without labels); ``logits`` is None when the forward
    stopped early (``stop_at_layer``)."""

    logits: torch.Tensor | None
    loss: torch.Tensor | None = None


class NoMLMHeadError(ValueError, AttributeError):
    """MLM logits or a loss were asked of an encoder-only model. A ValueError, so the CLIs report it in
    one line; an AttributeError, so ``getattr(out, "logits", None)`` and ``hasattr`` see no logits."""


@dataclass
class EncoderOnlyOutput:
    """The output of an encoder-only model's full forward: no logits; ``.logits`` says why."""

    reason: str
    loss: None = None

    @property
    def logits(self):
        raise NoMLMHeadError(self.reason)


# What a forward returns (``return_type``): TransformerLens' "logits", "loss", "both" and None, plus "output",
# the MaskedLMOutput; "auto" (the default) is "logits" when there are logits to give and no labels, else "output".
RETURN_TYPES = ("auto", "logits", "loss", "both", "output", None)


class TransformerLensConfig:
    """``model.cfg``: the ModelConfig's fields, plus the TransformerLens names its helpers read (``device``,
    ``d_vocab``, ``n_ctx``, ...) derived from it and the model."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name: str) -> Any:
        config = self._model.config
        derived = {"d_vocab": config.vocab_size, "d_vocab_out": config.vocab_size, "n_ctx": config.max_positions,
                   "n_key_value_heads": None, "attn_only": False, "normalization_type": "RMS", "act_fn": "silu",
                   "positional_embedding_type": {"ap": "standard", "rope": "rotary"}.get(config.variant, config.variant)}  # nope: "nope"
        if name == "device":
            return next(self._model.parameters()).device
        if name in derived:
            return derived[name]
        return getattr(config, name)

    def __repr__(self) -> str:
        return f"TransformerLensConfig({self._model.config!r})"


def unknown_hook_message(model, name: str) -> str:
    """One line for a hook name this model lacks: the per-stream names DSTG has instead, or the closest names."""
    hooks = list(model.hook_dict)
    stem = name.rsplit(".", 1)[-1]
    if stem == "hook_attn_scores":
        prefix = name[: -len(stem)]
        terms = [h for h in hooks if h.startswith(prefix + "hook_logits")]
        return (f"{name!r}: these models hook the pre-softmax logits term by term: {', '.join(terms) or 'hook_logits*'} "
                f"(their sum is cache['attn_scores', layer]); or hook {prefix}hook_pattern")
    streams = [f"{name}_{s}" for s in ("sem", "ap") if f"{name}_{s}" in model.hook_dict]
    if streams:
        return f"{name!r}: DSTG has this hook once per stream: {' and '.join(streams)}"
    close = difflib.get_close_matches(name, hooks, n=3, cutoff=0.6)
    return (f"{name!r}: no such hook in this {model.config.variant!r} model"
            f"{'; did you mean ' + ' or '.join(close) if close else ''} (every name: model.hook_dict)")


class EncoderForMLM(TextInputs, HookedRootModule):
    """Base class: a ``transformer_lens.HookedRootModule`` with an MLM head (linear + bias, untied), reading
    token ids or text (``TextInputs``: ``to_tokens``, ``to_str_tokens``, ``to_string``)."""

    config: ModelConfig

    def __init__(self, config: ModelConfig, head_width: int):
        super().__init__()
        self.config = config
        # An encoder-only checkpoint ships no decoder: no head rather than a random one that would give
        # plausible-looking logits.
        self.mlm_head = None if config.encoder_only else nn.Linear(head_width, config.vocab_size, bias=True)
        self.tokenizer = None  # a tokenizers.Tokenizer when loaded from a checkpoint that ships one

    def init_parameters(self) -> None:
        """Normal(0, init_std) init (a wider one for the position table with ``pos_init_std``), the MLM head
        tied to the token embedding with ``tie_embeddings``, then TransformerLens' hook registry."""
        init_weights(self, self.config.init_std)
        if self.config.pos_init_std is not None and self.config.has_ap_table:
            nn.init.normal_(self.ap_table, std=self.config.pos_init_std)
        if self.config.rp_locality_init is not None:
            for module in self.modules():
                if isinstance(module, RelativePositionBias):
                    module.locality_init(self.config.rp_locality_init)
        if self.config.tie_embeddings:
            self.mlm_head.weight = self.embed.weight
        self.setup()

    # Three of Hugging Face's PreTrainedModel conventions, for the tools built on them: EleutherAI's sparsify Trainer
    # finds its hook points in ``base_model``, puts batches on ``device`` and runs ``dummy_inputs`` to learn each
    # hook point's width (docs/field-tools.md: an SAE trained on a stream by sparsify's own Trainer).
    @property
    def base_model(self) -> EncoderForMLM:
        """The encoder itself (a PreTrainedModel's ``base_model`` is the model without its head; here the head is
        only ``mlm_head``, and hook names are read from the whole model)."""
        return self

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dummy_inputs(self) -> dict:
        """A one-sequence forward's keyword inputs (``model(**model.dummy_inputs)``), as ``PreTrainedModel`` has."""
        return {"tokens": torch.full((1, 4), min(5, self.config.vocab_size - 1), device=self.device)}

    def run_with_cache(self, *model_args, return_cache_object: bool = True, **kwargs):
        """``HookedRootModule.run_with_cache``: (logits, cache) as ``HookedTransformer`` gives them, the cache a
        ``StreamActivationCache`` (a TransformerLens ``ActivationCache``); ``return_cache_object=False`` gives the
        plain dict, ``return_type="output"`` the MaskedLMOutput first (see ``forward``)."""
        output, cache = super().run_with_cache(*model_args, **kwargs)
        if not return_cache_object:
            return output, cache
        return output, StreamActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    def _enable_hook_with_name(self, name: str, hook, dir):
        """TransformerLens' lookup of a hook by name, with a KeyError that says which names exist."""
        if name not in self.mod_dict:
            raise KeyError(unknown_hook_message(self, name))
        return super()._enable_hook_with_name(name, hook, dir)

    # TransformerLens helpers read ``model.cfg``.
    @property
    def cfg(self) -> "TransformerLensConfig":
        return TransformerLensConfig(self)

    @property
    def W_U(self) -> torch.Tensor:
        """The MLM head as TransformerLens' unembedding: [head width, vocab] (DSTG: the semantic stream's width)."""
        return self._head().weight.T

    @property
    def b_U(self) -> torch.Tensor:
        return self._head().bias

    def tokens_to_residual_directions(self, tokens) -> torch.Tensor:
        """The MLM head's row of each token (an int, a one-token string or an id tensor): [*tokens.shape, head width]."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self._head().weight.device)
        return self._head().weight[ids]

    def _head(self) -> nn.Linear:
        if self.mlm_head is None:
            raise NoMLMHeadError(self.no_head_reason())
        return self.mlm_head

    @property
    def subspaces(self) -> tuple[str, ...]:
        return self.config.subspaces

    @property
    def ap_table(self) -> torch.Tensor:
        """The learned absolute-position table, rows = positions: [max_positions, d]."""
        if not self.config.spec.has_position_input:
            raise ValueError(f"variant {self.config.variant!r} has no learned position table: position enters "
                             f"{position_mechanism(self.config.variant)}")
        raise ValueError(
            f"variant {self.config.variant!r} has no learned position table; use the per-position mean of a layer's states instead"
        )

    def no_head_reason(self) -> str:
        source = (self.config.source or {}).get("path")
        origin = f" (converted from {source}, saved without its MLM decoder)" if source else ""
        hook = "hook_final_sem" if self.config.spec.ap_stream else "hook_final"
        return (f"this {self.config.variant} model is encoder-only{origin}: it has no MLM head, so no logits or loss; "
                f"read its states with run_with_cache (e.g. {hook!r} or blocks.{{l}}.hook_resid_post*)")

    def encode(self, tokens, attention_mask, stop_at_layer, position_offset):  # pragma: no cover - abstract
        raise NotImplementedError

    def absolute_positions(self, batch: int, seq_len: int, position_offset: torch.Tensor | None, table: torch.Tensor):
        """Rows of a learned position table for each token: [batch, seq_len, d]; with ``position_offset``
        ([batch] ints), sequence i reads rows offset[i] .. offset[i] + seq_len - 1 (the authors' random_offset)."""
        if position_offset is None:
            return table[:seq_len].expand(batch, -1, -1)
        positions = position_offset[:, None] + torch.arange(seq_len, device=table.device)[None, :]
        return table[positions]

    # --- input checks: one clear error instead of a shape mismatch deep in torch ----------------
    def check_inputs(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None, position_offset=None):
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.long, torch.int, torch.int32, torch.int16):
            raise TypeError("tokens must be an integer torch.Tensor of shape [batch, pos], a string or a list of strings")
        if tokens.dim() == 1:
            tokens = tokens[None]
            if attention_mask is not None and attention_mask.dim() == 1:
                attention_mask = attention_mask[None]
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape [batch, pos], got {tuple(tokens.shape)}")
        seq_len = tokens.shape[1]
        if tokens.shape[0] == 0 or seq_len == 0:
            raise ValueError(f"tokens of shape {tuple(tokens.shape)} hold no token: give at least one sequence of at "
                             "least one token ([CLS] ... [SEP] from to_tokens)")
        if seq_len > self.config.max_positions:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_positions={self.config.max_positions}; truncate the input"
            )
        if position_offset is not None:
            position_offset = torch.as_tensor(position_offset, dtype=torch.long, device=tokens.device).reshape(-1)
            if position_offset.shape[0] != tokens.shape[0]:
                raise ValueError(f"position_offset needs one shift per sequence ({tokens.shape[0]}), got {position_offset.shape[0]}")
            if position_offset.numel() and (int(position_offset.min()) < 0
                                            or int(position_offset.max()) + seq_len > self.config.max_positions):
                raise ValueError(f"position_offset must lie in [0, max_positions - seq_len] = [0, "
                                 f"{self.config.max_positions - seq_len}], got [{int(position_offset.min())}, {int(position_offset.max())}]")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size):
            bad = int(tokens.max()) if int(tokens.max()) >= self.config.vocab_size else int(tokens.min())
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size})")
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(tokens.shape):
                raise ValueError(
                    f"attention_mask has shape {tuple(attention_mask.shape)} but tokens have shape {tuple(tokens.shape)}"
                )
            attention_mask = attention_mask.to(device=tokens.device, dtype=torch.bool)
        return tokens.long(), attention_mask, position_offset

    def forward(
        self,
        tokens: torch.Tensor | str | list[str],
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        return_type: str | None = "auto",
        stop_at_layer: int | None = None,
        masked_logits_only: bool = False,
        masked_rows_multiple: int = 1,
        position_offset: torch.Tensor | None = None,
    ):
        """Run the encoder (and the MLM head unless ``stop_at_layer`` is set).

        Args:
            tokens: [batch, pos] token ids, right-padded; or a string / list of strings (``to_tokens``, with
                the attention mask of its padding).
            attention_mask: [batch, pos], 1/True for real tokens (None = all real).
            labels: [batch, pos] target ids, -100 where no loss is taken.
            return_type: as TransformerLens: "logits" ([batch, pos, vocab]), "loss" (needs ``labels``),
                "both" ((logits, loss)), None (nothing: a forward for its hooks); "output" the
                ``MaskedLMOutput`` (``.logits``, ``.loss``). The default, "auto", is "logits" for a plain
                call and "output" with ``labels`` (training), ``stop_at_layer`` (no logits: ``.logits`` is None)
                or an encoder-only model (``EncoderOnlyOutput``, whose ``.logits`` says why there are none).
            stop_at_layer: run blocks ``0 .. stop_at_layer-1`` only (for caching); no logits then.
            masked_logits_only: with labels, compute logits only where labels != -100 ([n_masked, vocab]);
                the MLM head is the costliest matmul at small widths, and training needs nothing else.
            masked_rows_multiple: with ``masked_logits_only``, the head and the loss see the masked rows padded
                with zero rows (targets -100, which the loss ignores) up to a multiple of this, and the logits
                come back without them: the same loss and gradients, in a few row counts instead of one per
                batch (training under bf16, ``TrainConfig.pad_to_multiple_of``).
            position_offset: [batch] ints: sequence i starts at absolute position offset[i] of the learned
                table (DSTG, AP-NeoBERT; relative models ignore it: it changes no offset between tokens).
        """
        tokens, attention_mask = self.text_input(tokens, attention_mask)
        return_type = self._return_type(return_type, labels, stop_at_layer)
        output = self._forward(tokens, attention_mask, labels, stop_at_layer, masked_logits_only, masked_rows_multiple,
                               position_offset, head=return_type is not None)
        if return_type == "output":
            return output
        if return_type == "logits":
            return output.logits
        if return_type == "loss":
            return output.loss
        if return_type == "both":
            return output.logits, output.loss
        return None

    def _return_type(self, return_type, labels, stop_at_layer):
        if return_type not in RETURN_TYPES:
            raise ValueError(f"return_type must be one of {', '.join(map(repr, RETURN_TYPES))}, got {return_type!r}")
        if return_type == "auto":
            plain = labels is None and stop_at_layer is None and self.mlm_head is not None
            return "logits" if plain else "output"
        if return_type in ("loss", "both") and labels is None:
            raise ValueError(f"return_type={return_type!r} needs labels: the MLM loss is taken where labels != -100")
        if return_type in ("logits", "loss", "both"):
            if stop_at_layer is not None:
                raise ValueError(f"return_type={return_type!r}: stop_at_layer stops before the MLM head, so there are "
                                 "no logits; pass return_type=None and read the states with hooks or run_with_cache")
            if self.mlm_head is None:
                raise NoMLMHeadError(self.no_head_reason())
        return return_type

    def _forward(self, tokens, attention_mask, labels, stop_at_layer, masked_logits_only, masked_rows_multiple,
                 position_offset, head: bool = True) -> MaskedLMOutput | EncoderOnlyOutput:
        tokens, attention_mask, position_offset = self.check_inputs(tokens, attention_mask, position_offset)
        if self.mlm_head is None and labels is not None:
            raise NoMLMHeadError(self.no_head_reason())
        if isinstance(masked_rows_multiple, bool) or not isinstance(masked_rows_multiple, int) or masked_rows_multiple < 1:
            raise ValueError(f"masked_rows_multiple must be a positive integer, got {masked_rows_multiple!r}")
        if stop_at_layer is not None and not 0 <= stop_at_layer <= self.config.n_layers:
            raise ValueError(f"stop_at_layer must be in [0, {self.config.n_layers}], got {stop_at_layer}")
        final = self.encode(tokens, attention_mask, stop_at_layer, position_offset)
        if final is None or not head:
            return MaskedLMOutput(logits=None)
        if self.mlm_head is None:
            return EncoderOnlyOutput(self.no_head_reason())
        if labels is None:
            return MaskedLMOutput(logits=self.mlm_head(final))
        if labels.shape != tokens.shape:
            raise ValueError(f"labels have shape {tuple(labels.shape)} but tokens have shape {tuple(tokens.shape)}")
        labels = labels.to(tokens.device)
        if masked_logits_only:
            selected = labels != -100
            hidden, targets = final[selected], labels[selected]
            n_masked = hidden.shape[0]
            if not n_masked:  # no masked token: a zero loss that still reaches the graph
                logits = self.mlm_head(hidden)
                return MaskedLMOutput(logits=logits, loss=logits.sum() * 0.0)
            extra = -n_masked % masked_rows_multiple
            if extra:
                hidden, targets = F.pad(hidden, (0, 0, 0, extra)), F.pad(targets, (0, extra), value=-100)
            logits, loss = self.masked_lm_loss(hidden, targets)
            return MaskedLMOutput(logits=logits[:n_masked], loss=loss)
        logits = self.mlm_head(final)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        return MaskedLMOutput(logits=logits, loss=loss)

    def masked_lm_loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The MLM head and cross-entropy on the masked positions only: hidden [n, head width], targets [n]
        -> (logits [n, vocab], mean loss).  A method of its own so that training can compile it."""
        logits = self.mlm_head(hidden)
        return logits, F.cross_entropy(logits.float(), targets)

    # --- checkpoints --------------------------------------------------------------------------
    def save(self, path: str | Path, dtype: torch.dtype | None = None, tokenizer=None) -> Path:
        """Write ``config.json`` + ``model.safetensors`` (+ ``tokenizer.json``) atomically. See saving.py."""
        return save_checkpoint(self, path, dtype=dtype, tokenizer=tokenizer if tokenizer is not None else self.tokenizer)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
