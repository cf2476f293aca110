"""DSTG-NeoBERT: separate absolute-position (AP) and semantic residual streams, plus a relative bias.

    model = build_model(ModelConfig(variant="dstg", d_sem=112, d_ap=16, n_layers=6, n_heads=4))
    _, cache = model.run_with_cache(tokens, names_filter="blocks.5.attn.hook_logits_ap")

Per layer (the paper, arXiv 2605.30022, and the authors' public code; README, "The models"):
- attention: per head, q/k from each stream projected to the same ``d_head``; logit = (q_sem.k_sem +
  q_ap.k_ap)/sqrt(d_head) + T5-bucket RP bias; one softmax shared by both value streams; each stream's
  values and output projection stay inside that stream (block-diagonal);
- separate RMSNorms per stream before attention and before the FFN;
- SwiGLU reading concat(normed sem, normed AP); its hidden units are split in proportion to the stream
  widths and each part writes only into its own stream (block-diagonal down-projection) -- the only place
  the streams meet directly;
- the MLM head reads the final normed semantic stream only, so the final AP stream gets no MLM gradient.

Without the relative term (``rp_bias=False``, the authors' ablation) the logit is the two q.k terms only and
``hook_logits_rp`` does not exist.  Options for converted checkpoints of the authors (config.py): ``mlp_mode="mixed"`` (one SwiGLU over
[sem | AP] writing both streams), ``mlm_head_input="full"`` (the head reads [sem | AP]),
``rp_zero_boundary``, ``encoder_only``.

Fast path: concatenating [q_sem | q_ap] and [k_sem | k_ap] along the head dimension makes one dot product
equal the sum of both terms, so one attention call per layer computes it, with the values [v_sem | v_ap]
sharing its weights and the RP bias entering as the additive mask: fused SDPA without gradients,
``attention_with_learned_bias`` in training (the bias needs its gradient).  The separate logit terms are
materialised only when one of their hooks (or the pattern hook) is in use.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from ..config import ModelConfig
from ..variants import variants_where
from .base import EncoderForMLM
from .layers import (RelativePositionBias, RMSNorm, SwiGLU, additive_key_mask, attention_with_learned_bias, is_hooked,
                     merge_heads, split_heads, through_head_hook)


class DSTGAttention(nn.Module):
    """DSTG's attention: one softmax over the sum of the semantic q.k term, the AP q.k term and (optionally) the
    learned RP bias; the pattern mixes each stream's own values, [v_sem | v_ap], written back to each stream."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.d_head, self.d_sem, self.d_ap = cfg.n_heads, cfg.d_head, cfg.d_sem, cfg.d_ap
        qk = 2 * cfg.n_heads * cfg.d_head
        self.qkv_sem = nn.Linear(cfg.d_sem, qk + cfg.d_sem, bias=False)  # q_sem, k_sem, v_sem
        self.qkv_ap = nn.Linear(cfg.d_ap, qk + cfg.d_ap, bias=False)  # q_ap, k_ap, v_ap
        self.out_sem = nn.Linear(cfg.d_sem, cfg.d_sem, bias=False)
        self.out_ap = nn.Linear(cfg.d_ap, cfg.d_ap, bias=False)
        self.rel_bias = RelativePositionBias(cfg.n_heads, cfg.rp_num_buckets, cfg.rp_max_distance, cfg.max_positions,
                                             zero_boundary=cfg.rp_zero_boundary) if cfg.rp_bias else None
        self.hook_logits_sem = HookPoint()  # [batch, head, query_pos, key_pos] q_sem.k_sem / sqrt(d_head)
        self.hook_logits_ap = HookPoint()  # [batch, head, query_pos, key_pos] q_ap.k_ap / sqrt(d_head)
        # [batch, head, query_pos, key_pos] learned bucket bias; a DSTG built with rp_bias=False has no such term
        self.hook_logits_rp = HookPoint() if cfg.rp_bias else None
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos] softmax weights
        # per head and stream, TransformerLens' layout [batch, pos, head, d]: hook_q_sem, hook_k_sem, hook_v_sem,
        # hook_z_sem (the head's mixed values, before out_sem) and the same for _ap
        for stream in ("sem", "ap"):
            for name in ("q", "k", "v", "z"):
                setattr(self, f"hook_{name}_{stream}", HookPoint())

    def _project(self, x: torch.Tensor, linear: nn.Linear, d_value: int, stream: str):
        hd = self.n_heads * self.d_head
        q, k, v = linear(x).split([hd, hd, d_value], dim=-1)
        return tuple(through_head_hook(getattr(self, f"hook_{name}_{stream}"), split_heads(t, self.n_heads))
                     for name, t in zip("qkv", (q, k, v)))

    def forward(self, x_sem: torch.Tensor, x_ap: torch.Tensor, key_mask: torch.Tensor | None):
        q_sem, k_sem, v_sem = self._project(x_sem, self.qkv_sem, self.d_sem, "sem")
        q_ap, k_ap, v_ap = self._project(x_ap, self.qkv_ap, self.d_ap, "ap")
        batch, seq_len = x_sem.shape[:2]
        rp = self.rel_bias(seq_len).to(q_sem.dtype) if self.rel_bias is not None else None
        key_mask = key_mask.to(q_sem.dtype) if key_mask is not None else None
        scale = 1.0 / math.sqrt(self.d_head)
        hook_points = [self.hook_logits_sem, self.hook_logits_ap, self.hook_pattern]
        if is_hooked(*hook_points, *([self.hook_logits_rp] if rp is not None else [])):
            total = (
                self.hook_logits_sem(q_sem @ k_sem.transpose(-1, -2) * scale)
                + self.hook_logits_ap(q_ap @ k_ap.transpose(-1, -2) * scale)
            )
            if rp is not None:
                total = total + self.hook_logits_rp(rp.expand(batch, -1, -1, -1))
            if key_mask is not None:
                total = total + key_mask
            pattern = self.hook_pattern(total.softmax(dim=-1))
            z_sem, z_ap = pattern @ v_sem, pattern @ v_ap
        else:
            q = torch.cat([q_sem, q_ap], dim=-1)
            k = torch.cat([k_sem, k_ap], dim=-1)
            v = torch.cat([v_sem, v_ap], dim=-1)
            if rp is not None and rp.requires_grad:  # training (the bias was built with grad on): it needs dL/dlogits
                z = attention_with_learned_bias(q, k, v, rp, key_mask, scale)
            else:
                # Without a gradient for a learned bias, SDPA can use its fused CPU kernel, which
                # needs one head size for q, k and v (else it falls back to the ~7x slower math path):
                # zero-pad the narrower side, which changes neither scores nor outputs.
                width = max(q.shape[-1], v.shape[-1])
                q, k = F.pad(q, (0, width - q.shape[-1])), F.pad(k, (0, width - k.shape[-1]))
                v = F.pad(v, (0, width - v.shape[-1]))
                mask = key_mask if rp is None else (rp if key_mask is None else rp + key_mask)
                z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
            d_value_sem, d_value_ap = self.d_sem // self.n_heads, self.d_ap // self.n_heads
            z_sem, z_ap = z[..., :d_value_sem], z[..., d_value_sem : d_value_sem + d_value_ap]
        z_sem, z_ap = through_head_hook(self.hook_z_sem, z_sem), through_head_hook(self.hook_z_ap, z_ap)
        return self.out_sem(merge_heads(z_sem)), self.out_ap(merge_heads(z_ap))


class DSTGSwiGLU(nn.Module):
    """SwiGLU over concat(sem, AP) whose hidden units write back block-diagonally into each stream."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_mlp_sem, self.d_mlp_ap = cfg.d_mlp_sem, cfg.d_mlp_ap
        self.w_in = nn.Linear(cfg.d_sem + cfg.d_ap, 2 * cfg.d_mlp, bias=False)
        self.w_out_sem = nn.Linear(cfg.d_mlp_sem, cfg.d_sem, bias=False)
        self.w_out_ap = nn.Linear(cfg.d_mlp_ap, cfg.d_ap, bias=False)
        self.hook_post = HookPoint()  # [batch, pos, d_mlp] hidden units: the semantic stream's first, then the AP's

    def forward(self, x_sem: torch.Tensor, x_ap: torch.Tensor):
        gate, up = self.w_in(torch.cat([x_sem, x_ap], dim=-1)).chunk(2, dim=-1)
        hidden_sem, hidden_ap = self.hook_post(F.silu(gate) * up).split([self.d_mlp_sem, self.d_mlp_ap], dim=-1)
        return self.w_out_sem(hidden_sem), self.w_out_ap(hidden_ap)


class DSTGMixedSwiGLU(SwiGLU):
    """One SwiGLU over concat(sem, AP) whose down-projection writes both streams: the streams also meet
    here, through every hidden unit (the authors' ``mixed_feed_forward``)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, cfg.d_mlp, cfg.d_model)
        self.d_sem = cfg.d_sem

    def forward(self, x_sem: torch.Tensor, x_ap: torch.Tensor):  # type: ignore[override]  # two streams in
        out = super().forward(torch.cat([x_sem, x_ap], dim=-1))
        return out[..., : self.d_sem], out[..., self.d_sem :]


class DSTGBlock(nn.Module):
    """One DSTG block over the two streams: separate RMSNorms per stream, the shared attention, the FFN; with
    ``residual_from_normed`` (the authors' code) the normed stream becomes the residual."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.residual_from_normed = cfg.residual_from_normed
        self.norm_attn_sem = RMSNorm(cfg.d_sem, cfg.norm_eps)
        self.norm_attn_ap = RMSNorm(cfg.d_ap, cfg.norm_eps)
        self.attn = DSTGAttention(cfg)
        self.norm_mlp_sem = RMSNorm(cfg.d_sem, cfg.norm_eps)
        self.norm_mlp_ap = RMSNorm(cfg.d_ap, cfg.norm_eps)
        self.mlp = DSTGMixedSwiGLU(cfg) if cfg.mlp_mode == "mixed" else DSTGSwiGLU(cfg)
        for stream in ("sem", "ap"):  # [batch, pos, d_sem] / [batch, pos, d_ap]
            for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
                setattr(self, f"hook_{name}_{stream}", HookPoint())

    def forward(self, x_sem, x_ap, key_mask):
        x_sem, x_ap = self.hook_resid_pre_sem(x_sem), self.hook_resid_pre_ap(x_ap)
        n_sem, n_ap = self.norm_attn_sem(x_sem), self.norm_attn_ap(x_ap)
        a_sem, a_ap = self.attn(n_sem, n_ap, key_mask)
        if self.residual_from_normed:  # the authors' quirk: the normed stream becomes the residual
            x_sem, x_ap = n_sem, n_ap
        x_sem = self.hook_resid_mid_sem(x_sem + self.hook_attn_out_sem(a_sem))
        x_ap = self.hook_resid_mid_ap(x_ap + self.hook_attn_out_ap(a_ap))
        n_sem, n_ap = self.norm_mlp_sem(x_sem), self.norm_mlp_ap(x_ap)
        m_sem, m_ap = self.mlp(n_sem, n_ap)
        if self.residual_from_normed:
            x_sem, x_ap = n_sem, n_ap
        x_sem = self.hook_resid_post_sem(x_sem + self.hook_mlp_out_sem(m_sem))
        x_ap = self.hook_resid_post_ap(x_ap + self.hook_mlp_out_ap(m_ap))
        return x_sem, x_ap


class DSTGNeoBERT(EncoderForMLM):
    """DSTG-NeoBERT: a semantic stream from the token embedding and an AP stream from the learned position table
    (``ap_embed``), kept apart through every block; the MLM head reads the final semantic stream."""

    def __init__(self, config: ModelConfig):
        if config.spec.model_class != "DSTGNeoBERT":
            raise ValueError(f"DSTGNeoBERT builds the variants {'/'.join(variants_where(model_class='DSTGNeoBERT'))}, "
                             f"not {config.variant!r}")
        super().__init__(config, head_width=config.d_sem if config.mlm_head_input == "sem" else config.d_model)
        self.embed = nn.Embedding(config.vocab_size, config.d_sem)
        self.ap_embed = nn.Embedding(config.max_positions, config.d_ap)
        self.blocks = nn.ModuleList(DSTGBlock(config) for _ in range(config.n_layers))
        self.final_norm_sem = RMSNorm(config.d_sem, config.norm_eps)
        self.final_norm_ap = RMSNorm(config.d_ap, config.norm_eps)
        self.hook_embed_sem = HookPoint()  # [batch, pos, d_sem] token embedding
        self.hook_embed_ap = HookPoint()  # [batch, pos, d_ap] AP table rows
        self.hook_final_sem = HookPoint()  # [batch, pos, d_sem] what the MLM head reads
        self.hook_final_ap = HookPoint()  # [batch, pos, d_ap] (no MLM gradient reaches it)
        self.init_parameters()

    @property
    def ap_table(self) -> torch.Tensor:
        return self.ap_embed.weight

    def encode(self, tokens, attention_mask, stop_at_layer, position_offset=None):
        batch, seq_len = tokens.shape
        x_sem = self.hook_embed_sem(self.embed(tokens))
        x_ap = self.hook_embed_ap(self.absolute_positions(batch, seq_len, position_offset, self.ap_embed.weight))
        key_mask = additive_key_mask(attention_mask, torch.float32)
        n_blocks = self.config.n_layers if stop_at_layer is None else stop_at_layer
        for block in self.blocks[:n_blocks]:
            x_sem, x_ap = block(x_sem, x_ap, key_mask)
        if stop_at_layer is not None:
            return None
        reads_ap = self.config.mlm_head_input == "full" and not self.config.encoder_only
        final_ap = None
        if reads_ap or is_hooked(self.hook_final_ap):  # else nothing downstream reads it
            final_ap = self.hook_final_ap(self.final_norm_ap(x_ap))
        final_sem = self.hook_final_sem(self.final_norm_sem(x_sem))
        return torch.cat([final_sem, final_ap], dim=-1) if reads_ap else final_sem
