"""The vocabulary is named once, as tables (issue 57, item 1): a new variant is one row of
``dstg_interp.variants.VARIANTS`` and every reader picks it up; an unknown name raises, naming the known ones."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dstg_interp.cli.train import parse_args as parse_train_args
from dstg_interp.config import ModelConfig
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.hooks import layer_hooks, logit_terms, subspaces_of
from dstg_interp.model import NeoBERT, build_model
from dstg_interp.model.checkpoint import zoo_architecture
from dstg_interp.plots.output import display_name, model_color, ordered_models
from dstg_interp.tiny_zoo import tiny_config
from dstg_interp.variants import VARIANTS, position_mechanism, variant_row, variants_where


def alibi():
    """A throwaway row: the NeoBERT block with a relative bias and nothing else, as RP, under a name of its own."""
    return dataclasses.replace(VARIANTS["rp"], name="alibi", mechanism="a fixed linear bias in attention",
                               display_name="ALiBi-NeoBERT", short_name="ALiBi", color="#123456")


def test_a_new_variant_is_one_row_and_every_reader_picks_it_up(monkeypatch):
    monkeypatch.setitem(VARIANTS, "alibi", alibi())
    config = tiny_config("alibi", vocab_size=97)  # the tiny zoo's widths, from the row
    assert config.d_model == 32 and config.spec.relative_bias and not config.has_ap_table
    model = build_model(config).eval()  # the row's model class
    assert type(model) is NeoBERT and model.blocks[0].attn.rel_bias is not None and model.pos_embed is None
    assert zoo_architecture("alibi") == dict(variant="alibi", d_model=128, n_layers=6, n_heads=4)

    # hooks: the row's family, its logit terms those of a model with a relative bias
    assert layer_hooks("alibi", 2, "full") == ["blocks.1.hook_resid_post"] and subspaces_of("alibi") == ("full",)
    assert logit_terms("alibi") == {"content": "hook_logits", "rp": "hook_logits_rp"}
    assert {f"blocks.0.attn.{hook}" for hook in logit_terms("alibi").values()} <= set(model.hook_dict)
    encoder = open_encoder(model)
    states = encoder.states(torch.tensor([[2, 7, 9, 3]]), layers=[0, 2])
    assert states[(2, "full")].shape == (1, 4, 32)
    assert set(encoder.attention(torch.tensor([[2, 7, 9, 3]]))[0]) >= {"content", "rp"}

    # figures, messages and the command line
    assert display_name("alibi") == "ALiBi-NeoBERT" and display_name("alibi-seed1") == "ALiBi-NeoBERT seed 1"
    assert model_color("alibi-seed2") == "#123456"
    assert ordered_models(["mine", "alibi", "dstg"]) == ["dstg", "alibi", "mine"]  # the table's order, then the rest
    assert position_mechanism("alibi") == "a fixed linear bias in attention"
    assert "alibi" in variants_where(role="baseline", relative_bias=True)
    command = parse_train_args(["--variant", "alibi", "--d-model", "32", "--n-layers", "1", "--out", "unused"])
    assert command.training.model_config().variant == "alibi"


def test_an_unknown_variant_raises_naming_the_known_ones():
    known = "dstg, rope, ap, rp, nope"
    with pytest.raises(ValueError, match=f"unknown variant 'alibi'; known: {known}"):
        variant_row("alibi")
    with pytest.raises(ValueError, match=f"unknown variant 'alibi'; expected one of {known}"):
        ModelConfig(variant="alibi", d_model=32)
    with pytest.raises(ValueError, match=f"no hook names for variant 'alibi'; known: {known}"):
        layer_hooks("alibi", 1, "full")
    with pytest.raises(ValueError, match="unknown variant 'alibi'"):
        zoo_architecture("alibi")
    with pytest.raises(SystemExit):
        parse_train_args(["--variant", "alibi", "--out", "unused"])
    assert display_name("alibi") == "alibi"  # a model of the user's own is drawn under its own name


def test_the_table_answers_what_the_names_used_to():
    assert variants_where(ap_stream=True) == ("dstg",)
    assert variants_where(position_table=True) == ("dstg", "ap")
    assert variants_where(relative_bias=True) == ("dstg", "rp")
    assert variants_where(rotary=True) == ("rope",)
    assert variants_where(has_position_input=False) == ("nope",)
    assert [row.model_class for row in VARIANTS.values()] == ["DSTGNeoBERT"] + ["NeoBERT"] * 4
