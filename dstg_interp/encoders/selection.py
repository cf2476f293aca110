"""Which layers and where: the layer grammar every command and the library share, and the device check.

    from dstg_interp.encoders.selection import resolve_layers
    resolve_layers(("last", 0), n_layers=6)     # [6, 0]
    resolve_layers("all", n_layers=6)           # [0, 1, 2, 3, 4, 5, 6]
    encoder.resolve(("last", 0), ("ap",))       # the same grammar, checked against one model: ([6, 0], ["ap"])

A request is resolved once, where it enters (``Encoder.resolve``: grammar, names and range; a command at
its door, a library function at its own); what is built on it (the store, the probes) only asserts.  Each
refusal has one wording, written here (``missing_layer``, ``missing_subspace``).

The grammar (``dstg_interp.cli.flags.parse_layers`` reads it from a command line):

    0, 1, .., n_layers   0 = the embeddings, l = the output of the l-th block (hook blocks.{l-1}.hook_resid_post*)
    last                 n_layers, the last block's output
    final                the normed state the MLM head reads (models with a final norm; not HF encoders)
    all                  0..n_layers
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from .hooks import DSTG_SUBSPACES, FINAL

LAST, ALL = "last", "all"
SUBSPACES = DSTG_SUBSPACES
# A layer selection of the grammar above: a name, an index, or several of them (None: the caller's default).
LayerSelection = Union[str, int, Sequence[Union[str, int]], None]

__all__ = ["LAST", "FINAL", "ALL", "SUBSPACES", "LayerSelection", "resolve_layers", "listed", "missing_layer", "missing_subspace",
           "check_device"]


def resolve_layers(selection: LayerSelection, n_layers: int, default: LayerSelection = ALL) -> list:
    """Concrete layers for a model with ``n_layers`` blocks: ints (``last`` -> n_layers) and ``final``.

    selection: what ``parse_layers`` returns, a list of ints / names, a name, or None (= ``default``).
    Range checks stay with the model (``Encoder.resolve``), which names the layers it has."""
    selection = default if selection is None else selection
    if isinstance(selection, (str, int)):
        selection = (selection,)
    if tuple(selection) == (ALL,):
        return list(range(n_layers + 1))
    layers = []
    for layer in selection:
        layer = n_layers if layer == LAST else layer
        if layer not in layers:
            layers.append(layer)
    return layers


def listed(selection: LayerSelection) -> list | None:
    """A selection as the list its checks read (one name or index: a list of one; None stays None), resolved
    by nobody: where a request reaches a store or a probe it was resolved at its door, and what is left is to
    check it against what they hold."""
    if selection is None:
        return None
    return [selection] if isinstance(selection, (str, int)) else list(selection)


def missing_layer(layer, n_layers: int, has_final: bool, model: str | None = None) -> str:
    """The one wording of a layer a model does not have."""
    where = f" in {model}" if model else ""
    final = f" and {FINAL!r}" if has_final else ""
    return f"layer {layer!r} does not exist{where}: it has layers 0..{n_layers} (0 = embeddings){final}"


def missing_subspace(subspace, variant: str, subspaces: Sequence[str], model: str | None = None) -> str:
    """The one wording of a subspace a model does not have (an entangled model has only ``full``)."""
    where = f" ({model})" if model else ""
    return f"subspace {subspace!r} does not exist in a {variant!r} model{where}: it has {', '.join(subspaces)}"


def check_device(device: str) -> None:
    """A CUDA device asked for on a machine without one: one clear error (exit 2) before any work."""
    if device.startswith("cuda"):
        import torch  # optional: torch loads only when a GPU is asked for, so --help stays instant

        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available here; use --device cpu")
