"""Structure heads split by what drives their pattern: the offset j - i (relative, locality) or absolute position;
and layer 0's AP kernel read from the weights (``ap_kernel_offsets``), with known answers."""

import numpy as np
import pandas as pd
import pytest
import torch

from dstg_interp import ModelConfig, build_model
from dstg_interp.analysis.heads import ap_kernel_offsets, classify_heads, layer_permutation_test


def stats(positional_score: float, var_ap: float = 1.0, var_sem: float = 0.05) -> dict:
    return dict(model="dstg", layer=0, head=0, var_sem=var_sem, var_ap=var_ap, var_rp=0.0, js_without_sem=var_sem / 2,
                js_without_ap=var_ap / 2, js_without_rp=0.0, positional_score=positional_score)


def test_a_structure_head_is_relative_or_absolute_by_its_offset_r2():
    heads = classify_heads(pd.DataFrame([stats(0.9), stats(0.1), stats(0.9, var_ap=0.05, var_sem=1.0)]))
    assert heads.label.tolist() == ["structure", "structure", "semantic"]
    assert heads.structure_kind.tolist()[:2] == ["relative", "absolute"] and pd.isna(heads.structure_kind[2])
    assert heads.head_class.tolist() == ["structure-relative", "structure-absolute", "semantic"]
    assert heads.offset_driven.tolist() == [True, False, True]  # the semantic head attends by offset too
    # a heads.csv read back and labelled again at another threshold: its old kind is not kept
    again = classify_heads(heads, dominant_share=0.99)
    assert again.label.tolist() == ["mixed", "mixed", "mixed"] and again.structure_kind.isna().all()
    assert again.head_class.tolist() == ["mixed", "mixed", "mixed"]


def _heads(model: str, in_class_per_layer: list[int], n_heads: int = 8, seeds=(0,)) -> pd.DataFrame:
    """A head table of ``model``: layer l has ``in_class_per_layer[l]`` offset-driven heads of ``n_heads``."""
    return pd.DataFrame([dict(model=model, seed=seed, layer=layer, head=head, offset_driven=head < k)
                         for seed in seeds for layer, k in enumerate(in_class_per_layer) for head in range(n_heads)])


def test_the_permutation_test_exchanges_whole_layers():
    # two layers a model: 16 heads in the class against 0 is a huge head-level effect, but only 2 clusters, so
    # the 4 layer swaps give p = 2/4 exactly (the identity and the full swap reach the observed difference)
    heads = pd.concat([_heads("a", [8, 8]), _heads("b", [0, 0])])
    result = layer_permutation_test(heads, "a", "b")
    assert result["difference"] == 1.0 and result["exact"] and result["n_permutations"] == 4
    assert result["p_value"] == 0.5 == result["smallest_p"]


def test_the_permutation_test_separates_a_real_difference_and_not_a_null_one():
    seeds = (0, 1, 2)
    strong = pd.concat([_heads("a", [7, 6, 7, 8, 6, 7], seeds=seeds), _heads("b", [1, 2, 0, 1, 2, 1], seeds=seeds)])
    result = layer_permutation_test(strong, "a", "b", n_permutations=2000, seed=1)
    assert not result["exact"] and result["n_clusters"] == 18 and result["p_value"] < 0.01
    assert result["share_a"] == pytest.approx(41 / 48) and result["share_b"] == pytest.approx(7 / 48)
    same = pd.concat([_heads("a", [4, 2, 6, 3, 5, 4], seeds=seeds), _heads("b", [4, 3, 5, 3, 5, 4], seeds=seeds)])
    assert layer_permutation_test(same, "a", "b", n_permutations=2000)["p_value"] > 0.5
    # the same design, exact when the swaps are few enough
    exact = layer_permutation_test(strong[strong.seed == 0], "a", "b", n_permutations=64)
    assert exact["exact"] and exact["p_value"] == pytest.approx(2 / 64)


def test_the_permutation_test_refuses_what_it_cannot_compare():
    heads = _heads("a", [1, 2])
    with pytest.raises(ValueError, match="no heads of model 'b'"):
        layer_permutation_test(heads, "a", "b")
    with pytest.raises(ValueError, match="share no"):
        layer_permutation_test(pd.concat([heads, _heads("b", [1, 2], seeds=(5,))]), "a", "b")
    with pytest.raises(ValueError, match="lacks the column"):
        layer_permutation_test(heads.drop(columns="offset_driven"), "a", "a")
    with pytest.raises(ValueError, match="n_permutations"):
        layer_permutation_test(heads, "a", "a", n_permutations=0)


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
