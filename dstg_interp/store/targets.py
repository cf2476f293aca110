"""What to capture for a store: each stored array as a list of hook names concatenated on the last axis.

    targets = plan_targets(encoder, config)    # config resolved for this model
    targets[0].key, targets[0].hooks            # "0/sem", ["hook_embed_sem"]

Layer -> hook names is the encoders' table (dstg_interp/encoders/hooks.py; the public hook contract,
README.md "Hook names"); the names are recorded in the manifest next to each array.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from dstg_interp.encoders.hooks import blocks_needed, is_hf, layer_hooks

from .config import ExtractionConfig
from .manifest import StoreError

__all__ = ["Target", "plan_targets", "check_hook_name", "layer_hooks", "blocks_needed"]


@dataclass
class Target:
    key: str  # "3/sem", "final/full" or a hook name
    hooks: list[str]  # captured tensors, concatenated on the last axis
    file: str

    @property
    def blocks_needed(self) -> int:
        return max(blocks_needed(hook) for hook in self.hooks)


def plan_targets(encoder, config: ExtractionConfig) -> list[Target]:
    variant = encoder.variant
    targets = []
    for layer in config.layers:
        if layer == "final" and is_hf(variant):
            raise StoreError(f"layer 'final' is not defined for HF encoders; the last layer is {encoder.n_layers}")
        stem = "final" if layer == "final" else f"layer{layer:02d}"
        for subspace in config.subspaces:
            targets.append(Target(f"{layer}/{subspace}", layer_hooks(variant, layer, subspace), f"{stem}_{subspace}.npy"))
    for name in config.names:
        if is_hf(variant):
            raise StoreError(f"hook name {name!r}: HF encoders expose layers only (hidden states); drop names=")
        check_hook_name(encoder, name)
        targets.append(Target(name, [name], f"hook.{name}.npy"))
    return targets


def check_hook_name(encoder, name: str) -> None:
    hook_dict = encoder.model.hook_dict
    if name not in hook_dict:
        close = difflib.get_close_matches(name, list(hook_dict), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; see model.hook_dict for the names"
        raise StoreError(f"unknown hook name {name!r} for a {encoder.variant!r} model{hint}")
    if ".attn." in name:
        raise StoreError(f"hook {name!r} is an attention map [batch, head, query, key], not a token state; "
                         "use attention_summaries=True for per-head statistics")
