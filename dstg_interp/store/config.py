"""ExtractionConfig: what to extract and how, validated once and saved next to the outputs.

    config = ExtractionConfig(layers=(0, 3, "final"), subspaces=("sem", "ap"), dtype="float32")
    config = config.resolve(model)          # concrete layers/subspaces for this model, or StoreError
    config.to_json("store/extraction.json"); ExtractionConfig.from_json("store/extraction.json")

Layers: 0 = the embeddings (what enters block 0), l = the residual stream after block l-1
(``blocks.{l-1}.hook_resid_post*``), ``"final"`` = the normed state the MLM head reads (``hook_final*``).
Subspaces: ``sem``, ``ap`` and ``full`` = concat(sem, ap) in that order (the order the DSTG feed-forward
concatenates them) for DSTG; only ``full`` for entangled models and HF encoders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dstg_interp.config import ConfigIO, subspaces_field
from dstg_interp.encoders.selection import FINAL, missing_layer, missing_subspace

from .manifest import StoreError

DTYPES = ("float16", "float32")
ALL_SUBSPACES = ("sem", "ap", "full")


@dataclass
class ExtractionConfig(ConfigIO):
    """What to extract and how (the metadata makes dstg-cache's flags, dstg_interp/cli/config_args.py)."""

    ERROR = StoreError

    # ints >= 0 and/or "final"; None = every layer 0..n_layers (dstg-cache resolves --layers per model first)
    layers: tuple | None = field(default=None, metadata={"cli": False})
    # subset of ("sem", "ap", "full"); None = all the model has
    subspaces: tuple | None = subspaces_field(shown="all the model has")
    names: tuple = field(default=(), metadata={"csv": True, "help": "comma-separated extra token-level hook names"})
    dtype: str = field(default="float16", metadata={"choices": list(DTYPES), "help": "on disk; float32 is "
                                                    "bit-identical to the model's activations"})
    batch_size: int = field(default=32, metadata={"min": 1, "help": "sequences per forward"})
    attention_summaries: bool = field(default=False, metadata={
        "help": "per (layer, head) logit-term statistics over every block"})
    max_offset: int = field(default=32, metadata={
        "min": 1, "help": "attention-by-offset histogram covers key - query in [-max_offset, max_offset]"})

    def __post_init__(self):
        if isinstance(self.layers, (int, str)):
            self.layers = (self.layers,)
        if isinstance(self.subspaces, str):
            self.subspaces = (self.subspaces,)
        if isinstance(self.names, str):
            self.names = (self.names,)
        self.layers = None if self.layers is None else tuple(_layer(x) for x in self.layers)
        self.subspaces = None if self.subspaces is None else tuple(str(x) for x in self.subspaces)
        self.names = tuple(str(x) for x in self.names)
        self.dtype = str(self.dtype).replace("torch.", "")
        if self.dtype not in DTYPES:
            raise StoreError(f"dtype {self.dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise StoreError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if isinstance(self.max_offset, bool) or not isinstance(self.max_offset, int) or self.max_offset < 1:
            raise StoreError(f"max_offset must be a positive integer, got {self.max_offset!r}")
        self.attention_summaries = bool(self.attention_summaries)
        for what, values in (("layers", self.layers), ("subspaces", self.subspaces), ("names", self.names)):
            if values is not None and len(set(values)) != len(values):
                raise StoreError(f"{what} {list(values)} repeat an entry; list each once")
        for subspace in self.subspaces or ():
            if subspace not in ALL_SUBSPACES:
                raise StoreError(f"unknown subspace {subspace!r}; use {', '.join(ALL_SUBSPACES)}")

    def resolve(self, n_layers: int, model_subspaces: tuple[str, ...], variant: str) -> "ExtractionConfig":
        """A copy with concrete layers and subspaces for a model with ``n_layers`` blocks, checked."""
        layers = self.layers if self.layers is not None else tuple(range(n_layers + 1))
        for layer in layers:  # the wording of Encoder.resolve, which a command has run at its door already
            if layer != FINAL and not 0 <= layer <= n_layers:
                raise StoreError(missing_layer(layer, n_layers, has_final=not variant.startswith("hf:")))  # HF: no final
        subspaces = self.subspaces if self.subspaces is not None else tuple(model_subspaces)
        for subspace in subspaces:
            if subspace not in model_subspaces:
                raise StoreError(missing_subspace(subspace, variant, model_subspaces))
        if not layers and not self.names:
            raise StoreError("nothing to extract: give at least one layer or hook name")
        layers = tuple(sorted((x for x in layers if x != "final"))) + (("final",) if "final" in layers else ())
        return ExtractionConfig(layers=layers, subspaces=tuple(x for x in ALL_SUBSPACES if x in subspaces),
                                names=self.names, dtype=self.dtype, batch_size=self.batch_size,
                                attention_summaries=self.attention_summaries, max_offset=self.max_offset)


def _layer(value):
    """An int layer or 'final'; strings of digits (from the CLI) become ints."""
    if isinstance(value, str):
        if value == "final":
            return value
        if value.lstrip("-").isdigit():
            return int(value)
        raise StoreError(f"unknown layer {value!r}; layers are integers (0 = embeddings) or 'final'")
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, np.integer):
            return int(value)
        raise StoreError(f"unknown layer {value!r}; layers are integers (0 = embeddings) or 'final'")
    return value
