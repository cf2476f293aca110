"""The three entangled baselines on one NeoBERT block: RoPE-, AP- and RP-NeoBERT; and NoPE-NeoBERT, the
same block with no positional input at all (the floor of every position reading).

    model = build_model(ModelConfig(variant="rope", d_model=128, n_layers=6, n_heads=4))
    logits = model(tokens, attention_mask)               # [batch, pos, vocab]
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_resid_post"))

Block: pre-RMSNorm -> attention (SDPA) -> residual; pre-RMSNorm -> SwiGLU -> residual; no biases.
NoPE (``variant="nope"``): no table, no rotation, no bias; with bidirectional attention nothing in the model
tells positions apart, so it is permutation-equivariant: model(tokens[:, p])[:, i] == model(tokens)[:, p[i]].
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from ..config import ModelConfig
from ..variants import variants_where
from .base import EncoderForMLM
from .layers import (RelativePositionBias, RMSNorm, Rotary, SwiGLU, additive_key_mask, attention_with_learned_bias,
                     fused_attention, is_hooked, merge_heads, split_heads, through_head_hook)

class NeoBERTAttention(nn.Module):
    """One multi-head self-attention over the single stream: q, k, v from one projection; RoPE rotates q and k,
    RP-NeoBERT adds its learned bucket bias to the logits (``hook_logits_rp``), AP- and NoPE-NeoBERT add nothing."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.n_heads * cfg.d_head, bias=False)
        self.out = nn.Linear(cfg.n_heads * cfg.d_head, cfg.d_model, bias=False)
        self.rotary = Rotary(cfg.d_head, cfg.max_positions, cfg.rope_theta) if cfg.spec.rotary else None
        self.rel_bias = (
            RelativePositionBias(cfg.n_heads, cfg.rp_num_buckets, cfg.rp_max_distance, cfg.max_positions,
                                 zero_boundary=cfg.rp_zero_boundary)
            if cfg.spec.relative_bias
            else None
        )
        self.hook_logits = HookPoint()  # [batch, head, query_pos, key_pos] content term q.k/sqrt(d_head)
        self.hook_logits_rp = HookPoint() if self.rel_bias is not None else None  # [batch, head, q, k]
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos]
        # per head, TransformerLens' names and layout [batch, pos, head, d_head]; q and k before the rotation
        self.hook_q, self.hook_k, self.hook_v, self.hook_z = HookPoint(), HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        q, k, v = (split_heads(t, self.n_heads) for t in self.qkv(x).chunk(3, dim=-1))
        q, k, v = through_head_hook(self.hook_q, q), through_head_hook(self.hook_k, k), through_head_hook(self.hook_v, v)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        seq_len = x.shape[1]
        rp = self.rel_bias(seq_len).to(q.dtype) if self.rel_bias is not None else None
        key_mask = key_mask.to(q.dtype) if key_mask is not None else None
        scale = 1.0 / math.sqrt(self.d_head)
        hooks = [self.hook_logits, self.hook_pattern] + ([self.hook_logits_rp] if rp is not None else [])
        if is_hooked(*hooks):
            logits = self.hook_logits(q @ k.transpose(-1, -2) * scale)
            total = logits
            if rp is not None:
                total = total + self.hook_logits_rp(rp.expand(x.shape[0], -1, -1, -1))
            if key_mask is not None:
                total = total + key_mask
            pattern = self.hook_pattern(total.softmax(dim=-1))
            z = pattern @ v
        elif rp is not None and rp.requires_grad:  # training RP (the bias was built with grad on): it needs dL/dlogits
            z = attention_with_learned_bias(q, k, v, rp, key_mask, scale)
        else:
            mask = key_mask if rp is None else (rp if key_mask is None else rp + key_mask)
            z = fused_attention(q, k, v, mask, scale)
        return self.out(merge_heads(through_head_hook(self.hook_z, z)))


class NeoBERTBlock(nn.Module):
    """A pre-norm block of the baselines: x + attn(norm(x)), then + SwiGLU(norm(x)); every residual point hooked."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm_attn = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = NeoBERTAttention(cfg)
        self.norm_mlp = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.d_mlp, cfg.d_model)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.norm_attn(x), key_mask)))
        x = x + self.hook_mlp_out(self.mlp(self.norm_mlp(x)))
        return self.hook_resid_post(x)


class NeoBERT(EncoderForMLM):
    """RoPE-, AP-, RP- or NoPE-NeoBERT depending on ``config.variant``."""

    def __init__(self, config: ModelConfig):
        if config.spec.model_class != "NeoBERT":
            raise ValueError(f"NeoBERT builds the variants {'/'.join(variants_where(model_class='NeoBERT'))}, "
                             f"not {config.variant!r}")
        super().__init__(config, head_width=config.d_model)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_embed = nn.Embedding(config.max_positions, config.d_model) if config.spec.position_table else None
        self.blocks = nn.ModuleList(NeoBERTBlock(config) for _ in range(config.n_layers))
        self.final_norm = RMSNorm(config.d_model, config.norm_eps)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.hook_pos_embed = HookPoint() if self.pos_embed is not None else None  # [batch, pos, d_model]
        self.hook_final = HookPoint()  # [batch, pos, d_model] normed state the MLM head reads
        self.init_parameters()

    @property
    def ap_table(self) -> torch.Tensor:
        if self.pos_embed is None:
            return super().ap_table
        return self.pos_embed.weight

    def encode(self, tokens, attention_mask, stop_at_layer, position_offset=None):
        x = self.hook_embed(self.embed(tokens))
        if self.pos_embed is not None:
            batch, seq_len = tokens.shape
            x = x + self.hook_pos_embed(self.absolute_positions(batch, seq_len, position_offset, self.pos_embed.weight))
        key_mask = additive_key_mask(attention_mask, torch.float32)
        n_blocks = self.config.n_layers if stop_at_layer is None else stop_at_layer
        for block in self.blocks[:n_blocks]:
            x = block(x, key_mask)
        if stop_at_layer is not None:
            return None
        return self.hook_final(self.final_norm(x))
