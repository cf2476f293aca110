"""The adapter for models with TransformerLens hook points: DSTG-NeoBERT and the RoPE/AP/RP baselines
(also when loaded from another author's format: they are the same classes with other options).

    encoder = HookedEncoder(load_model("dstg"))
    encoder.states(tokens, layers=[0, 4, "final"], subspaces=["sem", "ap", "full"], attention_mask=mask)
    encoder.attention(tokens, attention_mask=mask)[3]["ap"]         # [B, H, T, T] scaled AP logit term

``capture`` registers one saving hook per requested name (``model.hooks``) and runs the forward only as far
as the deepest name needs: ``stop_at_layer`` for block hooks, and an exception raised at the final norm for
``hook_final*`` so the MLM head never runs. Without a logit-term or pattern hook the attention stays on its
fused path (one ``scaled_dot_product_attention`` per layer), so the states are bit-identical to
``model.run_with_cache(tokens, attention_mask=mask, names_filter=names)`` under ``torch.no_grad()``.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses

import torch

from dstg_interp.model import build_model
from dstg_interp.model.checkpoint import ZOO_DIR

from .base import AttentionCallback, BlockAttention, Encoder, EncoderError
from .hooks import FINAL, PATTERN_HOOK, blocks_needed, final_hook, is_final_hook, logit_terms
from .inputs import TOOLKIT_SPECIAL_TOKENS, SpecialTokens, special_tokens
from .naming import model_name


class _StopForward(Exception):
    """Raised by the hook at the final norm: skips the MLM head nobody asked for."""


class HookedEncoder(Encoder):
    kind = "dstg-interp"

    def __init__(self, model: torch.nn.Module, name: str | None = None):
        if not hasattr(model, "hook_dict") or not hasattr(model, "config"):
            raise EncoderError(f"cannot encode with a {type(model).__name__}: pass a dstg-interp model, a zoo name, "
                               "a checkpoint folder or a Hugging Face encoder folder")
        tokenizer = getattr(model, "tokenizer", None)
        path = getattr(model, "checkpoint_path", None)
        super().__init__(model, tokenizer, _special_tokens(model, tokenizer), name or _default_name(model, path), path)

    @property
    def config(self):
        return self.model.config

    @property
    def logit_terms(self) -> dict[str, str]:
        return logit_terms(self.variant, self.config.rp_bias)

    @property
    def layers(self) -> tuple:
        return tuple(range(self.n_layers + 1)) + (FINAL,)

    @property
    def subspaces(self) -> tuple[str, ...]:
        return tuple(self.model.subspaces)

    @property
    def ap_table(self) -> torch.Tensor:
        return self.model.ap_table

    @property
    def has_mlm_head(self) -> bool:
        """False for an encoder-only checkpoint (saved without its MLM decoder), as ``HFEncoder.has_mlm_head``."""
        return getattr(self.model, "mlm_head", None) is not None

    def random_init(self, seed: int | None = None) -> "HookedEncoder":
        config = self.config if seed is None else dataclasses.replace(self.config, seed=seed)
        twin = build_model(config).to(device=self.device, dtype=self.dtype).eval()
        twin.tokenizer = self.tokenizer
        return HookedEncoder(twin, name=f"{self.name} (random init)")

    # --- forward passes ----------------------------------------------------------------------
    def capture(self, tokens: torch.Tensor, attention_mask: torch.Tensor, hooks: Sequence[str], on_attention: AttentionCallback | None = None) -> dict:
        hooks = list(hooks)
        unknown = [name for name in hooks if name not in self.model.hook_dict]
        if unknown:
            raise EncoderError(f"{self.name}: no hook named {unknown[0]!r} in this {self.variant!r} model")
        captured: dict[str, torch.Tensor] = {}

        def save(tensor, hook):
            captured[hook.name] = tensor.detach()  # the layer-0 AP state is a view of the table parameter

        fwd_hooks = [(name, save) for name in hooks]
        stop_at_layer = max((blocks_needed(name) for name in hooks), default=0)
        if on_attention is not None:
            fwd_hooks += self._attention_hooks(range(self.n_layers), on_attention)
            stop_at_layer = self.n_layers
        if any(is_final_hook(name) for name in hooks):  # stop at the last hook before the MLM head
            fwd_hooks.append((final_hook(self.variant), _stop))
            stop_at_layer = None
        self._run(tokens, attention_mask, fwd_hooks, stop_at_layer)
        return captured

    def attention(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  layers: Sequence[int] | None = None, on_layer: AttentionCallback | None = None) -> dict:
        """Logit terms (``logit_terms(variant)``: DSTG sem/ap/rp, baselines content[/rp]) and the pattern,
        per block (``layers``: block indices, None = all). The [B, H, T, T] tensors of a block are handed to
        ``on_layer`` as soon as its pattern is computed, so streaming keeps one block in memory."""
        blocks = list(range(self.n_layers)) if layers is None else sorted(int(layer) for layer in layers)
        if any(not 0 <= b < self.n_layers for b in blocks):
            raise EncoderError(f"{self.name}: attention blocks are 0..{self.n_layers - 1}, got {blocks}")
        kept: dict = {}

        def keep(layer, terms, pattern):
            kept[layer] = {**terms, "pattern": pattern}

        tokens = tokens[None] if tokens.dim() == 1 else tokens
        mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
        with torch.inference_mode():
            self._run(tokens.to(self.device), mask.to(self.device), self._attention_hooks(blocks, on_layer or keep),
                      max(blocks) + 1 if blocks else 0)
        return BlockAttention(kept, self.name, self.n_layers)

    def mlm_logits(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # an encoder-only checkpoint raises NoMLMHeadError (a ValueError) here, saying why
        return self.model(tokens.to(self.device), attention_mask=attention_mask.to(self.device), return_type="logits")

    def _attention_hooks(self, blocks, on_layer: AttentionCallback) -> list:
        """Hooks that collect each block's logit terms and hand them, with its pattern, to ``on_layer``."""
        terms = self.logit_terms
        hooks = []
        for layer in blocks:
            held: dict[str, torch.Tensor] = {}

            def hold(tensor, hook, held=held):
                held[hook.name.rsplit(".", 1)[-1]] = tensor

            def hand_over(pattern, hook, held=held, layer=layer):
                on_layer(layer, {term: held[suffix] for term, suffix in terms.items()}, pattern)
                held.clear()  # drop this block's [B, H, T, T] tensors before the next block runs

            hooks += [(f"blocks.{layer}.attn.{suffix}", hold) for suffix in terms.values()]
            hooks.append((f"blocks.{layer}.attn.{PATTERN_HOOK}", hand_over))
        return hooks

    def _run(self, tokens, attention_mask, fwd_hooks, stop_at_layer) -> None:
        with self.model.hooks(fwd_hooks=fwd_hooks):
            try:
                self.model(tokens, attention_mask=attention_mask, stop_at_layer=stop_at_layer, return_type=None)
            except _StopForward:
                pass


def _stop(tensor, hook):
    raise _StopForward


def _special_tokens(model, tokenizer) -> SpecialTokens:
    """From the checkpoint's tokenizer; a model without one was trained with this toolkit's layout,
    whose PAD its config records."""
    if tokenizer is not None:
        return special_tokens(tokenizer, where=f"the tokenizer of {_default_name(model, getattr(model, 'checkpoint_path', None))}")
    return dataclasses.replace(TOOLKIT_SPECIAL_TOKENS, pad=model.config.pad_token_id)


def _default_name(model, path) -> str:
    if path is None:
        return model.config.variant
    try:
        return path.resolve().relative_to(ZOO_DIR).as_posix()  # a shipped model: its zoo name
    except ValueError:
        return model_name(path)
