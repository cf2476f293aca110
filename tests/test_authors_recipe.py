"""The `authors` recipe (figures/recipe/AUTHORS_RECIPE.md) sets what its page says, in the zoo script and as a
recipe-study arm, for every variant; choices that exist in DSTG only stay out of the baselines."""


import pytest

from experiments.pretrain_zoo import RECIPES, zoo_config
from experiments.recipe_levers import ARMS, parse_arm, recipe_for
from experiments.recipe_study import RecipeStudyConfig, train_config

VARIANTS = ("dstg", "rope", "ap", "rp", "nope")


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_zoo_recipe_sets_the_authors_choices(variant, tmp_path):
    cfg = zoo_config(variant, tmp_path, None, 1, seed=0, recipe="authors")
    assert (cfg.windows, cfg.schedule, cfg.batch_size, cfg.bf16) == (False, "cosine", 32, True)
    assert (cfg.weight_decay, tuple(cfg.betas), cfg.min_lr_ratio, cfg.grad_clip) == (0.01, (0.9, 0.95), 0.1, 1.0)
    assert (cfg.mask_prob, cfg.mask_strategy, cfg.corpus, cfg.max_length) == (0.2, "all", "en-large", 128)
    model = cfg.model_config(8192)
    assert model.n_layers == 6 and model.tie_embeddings is False
    assert model.mlm_head_input == ("sem" if variant == "dstg" else "full")  # DSTG's head reads the semantic slice
    assert model.residual_from_normed is (variant == "dstg")  # the normed residual is the disentangled path's
    if variant == "dstg":
        assert model.rp_bias is True and model.mlp_mode == "split"


def test_the_shipped_recipe_is_unchanged_beside_it(tmp_path):
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
