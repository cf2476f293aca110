"""Building blocks shared by DSTG-NeoBERT and the baselines: RMSNorm, SwiGLU, T5 relative bias, rotary.

All linear layers are bias-free (NeoBERT); only the MLM head has a bias.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dimension (no mean subtraction, no bias)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., d]
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class SwiGLU(nn.Module):
    """silu(x W_gate) * (x W_up), then W_down. Gate and up projections are fused into one matmul."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.d_hidden = d_hidden
        self.w_in = nn.Linear(d_in, 2 * d_hidden, bias=False)
        self.w_out = nn.Linear(d_hidden, d_out, bias=False)
        self.hook_post = HookPoint()  # [batch, pos, d_hidden] the hidden units W_down reads (TransformerLens' mlp.hook_post)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:  # [..., d_in] -> [..., d_hidden]
        gate, up = self.w_in(x).chunk(2, dim=-1)
        return F.silu(gate) * up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_out(self.hook_post(self.hidden(x)))


def t5_relative_buckets(query_len: int, key_len: int, num_buckets: int, max_distance: int, device=None) -> torch.Tensor:
    """Bidirectional T5 buckets of offset (key - query): [query_len, key_len] long tensor (``t5_offset_buckets``)."""
    offset = torch.arange(key_len, device=device)[None, :] - torch.arange(query_len, device=device)[:, None]
    return t5_offset_buckets(offset, num_buckets, max_distance)


def t5_offset_buckets(offset: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5 bucket of each offset (key - query), same shape.

    Half the buckets per direction; within a direction, offsets below ``num_buckets // 4`` are exact and
    the rest are log-spaced up to ``max_distance``; beyond it everything shares the last bucket.
    """
    half = num_buckets // 2
    bucket = (offset > 0).long() * half
    distance = offset.abs()
    exact = half // 2
    log_bucket = exact + (
        torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)
    ).long()
    log_bucket = log_bucket.clamp(max=half - 1)
    return bucket + torch.where(distance < exact, distance, log_bucket)


class RelativePositionBias(nn.Module):
    """Learned per-head scalar bias indexed by T5 bucket of the offset; zero-initialised (authors' code).

    ``zero_boundary`` reproduces the authors' transformers fork, which zeroes rows and columns 0 and
    seq_len - 1 of the bias (meant for [CLS]/[SEP]); seq_len is the padded batch length, so in a padded
    batch the last *real* token of a shorter sequence keeps its bias.
    """

    def __init__(self, n_heads: int, num_buckets: int, max_distance: int, max_positions: int, zero_boundary: bool = False):
        super().__init__()
        self.zero_boundary = zero_boundary
        self.bias = nn.Parameter(torch.zeros(num_buckets, n_heads))
        # The bucket of each offset key - query = -(max_positions - 1) .. max_positions - 1 (a bucket depends
        # on the offset only).  Indexed by offset rather than sliced from a [T, T] table, so that a compiled
        # graph with a symbolic length needs no special case for the full length (train.compile_for_training).
        self.max_positions = max_positions
        offsets = torch.arange(-(max_positions - 1), max_positions)
        self.register_buffer("offset_buckets", t5_offset_buckets(offsets, num_buckets, max_distance), persistent=False)

    @torch.no_grad()
    def locality_init(self, strength: float) -> None:
        """Every head's bias at -strength * ln(1 + |offset|), averaged over the offsets of each bucket: attention
        to near tokens from the first step (``ModelConfig.rp_locality_init``)."""
        offsets = torch.arange(-(self.max_positions - 1), self.max_positions, dtype=torch.float32)
        penalty = -strength * torch.log1p(offsets.abs())
        buckets = self.offset_buckets.to(torch.long)
        sums = torch.zeros(self.bias.shape[0]).index_add_(0, buckets, penalty)
        counts = torch.zeros(self.bias.shape[0]).index_add_(0, buckets, torch.ones_like(penalty))
        self.bias.copy_((sums / counts.clamp(min=1))[:, None].expand_as(self.bias))

    def forward(self, seq_len: int) -> torch.Tensor:  # -> [1, n_heads, seq_len, seq_len]
        positions = torch.arange(seq_len, device=self.bias.device)
        offsets = positions[None, :] - positions[:, None] + (self.max_positions - 1)
        bias = self.bias.t()[:, self.offset_buckets[offsets]]  # gathered head-major: contiguous rows
        if self.zero_boundary:
            edge = torch.zeros(seq_len, dtype=torch.bool, device=bias.device)
            edge[[0, -1]] = True
            bias = bias.masked_fill(edge[:, None] | edge[None, :], 0.0)
        return bias.unsqueeze(0)


class Rotary(nn.Module):
    """Rotary position embedding on the last dimension (rotate-half form, theta^(-2i/d) frequencies)."""

    def __init__(self, d_head: int, max_positions: int, theta: float):
        super().__init__()
        inv_freq = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, H, T, d_head]
        seq_len = x.shape[-2]
        cos, sin = self.cos[:seq_len].to(x.dtype), self.sin[:seq_len].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def is_hooked(*hook_points: HookPoint) -> bool:
    """True when any hook (forward or backward) is attached: then the slow, materialised path must run."""
    return any(hp._forward_hooks or hp._backward_hooks for hp in hook_points)


def through_head_hook(hook: HookPoint, x: torch.Tensor) -> torch.Tensor:
    """Pass a per-head tensor [B, H, T, d] through ``hook`` in TransformerLens' layout [batch, pos, head, d]
    (``hook_q``, ``hook_k``, ``hook_v``, ``hook_z``), only when a hook is attached: unused, it costs nothing."""
    if not is_hooked(hook):
        return x
    return hook(x.transpose(1, 2)).transpose(1, 2)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:  # [B, T, H*d] -> [B, H, T, d]
    b, t, _ = x.shape
    return x.view(b, t, n_heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:  # [B, H, T, d] -> [B, T, H*d]
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def attention_with_learned_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                                 key_mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale + bias + key_mask) v, for training a learned bias: q, k [B, H, T, d_qk], v [B, H, T, d_v],
    bias [1, H, T, T], key_mask [B, 1, 1, T] or None -> [B, H, T, d_v].

    SDPA's fused CPU kernels give no gradient for an additive mask, so with a bias that needs one SDPA
    takes its math path, whose "safe" softmax adds passes over the scores (and, compiled, inductor re-gathers
    the bias table inside each of them: benchmarks/README.md).  Here one ``baddbmm`` writes the scores on
    top of the realised bias, then one softmax and one ``bmm``: the same arithmetic in less time per layer
    (benchmarks/README.md).
    """
    batch, heads, seq_len, d_qk = q.shape
    mask = bias if key_mask is None else bias + key_mask
    scores = torch.baddbmm(mask.expand(batch, heads, seq_len, seq_len).reshape(batch * heads, seq_len, seq_len),
                           q.reshape(batch * heads, seq_len, d_qk), k.reshape(batch * heads, seq_len, d_qk).transpose(1, 2),
                           alpha=scale)
    z = torch.bmm(scores.softmax(dim=-1), v.reshape(batch * heads, seq_len, v.shape[-1]))
    return z.view(batch, heads, seq_len, v.shape[-1])


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    scale: float) -> torch.Tensor:
    """``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)``, except when training in bfloat16
    on a CPU: then it runs in float32 and returns bfloat16.  The CPU flash kernel's bfloat16 backward takes
    about 6x its float32 backward at zoo size (75 against 12 ms a layer, one thread: benchmarks/README.md,
    the step profile), more than all the step's matmuls; its float32 forward costs 1.4x the bfloat16 one.
    """
    training_bf16_on_cpu = (q.dtype == torch.bfloat16 and q.device.type == "cpu" and torch.is_grad_enabled()
                            and (q.requires_grad or k.requires_grad or v.requires_grad))
    if not training_bf16_on_cpu:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    with torch.autocast("cpu", enabled=False):  # autocast would cast the inputs back to bfloat16
        z = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                           attn_mask=None if mask is None else mask.float(), scale=scale)
    return z.to(q.dtype)


def additive_key_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """[B, T] bool (True = real token) -> [B, 1, 1, T] additive mask (0 or a large negative)."""
    if attention_mask is None:
        return None
    mask = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    mask = mask.masked_fill(~attention_mask, torch.finfo(dtype).min)
    return mask[:, None, None, :]


def init_weights(module: nn.Module, std: float) -> None:
    """Normal(0, std) for every linear weight and embedding table; norms at 1; biases (MLM head) at 0.

    The relative bias stays at zero, as in the authors' code.
    """
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            nn.init.normal_(sub.weight, std=std)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)
        elif isinstance(sub, nn.Embedding):
            nn.init.normal_(sub.weight, std=std)
        elif isinstance(sub, RMSNorm):
            nn.init.ones_(sub.weight)
        elif isinstance(sub, RelativePositionBias):
            nn.init.zeros_(sub.bias)
