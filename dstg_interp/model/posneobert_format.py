"""The authors' PosNeoBERT (DSTG) files -> our ``dstg`` model, exactly (≈3e-6 on the test fixtures).

Their convention and what the mapping does with it (notes/interop.md §3, items D1-D22):
- one residual [AP | sem], AP first; ours keeps two streams and our ``full`` is [sem | AP]: every weight
  that reads or writes the concatenation (FFN, full-state decoder) has its columns or rows swapped;
- the *normed* stream replaces the residual in both sub-layers: ``residual_from_normed=True``;
- the AP table has a padding row 0 and the first real token reads row pad_token_id + 1: rows shifted;
- the fork zeroes the first and last rows and columns of the relative bias at the padded batch length:
  ``rp_zero_boundary=True`` (their training code does not, so its files load without it);
- no relative bias (``relative_pos_bias=false``): our bias table is loaded as zeros, which adds nothing;
- FFN ``posbertswiglu``: one SwiGLU whose down-projection is masked block-diagonally; the AP units are
  read off ``ffn.mask`` (their rounding differs from ours) and set as ``mlp_ap_units``.
  ``swiglu`` with ``mixed_feed_forward``: ``mlp_mode="mixed"``.  Two separate SwiGLUs
  (``mixed_feed_forward=false``): our split FFN with a block-diagonal input projection;
- training code (A2): q and k come from one ``qk_*`` projection whose rows are interleaved per head;
- a file without ``decoder.*`` is encoder-only (the published checkpoint is saved that way).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .files import CONFIG_FILE, CheckpointError
from .mapping import (AUTHORS_RP_BUCKETS, AUTHORS_RP_MAX_DISTANCE, ForeignCheckpoint, check_authors_weights, field,
                      make_config, multiple_of_8_up, position_rows, vocabulary_fields)


def ap_last_to_first(n_ap: int, n_sem: int) -> torch.Tensor:
    """Indices that reorder their [AP | sem] axis into our [sem | AP]."""
    return torch.cat([torch.arange(n_ap, n_ap + n_sem), torch.arange(n_ap)])


def ffn_kind(data: dict, path: Path) -> str:
    activation = str(data.get("hidden_act", "swiglu")).lower()
    if activation == "posbertswiglu":
        return "masked"
    if activation == "swiglu":
        return "mixed" if data.get("mixed_feed_forward", True) else "separate"
    raise CheckpointError(f"{path / CONFIG_FILE}: hidden_act={data.get('hidden_act')!r} is not supported; only the SwiGLU "
                          "FFNs ('swiglu', 'posbertswiglu') have a counterpart in our models")


def expected_shapes(d: dict) -> dict[str, tuple]:
    """Every key of their file (model. prefix stripped) and its shape, from config.json alone."""
    h, p, dq, V, F = d["h"], d["p"], d["dq"], d["V"], d["F"]
    shapes = {"encoder.weight": (V, h), "positional_embedding.weight": (d["M"] + 1, p),
              "sem_layer_norm.weight": (h,), "pos_layer_norm.weight": (p,),
              "decoder.weight": (V, h if d["sem_decoder"] else h + p), "decoder.bias": (V,)}
    for i in range(d["L"]):
        t = f"transformer_encoder.{i}."
        if d["training_code"]:
            shapes.update({t + "qk_pos.weight": (2 * dq, p), t + "qk_sem.weight": (2 * dq, h),
                           t + "v_pos.weight": (p, p), t + "v_sem.weight": (h, h)})
        else:
            shapes.update({t + "qkv_pos.weight": (2 * dq + p, p), t + "qkv_sem.weight": (2 * dq + h, h)})
        shapes.update({t + "wo_pos.weight": (p, p), t + "wo_sem.weight": (h, h)})
        for name, width in (("sem", h), ("pos", p)):
            shapes.update({t + f"{name}_attention_norm.weight": (width,), t + f"{name}_ffn_norm.weight": (width,)})
        if d["rp"]:
            shapes.update({t + "relative_pos_bias.relative_attention_bias": (AUTHORS_RP_BUCKETS, d["H"]),
                           t + "relative_pos_bias.bucket_indices": (d["M"], d["M"])})
        if d["ffn"] == "separate":
            shapes.update({t + "pos_ffn.w12.weight": (2 * d["F_ap"], p), t + "pos_ffn.w3.weight": (p, d["F_ap"]),
                           t + "sem_ffn.w12.weight": (2 * d["F_sem"], h), t + "sem_ffn.w3.weight": (h, d["F_sem"])})
        else:
            shapes.update({t + "ffn.w12.weight": (2 * F, p + h), t + "ffn.w3.weight": (p + h, F)})
            if d["ffn"] == "masked":
                shapes[t + "ffn.mask"] = (p + h, F)
    return shapes


def split_qkv(state: dict, t: str, stream: str, d: dict) -> torch.Tensor:
    """Our fused [q | k | v] rows (head-major) for one stream."""
    if not d["training_code"]:
        return state[t + f"qkv_{stream}.weight"]  # the fork already stores [q | k | v], head-major
    qk = state[t + f"qk_{stream}.weight"]  # rows: per head, [q_h | k_h]
    per_head = qk.view(d["H"], 2, d["dq"] // d["H"], qk.shape[-1])
    q, k = (per_head[:, j].reshape(d["dq"], qk.shape[-1]) for j in (0, 1))
    return torch.cat([q, k, state[t + f"v_{stream}.weight"]])


def masked_ffn_units(file: Path, mask: torch.Tensor, p: int) -> int:
    """How many hidden units write the AP stream, from the fork's ``ffn.mask`` (which must be the block
    pattern: AP rows read units [0, n), semantic rows the rest)."""
    n_ap = int(mask[0].sum())
    expected = torch.zeros_like(mask)
    expected[:p, :n_ap] = 1
    expected[p:, n_ap:] = 1
    if not 0 < n_ap < mask.shape[1] or not torch.equal(mask, expected):
        raise CheckpointError(f"{file}: ffn.mask is not the block-diagonal [AP | sem] pattern of the posbertswiglu FFN")
    return n_ap


def map_ffn(file: Path, state: dict, t: str, o: str, d: dict, out: dict) -> int:
    """Fill our ``blocks.{i}.mlp.*`` from their FFN; returns the AP units (0 for the mixed FFN)."""
    h, p = d["h"], d["p"]
    swap = ap_last_to_first(p, h)
    if d["ffn"] == "separate":  # two SwiGLUs -> one split SwiGLU whose input projection is block-diagonal
        ap_w12, sem_w12 = state[t + "pos_ffn.w12.weight"], state[t + "sem_ffn.w12.weight"]
        halves = []
        for ap_half, sem_half in zip(ap_w12.chunk(2), sem_w12.chunk(2)):  # gate, then value
            halves.append(torch.block_diag(sem_half, ap_half))  # rows [sem units | AP units], columns [sem | AP]
        out[o + "mlp.w_in.weight"] = torch.cat(halves)
        out[o + "mlp.w_out_sem.weight"] = state[t + "sem_ffn.w3.weight"]
        out[o + "mlp.w_out_ap.weight"] = state[t + "pos_ffn.w3.weight"]
        return d["F_ap"]
    w12, w3 = state[t + "ffn.w12.weight"], state[t + "ffn.w3.weight"]
    F = w3.shape[1]
    if d["ffn"] == "mixed":
        out[o + "mlp.w_in.weight"] = w12[:, swap]
        out[o + "mlp.w_out.weight"] = w3[swap]
        return 0
    n_ap = masked_ffn_units(file, state[t + "ffn.mask"], p)
    w3 = w3 * state[t + "ffn.mask"]  # the stored off-block entries are not zero; their forward masks them
    units = torch.cat([torch.arange(n_ap, F), torch.arange(n_ap)])  # our hidden order: [sem units | AP units]
    out[o + "mlp.w_in.weight"] = w12.view(2, F, p + h)[:, units][:, :, swap].reshape(2 * F, h + p)
    out[o + "mlp.w_out_sem.weight"] = w3[p:, n_ap:]
    out[o + "mlp.w_out_ap.weight"] = w3[:p, :n_ap]
    return n_ap


def read_posneobert(path: Path, file: Path, data: dict, state: dict, format_name: str) -> ForeignCheckpoint:
    if data.get("rope"):
        raise CheckpointError(f"{path / CONFIG_FILE}: rope=true inside PosNeoBERT is not supported (DSTG models "
                              "carry position in the AP stream and the relative bias)")
    base = vocabulary_fields(data, path)
    h, p = field(data, "hidden_size", path), field(data, "pos_size", path)
    H, M = base["n_heads"], field(data, "max_length", path)
    if (h + p) % H:
        raise CheckpointError(f"{path / CONFIG_FILE}: hidden_size + pos_size = {h + p} is not divisible by {H} heads")
    if data.get("dim_head", (h + p) // H) != (h + p) // H:
        raise CheckpointError(f"{path / CONFIG_FILE}: dim_head={data['dim_head']} but PosNeoBERT implies "
                              f"(hidden_size + pos_size) / heads = {(h + p) // H}")
    # B's class defaults are 4x each width, the training code's 1536/3072: read them, never assume.
    ap_inner, sem_inner = data.get("pos_intermediate_size") or 4 * p, data.get("intermediate_size") or 4 * h
    d = dict(h=h, p=p, H=H, L=base["n_layers"], M=M, V=base["vocab_size"], dq=h + p, ffn=ffn_kind(data, path),
             F=multiple_of_8_up(2 * (ap_inner + sem_inner) / 3), F_ap=multiple_of_8_up(2 * ap_inner / 3),
             F_sem=multiple_of_8_up(2 * sem_inner / 3), rp=bool(data.get("relative_pos_bias")),
             sem_decoder=bool(data.get("use_only_sem_for_decoding")), training_code=format_name == "posneobert-training")
    shapes = expected_shapes(d)
    check_authors_weights(file, state, shapes, M)

    ap_rows, max_positions = position_rows(state["positional_embedding.weight"], base["pad_token_id"], M)
    out = {"embed.weight": state["encoder.weight"], "ap_embed.weight": ap_rows,
           "final_norm_sem.weight": state["sem_layer_norm.weight"], "final_norm_ap.weight": state["pos_layer_norm.weight"]}
    ap_units = set()
    for i in range(d["L"]):
        t, o = f"transformer_encoder.{i}.", f"blocks.{i}."
        out[o + "attn.qkv_sem.weight"] = split_qkv(state, t, "sem", d)
        out[o + "attn.qkv_ap.weight"] = split_qkv(state, t, "pos", d)
        out[o + "attn.out_sem.weight"], out[o + "attn.out_ap.weight"] = state[t + "wo_sem.weight"], state[t + "wo_pos.weight"]
        out[o + "attn.rel_bias.bias"] = (state[t + "relative_pos_bias.relative_attention_bias"] if d["rp"]
                                         else torch.zeros(AUTHORS_RP_BUCKETS, H))
        for ours, theirs in (("norm_attn", "attention_norm"), ("norm_mlp", "ffn_norm")):
            out[o + f"{ours}_sem.weight"] = state[t + f"sem_{theirs}.weight"]
            out[o + f"{ours}_ap.weight"] = state[t + f"pos_{theirs}.weight"]
        ap_units.add(map_ffn(file, state, t, o, d, out))
    if len(ap_units) != 1:
        raise CheckpointError(f"{file}: ffn.mask gives different AP widths per layer ({sorted(ap_units)}); "
                              "our split FFN has one")
    has_decoder = "decoder.weight" in state
    if has_decoder:
        out["mlm_head.weight"] = state["decoder.weight"] if d["sem_decoder"] else state["decoder.weight"][:, ap_last_to_first(p, h)]
        out["mlm_head.bias"] = state["decoder.bias"]
    mixed = d["ffn"] == "mixed"
    config = make_config(
        path, format_name, variant="dstg", d_sem=h, d_ap=p, d_head=(h + p) // H, max_positions=max_positions,
        d_mlp=d["F_ap"] + d["F_sem"] if d["ffn"] == "separate" else d["F"],
        mlp_mode="mixed" if mixed else "split", mlp_ap_units=None if mixed else ap_units.pop(),
        residual_from_normed=True, rp_zero_boundary=d["rp"] and not d["training_code"],
        rp_num_buckets=AUTHORS_RP_BUCKETS, rp_max_distance=AUTHORS_RP_MAX_DISTANCE,
        mlm_head_input="sem" if d["sem_decoder"] else "full", encoder_only=not has_decoder, **base)
    return ForeignCheckpoint(config=config, state={k: v.float().contiguous() for k, v in out.items()}, format=format_name)
