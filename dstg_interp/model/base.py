"""What every encoder of the zoo shares: input checks, the MLM head and loss, and the hook plumbing.

Subclasses implement ``encode(tokens, attention_mask, stop_at_layer, position_offset)`` and return the
normed state the MLM head reads (``None`` when stopped early).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.utilities import get_act_name

from ..config import ModelConfig
from .layers import init_weights
from .saving import save_checkpoint


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


STREAMS = ("sem", "ap")


class StreamActivationCache(ActivationCache):
    """TransformerLens' ``ActivationCache`` that also reads DSTG's two streams by TransformerLens shorthand:

        cache["resid_post", 1]       # blocks.1.hook_resid_post (baselines); DSTG: [sem | ap], its 'full' state
        cache["resid_post_ap", 1]    # blocks.1.hook_resid_post_ap
        cache["q_sem", 0]            # blocks.0.attn.hook_q_sem   [batch, pos, head, d_head]
        cache.stack_activation("resid_post")   # [n_layers, batch, pos, d]

    A name of the table with a ``_sem`` / ``_ap`` suffix resolves like the name without it, suffix kept;
    a stream-less name that DSTG has only per stream is the concatenation [sem | ap] (both must be cached).
    """

    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, str) and key in self.cache_dict:
            return self.cache_dict[key]
        parts = (key,) if isinstance(key, str) else tuple(key)
        if len(parts) > 1 and parts[1] is not None and parts[1] < 0:
            parts = (parts[0], self.model.cfg.n_layers + parts[1], *parts[2:])
        name, stream = parts[0], None
        for suffix in STREAMS:
            if name.endswith(f"_{suffix}") and "." not in name:
                name, stream = name[: -len(suffix) - 1], suffix
        full = get_act_name(name, *parts[1:])
        if stream is not None:
            return self.cache_dict[f"{full}_{stream}"]
        if full in self.cache_dict:
            return self.cache_dict[full]
        if all(f"{full}_{s}" in self.cache_dict for s in STREAMS):
            return torch.cat([self.cache_dict[f"{full}_{s}"] for s in STREAMS], dim=-1)
        raise KeyError(f"{key!r} -> {full!r} is not in this cache (cached: {len(self.cache_dict)} names, e.g. "
                       f"{', '.join(list(self.cache_dict)[:3])}); widen names_filter")


class EncoderForMLM(HookedRootModule):
    """Base class: a ``transformer_lens.HookedRootModule`` with an MLM head (linear + bias, untied)."""

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
        if self.config.tie_embeddings:
            self.mlm_head.weight = self.embed.weight
        self.setup()

    def run_with_cache(self, *model_args, return_cache_object: bool = True, **kwargs):
        """``HookedRootModule.run_with_cache``, returning a ``StreamActivationCache`` (a TransformerLens
        ``ActivationCache``) as ``HookedTransformer`` does; ``return_cache_object=False`` gives the plain dict."""
        output, cache = super().run_with_cache(*model_args, **kwargs)
        if not return_cache_object:
            return output, cache
        return output, StreamActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    # TransformerLens helpers read ``model.cfg``.
    @property
    def cfg(self) -> ModelConfig:
        return self.config

    @property
    def subspaces(self) -> tuple[str, ...]:
        return self.config.subspaces

    @property
    def ap_table(self) -> torch.Tensor:
        """The learned absolute-position table, rows = positions: [max_positions, d]."""
        raise ValueError(
            f"variant {self.config.variant!r} has no learned position table; use the per-position mean of a layer's states instead"
        )

    def no_head_reason(self) -> str:
        source = (self.config.source or {}).get("path")
        origin = f" (converted from {source}, saved without its MLM decoder)" if source else ""
        hook = "hook_final_sem" if self.config.variant == "dstg" else "hook_final"
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
            raise TypeError("tokens must be an integer torch.Tensor of shape [batch, pos]")
        if tokens.dim() == 1:
            tokens = tokens[None]
            if attention_mask is not None and attention_mask.dim() == 1:
                attention_mask = attention_mask[None]
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape [batch, pos], got {tuple(tokens.shape)}")
        seq_len = tokens.shape[1]
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
        tokens: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        stop_at_layer: int | None = None,
        masked_logits_only: bool = False,
        masked_rows_multiple: int = 1,
        position_offset: torch.Tensor | None = None,
    ) -> MaskedLMOutput | EncoderOnlyOutput:
        """Run the encoder (and the MLM head unless ``stop_at_layer`` is set).

        Args:
            tokens: [batch, pos] token ids, right-padded.
            attention_mask: [batch, pos], 1/True for real tokens (None = all real).
            labels: [batch, pos] target ids, -100 where no loss is taken.
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
        tokens, attention_mask, position_offset = self.check_inputs(tokens, attention_mask, position_offset)
        if self.mlm_head is None and labels is not None:
            raise NoMLMHeadError(self.no_head_reason())
        if isinstance(masked_rows_multiple, bool) or not isinstance(masked_rows_multiple, int) or masked_rows_multiple < 1:
            raise ValueError(f"masked_rows_multiple must be a positive integer, got {masked_rows_multiple!r}")
        if stop_at_layer is not None and not 0 <= stop_at_layer <= self.config.n_layers:
            raise ValueError(f"stop_at_layer must be in [0, {self.config.n_layers}], got {stop_at_layer}")
        final = self.encode(tokens, attention_mask, stop_at_layer, position_offset)
        if final is None:
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
