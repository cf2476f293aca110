"""The hook-name table: which captured tensors are a layer's states, per model family.

    layer_hooks("dstg", 3, "full")      # ["blocks.2.hook_resid_post_sem", "blocks.2.hook_resid_post_ap"]
    layer_hooks("hf:bert", 3, "full")   # ["hidden_states.3"]

    layer   DSTG (sem | ap; full = [sem, ap])          baselines (full)              HF encoder (full)
    0       hook_embed_sem | hook_embed_ap              blocks.0.hook_resid_pre       hidden_states.0
    l >= 1  blocks.{l-1}.hook_resid_post_sem | _ap      blocks.{l-1}.hook_resid_post  hidden_states.{l}
    final   hook_final_sem | hook_final_ap              hook_final                    (not defined)

A state is a list of hook names concatenated on the last axis: DSTG ``full`` is [sem | ap], in the order
the DSTG feed-forward concatenates them. Baselines read layer 0 at ``blocks.0.hook_resid_pre`` because
for AP-NeoBERT the embedding is the sum of two hooks (token + position); the cost is running one block
when layer 0 alone is asked for. ``hidden_states.{l}`` is not a HookPoint but the l-th entry of a
transformers model's ``output_hidden_states``; the HF adapter serves it under that name.

Attention (``logit_terms``): the additive logit terms under ``blocks.{l}.attn.``, scaled as they enter the
softmax, and ``hook_pattern`` (the softmax weights), all [batch, head, query_pos, key_pos].
"""

from __future__ import annotations

import re

FINAL = "final"
DSTG_SUBSPACES = ("sem", "ap", "full")
ENTANGLED_SUBSPACES = ("full",)
PATTERN_HOOK = "hook_pattern"


def is_hf(variant: str) -> bool:
    return variant.startswith("hf:")


def subspaces_of(variant: str) -> tuple[str, ...]:
    """The subspaces a model of ``variant`` has: DSTG's two streams and their concatenation, else one."""
    return DSTG_SUBSPACES if variant == "dstg" else ENTANGLED_SUBSPACES


def layer_hooks(variant: str, layer: int | str, subspace: str) -> list[str]:
    """Hook names whose tensors, concatenated on the last axis, are ``subspace`` at ``layer`` (table above)."""
    if is_hf(variant):
        return [f"hidden_states.{layer}"]
    if variant == "dstg":
        if subspace == "full":
            return layer_hooks(variant, layer, "sem") + layer_hooks(variant, layer, "ap")
        if layer == FINAL:
            return [f"hook_final_{subspace}"]
        return [f"hook_embed_{subspace}"] if layer == 0 else [f"blocks.{layer - 1}.hook_resid_post_{subspace}"]
    if layer == FINAL:
        return ["hook_final"]
    return ["blocks.0.hook_resid_pre"] if layer == 0 else [f"blocks.{layer - 1}.hook_resid_post"]


def final_hook(variant: str) -> str:
    """The last hook before the MLM head: a forward that needs nothing later can stop there."""
    return "hook_final_sem" if variant == "dstg" else "hook_final"


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
    if variant == "dstg":
        terms = {"sem": "hook_logits_sem", "ap": "hook_logits_ap"}
        return {**terms, "rp": "hook_logits_rp"} if rp_bias else terms
    terms = {"content": "hook_logits"}
    if variant == "rp":
        terms["rp"] = "hook_logits_rp"
    return terms
