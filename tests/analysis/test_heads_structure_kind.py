"""Structure heads split by what drives their pattern: the offset j - i (relative, locality) or absolute position;
and layer 0's AP kernel read from the weights (``ap_kernel_offsets``), with known answers."""

import numpy as np
import pandas as pd
import pytest
import torch

from dstg_interp import ModelConfig, build_model
from dstg_interp.analysis.heads import ap_kernel_offsets, classify_heads


def stats(positional_score: float, var_ap: float = 1.0, var_sem: float = 0.05) -> dict:
    return dict(model="dstg", layer=0, head=0, var_sem=var_sem, var_ap=var_ap, var_rp=0.0, js_without_sem=var_sem / 2,
                js_without_ap=var_ap / 2, js_without_rp=0.0, positional_score=positional_score)


def test_a_structure_head_is_relative_or_absolute_by_its_offset_r2():
    heads = classify_heads(pd.DataFrame([stats(0.9), stats(0.1), stats(0.9, var_ap=0.05, var_sem=1.0)]))
    assert heads.label.tolist() == ["structure", "structure", "semantic"]
    assert heads.structure_kind.tolist()[:2] == ["relative", "absolute"] and pd.isna(heads.structure_kind[2])


def _dstg_with_table(table: torch.Tensor, qk) -> torch.nn.Module:
    config = ModelConfig(variant="dstg", vocab_size=64, d_sem=16, d_ap=8, n_heads=1, n_layers=1, d_mlp=32,
                         max_positions=table.shape[0])
    model = build_model(config)
    with torch.no_grad():
        model.ap_embed.weight.copy_(table)
        model.blocks[0].norm_attn_ap.weight.fill_(1.0)
        qk(model.blocks[0].attn.qkv_ap.weight, config)
    return model


def test_the_layer_zero_kernel_reads_a_rotation_as_an_offset_head_and_a_ramp_as_absolute():
    n, d = 64, 8
    angle = 2 * np.pi * np.arange(n)[:, None] * np.array([1, 2, 3, 5]) / n
    rotary = torch.tensor(np.concatenate([np.cos(angle), np.sin(angle)], axis=1), dtype=torch.float32)

    def identity_qk(weight, config):  # q = k = the (normed) table row: q_i . k_j = cos of the angle between
        weight.zero_()
        width = config.d_head
        weight[:config.d_ap, :config.d_ap] = 3 * torch.eye(config.d_ap)
        weight[width:width + config.d_ap, :config.d_ap] = 3 * torch.eye(config.d_ap)

    relative = ap_kernel_offsets(_dstg_with_table(rotary, identity_qk))
    assert relative.offset_share[0] > 0.95 and relative.modal_offset[0] == 0  # a function of j - i alone

    ramp = torch.zeros(n, d)
    ramp[:, 0] = torch.linspace(-1, 1, n)
    ramp[:, 1] = 1.0

    def key_reads_position(weight, config):  # q constant, k = the ramp: every query attends to the last position
        weight.zero_()
        width = config.d_head
        weight[0, 1] = 3.0  # q_0 = 3 * (the constant column)
        weight[width, 0] = 3.0  # k_0 = 3 * (the ramp)

    absolute = ap_kernel_offsets(_dstg_with_table(ramp, key_reads_position))
    assert absolute.key_share[0] > 0.95 and absolute.offset_share[0] < 0.5
    with pytest.raises(ValueError, match="needs a DSTG model"):
        ap_kernel_offsets(build_model(ModelConfig(variant="rope", vocab_size=64, d_model=16, n_heads=1, n_layers=1,
                                                   d_mlp=32, max_positions=16)))
