"""NeoBERT files -> our baselines: ``chandar-lab/NeoBERT`` (RoPE) and the authors' fork's AP / RP / RoPE
NeoBERT (``posneobert=false``), exactly (≈3e-6 on the test fixtures).

Their convention and what the mapping does with it (notes/interop.md §2.4-2.5, §3):
- ``qkv`` rows are interleaved per head ([q_h | k_h | v_h] for each head); ours are [Q | K | V]: regrouped;
- RoPE rotates consecutive pairs (2i, 2i+1); ours rotates halves (i, i + d_head/2) with the same
  frequencies: each head's q and k rows are permuted [0, 2, 4, ..., 1, 3, 5, ...], which leaves q.k as
  it is and makes our rotation theirs;
- the AP table has a padding row 0 and the first real token reads row pad_token_id + 1: rows shifted;
- the fork zeroes the first and last rows and columns of the RP bias at the padded batch length:
  ``rp_zero_boundary=True``;
- ``hidden_size`` is the model width, SwiGLU width = multiple_of_8_up(2/3 * intermediate_size), gate first.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..variants import variant_row

from .files import CONFIG_FILE, CheckpointError
from .mapping import (AUTHORS_RP_BUCKETS, AUTHORS_RP_MAX_DISTANCE, ForeignCheckpoint, check_authors_weights, field,
                      make_config, multiple_of_8_up, position_rows, vocabulary_fields)


def baseline_variant(data: dict, path: Path, format_name: str) -> str:
    if format_name == "neobert":  # the hub layout: RoPE, nothing else
        return "rope"
    rope, ap, rp = bool(data.get("rope")), bool(data.get("AP_embeddings", True)), bool(data.get("relative_pos_bias"))
    kinds = [name for name, on in (("rope", rope), ("ap", ap and not rope), ("rp", rp)) if on]
    if len(kinds) != 1:
        found = " + ".join(kinds) if kinds else "no position information at all"
        raise CheckpointError(f"{path / CONFIG_FILE}: a baseline with {found} (rope={rope}, AP_embeddings={ap}, "
                              f"relative_pos_bias={rp}) has no counterpart among our rope / ap / rp baselines")
    return kinds[0]


def expected_shapes(variant: str, h: int, V: int, M: int, H: int, L: int, F: int) -> dict[str, tuple]:
    spec = variant_row(variant)
    shapes = {"encoder.weight": (V, h), "layer_norm.weight": (h,), "decoder.weight": (V, h), "decoder.bias": (V,)}
    if spec.position_table:
        shapes["positional_embedding.weight"] = (M + 1, h)
    for i in range(L):
        t = f"transformer_encoder.{i}."
        shapes.update({t + "qkv.weight": (3 * h, h), t + "wo.weight": (h, h), t + "ffn.w12.weight": (2 * F, h),
                       t + "ffn.w3.weight": (h, F), t + "attention_norm.weight": (h,), t + "ffn_norm.weight": (h,)})
        if spec.relative_bias:
            shapes.update({t + "relative_pos_bias.relative_attention_bias": (AUTHORS_RP_BUCKETS, H),
                           t + "relative_pos_bias.bucket_indices": (M, M)})
    return shapes


def regroup_qkv(qkv: torch.Tensor, n_heads: int, rope: bool) -> torch.Tensor:
    """Their per-head [q_h | k_h | v_h] rows -> our [Q | K | V]; for RoPE, pairs (2i, 2i+1) -> halves."""
    d_head = qkv.shape[0] // (3 * n_heads)
    per_head = qkv.view(n_heads, 3, d_head, qkv.shape[-1]).transpose(0, 1)  # [3, H, d_head, d_in]
    if rope:
        pairs_to_halves = torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])
        q_and_k = per_head[:2][:, :, pairs_to_halves]
        per_head = torch.cat([q_and_k, per_head[2:]])
    return per_head.reshape(3 * n_heads * d_head, qkv.shape[-1])


def read_neobert(path: Path, file: Path, data: dict, state: dict, format_name: str) -> ForeignCheckpoint:
    variant = baseline_variant(data, path, format_name)
    spec = variant_row(variant)
    base = vocabulary_fields(data, path)
    h, M, H, L = field(data, "hidden_size", path), field(data, "max_length", path), base["n_heads"], base["n_layers"]
    if h % H:
        raise CheckpointError(f"{path / CONFIG_FILE}: hidden_size {h} is not divisible by {H} heads")
    if data.get("dim_head", h // H) != h // H:
        raise CheckpointError(f"{path / CONFIG_FILE}: dim_head={data['dim_head']} but hidden_size / heads = {h // H}")
    F = multiple_of_8_up(2 * field(data, "intermediate_size", path, default=4 * h) / 3)
    shapes = expected_shapes(variant, h, base["vocab_size"], M, H, L, F)
    check_authors_weights(file, state, shapes, M)

    out = {"embed.weight": state["encoder.weight"], "final_norm.weight": state["layer_norm.weight"]}
    max_positions = M
    if spec.position_table:
        out["pos_embed.weight"], max_positions = position_rows(state["positional_embedding.weight"], base["pad_token_id"], M)
    for i in range(L):
        t, o = f"transformer_encoder.{i}.", f"blocks.{i}."
        out[o + "attn.qkv.weight"] = regroup_qkv(state[t + "qkv.weight"], H, rope=spec.rotary)
        out[o + "attn.out.weight"] = state[t + "wo.weight"]
        if spec.relative_bias:
            out[o + "attn.rel_bias.bias"] = state[t + "relative_pos_bias.relative_attention_bias"]
        out[o + "norm_attn.weight"], out[o + "norm_mlp.weight"] = state[t + "attention_norm.weight"], state[t + "ffn_norm.weight"]
        out[o + "mlp.w_in.weight"], out[o + "mlp.w_out.weight"] = state[t + "ffn.w12.weight"], state[t + "ffn.w3.weight"]
    has_decoder = "decoder.weight" in state
    if has_decoder:
        out["mlm_head.weight"], out["mlm_head.bias"] = state["decoder.weight"], state["decoder.bias"]
    extra = dict(rp_num_buckets=AUTHORS_RP_BUCKETS, rp_max_distance=AUTHORS_RP_MAX_DISTANCE, rp_zero_boundary=True) if spec.relative_bias else {}
    config = make_config(path, format_name, variant=variant, d_model=h, d_head=h // H, d_mlp=F, max_positions=max_positions,
                         rope_theta=10000.0, encoder_only=not has_decoder, **extra, **base)
    return ForeignCheckpoint(config=config, state={k: v.float().contiguous() for k, v in out.items()}, format=format_name)
