"""Head classes for any encoder: each head's q.k split through the position / context decomposition of its input.

    from dstg_interp.analysis.head_split import head_split_stats, classify_split_heads, layer_class_shares
    stats = head_split_stats(encoder, tokens)       # tokens [C, T]: C full windows of T tokens; one row per head
    heads = classify_split_heads(stats)             # shares and a label: positional / semantic / mixed
    threshold_sweep(stats, classify=classify_split_heads)   # (analysis.heads) the labels for every dominant share

DSTG's heads are classed by its separate logit terms (``analysis.heads``); an entangled model (RoPE-, AP-, RP-NeoBERT,
an HF encoder) has one q.k.  Here every model's q.k is split as Song & Zhong split the states
(``analysis.decomposition``): over C contexts (windows) of T positions, each head's query at position t of window c
is q[c, t] = q_pos[t] + q_ctx[c, t], with q_pos[t] = mean_c q[c, t] (the per-position mean) and q_ctx the rest;
q_pos[t] = mu + p[t] holds the overall mean mu = mean_t q_pos[t], which varies with neither position nor context.
The same for the key.  Each product of the parts goes to the term of what it varies with, and the logit
q.k / sqrt(d_head) is the sum of four terms (``SPLIT_TERMS``):

    position        q_pos[t] . k_pos[s]                          positions alone, plus any additive position bias
                                                                 (RP's bucket bias)
    context         (mu_q + q_ctx[c, t]) . k_ctx[c, s] + q_ctx[c, t] . mu_k     contexts alone (the mean query
                                                                 reading the key's content is content attention)
    query_position  p_q[t] . k_ctx[c, s]     the query's position part picks the key's content
    key_position    q_ctx[c, t] . p_k[s]     the query's content picks the key's position

A head's queries and keys are an affine map of its input (the normed state the block reads), so the per-position
mean of q is the query of the per-position mean input: this is the split of the input pushed through the head.  A
rotary head's q and k are taken after their rotation (it depends on the position alone, so it commutes with the
mean).  DSTG's q is [q_sem | q_ap] (its logit is the sum of both streams' q.k); its RP bias, like RP-NeoBERT's, is a
position term.  The terms sum to the head's logit exactly (tests check it against the hooks and the HF patterns).

Shares, rule and sweep are DSTG's (``analysis.heads``): the terms' variances **within each query** (each term minus
its mean over the query's keys; softmax ignores the rest), pooled over queries and windows; ``share_t`` = var_t /
the summed variances (covariances apart, ``cov_share``); a head is named after the term that carries at least
``DOMINANT_SHARE`` of them and whose removal changes the pattern most (``heads.dominant_term``): position ->
"positional", context -> "semantic"; a cross term or no term -> "mixed".  ``threshold_sweep(stats,
classify=classify_split_heads)`` relabels the heads over the same range of shares.

[CLS] / [SEP] (``drop_ends``, default on) are left out of the queries and keys read, as ``decomposition`` drops
them: a constant token at a fixed position is position and context at once.  The per-position mean is estimated
from the C windows themselves, so it holds about 1/C of each window's context; the control
(``shuffle_positions=True``) takes the means over positions shuffled within each window instead -- the split a
label that carries no position gives, everything that moves with the true position (a position bias too) then
counted as context -- and a position share is read against it.  A block whose keys are not all
visible to a query (ModernBERT's sliding-window layers) is not read (``unread_blocks`` says why).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..encoders import Encoder, EncoderError
from ..encoders.queries_keys import query_key_families, query_key_family
from ..store.attention import AttentionAccumulator
from .heads import DOMINANT_SHARE, dominant_term, head_stats_from_store
from .rope_bands import hf_rope, rotary_of, rotate

SPLIT_TERMS = ("position", "context", "query_position", "key_position")
SPLIT_LABELS = {"position": "positional", "context": "semantic"}  # any other dominant term, or none: "mixed"
CLASSES = ("positional", "semantic", "mixed")
# a block's queries and keys, per stream: the hooks of ours (DSTG has two streams, the baselines one; HF encoders
# serve hook_q / hook_k through encoders.queries_keys)
STREAM_HOOKS = (("hook_q", "hook_k"), ("hook_q_sem", "hook_k_sem"), ("hook_q_ap", "hook_k_ap"))
QK_TERMS = ("sem", "ap", "content")  # logit terms of ours that are a q.k
POSITION_BIAS_TERMS = ("rp",)  # logit terms of ours that depend on the positions alone


def unread_blocks(encoder: Encoder, length: int) -> dict[int, str]:
    """{block: why its heads are not split} for windows of ``length`` tokens: blocks whose queries see only some
    keys (a sliding window shorter than the window).  One EncoderError for an HF encoder of a family whose queries
    and keys the adapter does not read."""
    if encoder.kind == "hf" and query_key_family(encoder.model) is None:
        raise EncoderError(f"{encoder.name}: splitting its heads needs each head's queries and keys, which the adapter "
                           f"reads for the Hugging Face families {query_key_families()} "
                           f"(dstg_interp/encoders/queries_keys.py), not {encoder.variant}")
    if not hf_rope(encoder):
        return {}
    why = {}
    for block in range(encoder.n_layers):
        window = rotary_of(encoder, block, positions=length).window
        if window is not None and window < length - 1:
            why[block] = (f"block {block} attends within {window} positions (a sliding window): its logit over the "
                          f"{length}-token window is not its q.k")
    return why


def _bias_terms(encoder: Encoder) -> list[str]:
    """The hooks of the additive position-bias terms of a model of ours ([] for an HF encoder); EncoderError for a
    logit term that is neither a q.k nor a position bias."""
    if encoder.kind == "hf":
        return []
    terms = encoder.logit_terms
    unknown = [t for t in terms if t not in QK_TERMS + POSITION_BIAS_TERMS]
    if unknown:
        raise EncoderError(f"{encoder.name}: the logit term(s) {unknown} are neither a q.k nor a position bias: the "
                           "position / context split does not read them")
    return [terms[t] for t in terms if t in POSITION_BIAS_TERMS]


def read_queries_keys(encoder: Encoder, tokens: torch.Tensor, mask: torch.Tensor, blocks) -> dict:
    """{block: (q, k, bias, scale)}: the queries and keys of each head as they meet, [B, H, T, d] float64 (a rotary
    head's rotated; DSTG's [sem | ap]), the additive position bias [B, H, T, T] (None without one) and the logit
    scale, so that logit = q @ k^T * scale + bias."""
    if encoder.kind == "hf":
        pairs = [("hook_q", "hook_k")]
    else:
        pairs = [pair for pair in STREAM_HOOKS if f"blocks.0.attn.{pair[0]}" in encoder.model.hook_dict]
    biases = _bias_terms(encoder)
    names = [f"blocks.{b}.attn.{hook}" for b in blocks for pair in pairs for hook in pair]
    names += [f"blocks.{b}.attn.{hook}" for b in blocks for hook in biases]
    with torch.no_grad():
        captured = encoder.capture(tokens.to(encoder.device), mask.to(encoder.device), names)
    rotary = hf_rope(encoder) or (encoder.kind != "hf" and encoder.variant == "rope")
    read = {}
    for b in blocks:
        parts = [[captured[f"blocks.{b}.attn.{hook}"].transpose(1, 2).double() for hook in pair] for pair in pairs]
        q, k = (torch.cat([part[i] for part in parts], dim=-1) for i in (0, 1))  # [B, H, T, d]
        if rotary:
            rotation = rotary_of(encoder, b, positions=tokens.shape[1])
            q, k = rotate(q, rotation), rotate(k, rotation)
        bias = sum((captured[f"blocks.{b}.attn.{hook}"].double() for hook in biases), torch.zeros(()).double())
        read[b] = (q, k, bias if biases else None, float(parts[0][0].shape[-1]) ** -0.5)
    return read


def split_terms(q: torch.Tensor, k: torch.Tensor, q_position: torch.Tensor, k_position: torch.Tensor, scale: float,
                bias: torch.Tensor | None = None, bias_term: str = "position") -> dict[str, torch.Tensor]:
    """The four ``SPLIT_TERMS`` [B, H, T, T] of q @ k^T * scale (+ ``bias``, added to ``bias_term``) given the
    position parts ``q_position``, ``k_position`` (the per-position means, broadcastable to q, k [B, H, T, d]; their
    mean over positions is the overall mean): the context parts are the rest, and each product of the parts goes to
    the term of what it varies with (module docstring)."""
    q_mean, k_mean = q_position.mean(dim=-2, keepdim=True), k_position.mean(dim=-2, keepdim=True)
    q_context, k_context = q - q_position, k - k_position

    def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.transpose(-1, -2) * scale

    terms = {"position": dot(q_position, k_position),  # (mean + position) . (mean + position)
             "context": dot(q_mean + q_context, k_context) + dot(q_context, k_mean),
             "query_position": dot(q_position - q_mean, k_context),
             "key_position": dot(q_context, k_position - k_mean)}
    if bias is not None:
        terms[bias_term] = terms[bias_term] + bias
    full = terms["context"]  # [B, H, T, T]: q's and k's own rows
    return {name: term.expand_as(full) for name, term in terms.items()}


def head_split_stats(encoder: Encoder, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     model_name: str | None = None, batch_size: int = 16, drop_ends: bool = True,
                     shuffle_positions: bool = False, seed: int = 0) -> pd.DataFrame:
    """Head statistics of the split (module docstring), one row per (layer, head) of the blocks read: var_*, cov_*
    and js_without_* of ``SPLIT_TERMS``, positional_score and n_pairs, as ``heads.head_stats_from_store`` gives
    them; the terms' variances within each query.  ``tokens`` [C, T]: C windows of T tokens, no padding (the
    per-position mean needs every window at every position).  Two passes: the per-position means of q and k, then
    the terms, ``batch_size`` windows at a time.  ``shuffle_positions``: the control, the means taken over
    positions shuffled within each window (``seed``), a position bias counted as context."""
    tokens = tokens[None] if tokens.dim() == 1 else tokens
    if attention_mask is not None and not bool(attention_mask.to(torch.bool).all()):
        raise EncoderError("the position / context split of the heads needs a full grid: windows of one length, "
                           "no padding")
    first = 1 if drop_ends else 0
    n_windows, n_positions = tokens.shape[0], tokens.shape[1] - 2 * first
    if n_windows < 2 or n_positions < 3:
        raise EncoderError(f"the head split needs 2 windows or more of at least {3 + 2 * first} tokens, got "
                           f"{list(tokens.shape)}")
    blocks = [b for b in range(encoder.n_layers) if b not in unread_blocks(encoder, tokens.shape[1])]
    mask = torch.ones_like(tokens, dtype=torch.bool)
    generator = np.random.default_rng(seed)
    labels = torch.as_tensor(np.stack([generator.permutation(n_positions) if shuffle_positions
                                       else np.arange(n_positions) for _ in range(n_windows)]))  # [C, T']
    inner = slice(first, first + n_positions)

    def chunks():
        for start in range(0, n_windows, batch_size):
            read = read_queries_keys(encoder, tokens[start:start + batch_size], mask[start:start + batch_size], blocks)
            yield start, {b: (q[:, :, inner], k[:, :, inner], None if bias is None else bias[:, :, inner, inner], scale)
                          for b, (q, k, bias, scale) in read.items()}

    sums: dict = {}
    for start, read in chunks():  # pass 1: the sums of q and k at each position label
        for b, (q, k, _, _) in read.items():
            q_sum, k_sum = sums.setdefault(b, (torch.zeros_like(q[0]), torch.zeros_like(k[0])))  # [H, T', d]
            for row in range(q.shape[0]):
                q_sum.index_add_(1, labels[start + row], q[row])
                k_sum.index_add_(1, labels[start + row], k[row])
    means = {b: (q_sum / n_windows, k_sum / n_windows) for b, (q_sum, k_sum) in sums.items()}
    accumulator = AttentionAccumulator(encoder.n_layers, encoder.n_heads, list(SPLIT_TERMS), max_offset=n_positions - 1,
                                       max_positions=n_positions, variance_over="query")
    for start, read in chunks():  # pass 2: each window's terms, folded into the head statistics
        rows = labels[start:start + batch_size]
        for b, (q, k, bias, scale) in read.items():
            q_mean, k_mean = means[b]
            terms = split_terms(q, k, q_mean[:, rows].transpose(0, 1), k_mean[:, rows].transpose(0, 1), scale, bias,
                                "context" if shuffle_positions else "position")
            accumulator.update(b, [terms[t] for t in SPLIT_TERMS], None, [n_positions] * q.shape[0])
    stats = head_stats_from_store(accumulator.summaries(), model_name=model_name or encoder.name)
    stats = stats[stats.layer.isin(blocks)].reset_index(drop=True)
    return stats.assign(n_windows=n_windows, shuffled_positions=shuffle_positions)


def classify_split_heads(stats: pd.DataFrame, dominant_share: float = DOMINANT_SHARE) -> pd.DataFrame:
    """Shares and a label for each head of ``head_split_stats`` (module docstring): share_{term}, share_cross (the
    two cross terms), cov_share, dominant_term and label (positional / semantic / mixed)."""
    missing = {f"var_{t}" for t in SPLIT_TERMS} - set(stats.columns)
    if missing:
        raise ValueError(f"head-split statistics lack the column(s) {sorted(missing)}")
    if not 0.0 < dominant_share <= 1.0:
        raise ValueError(f"dominant_share must be in (0, 1], got {dominant_share}")
    rows = []
    for row in stats.to_dict(orient="records"):
        variances = {t: float(row[f"var_{t}"]) for t in SPLIT_TERMS}
        summed = sum(variances.values())
        covariance = sum(float(row.get(f"cov_{a}_{b}", 0.0)) for i, a in enumerate(SPLIT_TERMS)
                         for b in SPLIT_TERMS[i + 1:])
        out = dict(row)
        for t in SPLIT_TERMS:
            out[f"share_{t}"] = variances[t] / summed if summed > 0 else np.nan
        out["share_cross"] = out["share_query_position"] + out["share_key_position"]
        out["cov_share"] = 2.0 * covariance / summed if summed > 0 else np.nan
        dominant = dominant_term(list(SPLIT_TERMS), out, dominant_share)
        out["dominant_term"] = dominant
        out["label"] = SPLIT_LABELS.get(dominant or "", "mixed")
        rows.append(out)
    return pd.DataFrame(rows)


def layer_class_shares(heads: pd.DataFrame, by=("layer",)) -> pd.DataFrame:
    """Per block (and ``by``'s other columns): n_heads, the share of its heads in each class (``heads_positional``,
    ``heads_semantic``, ``heads_mixed``) and the mean over its heads of the position, context and cross shares
    (``head_share_position``, ``head_share_context``, ``head_share_cross``)."""
    by = [column for column in by if column in heads]
    grouped = heads.groupby(by, sort=True)
    table = grouped.size().rename("n_heads").to_frame()
    for label in CLASSES:
        table[f"heads_{label}"] = grouped.label.apply(lambda labels, label=label: float((labels == label).mean()))
    for share in ("position", "context", "cross"):
        table[f"head_share_{share}"] = grouped[f"share_{share}"].mean()
    return table.reset_index()


# DSTG's term classes in the split's vocabulary: its AP (structure) and RP heads are position heads
TERM_CLASSES = {"structure": "positional", "RP": "positional", "semantic": "semantic", "mixed": "mixed"}


def term_agreement(split: pd.DataFrame, terms: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The split beside DSTG's own logit terms, head by head: ``split`` from ``classify_split_heads``, ``terms``
    from ``heads.classify_heads`` of the same model on the same windows (``variance_over="query"``).  Returns the
    merged heads (share_position beside share_ap + share_rp, the class each rule gives) and a summary: Pearson r of
    the split's position share with the AP + RP share (and of its context share with the semantic share), and the
    share of heads whose class agrees."""
    keys = [c for c in ("model", "seed", "member", "layer", "head") if c in split and c in terms]
    merged = split[keys + ["share_position", "share_context", "share_cross", "label"]].merge(
        terms[keys + ["share_sem", "share_ap", "share_rp", "label"]], on=keys, suffixes=("", "_terms"))
    merged["share_position_terms"] = merged.share_ap + merged.share_rp.fillna(0.0)
    merged["class_terms"] = merged.label_terms.map(TERM_CLASSES)
    agree = merged.label == merged.class_terms

    def pearson(a: pd.Series, b: pd.Series) -> float:
        return float(np.corrcoef(a, b)[0, 1]) if len(a) > 1 and a.std() > 0 and b.std() > 0 else float("nan")

    summary = {"n_heads": int(len(merged)),
               "r_position": pearson(merged.share_position, merged.share_position_terms),
               "r_context": pearson(merged.share_context, merged.share_sem),
               "class_agreement": float(agree.mean()) if len(merged) else float("nan"),
               "confusion": {f"{a} -> {b}": int(n) for (a, b), n in
                             merged.groupby(["class_terms", "label"]).size().items()}}
    return merged, summary
