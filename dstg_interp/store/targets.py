"""What to capture for a store: each stored array as a list of hook names concatenated on the last axis.

    targets = plan_targets(model, config)      # config resolved for this model
    targets[0].key, targets[0].hooks            # "0/sem", ["hook_embed_sem"]

Layer -> hook names (the public hook contract, README.md "Hook names"):

    layer   DSTG (sem | ap; full = [sem, ap])          baselines (full)            HF encoder (full)
    0       hook_embed_sem | hook_embed_ap              blocks.0.hook_resid_pre     hidden_states[0]
    l >= 1  blocks.{l-1}.hook_resid_post_sem | _ap      blocks.{l-1}.hook_resid_post  hidden_states[l]
    final   hook_final_sem | hook_final_ap              hook_final                  (not defined)

Baselines read layer 0 at ``blocks.0.hook_resid_pre`` because for AP-NeoBERT the embedding is the sum
of two hooks (token + position); it costs running one block when only layer 0 is asked for.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from .config import ExtractionConfig
from .manifest import StoreError


@dataclass
class Target:
    key: str  # "3/sem", "final/full" or a hook name
    hooks: list[str]  # captured tensors, concatenated on the last axis
    file: str

    @property
    def blocks_needed(self) -> int:
        return max(blocks_needed(hook) for hook in self.hooks)


def layer_hooks(variant: str, layer, subspace: str) -> list[str]:
    if variant.startswith("hf:"):
        return [f"hidden_states.{layer}"]
    if variant == "dstg":
        if subspace == "full":
            return layer_hooks(variant, layer, "sem") + layer_hooks(variant, layer, "ap")
        if layer == "final":
            return [f"hook_final_{subspace}"]
        return [f"hook_embed_{subspace}"] if layer == 0 else [f"blocks.{layer - 1}.hook_resid_post_{subspace}"]
    if layer == "final":
        return ["hook_final"]
    return ["blocks.0.hook_resid_pre"] if layer == 0 else [f"blocks.{layer - 1}.hook_resid_post"]


def blocks_needed(hook: str) -> int:
    """How many blocks must run for ``hook`` to fire (hook_final* is handled by the caller)."""
    match = re.match(r"(?:blocks|hidden_states)\.(\d+)", hook)
    if match is None:
        return 0
    index = int(match.group(1))
    if hook.startswith("hidden_states."):
        return index
    # blocks.{i}.* fires inside block i (stop_at_layer=i+1 runs blocks 0..i)
    return index + 1


def plan_targets(model, config: ExtractionConfig) -> list[Target]:
    variant = model.config.variant
    targets = []
    for layer in config.layers:
        if layer == "final" and variant.startswith("hf:"):
            raise StoreError(f"layer 'final' is not defined for HF encoders; the last layer is {model.config.n_layers}")
        stem = "final" if layer == "final" else f"layer{layer:02d}"
        for subspace in config.subspaces:
            targets.append(Target(f"{layer}/{subspace}", layer_hooks(variant, layer, subspace), f"{stem}_{subspace}.npy"))
    for name in config.names:
        if variant.startswith("hf:"):
            raise StoreError(f"hook name {name!r}: HF encoders expose layers only (hidden states); drop names=")
        check_hook_name(model, name)
        targets.append(Target(name, [name], f"hook.{name}.npy"))
    return targets


def check_hook_name(model, name: str) -> None:
    if name not in model.hook_dict:
        close = difflib.get_close_matches(name, list(model.hook_dict), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; see model.hook_dict for the names"
        raise StoreError(f"unknown hook name {name!r} for a {model.config.variant!r} model{hint}")
    if ".attn." in name:
        raise StoreError(f"hook {name!r} is an attention map [batch, head, query, key], not a token state; "
                         "use attention_summaries=True for per-head statistics")
