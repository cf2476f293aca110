"""The activation cache of our encoders: TransformerLens' ``ActivationCache``, reading DSTG's two streams and
the TransformerLens names that our hooks spell differently.

    logits, cache = model.run_with_cache("The miller mended the door.")
    cache["resid_post", 1]          # baselines: blocks.1.hook_resid_post; DSTG: [sem | ap], its 'full' state
    cache["resid_post_ap", 1]       # blocks.1.hook_resid_post_ap (DSTG)
    cache["attn_scores", 0]         # TL's name: the sum of the logit terms (hook_logits*), before the padding mask
    cache["result", 0]              # [batch, pos, head, d]: what each head writes into the residual
    cache.decompose_resid(layer=2, stream="ap")   # components summing to blocks.2.hook_resid_pre_ap
    cache.accumulated_resid(apply_ln=True)        # the logit lens input: every resid_pre and the final state, normed
    cache.stack_head_results(stream="sem")        # [n_layers * n_heads, batch, pos, d_sem]
    cache.logit_attrs(cache.decompose_resid(stream="sem"), tokens)   # direct logit attribution

``stream``: DSTG's residual is two streams; ``None`` (the default) gives the full state [sem | ap], ``"sem"`` or
``"ap"`` one stream (baselines have one stream, so only ``None``).  ``apply_ln`` scales a stack by the RMSNorm
that reads the residual at that point, with the scale of the cached residual there (TransformerLens' reading):
the scaled components then sum to the normed residual.  The RMSNorms have no hooks, so the scale is
recomputed from the cached residual (the resid_* hooks must be in the cache).  In the authors' DSTG
(``residual_from_normed``) every block norm rescales all that came before it; ``decompose_resid`` carries each
component through those scales, so its stack sums to the residual there too.
"""

from __future__ import annotations

import operator

import re
from typing import Any

import torch
from transformer_lens import ActivationCache
from transformer_lens.utilities import get_act_name
from transformer_lens.utilities.slice import Slice

STREAMS = ("sem", "ap")

# TransformerLens names these models have no hook for, and what to read instead.
NO_SUCH_HOOK = {
    "pre": "the SwiGLU's hidden units are 'post' (blocks.{l}.mlp.hook_post); there is no pre-activation hook",
    "mid": "the SwiGLU's hidden units are 'post' (blocks.{l}.mlp.hook_post)",
    "pre_linear": "the SwiGLU's hidden units are 'post' (blocks.{l}.mlp.hook_post)",
    "scale": "the RMSNorms have no hooks; 'final' (hook_final*) is the normed state the MLM head reads",
    "normalized": "the RMSNorms have no hooks; 'final' (hook_final*) is the normed state the MLM head reads",
    "rot_q": "q and k are hooked before the rotation ('q', 'k'); RoPE rotates them inside the attention",
    "rot_k": "q and k are hooked before the rotation ('q', 'k'); RoPE rotates them inside the attention",
    "attn_in": "the attention reads the normed 'resid_pre'",
    "q_input": "the attention reads the normed 'resid_pre'",
    "k_input": "the attention reads the normed 'resid_pre'",
    "v_input": "the attention reads the normed 'resid_pre'",
    "mlp_in": "the MLP reads the normed 'resid_mid'",
}
# Our attention hooks that get_act_name would place outside the attention module.
ATTENTION_HOOKS = ("logits", "logits_rp")
SHORT_NAMES = ("embed", "pos_embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "q", "k", "v", "z",
               "pattern", "logits", "logits_rp", "attn_scores", "result", "post", "final")
_FULL_ALIAS = re.compile(r"blocks\.(\d+)\.attn\.hook_(attn_scores|result)$")


class StreamActivationCache(ActivationCache):
    """TransformerLens' ``ActivationCache`` for DSTG-NeoBERT and the baselines (module docstring).

    A name of the table with a ``_sem`` / ``_ap`` suffix resolves like the name without it, suffix kept; a
    stream-less name that DSTG has only per stream is the concatenation [sem | ap] (both must be cached).
    A name that is neither in this model nor a TransformerLens alias raises a KeyError that says which
    names exist; a hook of the model that ``names_filter`` left out raises one that says so.
    """

    @property
    def _net(self) -> Any:
        """The model (TransformerLens types ``self.model`` as its own weight-processing protocol)."""
        return self.model

    # --- indexing ------------------------------------------------------------------------------------
    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, str) and key in self.cache_dict:
            return self.cache_dict[key]
        name, layer, layer_type = self._parts(key)
        name, stream = _split_stream(name)
        if name in ("attn_scores", "attn_logits"):
            return self._attn_scores(self._need_layer(key, layer), stream)
        if name == "result":
            return self._head_results(self._need_layer(key, layer), stream)
        if name == "logits" and stream is None and self._dstg and layer is not None:
            raise KeyError(f"{key!r}: DSTG's logit terms are 'logits_sem', 'logits_ap' and 'logits_rp' "
                           "(blocks.{l}.attn.hook_logits_*); 'attn_scores' is their sum")
        if name == "pos_embed" and self._dstg:  # DSTG's AP table rows are its position embedding
            name, stream = "embed", "ap"
        if name == "final" and layer is None:
            full = "hook_final"
        elif name in ATTENTION_HOOKS and layer is not None:
            full = f"blocks.{layer}.attn.hook_{name}"
        else:
            full = get_act_name(name, layer, layer_type)
        if stream is not None:
            if not self._dstg:
                raise KeyError(f"{key!r}: this {self._variant} model has one residual stream; the _sem / _ap names "
                               "are DSTG's")
            return self._cached(f"{full}_{stream}", key)
        if full in self.cache_dict:
            return self.cache_dict[full]
        if self._dstg and all(f"{full}_{s}" in self._net.hook_dict for s in STREAMS):
            return torch.cat([self._cached(f"{full}_{s}", key) for s in STREAMS], dim=-1)
        return self._cached(full, key, tl_name=name)

    def _parts(self, key) -> tuple:
        if isinstance(key, str):
            match = _FULL_ALIAS.match(key)
            if match:
                return match.group(2), int(match.group(1)), None
            return key, None, None
        parts = tuple(key) + (None, None)
        name, layer, layer_type = parts[0], parts[1], parts[2]
        if layer is not None:
            layer = int(layer)
            if layer < 0:
                layer += self._net.config.n_layers
        return name, layer, layer_type

    def _need_layer(self, key, layer) -> int:
        if layer is None:
            raise KeyError(f"{key!r} needs a layer, e.g. cache[{key!r}, 0]")
        return layer

    def _cached(self, full: str, key, tl_name: str | None = None) -> torch.Tensor:
        if full in self.cache_dict:
            return self.cache_dict[full]
        if full in self._net.hook_dict:
            raise KeyError(f"{key!r} -> {full!r} is a hook of this model but not in this cache (cached: "
                           f"{len(self.cache_dict)} names, e.g. {', '.join(list(self.cache_dict)[:3])}); widen names_filter")
        layer = re.search(r"blocks\.(\d+)\.", full)
        hint = NO_SUCH_HOOK.get(tl_name or "", "").replace("{l}", layer.group(1) if layer else "{l}")
        hint = f"; {hint}" if hint else ""
        raise KeyError(f"{key!r} -> {full!r}: this {self._variant} model has no such hook{hint}. Short names it "
                       f"reads: {', '.join(self._short_names())}"
                       f"{' (each also with _sem / _ap)' if self._dstg else ''}; full names: model.hook_dict")

    def _short_names(self) -> list[str]:
        names = [n for n in SHORT_NAMES if n != "logits_rp" or any(h.endswith("hook_logits_rp") for h in self._net.hook_dict)]
        names = [n for n in names if n != "logits" or not self._dstg]  # DSTG: logits_sem / logits_ap
        return [n for n in names if n != "pos_embed" or self._dstg or "hook_pos_embed" in self._net.hook_dict]

    @property
    def _dstg(self) -> bool:
        return self._net.config.spec.ap_stream

    @property
    def _variant(self) -> str:
        return repr(self._net.config.variant)

    def _attn_scores(self, layer: int, stream: str | None) -> torch.Tensor:
        """TransformerLens' attn_scores: the pre-softmax logits, here the sum of the logit terms (without the
        additive padding mask)."""
        if stream is not None:
            raise KeyError(f"attn_scores_{stream}: the logit terms are hook_logits_sem / hook_logits_ap / "
                           "hook_logits_rp ('logits_sem', 'logits_ap', 'logits_rp'); attn_scores is their sum")
        prefix = f"blocks.{layer}.attn."
        terms = sorted(n for n in self._net.hook_dict if n.startswith(prefix + "hook_logits"))
        return sum(self._cached(term, ("attn_scores", layer)) for term in terms)

    # --- per-head results ------------------------------------------------------------------------------
    def _head_results(self, layer: int, stream: str | None) -> torch.Tensor:
        """What each head of block ``layer`` writes into the residual: [batch, pos, head, d] (TransformerLens'
        ``hook_result``), from the cached z and the output projection (no bias)."""
        if stream is None and self._dstg:
            return torch.cat([self._head_results(layer, s) for s in STREAMS], dim=-1)
        self._check_stream(stream)
        suffix = f"_{stream}" if stream else ""
        z = self._cached(f"blocks.{layer}.attn.hook_z{suffix}", ("z", layer))  # [..., head, d_value]
        out = self._net.get_submodule(f"blocks.{layer}.attn.out{suffix}").weight  # [d, head * d_value]
        weight = out.reshape(out.shape[0], z.shape[-2], z.shape[-1]).to(z.dtype)
        return torch.einsum("...hv,mhv->...hm", z, weight)

    def compute_head_results(self) -> None:
        """Caches ``blocks.{l}.attn.hook_result`` (DSTG: ``hook_result_sem`` / ``_ap``) for every block."""
        for layer in range(self._net.config.n_layers):
            for stream in (STREAMS if self._dstg else (None,)):
                suffix = f"_{stream}" if stream else ""
                self.cache_dict[f"blocks.{layer}.attn.hook_result{suffix}"] = self._head_results(layer, stream)

    def stack_head_results(self, layer: int | None = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice=None, apply_ln: bool = False, stream: str | None = None):
        """Every head's output at the blocks before ``layer`` (None / -1: all): [n_heads * layer, *batch, pos, d],
        labels ``L{l}H{h}``; ``incl_remainder`` adds resid_post[layer - 1] minus their sum ('remainder')."""
        layer = self._layer(layer)
        self._check_stream(stream)
        pos_slice = _slice(pos_slice)
        labels = [f"L{l}H{h}" for l in range(layer) for h in range(self._net.config.n_heads)]
        heads = [pos_slice.apply(self._head_results(l, stream), dim=-3) for l in range(layer)]
        if heads:
            components = torch.cat(heads, dim=-2).movedim(-2, 0)
        else:
            reference = pos_slice.apply(self._stream("blocks.0.hook_resid_pre", stream), dim=-2)
            components = reference.new_zeros((0, *reference.shape))
        if incl_remainder:
            total = (pos_slice.apply(self._stream(f"blocks.{layer - 1}.hook_resid_post", stream), dim=-2) if layer
                     else pos_slice.apply(self._stream("blocks.0.hook_resid_pre", stream), dim=-2))
            components = torch.cat([components, (total - components.sum(0))[None]])
            labels.append("remainder")
        if apply_ln:
            components = self._apply_norm(components, layer, False, stream, pos_slice)
        return (components, labels) if return_labels else components

    # --- the residual, stacked -----------------------------------------------------------------------
    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice=None, incl_embeds: bool = True,
                        return_labels: bool = False, stream: str | None = None):
        """The residual entering block ``layer`` (None / -1: the final state) as the stack of what wrote it:
        ``embed``, ``pos_embed`` (AP-NeoBERT's table; DSTG's AP rows), ``{l}_attn_out``, ``{l}_mlp_out``
        (``mode``: "all", "attn", "mlp"); ``mlp_input`` adds block ``layer``'s attn_out. They sum to
        resid_pre[layer] (resid_post of the last block for the final state), stream by stream.

        A model whose blocks carry the normed stream forward (``residual_from_normed``, the authors' DSTG: the
        shipped zoo's) rescales everything before each norm: there each component is scaled by every RMSNorm it
        passed through on its way, with the scale of the cached residual at that norm (TransformerLens' frozen
        norm scale, as ``apply_ln``), so the stack still sums to the residual exactly."""
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"mode must be 'all', 'attn' or 'mlp', got {mode!r}")
        layer = self._layer(layer)
        self._check_stream(stream)
        pos_slice = _slice(pos_slice)
        normed = self._net.config.residual_from_normed
        whole = _slice(None)
        components: list[torch.Tensor] = []
        labels: list[str] = []
        for label, tensor in self._embeddings(stream):
            components.append(tensor)
            labels.append(label)

        def write(name: str, l: int) -> None:
            if normed:  # the block's norm reads all that came before and carries its output forward
                scaled = self._apply_norm(torch.stack(components), l, name == "mlp_out", stream, whole)
                components[:] = list(scaled.unbind(0))
            components.append(self._stream(f"blocks.{l}.hook_{name}", stream))
            labels.append(f"{l}_{name}")

        for l in range(layer + (1 if mlp_input and layer < self._net.config.n_layers else 0)):
            write("attn_out", l)
            if l < layer:
                write("mlp_out", l)

        def kept(label: str) -> bool:
            if label in ("embed", "pos_embed"):
                return incl_embeds
            return mode != ("mlp" if label.endswith("attn_out") else "attn")

        keep = [i for i, label in enumerate(labels) if kept(label)]
        if not keep:
            raise ValueError("decompose_resid: nothing to stack (incl_embeds=False and no block before this layer)")
        stack = torch.stack([pos_slice.apply(components[i], dim=-2) for i in keep])
        if apply_ln:
            stack = self._apply_norm(stack, layer, mlp_input, stream, pos_slice)
        labels = [labels[i] for i in keep]
        return (stack, labels) if return_labels else stack

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice=None, mlp_input: bool = False, return_labels: bool = False,
                          stream: str | None = None):
        """resid_pre of every block up to ``layer`` (None / -1: all, plus the final state 'final_post'),
        with resid_mid for ``incl_mid`` / ``mlp_input`` as in TransformerLens.  ``apply_ln`` at the final
        layer puts each state through the final norm on its own scale (the logit lens)."""
        layer = self._layer(layer)
        self._check_stream(stream)
        pos_slice = _slice(pos_slice)
        n_layers = self._net.config.n_layers
        components, labels = [], []
        for l in range(layer + 1):
            if l == n_layers:
                components.append(self._stream(f"blocks.{n_layers - 1}.hook_resid_post", stream))
                labels.append("final_post")
                continue
            components.append(self._stream(f"blocks.{l}.hook_resid_pre", stream))
            labels.append(f"{l}_pre")
            if (incl_mid and l < layer) or (mlp_input and l == layer):
                components.append(self._stream(f"blocks.{l}.hook_resid_mid", stream))
                labels.append(f"{l}_mid")
        stack = torch.stack([pos_slice.apply(c, dim=-2) for c in components])
        if apply_ln:
            stack = self._apply_norm(stack, layer, mlp_input, stream, pos_slice, recompute=layer == n_layers)
        return (stack, labels) if return_labels else stack

    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice=None, batch_slice=None, has_batch_dim: bool = True, recompute_ln: bool = False,
                          stream: str | None = None) -> torch.Tensor:
        """Scales a stack [components, *batch, pos, d] by the RMSNorm reading the residual entering block
        ``layer`` (None / -1: the final norm); ``stream`` is inferred from the width d where it can be."""
        stream = self._stream_of(residual_stack, stream)
        return self._apply_norm(residual_stack, self._layer(layer), mlp_input, stream, _slice(pos_slice),
                                recompute=recompute_ln, batch_slice=_slice(batch_slice))

    def logit_attrs(self, residual_stack: torch.Tensor, tokens, incorrect_tokens=None, pos_slice=None,
                    batch_slice=None, has_batch_dim: bool = True, stream: str | None = None) -> torch.Tensor:
        """Direct logit attribution: each component of ``residual_stack``, scaled by the final norm, dotted with
        the MLM head's row of ``tokens`` (minus that of ``incorrect_tokens``). DSTG's head reads the semantic
        stream only: pass a ``stream="sem"`` stack (a full [sem | ap] stack is cut to its sem part; the AP
        stream writes nothing the head reads)."""
        directions = self._net.tokens_to_residual_directions(tokens)
        if incorrect_tokens is not None:
            wrong = self._net.tokens_to_residual_directions(incorrect_tokens)
            if wrong.shape != directions.shape:
                raise ValueError(f"tokens and incorrect_tokens must have the same shape, got {tuple(directions.shape)} "
                                 f"and {tuple(wrong.shape)}")
            directions = directions - wrong
        head_reads = self._net.mlm_head.in_features
        stream = self._stream_of(residual_stack, stream)
        if self._dstg and self._net.config.mlm_head_input == "sem":
            if stream == "ap":
                raise ValueError("logit_attrs: DSTG's MLM head reads the semantic stream only; the AP stream has no "
                                 "direct logit attribution (pass a stream='sem' stack)")
            residual_stack, stream = residual_stack[..., :head_reads], "sem"
        elif residual_stack.shape[-1] != head_reads:
            raise ValueError(f"logit_attrs: the MLM head reads width {head_reads}, the stack has {residual_stack.shape[-1]}")
        scaled = self._apply_norm(residual_stack, self._net.config.n_layers, False, stream, _slice(pos_slice),
                                  batch_slice=_slice(batch_slice))
        if (has_batch_dim and scaled.ndim == 4 and directions.ndim == 2 and directions.shape[0] == scaled.shape[1]):
            directions = directions[:, None]  # one token per sequence: the same direction at every position
        return (scaled * directions.to(scaled.dtype)).sum(-1)

    def logit_lens(self, **kwargs):
        raise NotImplementedError("logit_lens: use cache.accumulated_resid(apply_ln=True"
                                  + (", stream='sem'" if self._dstg else "") + ") @ model.W_U + model.b_U")

    def get_full_resid_decomposition(self, *args, **kwargs):
        raise NotImplementedError("get_full_resid_decomposition: use decompose_resid(...) and stack_head_results(...)"
                                  + (" with stream='sem' / 'ap'" if self._dstg else ""))

    def stack_neuron_results(self, *args, **kwargs):
        raise NotImplementedError("stack_neuron_results: neuron results are not implemented for these models; the "
                                  "SwiGLU's hidden units are cache['post', layer]")

    def get_neuron_results(self, *args, **kwargs):
        self.stack_neuron_results()

    def apply_slice_to_batch_dim(self, batch_slice) -> "StreamActivationCache":
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return StreamActivationCache(sliced.cache_dict, self.model, has_batch_dim=sliced.has_batch_dim)

    # --- helpers ---------------------------------------------------------------------------------------
    def _layer(self, layer: int | None) -> int:
        original = layer
        n_layers = self._net.config.n_layers
        if layer is None:
            return n_layers
        try:  # an integer (a numpy or 0-d tensor one too), never a bool: True is not layer 1
            layer = operator.index(layer) if not isinstance(layer, bool) else None
        except TypeError:
            layer = None
        if layer is None:
            raise TypeError(f"layer must be an integer in [0, {n_layers}] (or None / -1 for the final state), got "
                            f"{original!r}")
        if layer == -1:
            return n_layers
        if not 0 <= layer <= n_layers:
            raise ValueError(f"layer must be in [0, {n_layers}] (or None / -1 for the final state), got {layer}")
        return layer

    def _check_stream(self, stream: str | None) -> None:
        if stream is None:
            return
        if not self._dstg:
            raise ValueError(f"stream={stream!r}: this {self._variant} model has one residual stream; streams are DSTG's")
        if stream not in STREAMS:
            raise ValueError(f"stream must be 'sem', 'ap' or None (both, [sem | ap]), got {stream!r}")

    def _stream_of(self, stack: torch.Tensor, stream: str | None) -> str | None:
        self._check_stream(stream)
        if stream is not None or not self._dstg:
            return stream
        cfg = self._net.cfg
        widths = {cfg.d_model: None, cfg.d_sem: "sem", cfg.d_ap: "ap"}
        if stack.shape[-1] not in widths or cfg.d_sem == cfg.d_ap:
            raise ValueError(f"pass stream='sem' / 'ap' (or None for [sem | ap]): a stack of width {stack.shape[-1]} "
                             f"does not say which stream it is (d_sem={cfg.d_sem}, d_ap={cfg.d_ap})")
        return widths[stack.shape[-1]]

    def _stream(self, full: str, stream: str | None) -> torch.Tensor:
        """The cached tensor of hook ``full`` in ``stream`` (DSTG, None: [sem | ap])."""
        if not self._dstg:
            return self._cached(full, full)
        if stream is not None:
            return self._cached(f"{full}_{stream}", full)
        return torch.cat([self._cached(f"{full}_{s}", full) for s in STREAMS], dim=-1)

    def _embeddings(self, stream: str | None) -> list[tuple[str, torch.Tensor]]:
        if not self._dstg:
            found = [("embed", self._cached("hook_embed", "embed"))]
            if "hook_pos_embed" in self._net.hook_dict:
                found.append(("pos_embed", self._cached("hook_pos_embed", "pos_embed")))
            return found
        sem, ap = self._cached("hook_embed_sem", "embed_sem"), self._cached("hook_embed_ap", "embed_ap")
        if stream == "sem":
            return [("embed", sem)]
        if stream == "ap":
            return [("pos_embed", ap)]
        ap = ap.expand(*sem.shape[:-1], ap.shape[-1])
        return [("embed", torch.cat([sem, torch.zeros_like(ap)], -1)), ("pos_embed", torch.cat([torch.zeros_like(sem), ap], -1))]

    def _apply_norm(self, stack: torch.Tensor, layer: int, mlp_input: bool, stream: str | None, pos_slice: Slice,
                    recompute: bool = False, batch_slice: Slice | None = None) -> torch.Tensor:
        """Scales each stream of ``stack`` by the RMSNorm reading the residual entering block ``layer`` (the final
        norm at n_layers; block ``layer``'s MLP norm with ``mlp_input``): weight / rms(residual there), or with
        ``recompute`` each component's own rms."""
        n_layers = self._net.config.n_layers
        if layer == n_layers:
            norm, residual = "final_norm", f"blocks.{n_layers - 1}.hook_resid_post"
        elif mlp_input:
            norm, residual = f"blocks.{layer}.norm_mlp", f"blocks.{layer}.hook_resid_mid"
        else:
            norm, residual = f"blocks.{layer}.norm_attn", f"blocks.{layer}.hook_resid_pre"
        streams = (STREAMS if stream is None else (stream,)) if self._dstg else (None,)
        parts = stack.split([self._net.config.d_sem, self._net.config.d_ap], dim=-1) if len(streams) == 2 else (stack,)
        scaled = []
        for part, s in zip(parts, streams):
            suffix = f"_{s}" if s else ""
            module = self._net.get_submodule(norm + suffix)
            if recompute:
                reference = part
            else:
                reference = pos_slice.apply(self._cached(residual + suffix, residual), dim=-2)
                if batch_slice is not None:
                    reference = batch_slice.apply(reference, dim=0)
            rms = reference.float().pow(2).mean(-1, keepdim=True).add(module.eps).rsqrt()
            scaled.append((part.float() * rms * module.weight.float()).to(part.dtype))
        return torch.cat(scaled, dim=-1) if len(scaled) > 1 else scaled[0]


def _split_stream(name: str) -> tuple[str, str | None]:
    if "." not in name:
        for stream in STREAMS:
            if name.endswith(f"_{stream}"):
                return name[: -len(stream) - 1], stream
    return name, None


def _slice(value) -> Slice:
    return value if isinstance(value, Slice) else Slice(value)
