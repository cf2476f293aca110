"""The hook-name table: which captured tensors are a layer's states, per model family (``HOOK_TABLE``, data).

    layer_hooks("dstg", 3, "full")      # ["blocks.2.hook_resid_post_sem", "blocks.2.hook_resid_post_ap"]
    layer_hooks("hf:bert", 3, "full")   # ["hidden_states.3"]
    logit_terms("rp")                   # {"content": "hook_logits", "rp": "hook_logits_rp"}

A variant's family is its row's ``hook_family`` (``dstg_interp.variants``): DSTG's two streams, or the NeoBERT
block all four single-stream variants share, whose relative term only a variant with a relative bias has.

A state is a list of hook names concatenated on the last axis: DSTG ``full`` is [sem | ap], in the order
the DSTG feed-forward concatenates them. Baselines read layer 0 at ``blocks.0.hook_resid_pre`` because
for AP-NeoBERT the embedding is the sum of two hooks (token + position); the cost is running one block
when layer 0 alone is asked for. ``hidden_states.{l}`` is not a HookPoint but the l-th entry of a
transformers model's ``output_hidden_states``; the HF adapter serves it under that name (an HF encoder has
no ``final`` layer: its layers stop at the last block).

Attention (``logit_terms``): the additive logit terms under ``blocks.{l}.attn.``, scaled as they enter the
softmax, and ``hook_pattern`` (the softmax weights), all [batch, head, query_pos, key_pos]; ``head_values``:
each head's mixed values under the same prefix, [batch, pos, head, d] (what per-head patching replaces).
"""

from __future__ import annotations

import re

from dstg_interp.variants import VARIANTS

FINAL = "final"
DSTG_SUBSPACES = ("sem", "ap", "full")
ENTANGLED_SUBSPACES = ("full",)
PATTERN_HOOK = "hook_pattern"
HF_FAMILY = "hf"
RP_TERM = "rp"  # the relative bias's logit term: in a family's table, served to the variants that have the bias


# Per family: where layer 0, the output of block l-1 (layer l >= 1) and the final norm are read ("{part}": each
# stream of the subspace, ``parts``; a subspace not listed is its own one part), the subspaces it has, the last
# hook before the MLM head (a forward that needs nothing later stops there), the logit terms and the heads' values.
HOOK_TABLE: dict[str, dict] = {
    "dstg": {
        "states": {0: "hook_embed_{part}", "block": "blocks.{block}.hook_resid_post_{part}", FINAL: "hook_final_{part}"},
        "parts": {"full": ("sem", "ap")},
        "subspaces": DSTG_SUBSPACES,
        "final_hook": "hook_final_sem",
        "logit_terms": {"sem": "hook_logits_sem", "ap": "hook_logits_ap", RP_TERM: "hook_logits_rp"},
        "head_values": {"sem": "hook_z_sem", "ap": "hook_z_ap"},
    },
    "neobert": {  # one stream (RoPE, AP, RP, NoPE): one state per layer, read as ``full``
        "states": {0: "blocks.0.hook_resid_pre", "block": "blocks.{block}.hook_resid_post", FINAL: "hook_final"},
        "parts": {},
        "subspaces": ENTANGLED_SUBSPACES,
        "final_hook": "hook_final",
        "logit_terms": {"content": "hook_logits", RP_TERM: "hook_logits_rp"},
        "head_values": {"full": "hook_z"},
    },
    HF_FAMILY: {
        "states": {0: "hidden_states.{layer}", "block": "hidden_states.{layer}", FINAL: "hidden_states.{layer}"},
        "parts": {},
        "subspaces": ENTANGLED_SUBSPACES,
        "logit_terms": {},  # HF attention returns the softmax weights only
        "head_values": {},
    },
}


def is_hf(variant: str) -> bool:
    return variant.startswith("hf:")


def family(variant: str) -> dict:
    """The ``HOOK_TABLE`` entry of a model of ``variant`` ("hf:<model_type>" for any Hugging Face encoder), its
    logit terms those the variant has."""
    if is_hf(variant):
        return HOOK_TABLE[HF_FAMILY]
    row = VARIANTS.get(variant)
    if row is None:
        raise ValueError(f"no hook names for variant {variant!r}; known: {', '.join(VARIANTS)} and hf:<model_type>")
    entry = HOOK_TABLE[row.hook_family]
    if row.relative_bias:
        return entry
    return dict(entry, logit_terms={term: hook for term, hook in entry["logit_terms"].items() if term != RP_TERM})


def subspaces_of(variant: str) -> tuple[str, ...]:
    """The subspaces a model of ``variant`` has: DSTG's two streams and their concatenation, else one."""
    return family(variant)["subspaces"]


def layer_hooks(variant: str, layer: int | str, subspace: str) -> list[str]:
    """Hook names whose tensors, concatenated on the last axis, are ``subspace`` at ``layer`` (``HOOK_TABLE``)."""
    entry = family(variant)
    where = layer if layer in (0, FINAL) else "block"
    template = entry["states"][where]
    block = None if where != "block" else int(layer) - 1
    return [template.format(part=part, block=block, layer=layer) for part in entry["parts"].get(subspace, (subspace,))]


def final_hook(variant: str) -> str:
    """The last hook before the MLM head: a forward that needs nothing later can stop there."""
    return family(variant)["final_hook"]


def is_final_hook(name: str) -> bool:
    return name.startswith("hook_final")


def blocks_needed(hook: str) -> int:
    """How many blocks must run for ``hook`` to fire (``hook_final*`` needs them all: see ``final_hook``)."""
    match = re.match(r"(?:blocks|hidden_states)\.(\d+)", hook)
    if match is None:
        return 0
    index = int(match.group(1))
    if hook.startswith("hidden_states."):
        return index
    return index + 1  # blocks.{i}.* fires inside block i: stop_at_layer=i+1 runs blocks 0..i


def logit_terms(variant: str, rp_bias: bool = True) -> dict[str, str]:
    """term -> hook name under ``blocks.{l}.attn.`` for one of our variants (README.md, "Hook names");
    ``rp_bias=False``: a DSTG built without its relative term (``ModelConfig.rp_bias``)."""
    terms = dict(family(variant)["logit_terms"])
    if not rp_bias:
        terms.pop(RP_TERM, None)
    return terms


def head_values(variant: str) -> dict[str, str]:
    """stream -> hook name under ``blocks.{l}.attn.`` of each head's mixed values ([batch, pos, head, d])."""
    return dict(family(variant)["head_values"])
