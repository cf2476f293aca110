"""Which layers and where: the layer grammar every command and the library share, and the device check.

    from dstg_interp.encoders.selection import resolve_layers
    resolve_layers(("last", 0), n_layers=6)     # [6, 0]
    resolve_layers("all", n_layers=6)           # [0, 1, 2, 3, 4, 5, 6]

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

__all__ = ["LAST", "FINAL", "ALL", "SUBSPACES", "LayerSelection", "resolve_layers", "check_device"]


def resolve_layers(selection: LayerSelection, n_layers: int, default: LayerSelection = ALL) -> list:
    """Concrete layers for a model with ``n_layers`` blocks: ints (``last`` -> n_layers) and ``final``.

    selection: what ``parse_layers`` returns, a list of ints / names, a name, or None (= ``default``).
    Range checks stay with the model (``Encoder.check_request``), which names the layers it has."""
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


def check_device(device: str) -> None:
    """A CUDA device asked for on a machine without one: one clear error (exit 2) before any work."""
    if device.startswith("cuda"):
        import torch  # optional: torch loads only when a GPU is asked for, so --help stays instant

        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available here; use --device cpu")
