"""The hook table is data (encoders/hooks.py: HOOK_TABLE) and the one write path into a model is encoders/edits.py:
every name the table gives exists in a built model, and no library module outside encoders/ and model/ hooks a model."""

import re
from pathlib import Path

import pytest
from conftest import VARIANTS, tiny_model

from dstg_interp.encoders.hooks import FINAL, HOOK_TABLE, head_values, layer_hooks, logit_terms, subspaces_of

ROOT = Path(__file__).resolve().parents[2]
# what registers a hook on a model: TransformerLens' hooks() / run_with_hooks / add_hook, PyTorch's module hooks
HOOKING = re.compile(r"\.hooks\(fwd_hooks|run_with_hooks\(|\.add_hook\(|register_forward(_pre)?_hook\(")
HOOKS_ALLOWED = ("dstg_interp/encoders/", "dstg_interp/model/")


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_name_the_table_gives_is_a_hook_of_the_model(variant):
    model = tiny_model(variant)
    names = set(model.hook_dict)
    for layer in [*range(model.config.n_layers + 1), FINAL]:
        for subspace in subspaces_of(variant):
            assert set(layer_hooks(variant, layer, subspace)) <= names, (variant, layer, subspace)
    for block in range(model.config.n_layers):
        attention = {f"blocks.{block}.attn.{suffix}" for suffix in [*logit_terms(variant).values(), *head_values(variant).values()]}
        assert attention <= names, variant


def test_the_table_covers_each_family_with_the_same_fields():
    fields = {"states", "parts", "subspaces", "logit_terms", "head_values"}
    for family, entry in HOOK_TABLE.items():
        assert fields <= set(entry), family
        assert set(entry["states"]) == {0, "block", FINAL}, family
    assert layer_hooks("dstg", 2, "full") == ["blocks.1.hook_resid_post_sem", "blocks.1.hook_resid_post_ap"]
    assert layer_hooks("hf:bert", 3, "full") == ["hidden_states.3"]
    assert logit_terms("dstg", rp_bias=False) == {"sem": "hook_logits_sem", "ap": "hook_logits_ap"}


def test_no_library_module_outside_encoders_and_model_hooks_a_model():
    offenders = []
    for folder in ("dstg_interp", "probes", "experiments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(HOOKS_ALLOWED):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if HOOKING.search(line) and not line.lstrip().startswith("#"):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, "edit a model through dstg_interp.encoders.edits instead:\n" + "\n".join(offenders)


def test_an_unknown_variant_has_no_hook_names_rather_than_ropes():
    """A variant the table does not know was given RoPE's hook names (house step 3: unknown names raise)."""
    from dstg_interp.encoders.hooks import family, layer_hooks
    assert family("nope")["logit_terms"] == {"content": "hook_logits"}
    with pytest.raises(ValueError, match="no hook names for variant 'alibi'"):
        layer_hooks("alibi", 1, "full")
    with pytest.raises(ValueError, match="no hook names for variant 'hf'"):
        family("hf")
