"""Shared fixtures: tiny random models (d ~ 32) of every variant."""

import pytest
import torch

from dstg_interp import ModelConfig, build_model

VARIANTS = ("dstg", "rope", "ap", "rp")


def tiny_config(variant: str, **overrides) -> ModelConfig:
    widths = {"d_sem": 24, "d_ap": 8} if variant == "dstg" else {"d_model": 32}
    base = dict(variant=variant, vocab_size=97, max_positions=40, n_layers=2, n_heads=4, d_head=8, seed=0)
    base.update(widths)
    base.update(overrides)
    return ModelConfig(**base)


def tiny_model(variant: str, **overrides):
    return build_model(tiny_config(variant, **overrides))


@pytest.fixture(params=VARIANTS)
def variant(request):
    return request.param


@pytest.fixture
def padded_batch():
    """Two sequences, the second right-padded after 11 tokens."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 97, (2, 16), generator=generator)
    attention_mask = torch.ones(2, 16, dtype=torch.bool)
    attention_mask[1, 11:] = False
    tokens[1, 11:] = 0
    return tokens, attention_mask
