"""The `authors` recipe (figures/recipe/AUTHORS_RECIPE.md) sets what its page says, in the zoo script and as a
recipe-study arm, for every variant; choices that exist in DSTG only stay out of the baselines."""


import pytest
from conftest import tiny_model

from experiments import pretrain_zoo
from experiments.pretrain_zoo import RECIPES, zoo_config
from experiments.recipe_levers import ARMS, parse_arm, recipe_for
from experiments.recipe_readings import read_table_curve
from experiments.recipe_study import RecipeStudyConfig, train_config

VARIANTS = ("dstg", "rope", "ap", "rp", "nope")


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_zoo_recipe_sets_the_authors_choices(variant, tmp_path):
    cfg = zoo_config(variant, tmp_path, None, 1, seed=0, recipe="authors", precision="bf16")
    assert (cfg.windows, cfg.schedule, cfg.batch_size, cfg.bf16) == (False, "cosine", 32, True)
    assert (cfg.weight_decay, tuple(cfg.betas), cfg.min_lr_ratio, cfg.grad_clip) == (0.01, (0.9, 0.95), 0.1, 1.0)
    assert (cfg.mask_prob, cfg.mask_strategy, cfg.corpus, cfg.max_length) == (0.2, "all", "en-large", 128)
    model = cfg.model_config(8192)
    assert model.n_layers == 6 and model.tie_embeddings is False
    assert model.mlm_head_input == ("sem" if variant == "dstg" else "full")  # DSTG's head reads the semantic slice
    assert model.residual_from_normed is (variant == "dstg")  # the normed residual is the disentangled path's
    if variant == "dstg":
        assert model.rp_bias is True and model.mlp_mode == "split"


def test_the_recipes_bf16_runs_as_this_machine_allows(tmp_path, monkeypatch):
    """``auto`` keeps the recipe's bf16 where it is native and trains float32 where autocast would emulate it;
    ``float32`` / ``bf16`` force one; a recipe without bf16 stays float32 under ``auto``."""
    for native in (True, False):
        monkeypatch.setattr(pretrain_zoo, "bf16_is_native", lambda device, native=native: native)
        assert zoo_config("dstg", tmp_path, None, 1, recipe="authors").bf16 is native
        assert zoo_config("dstg", tmp_path, None, 1, recipe="6x128").bf16 is False
    assert zoo_config("ap", tmp_path, None, 1, recipe="authors", precision="float32").bf16 is False
    assert zoo_config("ap", tmp_path, None, 1, recipe="6x128", precision="bf16").bf16 is True
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        zoo_config("ap", tmp_path, None, 1, recipe="authors", precision="fp8")


def test_the_former_shipped_recipe_is_unchanged_beside_it(tmp_path):
    cfg = zoo_config("dstg", tmp_path, None, 1, seed=0, recipe="6x128")
    assert (cfg.windows, cfg.schedule, cfg.weight_decay, tuple(cfg.betas), cfg.bf16) == (True, "constant", 0.1, (0.9, 0.98), False)
    assert cfg.model_config(8192).residual_from_normed is False
    assert set(RECIPES) >= {"4x128", "6x128", "authors"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_study_arm_matches_the_zoo_recipe(variant, tmp_path):
    """The 4-layer study arm and the 6-layer zoo recipe agree on every training choice they share."""
    study = RecipeStudyConfig(runs=tmp_path / "runs", out=tmp_path / "out", arms=["authors"])
    arm_cfg = train_config(study, variant, recipe_for(parse_arm("authors"), variant), "authors", 0, 100, 50, 2)
    zoo_cfg = zoo_config(variant, tmp_path, None, 1, seed=0, recipe="authors")
    for name in ("windows", "schedule", "batch_size", "weight_decay", "betas", "mask_prob", "mask_strategy", "lr"):
        assert getattr(arm_cfg, name) == getattr(zoo_cfg, name), name
    arm_model, zoo_model = arm_cfg.model_config(8192), zoo_cfg.model_config(8192)
    for name in ("residual_from_normed", "tie_embeddings", "rp_bias", "mlp_mode", "mlm_head_input"):
        assert getattr(arm_model, name) == getattr(zoo_model, name), name
    assert ARMS["authors"]["normed"] is True


def test_a_dstg_only_choice_named_for_a_baseline_is_refused():
    with pytest.raises(ValueError, match="lever normed does not apply to variant 'ap'"):
        parse_arm("ap:authors,normed=true")
    assert recipe_for(parse_arm("authors"), "ap")["normed"] is False  # the named arm leaves it out of a baseline
    assert recipe_for(parse_arm("authors"), "dstg")["normed"] is True


def test_a_zoo_member_records_its_tables_spectrum_at_every_validation(tmp_path):
    """``pretrain_zoo.table_recorder``: one row per validation for a model with a position table (the curve
    exported into training.json, read back by ``read_table_curve``), nothing for one without."""
    for variant in ("dstg", "rope"):
        run = tmp_path / variant
        run.mkdir()
        record = pretrain_zoo.table_recorder(run)
        model = tiny_model(variant)
        for step in (10, 20):
            record(model, step, step * 100)
        curve = read_table_curve(run)
        if variant == "rope":
            assert curve.empty
            continue
        assert list(curve.step) == [10, 20] and list(curve.tokens) == [1000, 2000]
        assert {"pc1_pc2", "participation_ratio", "low_freq_share", "row_norm"} <= set(curve.columns)
        assert 0 < curve.pc1_pc2.iloc[0] <= 1 and curve.row_norm.iloc[0] > 0
