"""The vocabulary is named once, as tables (issue 57, item 1): a new variant is one row of
``dstg_interp.variants.VARIANTS``, a new label column one row of ``dstg_interp.data.labels.LABELS``, and every
reader picks it up; an unknown name raises, naming the known ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import tiny_model, write_synthetic_corpus

from dstg_interp import extract
from dstg_interp.cli.train import parse_args as parse_train_args
from dstg_interp.config import ModelConfig
from dstg_interp.data import StructuredSequences, build_structured_sequences, load_corpus, train_tokenizer
from dstg_interp.data.labels import LABELS, Label, label_row, position_labels
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.hooks import layer_hooks, logit_terms, subspaces_of
from dstg_interp.model import NeoBERT, build_model
from dstg_interp.model.checkpoint import zoo_architecture
from dstg_interp.plots.output import display_name, model_color, ordered_models
from dstg_interp.store.manifest import sequences_sha256
from dstg_interp.tiny_zoo import tiny_config
from dstg_interp.variants import VARIANTS, position_mechanism, variant_row, variants_where
from probes.erasure import ErasureError, fit_eraser


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


# --- label columns ------------------------------------------------------------------------------------
def test_a_new_label_column_is_one_row_and_every_reader_picks_it_up(monkeypatch, tmp_path):
    documents = load_corpus(str(write_synthetic_corpus(tmp_path / "docs", n_docs=12)), progress=False)
    tokenizer = train_tokenizer(documents, vocab_size=97)
    sequences = build_structured_sequences(documents, tokenizer, max_length=24, windows=True)
    before = sequences_sha256(sequences)
    # the throwaway column's values, where data.structure would compute them: the index of the token's pair
    sequences.arrays["pair_index"] = (sequences.arrays["token_position"] // 2).astype(np.int32)
    monkeypatch.setitem(LABELS, "pair_index", Label("pair_index", "int32", "index of the token's pair", "position"))

    assert sequences_sha256(sequences) != before  # a store's identity hashes it
    sequences.save(tmp_path / "sequences")
    assert np.array_equal(StructuredSequences.load(tmp_path / "sequences").arrays["pair_index"],
                          sequences.arrays["pair_index"])
    model = tiny_model("rope", vocab_size=tokenizer.get_vocab_size()).eval()
    store = extract(model, sequences, tmp_path / "store", layers=(1,), dtype="float32", progress=False)
    assert store.manifest["labels"]["files"]["pair_index"] == "labels_pair_index.npy"
    assert store.labels["pair_index"].dtype == np.int32
    assert np.array_equal(store.labels["pair_index"], sequences.arrays["pair_index"])
    assert "pair_index" in position_labels()
    eraser = fit_eraser(store, 1, "full", target="pair_index", encoding="linear")  # a target of erasure
    assert eraser.identity["target"] == "pair_index"
    with pytest.raises(ErasureError, match="unknown target 'paragraph'; use token_position, .*, pair_index"):
        fit_eraser(store, 1, "full", target="paragraph")


def test_an_unknown_label_column_raises_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown label column 'paragraph'; known: sequence, input_ids, token_position"):
        label_row("paragraph")
