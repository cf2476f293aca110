"""Tiny models whose heads are made to read one thing by zeroing weights: the hand-built DSTG of the head tests
(``tests/analysis/test_heads.py``, ``test_head_split.py``)."""

import torch

from conftest import tiny_model

N_HEADS, D_HEAD = 4, 8


def qk_rows(head: int) -> list[int]:
    """Rows of a fused [q | k | v] projection that produce head ``head``'s query and key."""
    q = range(head * D_HEAD, (head + 1) * D_HEAD)
    k = range(N_HEADS * D_HEAD + head * D_HEAD, N_HEADS * D_HEAD + (head + 1) * D_HEAD)
    return [*q, *k]


def hand_built_dstg():
    """Layer 0 heads: 0 AP-only, 1 semantic-only, 2 RP-only, 3 untouched (strong sem and AP). Layer 1 as built."""
    model = tiny_model("dstg")
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            # large weights so the logits are far from uniform attention (init std 0.02 gives ~0 logits)
            attn.qkv_sem.weight.copy_(torch.randn(attn.qkv_sem.weight.shape, generator=generator) * 0.6)
            attn.qkv_ap.weight.copy_(torch.randn(attn.qkv_ap.weight.shape, generator=generator) * 1.0)
        attn = model.blocks[0].attn
        attn.qkv_sem.weight[qk_rows(0)] = 0.0  # head 0: no semantic q/k -> AP-driven
        attn.qkv_ap.weight[qk_rows(1)] = 0.0  # head 1: no AP q/k -> semantic
        attn.qkv_sem.weight[qk_rows(2)] = 0.0  # head 2: neither -> only the relative bias is left
        attn.qkv_ap.weight[qk_rows(2)] = 0.0
        attn.rel_bias.bias[:, 2] = torch.randn(attn.rel_bias.bias.shape[0], generator=generator) * 3.0
    return model
