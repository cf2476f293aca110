"""An MLM logit lens: each layer's state decoded through the model's own final norm and masked-LM head.

    from dstg_interp.analysis.mlm_lens import logit_lens
    table = logit_lens(encoder, tokens, attention_mask, n_masked=4, seed=0)
    table.pivot_table(index="layer", columns="subspace", values="top1_accuracy")

For layer l the last layer's state is replaced by layer l's (``encoders.edits.edit_states`` at layer
``n_layers``) and the rest of the model runs as it is: its final norm and its MLM head (ours: ``final_norm`` +
``mlm_head``; a BERT-family ``...ForMaskedLM``: whatever its head does to the last hidden state, transform and
LayerNorm included).  So the lens at the last layer *is* the model's output (the known answer the tests check),
and no norm or head is re-implemented here.  Scored at masked positions (``masked_inputs.masked_batch``):
    top1_accuracy    the lens's top token is the masked (clean) token
    top1_agreement   the lens's top token is the model's own final top token
    kl_to_final      KL(final || lens), nats
    chance_accuracy  the accuracy of always answering the batch's most frequent masked token
Subspaces: DSTG's head reads the semantic stream, so its lens decodes ``sem``; a DSTG whose head reads
[sem | ap] (the authors' ``mlm_head_input="full"``) gives two rows per layer: ``full`` (both streams of layer l)
and ``sem`` (the semantic stream of layer l with the AP stream the model ends with), whose difference is what
layer l's AP stream adds.  Baselines and HF masked LMs: ``full``.  A model without an MLM head is refused in
one line (``masked_inputs.require_mlm_head``).  The control is ``encoder.random_init()`` read the same way.
"""

from __future__ import annotations

import pandas as pd
import torch

from ..encoders import Encoder
from ..encoders.edits import edit_states
from .masked_inputs import masked_batch, mlm_logits, require_mlm_head

COLUMNS = ["layer", "subspace", "top1_accuracy", "top1_agreement", "kl_to_final", "chance_accuracy", "n_tokens"]


def lens_subspaces(encoder: Encoder) -> list[str]:
    """What the lens decodes (module docstring)."""
    if "sem" not in encoder.subspaces:
        return ["full"]
    return ["full", "sem"] if getattr(encoder.config, "mlm_head_input", "sem") == "full" else ["sem"]


def logit_lens(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
               n_masked: int = 2, seed: int = 0, positions=None, layers=None) -> pd.DataFrame:
    """One row per (layer, subspace) (``COLUMNS``), scored at ``n_masked`` masked positions of every row."""
    require_mlm_head(encoder, "the logit lens")
    batch = masked_batch(encoder, tokens, attention_mask, n_masked=n_masked, seed=seed, positions=positions)
    layers = [layer for layer in encoder.layers if layer != "final"] if layers is None else list(layers)
    subspaces = lens_subspaces(encoder)
    last = encoder.n_layers
    with torch.no_grad():
        states = encoder.states(batch.tokens, layers, subspaces, attention_mask=batch.attention_mask)
        final = mlm_logits(encoder, batch.tokens, batch.attention_mask).float()[batch.scored]
    answers = batch.targets[batch.scored]
    final_log_probs = final.log_softmax(-1)
    chance = float((answers == answers.mode().values).double().mean())
    rows = []
    for layer in layers:
        for subspace in subspaces:
            state = states[(layer, subspace)]

            def replace(x: torch.Tensor, state: torch.Tensor = state) -> torch.Tensor:  # this layer's state instead
                return state.to(x.dtype).clone()

            with torch.no_grad(), edit_states(encoder, last, subspace, replace):
                lens = mlm_logits(encoder, batch.tokens, batch.attention_mask).float()[batch.scored]
            log_q = lens.log_softmax(-1)
            top = lens.argmax(-1)
            rows.append({"layer": layer, "subspace": subspace,
                         "top1_accuracy": float((top == answers).double().mean()),
                         "top1_agreement": float((top == final.argmax(-1)).double().mean()),
                         "kl_to_final": float((final_log_probs.exp() * (final_log_probs - log_q)).sum(-1).mean()),
                         "chance_accuracy": chance, "n_tokens": int(answers.numel())})
    return pd.DataFrame(rows, columns=COLUMNS)
