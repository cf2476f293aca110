"""DSTG without its relative-position term (``ModelConfig.rp_bias=False``): hook table, the three attention
paths, an equivalence with a zero bias, the checkpoint round trip and the head statistics."""

import pytest
import torch

from dstg_interp import ModelConfig, load_model
from dstg_interp.analysis.heads import head_summaries_from_cache
from dstg_interp.encoders import open_encoder

from conftest import tiny_config, tiny_model


def test_no_bias_table_and_no_rp_hook():
    model = tiny_model("dstg", rp_bias=False)
    assert not any("rel_bias" in name for name, _ in model.named_parameters())
    assert not any(name.endswith("hook_logits_rp") for name in model.hook_dict)
    assert {"blocks.0.attn.hook_logits_sem", "blocks.0.attn.hook_logits_ap", "blocks.0.attn.hook_pattern"} <= set(model.hook_dict)
    assert open_encoder(model).logit_terms == {"sem": "hook_logits_sem", "ap": "hook_logits_ap"}
    assert open_encoder(tiny_model("dstg")).logit_terms["rp"] == "hook_logits_rp"


def test_logit_terms_sum_to_the_pattern(padded_batch):
    model = tiny_model("dstg", rp_bias=False)
    tokens, mask = padded_batch
    names = [f"blocks.1.attn.hook_{n}" for n in ("logits_sem", "logits_ap", "pattern")]
    _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=names)
    logits = (cache[names[0]] + cache[names[1]]).masked_fill(~mask[:, None, None, :], float("-inf"))
    torch.testing.assert_close(logits.softmax(-1), cache[names[2]], atol=1e-6, rtol=1e-5)


def test_equals_a_model_whose_bias_is_zero_on_every_path(padded_batch):
    """Same weights as a DSTG with the bias table at zero: identical logits and gradients, fused,
    training and hooked paths alike; a non-zero bias in the reference does change them."""
    tokens, mask = padded_batch
    without = tiny_model("dstg", rp_bias=False)
    reference = tiny_model("dstg")
    reference.load_state_dict(without.state_dict(), strict=False)  # the bias tables stay at their zero init
    labels = torch.where(torch.arange(16) % 3 == 0, tokens, torch.full_like(tokens, -100))
    for model in (without, reference):
        model.train()
        model(tokens, mask, labels=labels).loss.backward()
    for name, param in without.named_parameters():
        torch.testing.assert_close(param.grad, dict(reference.named_parameters())[name].grad, atol=1e-6, rtol=1e-5)
    without.eval(), reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(without(tokens, mask), reference(tokens, mask), atol=1e-5, rtol=1e-5)
        hooked = without.run_with_hooks(tokens, attention_mask=mask,
                                        fwd_hooks=[(lambda n: n.endswith("hook_pattern"), lambda t, hook: t)])
        torch.testing.assert_close(hooked, without(tokens, mask), atol=1e-5, rtol=1e-5)
        reference.blocks[0].attn.rel_bias.bias.normal_()
        assert (reference(tokens, mask) - without(tokens, mask)).abs().max() > 1e-3


def test_checkpoint_round_trip(tmp_path, padded_batch):
    model = tiny_model("dstg", rp_bias=False, mlp_mode="mixed").eval()
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.config.rp_bias is False and loaded.config.mlp_mode == "mixed"
    assert loaded.state_dict().keys() == model.state_dict().keys()
    tokens, mask = padded_batch
    torch.testing.assert_close(loaded(tokens, mask), model(tokens, mask), rtol=0, atol=0)
    assert ModelConfig.from_json(model.config.to_json()) == model.config


def test_a_checkpoint_with_a_bias_does_not_load_into_a_model_without(tmp_path):
    import json
    tiny_model("dstg").save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(dict(config, rp_bias=False)))
    with pytest.raises(ValueError, match="rel_bias"):
        load_model(tmp_path / "m")


@pytest.mark.parametrize("kwargs", [dict(variant="rp", d_model=32, rp_bias=False),
                                    dict(variant="ap", d_model=32, rp_bias=False),
                                    dict(variant="dstg", d_sem=24, d_ap=8, rp_bias="no"),
                                    dict(variant="dstg", d_sem=24, d_ap=8, rp_bias=False, rp_zero_boundary=True)])
def test_invalid_combinations_name_the_field(kwargs):
    with pytest.raises(ValueError, match=r"ModelConfig\.rp_") as err:
        ModelConfig(**kwargs)
    assert "\n" not in str(err.value)


def test_head_statistics_use_the_two_terms(padded_batch):
    tokens, mask = padded_batch
    table = head_summaries_from_cache(tiny_model("dstg", rp_bias=False), tokens, mask)
    assert len(table) == 2 * 4 and "var_sem" in table and "var_ap" in table and "var_rp" not in table


def test_tiny_config_helper_accepts_the_option():
    assert tiny_config("dstg", rp_bias=False).rp_bias is False


def test_a_locality_prior_starts_the_relative_bias_near_and_is_refused_without_one():
    """ModelConfig.rp_locality_init (the data-form study's arm G): each head's bias starts at -s ln(1 + |offset|)."""
    import numpy as np
    import pytest

    from dstg_interp import ModelConfig, build_model
    model = build_model(ModelConfig(variant="dstg", vocab_size=64, d_sem=16, d_ap=8, n_heads=2, n_layers=1,
                                    max_positions=32, rp_locality_init=2.0))
    bias = model.blocks[0].attn.rel_bias(6)[0].detach().numpy()  # [head, query, key]
    assert np.allclose(bias[0], bias[1]) and np.allclose(np.diag(bias[0]), 0.0)
    assert bias[0, 0, 1] == pytest.approx(-2 * np.log(2), abs=1e-5) and (np.diff(bias[0, 0]) < 0).all()
    assert np.allclose(bias[0], bias[0].T)  # a function of |offset|
    for config in (dict(variant="ap"), dict(variant="dstg", rp_bias=False), dict(variant="dstg", rp_locality_init=-1.0)):
        fields = dict(dict(vocab_size=64, d_sem=16, d_ap=8, n_heads=2, n_layers=1, max_positions=32,
                           rp_locality_init=1.0), **config)
        if fields["variant"] == "ap":
            fields = {k: v for k, v in fields.items() if k not in ("d_sem", "d_ap")} | dict(d_model=16)
        with pytest.raises(ValueError, match="rp_locality_init"):
            ModelConfig(**fields)
