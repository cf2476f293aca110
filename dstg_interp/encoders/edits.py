"""Edit a layer's states inside the forward pass: the write side of the hook table (``hooks.py``).

    from dstg_interp.encoders import open_encoder
    from dstg_interp.encoders.edits import edit_states
    encoder = open_encoder("dstg")
    with edit_states(encoder, 3, "ap", lambda x: x - x.mean(dim=1, keepdim=True)):   # x: [batch, pos, d_ap]
        logits = encoder.mlm_logits(tokens, mask)        # every forward in the block runs with the edit

``edit`` receives the state of (layer, subspace) exactly as the store holds it -- [batch, pos, d], DSTG ``full``
= [sem | ap] -- and returns a tensor of the same shape that the rest of the model reads instead.  Models of
ours are edited through their TransformerLens hook points (``model.hooks``, which nests with the hooks
``capture`` and ``attention`` add); DSTG ``full`` spans two hook points, so the first one to fire hands on a
copy that the second one overwrites in place with its part of the edited concatenation (the two streams
are not read between the two hooks).  HF encoders have no hook points: ``hidden_states.{l}`` is the output
of the embeddings (l = 0) or of encoder layer l-1, edited with a PyTorch forward hook on that module.

Three sites, one file that hooks the model (nnsight / pyvene: an edit is a function handed to one place):
    edit_states(encoder, layer, subspace, edit)   a layer's state, by the hook table (every model)
    edit_hooks(encoder, {hook name: edit})        any named hook point (models of ours: heads' values, position
                                                  embeddings)
    edit_position_rows(encoder, edit)             the rows an HF encoder's learned position table hands on
                                                  (``embeddings.position_embeddings``; edit(rows, position_ids))
The analyses (interventions, erasure, patching, the MLM lens) build their edits and hand them here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import torch

from .base import Encoder, EncoderError
from .hf import position_table

StateEdit = Callable[[torch.Tensor], torch.Tensor]  # [batch, pos, d] -> [batch, pos, d]
RowsEdit = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (rows [batch, pos, d], ids [batch, pos]) -> rows


@contextlib.contextmanager
def edit_states(encoder: Encoder, layer: int | str, subspace: str, edit: StateEdit) -> Iterator[None]:
    """Run every forward inside the block with the state of (``layer``, ``subspace``) replaced by ``edit(state)``."""
    encoder.resolve([layer], [subspace])
    hooks = encoder.hooks_for(layer, subspace)
    if encoder.kind == "hf":
        with _hf_edit(encoder, layer, edit):
            yield
        return
    missing = [name for name in hooks if name not in encoder.model.hook_dict]
    if missing:
        raise EncoderError(f"{encoder.name}: no hook named {missing[0]!r} to edit in this {encoder.variant!r} model")
    with encoder.model.hooks(fwd_hooks=_joint_hooks(hooks, edit, _widths(encoder, hooks))):
        yield


@contextlib.contextmanager
def edit_hooks(encoder: Encoder, edits: Mapping[str, StateEdit]) -> Iterator[None]:
    """Run every forward inside the block with each named hook point's tensor replaced by ``edit(tensor)``
    (models of ours only: HF encoders have no hook points below their layers; use ``edit_states`` there)."""
    if encoder.kind == "hf":
        raise EncoderError(f"{encoder.name}: an HF encoder has no hook points to edit by name; edit its "
                           "hidden_states.{l} with edit_states")
    missing = [name for name in edits if name not in encoder.model.hook_dict]
    if missing:
        raise EncoderError(f"{encoder.name}: no hook named {missing[0]!r} to edit in this {encoder.variant!r} model")
    hooks = [hook for name, edit in edits.items() for hook in _joint_hooks([name], edit, [0])]
    with encoder.model.hooks(fwd_hooks=hooks):
        yield


@contextlib.contextmanager
def edit_position_rows(encoder: Encoder, edit: RowsEdit) -> Iterator[None]:
    """Run every forward inside the block with the rows an HF encoder's learned absolute-position table hands
    on replaced by ``edit(rows, position_ids)`` (rows [batch or 1, pos, d], the ids the model looked up)."""
    table = position_rows_module(encoder)
    if table is None:
        raise EncoderError(f"{encoder.name}: no learned absolute-position table (embeddings.position_embeddings) "
                           "to edit in this model")

    def on_output(module, args, output):
        return _checked(edit(output, args[0]), output, "embeddings.position_embeddings")

    with _forward_hook(table, on_output):
        yield


def position_rows_module(encoder: Encoder) -> torch.nn.Embedding | None:
    """An HF encoder's learned absolute-position table (BERT-style ``embeddings.position_embeddings``), or None."""
    base = getattr(encoder.model, "base_model", None) if encoder.kind == "hf" else None
    return position_table(base) if isinstance(base, torch.nn.Module) else None


def _widths(encoder: Encoder, hooks: list[str]) -> list[int]:
    config = encoder.config
    if len(hooks) == 1:
        return [0]
    return [config.d_sem if name.endswith("_sem") else config.d_ap for name in hooks]


def _joint_hooks(hooks: list[str], edit: StateEdit, widths: list[int]) -> list:
    """Hook functions that apply ``edit`` to the concatenation of ``hooks`` (in their order), whichever fires first."""
    if len(hooks) == 1:
        return [(hooks[0], lambda tensor, hook: _checked(edit(tensor), tensor, hooks[0]))]
    held: dict[str, torch.Tensor] = {}

    def on_part(tensor, hook):
        part = tensor.clone()  # a copy: the layer-0 AP state is a view of the table parameter
        held[hook.name] = part
        if len(held) < len(hooks):
            return part
        joined = torch.cat([held[name] for name in hooks], dim=-1)
        edited = _checked(edit(joined), joined, "+".join(hooks))
        for name, piece in zip(hooks, edited.split(widths, dim=-1)):
            held[name].copy_(piece)  # the part handed on earlier is the tensor the next block reads
        held.clear()
        return part

    return [(name, on_part) for name in hooks]


def _checked(edited: torch.Tensor, original: torch.Tensor, where: str) -> torch.Tensor:
    if not isinstance(edited, torch.Tensor) or edited.shape != original.shape:
        shape = list(edited.shape) if isinstance(edited, torch.Tensor) else type(edited).__name__
        raise EncoderError(f"the edit of {where} returned {shape}, not a tensor of the state's shape {list(original.shape)}")
    return edited.to(original.dtype)


@contextlib.contextmanager
def _hf_edit(encoder: Encoder, layer: int, edit: StateEdit):
    def on_output(module, inputs, output):
        if isinstance(output, tuple):
            return (_checked(edit(output[0]), output[0], f"hidden_states.{layer}"),) + output[1:]
        return _checked(edit(output), output, f"hidden_states.{layer}")

    with _forward_hook(_hf_module(encoder, layer), on_output):
        yield


@contextlib.contextmanager
def _forward_hook(module: torch.nn.Module, hook):
    """A PyTorch forward hook on ``module`` for the block, removed afterwards (also on error)."""
    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _hf_module(encoder: Encoder, layer: int) -> torch.nn.Module:
    """The module whose output is ``hidden_states[layer]`` of a BERT-family model."""
    model = getattr(encoder.model, "base_model", encoder.model)  # a ...ForMaskedLM holds its encoder there
    if layer == 0:
        embeddings = getattr(model, "embeddings", None)
        if isinstance(embeddings, torch.nn.Module):
            return embeddings
    else:
        for path in ("encoder.layer", "layers", "transformer.layer"):
            blocks = model
            for part in path.split("."):
                blocks = getattr(blocks, part, None)
            if isinstance(blocks, torch.nn.ModuleList) and len(blocks) >= layer:
                return blocks[layer - 1]
    raise EncoderError(f"{encoder.name}: cannot find the module that outputs hidden_states.{layer} in this "
                       f"{encoder.variant} model (edits know BERT-style embeddings + encoder.layer)")
