"""NoPE-NeoBERT (``variant="nope"``), the floor of the position readings: no positional input at all, so with
bidirectional attention it is permutation-equivariant (the known answer); it saves and loads, has the
baselines' hooks and no position hook, trains from dstg-train, and every analysis that needs a position
mechanism refuses it in one line; the zoo, the probe tables and the claims read it as the floor, and say so
where it is not trained."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import tiny_config, tiny_model, write_synthetic_corpus

from dstg_interp import EncoderError, load_model
from dstg_interp.analysis.extrapolate import extend_positions
from dstg_interp.analysis.interventions import position_hooks
from dstg_interp.analysis.patching import patching_pair
from dstg_interp.analysis.rope_bands import rotary_of
from dstg_interp.config import ModelConfig
from dstg_interp.encoders import logit_terms, open_encoder
from dstg_interp.flops import forward_flops_per_token
from dstg_interp.model.checkpoint import FLOOR_TRAIN_COMMAND, ZOO_FLOOR, ZOO_NAMES, ZOO_WIDTHS, CheckpointError
from dstg_interp.plots.output import display_name
from dstg_interp.variants import VARIANTS, variants_where
from experiments import claims
from experiments.figure_inputs import load_figure_inputs, trained_floor
from experiments.pretrain_zoo import PretrainZooConfig, check_zoo_recipe, zoo_config
from experiments.recipe_levers import applies, parse_arm, recipe_for

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nope():
    return tiny_model("nope", init_std=0.2).eval()  # wide init: attention far from uniform, so a leak would show


def tokens(rows=2, length=24, seed=0):
    return torch.randint(5, 97, (rows, length), generator=torch.Generator().manual_seed(seed))


# --- the model ------------------------------------------------------------------------------------
def test_permuting_the_tokens_permutes_every_state_and_logit(nope):
    batch = tokens()
    perm = torch.randperm(batch.shape[1], generator=torch.Generator().manual_seed(1))
    names = lambda n: n.endswith(("hook_resid_post", "hook_final", "hook_embed"))  # noqa: E731
    logits, cache = nope.run_with_cache(batch, names_filter=names)
    shuffled_logits, shuffled = nope.run_with_cache(batch[:, perm], names_filter=names)
    torch.testing.assert_close(shuffled_logits, logits[:, perm], atol=1e-5, rtol=1e-5)
    for name in cache:
        torch.testing.assert_close(shuffled[name], cache[name][:, perm], atol=1e-5, rtol=1e-5)


def test_permutation_equivariance_holds_with_padding(nope):
    batch = tokens(rows=2, length=16)
    mask = torch.ones_like(batch, dtype=torch.bool)
    mask[1, 11:] = False
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(2))
    shuffled = batch.clone()
    shuffled[1, :11] = batch[1, perm]
    with torch.no_grad():
        out, out_shuffled = nope(batch, mask), nope(shuffled, mask)
    torch.testing.assert_close(out_shuffled[1, :11], out[1, perm], atol=1e-5, rtol=1e-5)


def test_every_model_with_position_input_is_not_equivariant():
    """The known answer's control: the same test fails for the variants with a position mechanism."""
    batch = tokens()
    perm = torch.randperm(batch.shape[1], generator=torch.Generator().manual_seed(1))
    for variant in variants_where(has_position_input=True):
        model = tiny_model(variant, init_std=0.2).eval()
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("rel_bias.bias"):  # the relative bias starts at zero (no position yet): give it some
                    parameter.normal_(generator=torch.Generator().manual_seed(3))
            gap = (model(batch[:, perm]) - model(batch)[:, perm]).abs().max()
        assert gap > 1e-3, variant


def test_hooks_are_the_baselines_without_a_position_hook(nope):
    hooks = set(nope.hook_dict)
    assert {"hook_embed", "hook_final", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_post",
            "blocks.0.attn.hook_logits", "blocks.0.attn.hook_pattern"} <= hooks
    assert not {h for h in hooks if "pos_embed" in h or "logits_rp" in h or h.endswith(("_sem", "_ap"))}
    assert logit_terms("nope") == {"content": "hook_logits"}
    batch = tokens(rows=2, length=12)
    _, cache = nope.run_with_cache(batch)
    d, heads = nope.config.d_model, nope.config.n_heads
    assert cache["hook_embed"].shape == cache["blocks.1.hook_resid_post"].shape == cache["hook_final"].shape == (2, 12, d)
    assert cache["blocks.0.attn.hook_pattern"].shape == cache["blocks.0.attn.hook_logits"].shape == (2, heads, 12, 12)
    assert open_encoder(nope).subspaces == ("full",)


def test_save_and_load_round_trip(nope, tmp_path):
    nope.save(tmp_path / "nope")
    loaded = load_model(tmp_path / "nope").eval()
    assert loaded.config == nope.config and loaded.config.variant == "nope"
    batch = tokens()
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), nope(batch))


def test_the_variant_is_named_sized_and_counted():
    assert "nope" in VARIANTS and not VARIANTS["nope"].has_position_input
    assert display_name("nope") == "NoPE-NeoBERT" and display_name("nope-seed1") == "NoPE-NeoBERT seed 1"
    assert ZOO_WIDTHS["nope"] == dict(variant="nope", d_model=128) and ZOO_FLOOR not in ZOO_NAMES
    rope, nope = tiny_config("rope"), tiny_config("nope")
    assert forward_flops_per_token(nope, 64) == forward_flops_per_token(rope, 64)  # rotation is not counted: same
    assert tiny_model("nope").n_params() == tiny_model("rope").n_params()


# --- refused where a position mechanism is needed --------------------------------------------------
def test_analyses_that_need_a_position_mechanism_refuse_it_in_one_line(nope):
    encoder = open_encoder(nope)
    with pytest.raises(ValueError, match="no learned position table: position enters nowhere"):
        _ = nope.ap_table
    with pytest.raises(EncoderError, match="rotary.*position enters nowhere"):
        rotary_of(encoder, 0)
    with pytest.raises(EncoderError, match="no hook that holds an absolute-position state.*nowhere"):
        position_hooks(encoder, 0)
    with pytest.raises(EncoderError, match="'offset' corruption.*nowhere"):
        patching_pair(encoder, tokens(rows=2, length=12), corruption="offset", offset=4)
    with pytest.raises(ValueError, match="no learned AP table to extend.*nowhere"):
        extend_positions(nope, factor=2)
    with pytest.raises(ValueError, match="random_offset"):
        from dstg_interp.train import TrainConfig
        TrainConfig(model=dict(variant="nope", d_model=32, n_layers=2, n_heads=4), random_offset=True)


def test_dstg_extend_refuses_a_nope_checkpoint_with_exit_2(nope, tmp_path):
    nope.save(tmp_path / "nope")
    done = subprocess.run([sys.executable, "-m", "dstg_interp.cli.extend", "--model", str(tmp_path / "nope"),
                           "--factor", "2", "--out", str(tmp_path / "longer")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "position enters nowhere" in done.stderr
    assert not (tmp_path / "longer").exists()


# --- training --------------------------------------------------------------------------------------
def test_dstg_train_variant_nope_runs_a_tiny_config(tmp_path, monkeypatch):
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=40)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "dstg_interp.cli.train", "--variant", "nope", "--out", str(out),
                           "--corpus", str(corpus), "--d-model", "32", "--n-layers", "2", "--n-heads", "4",
                           "--max-length", "32", "--vocab-size", "150", "--batch-size", "4", "--steps", "4",
                           "--warmup-steps", "1", "--eval-every", "4", "--save-every", "4", "--quiet", "--threads", "1"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "DSTG_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    model = load_model(out)
    assert model.config.variant == "nope" and model.config.d_model == 32


def test_the_zoo_recipe_trains_nope_as_it_trains_the_four(tmp_path):
    runs = tmp_path / "runs"
    nope, rope = zoo_config("nope", runs, None, 1), zoo_config("rope", runs, None, 1)
    assert nope.model == dict(rope.model, variant="nope")
    assert {k: v for k, v in nope.to_dict().items() if k not in ("model", "out_dir")} == \
           {k: v for k, v in rope.to_dict().items() if k not in ("model", "out_dir")}
    assert PretrainZooConfig(variants=["nope"]).variants == ["nope"]
    assert PretrainZooConfig().variants == list(ZOO_NAMES)  # the default stays the reference four
    authors = zoo_config("nope", runs, None, 1, recipe="authors")
    assert "residual_from_normed" not in authors.model  # the normed residual exists in DSTG only
    zoo = tmp_path / "zoo"
    (zoo / "rope").mkdir(parents=True)
    (zoo / "rope" / "train_config.json").write_text(json.dumps(rope.to_dict()))
    check_zoo_recipe(zoo, "nope", nope)  # the same recipe: accepted
    with pytest.raises(ValueError, match="another recipe"):
        check_zoo_recipe(zoo, "nope", zoo_config("nope", runs, 100, 1))


def test_recipe_levers_that_need_a_position_mechanism_do_not_apply_to_nope():
    assert not any(applies(lever, "nope") for lever in ("pos_init", "d_ap", "mlp", "rp", "normed"))
    assert all(applies(lever, "nope") for lever in ("lr", "batch", "tie", "windows", "schedule"))
    with pytest.raises(ValueError, match="lever pos_init does not apply to variant 'nope'"):
        parse_arm("nope:pos_init=0.2")
    recipe = recipe_for(parse_arm("nope:reimpl"), "nope")
    assert recipe["tie"] is True and recipe["mlp"] == "split" and recipe["rp"] is True  # DSTG's choices left out


def test_a_nope_zoo_name_that_is_not_trained_says_how_to_train_it(monkeypatch, tmp_path):
    from dstg_interp.model import checkpoint
    monkeypatch.setattr(checkpoint, "ZOO_DIR", tmp_path)
    with pytest.raises(CheckpointError, match="--variants nope"):
        checkpoint.resolve_checkpoint("nope")


# --- the floor in the zoo, the probe tables and the claims ------------------------------------------
def test_the_floor_missing_from_a_zoo_is_stated_with_its_training_command(tmp_path):
    members, note = trained_floor(tmp_path, {"nope": ("nope", 0)})
    assert members == {} and "nope/" in note and FLOOR_TRAIN_COMMAND in note and str(tmp_path) in note
    (tmp_path / "nope").mkdir()
    (tmp_path / "nope" / "model.safetensors").write_bytes(b"")
    assert trained_floor(tmp_path, {"nope": ("nope", 0)}) == ({"nope": ("nope", 0)}, None)


def test_tiny_inputs_with_the_floor_hold_a_nope_member():
    inputs = load_figure_inputs(tiny=True, models=("dstg", "rope"), model_seeds=(0, 1), floor=True)
    assert set(inputs.models) == {"dstg", "rope", "dstg-seed1", "rope-seed1", "nope"}  # the floor: seed 0 only
    assert inputs.member("nope") == ("nope", 0) and inputs.models["nope"].config.variant == "nope"
    assert "nope" not in load_figure_inputs(tiny=True, models=("dstg",), model_seeds=(0,)).models


def probe_rows(model, subspace, task, segment, r2, half=0.03):
    return [dict(model=model, subspace=subspace, task=task, segment=segment, layer=layer, seed=0, r2=value,
                 ci_low=value - half, ci_high=value + half, control_r2=0.0, position_r2=0.5)
            for layer, value in ((0, 0.1), (2, r2))]


def test_floor_claims_compare_every_model_with_position_input_with_nope():
    readings = [("dstg", "ap"), ("rope", "full"), ("ap", "full"), ("rp", "full")]
    rows = [row for m, s in readings for row in probe_rows(m, s, "token", "sentence", 0.6)]
    above = claims.floor_claims(pd.DataFrame(rows + probe_rows("nope", "full", "token", "sentence", 0.2)))
    token = {c["id"]: c for c in above}["floor_token"]
    assert token["verdict"] == claims.HOLDS and token["ours"] == pytest.approx(0.2) and "+0.40 over the floor" in token["detail"]
    at_floor = claims.floor_claims(pd.DataFrame(rows + probe_rows("nope", "full", "token", "sentence", 0.6)))
    assert {c["id"]: c for c in at_floor}["floor_token"]["verdict"] == claims.FAILS
    missing = {c["id"]: c for c in claims.floor_claims(pd.DataFrame(rows))}
    assert set(missing) == {"floor_token", "floor_segment_sentence", "floor_segment_paragraph", "floor_intra_sentence",
                            "floor_intra_paragraph"}
    assert all(c["verdict"] == claims.NOT_MEASURED and FLOOR_TRAIN_COMMAND in c["detail"] for c in missing.values())
    assert set(missing) <= set(claims.RULES)


def test_the_floor_is_not_a_baseline_of_the_paper_claims():
    """A nope row must not change the claims about 'every baseline' (RoPE, AP, RP)."""
    rows = probe_rows("dstg", "ap", "token", "sentence", 0.6) + probe_rows("rope", "full", "token", "sentence", 0.2)
    before = {c["id"]: c for c in claims.final_layer_claims(pd.DataFrame(rows))}["final_token"]
    with_floor = rows + probe_rows("nope", "full", "token", "sentence", 0.9)
    after = {c["id"]: c for c in claims.final_layer_claims(pd.DataFrame(with_floor))}["final_token"]
    assert before["verdict"] == after["verdict"] == claims.HOLDS


def test_model_config_accepts_nope_and_refuses_position_options():
    assert ModelConfig(variant="nope", d_model=32, n_heads=4).subspaces == ("full",)
    with pytest.raises(ValueError, match="rp_zero_boundary"):
        ModelConfig(variant="nope", d_model=32, n_heads=4, rp_zero_boundary=True)
    with pytest.raises(ValueError, match="mixed"):
        ModelConfig(variant="nope", d_model=32, n_heads=4, mlp_mode="mixed")


def test_the_report_floor_table_reads_the_margins_or_says_how_to_train_the_floor(tmp_path):
    from experiments.report_beyond import floor_table
    (tmp_path / "probes").mkdir()
    rows = probe_rows("dstg", "ap", "token", "sentence", 0.6) + probe_rows("rope", "full", "token", "sentence", 0.3)
    pd.DataFrame(rows).to_csv(tmp_path / "probes" / "probes_over_seeds.csv", index=False)
    assert "not measured" in floor_table(tmp_path) and FLOOR_TRAIN_COMMAND in floor_table(tmp_path)
    rows += probe_rows("nope", "full", "token", "sentence", 0.2)
    pd.DataFrame(rows).to_csv(tmp_path / "probes" / "probes_over_seeds.csv", index=False)
    token = next(line for line in floor_table(tmp_path).splitlines() if line.startswith("| token position"))
    assert token == "| token position | 0.200 | 0.600 (+0.400) | 0.300 (+0.100) | — | — |"
