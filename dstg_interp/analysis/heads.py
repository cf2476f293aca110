"""Attention-head classification: which logit term drives each head (structure / semantic / RP / mixed).

    from dstg_interp.analysis.heads import head_summaries_from_cache, classify_heads
    stats = head_summaries_from_cache(model, tokens, attention_mask)   # one row per (layer, head)
    heads = classify_heads(stats)                                      # + shares, scores and a label
    heads.groupby(["model", "label"]).size()

Inputs ("head statistics", one row per model x layer x head) -- small and explicit, so they can come from
this module's ``head_summaries_from_cache`` (a batch, no store) or from an activation store's attention
summaries (``head_stats_from_store``):

    var_{t}           variance of logit term t (DSTG: sem, ap, rp; baselines: content, and rp for RP-NeoBERT)
    cov_{a}_{b}       covariance of terms a and b (pairs in TERMS order)
    js_without_{t}    mean Jensen-Shannon divergence (bits, in [0, 1]) between the head's pattern and the
                      pattern with term t dropped from the softmax input, over valid queries
    positional_score  R^2 of the attention weights on relative offset alone (see below)
    n_pairs           valid (query, key) pairs the statistics pool
    variance_over     "query" or "pair" (below)

``head_summaries_from_cache`` takes variances **within each query** by default (``variance_over="query"``:
the term minus its mean over the query's valid keys, pooled over all valid pairs): softmax ignores
anything constant along a query's keys, so e.g. the part of the AP term that only moves with the query
is not counted as attention-shaping.  The activation store's summaries are over all valid pairs
(``variance_over="pair"``, also available here so both paths can be compared).

Shares.  ``share_t = var_t / sum_u var_u``: each term's share of the summed term variances, so shares sum
to 1 whatever the covariances.  Covariances are reported, not split among terms: ``cov_share =
2 sum_{a<b} cov_ab / sum_u var_u = var(total) / sum var - 1``; positive when terms reinforce each other,
negative when they cancel.

Rule (DSTG and any model with more than one term):
    a head is labelled after term t  (sem -> "semantic", ap -> "structure", rp -> "RP")
    when share_t >= DOMINANT_SHARE  and  removing t changes the pattern most (js_without_t is the largest);
    otherwise "mixed".
Both conditions: the variance share says the term is large, the JS says the softmax actually listens to it.

Entangled baselines (RoPE/AP: one content term; RP: content + rp).  Their content term mixes position and
meaning, so a pattern-level score decides instead: ``positional_score`` is the correlation ratio eta^2 of
attention weights on relative offset (key - query) over valid pairs, i.e. the R^2 of predicting each
weight by the head's mean weight at that offset; ``content_score = 1 - positional_score``.
    an RP-NeoBERT head whose rp term dominates by the rule above   -> "RP"
    positional_score >= POSITIONAL_SCORE_MIN                          -> "positional"
    positional_score <  CONTENT_SCORE_MAX_POSITIONAL                  -> "content"
    otherwise                                                          -> "mixed"
DSTG heads get a positional_score too (same axis for every model) but are labelled by the term rule.

Head classes (``head_class``, what the head map colours): the label, with a DSTG structure head split by its
``structure_kind`` into "structure-relative" (positional_score >= POSITIONAL_SCORE_MIN: the offset j - i alone
explains its pattern, a locality head) and "structure-absolute" (it attends to absolute positions).  On every
model's heads, ``offset_driven`` marks the heads whose pattern the offset explains (positional_score >=
POSITIONAL_SCORE_MIN): the one class defined the same way for DSTG and the entangled baselines, so the one whose
share can be compared across models.

Comparing a class's share between two models: ``layer_permutation_test``.  Heads of one layer read the same
input and are not independent draws, so a head-level test overstates the evidence; the unit exchanged is a
(training seed, layer) cluster: each permutation swaps whole layers between the two models, layer l of one
with layer l of the other at the same seed, and the statistic is the difference of the class shares.

One cut is not a finding: ``threshold_sweep`` relabels the heads for a range of dominant shares
(``classify_heads(stats, dominant_share=...)``) and counts each label per model and training seed, so a
verdict such as "no RP heads" can be read together with the threshold it needs.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import torch

from ..encoders import open_encoder
from ..store.attention import AttentionAccumulator

DSTG_TERMS = ("sem", "ap", "rp")
BASELINE_TERMS = ("content", "rp")
ALL_TERMS = ("sem", "ap", "content", "rp")
TERM_LABELS = {"sem": "semantic", "ap": "structure", "rp": "RP", "content": "content"}
LABELS = ("structure", "semantic", "RP", "mixed", "positional", "content")
HEAD_CLASSES = ("structure-relative", "structure-absolute", "structure", "semantic", "RP", "mixed", "positional",
                "content")  # "structure": a structure head without a positional score to split it

DOMINANT_SHARE = 0.6  # a term must carry at least this share of the summed term variances
POSITIONAL_SCORE_MIN = 0.5  # baselines: offset alone explains at least half of the pattern variance
CONTENT_SCORE_MAX_POSITIONAL = 0.2  # baselines: offset explains less than this -> content head

# --- statistics from a batch (no store) ------------------------------------------------------------
def head_summaries_from_cache(
    model, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None, model_name: str | None = None,
    batch_size: int = 16, variance_over: str = "query", drop_ends: bool = False,
) -> pd.DataFrame:
    """Head statistics (see module docstring) of ``model`` on a batch, from the logit-term hooks.

    Args:
        model: a zoo encoder (DSTG or a baseline), or anything ``open_encoder`` takes that has logit terms.
        tokens: [batch, pos] token ids, right-padded.  attention_mask: [batch, pos] (None = all real).
        model_name: value of the ``model`` column (default: the encoder's name).
        batch_size: sequences per forward pass (the [B, H, T, T] term tensors are the memory cost; each
            block's are folded into the statistics and dropped before the next block runs).
        variance_over: "query" (within-query, what softmax sees) or "pair" (over all valid pairs, as the store).
        drop_ends: leave the first and last position ([CLS] / [SEP]) out of the queries and keys the statistics
            read, as ``head_split`` does (full rows only: no padding).
    Returns:
        one row per (layer, head): model, layer, head, var_*, cov_*, js_without_*, positional_score, n_pairs.
    """
    if variance_over not in ("query", "pair"):
        raise ValueError(f"variance_over must be 'query' or 'pair', got {variance_over!r}")
    encoder = open_encoder(model)
    if encoder.kind != "dstg-interp":
        raise ValueError(f"{encoder.name}: head statistics need the separate logit terms of a dstg-interp model; "
                         "an HF encoder exposes only its attention patterns")
    terms = tuple(encoder.logit_terms)
    if tokens.dim() == 1:
        tokens = tokens[None]
    if attention_mask is None:
        attention_mask = torch.ones_like(tokens, dtype=torch.bool)
    attention_mask = attention_mask.to(torch.bool)
    lengths = attention_mask.sum(1)
    if not torch.equal(attention_mask, torch.arange(tokens.shape[1])[None, :] < lengths[:, None]):
        raise ValueError("head statistics need right-padded sequences: each attention_mask row is True, then False")
    if drop_ends and (not bool(attention_mask.all()) or tokens.shape[1] < 3):
        raise ValueError("drop_ends needs full rows of 3 tokens or more (no padding): the ends are the first and "
                         "last position of every row")
    ends = slice(1, -1) if drop_ends else slice(None)
    # the store's accumulator, with every offset its own bin (none clipped) and the pattern from the terms
    accumulator = AttentionAccumulator(encoder.n_layers, encoder.n_heads, list(terms), max_offset=tokens.shape[1] - 1,
                                       max_positions=tokens.shape[1], variance_over=variance_over)
    was_training = encoder.model.training
    encoder.model.eval()
    try:
        for start in range(0, tokens.shape[0], batch_size):
            batch_mask = attention_mask[start : start + batch_size]
            batch_lengths = [n - 2 if drop_ends else n for n in lengths[start : start + batch_size].tolist()]

            def fold(layer, term_logits, pattern, batch_lengths=batch_lengths):  # term_logits: {term: [B, H, T, T]}
                accumulator.update(layer, [term_logits[t][:, :, ends, ends] for t in terms], None, batch_lengths)

            encoder.attention(tokens[start : start + batch_size], batch_mask, on_layer=fold)
    finally:
        encoder.model.train(was_training)
    return head_stats_from_store(accumulator.summaries(), model_name=model_name or encoder.name)


def _term_pairs(terms, diagonal: bool):
    pairs = [(t, t) for t in terms] if diagonal else []
    return pairs + list(combinations(terms, 2))


# --- statistics from an activation store -----------------------------------------------------------
def head_stats_from_store(store, model_name: str = "model") -> pd.DataFrame:
    """Head statistics from an activation store's attention summaries (``dstg_interp.store.attention``).

    Args:
        store: an ``ActivationStore`` (its ``.attention``) or an ``AttentionSummaries`` itself.
        model_name: value of the ``model`` column.
    The store's variances are over all valid pairs (``variance_over="pair"``); JS is in bits, as
    everywhere (``store.attention.jensen_shannon``).  ``positional_score`` needs the mean squared attention weight per head
    (array ``weight_sq_mean`` [layers, heads]); without it the score is NaN and baselines are labelled
    "mixed" unless their rp term dominates.
    """
    try:
        summaries = getattr(store, "attention", store)
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"the activation store has no readable attention summaries ({err}); re-extract with them") from None
    arrays = getattr(summaries, "arrays", None) if summaries is not None else None
    if not isinstance(arrays, dict) or not {"cov", "js_removal", "pairs"} <= set(arrays):
        raise ValueError(
            "the activation store has no attention summaries (cov, js_removal, pairs); re-extract with them, "
            "or use heads.head_summaries_from_cache(model, tokens, attention_mask) on a batch"
        )
    terms = list(summaries.terms)
    cov = np.asarray(arrays["cov"])  # [layers, heads, terms, terms]
    js_bits = np.asarray(arrays["js_removal"])  # [layers, heads, terms]
    n_layers, n_heads = cov.shape[:2]
    layer, head = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    rows = {"model": model_name, "layer": layer.ravel(), "head": head.ravel()}
    for i, a in enumerate(terms):
        rows[f"var_{a}"] = cov[:, :, i, i].ravel()
        rows[f"js_without_{a}"] = js_bits[:, :, i].ravel()
        for j in range(i + 1, len(terms)):
            rows[f"cov_{a}_{terms[j]}"] = cov[:, :, i, j].ravel()
    rows["positional_score"] = _eta_squared_from_store(arrays, n_layers, n_heads).ravel()
    rows["n_pairs"] = np.repeat(np.asarray(arrays["pairs"]).astype(np.int64), n_heads)
    rows["variance_over"] = getattr(summaries, "variance_over", "pair")
    return pd.DataFrame(rows)


def _eta_squared_from_store(arrays: dict, n_layers: int, n_heads: int) -> np.ndarray:
    """eta^2 of weights on (clipped) offset from per-offset means and the mean squared weight; NaN if absent."""
    if "weight_sq_mean" not in arrays or "offset_mean_weight" not in arrays or "offset_pairs" not in arrays:
        return np.full((n_layers, n_heads), np.nan)
    counts = np.asarray(arrays["offset_pairs"], dtype=np.float64)[:, None, :]  # [L, 1, bins]
    means = np.asarray(arrays["offset_mean_weight"], dtype=np.float64)  # [L, H, bins]
    n = counts.sum(-1)  # [L, 1]
    grand_mean = (counts * means).sum(-1) / np.maximum(n, 1)  # [L, H]
    between = (counts * means**2).sum(-1) / np.maximum(n, 1) - grand_mean**2
    total = np.asarray(arrays["weight_sq_mean"], dtype=np.float64) - grand_mean**2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 1e-12, np.clip(between / total, 0.0, 1.0), 0.0)


# --- the rule --------------------------------------------------------------------------------------
def classify_heads(stats: pd.DataFrame, dominant_share: float = DOMINANT_SHARE) -> pd.DataFrame:
    """Add shares, scores and a label to head statistics (the rule is in the module docstring; a term must
    carry ``dominant_share`` of the summed term variances to name a head).

    Returns one row per head: model, layer, head, share_{sem,ap,rp,content}, cov_share, js_without_*,
    positional_score, content_score, dominant_term, label (NaN where a term does not exist in the model).
    """
    missing = {"model", "layer", "head"} - set(stats.columns)
    if missing:
        raise ValueError(f"head statistics lack the column(s) {sorted(missing)}")
    if not 0.0 < dominant_share <= 1.0:
        raise ValueError(f"dominant_share must be in (0, 1], got {dominant_share}")
    rows = [_classify_row(row, dominant_share) for row in stats.to_dict(orient="records")]
    result = pd.DataFrame(rows)
    result["head_class"] = [f"structure-{row['structure_kind']}" if _present(row.get("structure_kind")) else row["label"]
                            for row in rows]
    result["offset_driven"] = result.positional_score.ge(POSITIONAL_SCORE_MIN) & result.positional_score.notna()
    leading = ["model", "layer", "head", *[f"share_{t}" for t in ALL_TERMS], "cov_share",
               *[f"js_without_{t}" for t in ALL_TERMS], "positional_score", "content_score", "dominant_term", "label",
               "head_class", "offset_driven"]
    rest = [c for c in result.columns if c not in leading]
    return result[[c for c in leading if c in result.columns] + rest]


def _classify_row(row: dict, dominant_share: float = DOMINANT_SHARE) -> dict:
    terms = [t for t in ALL_TERMS if _present(row.get(f"var_{t}"))]
    if not terms:
        raise ValueError(f"head (model={row['model']}, layer={row['layer']}, head={row['head']}) has no var_* column")
    variances = {t: float(row[f"var_{t}"]) for t in terms}
    summed = sum(variances.values())
    covariance = sum(float(row.get(f"cov_{a}_{b}", 0.0) or 0.0) for a, b in _term_pairs(terms, diagonal=False)
                     if _present(row.get(f"cov_{a}_{b}")))
    out = dict(row)
    for derived in ("structure_kind", "head_class", "offset_driven"):  # a relabelled heads.csv: computed again
        out.pop(derived, None)
    out["structure_kind"] = np.nan  # relative / absolute for a structure head, below
    for t in ALL_TERMS:
        out[f"share_{t}"] = variances[t] / summed if t in variances and summed > 0 else np.nan
        out.setdefault(f"js_without_{t}", np.nan)
    out["cov_share"] = 2.0 * covariance / summed if summed > 0 else np.nan
    positional = row.get("positional_score", np.nan)
    out["positional_score"] = positional
    out["content_score"] = 1.0 - positional if _present(positional) else np.nan

    dominant = dominant_term(terms, out, dominant_share)
    out["dominant_term"] = dominant
    is_dstg = "sem" in terms or "ap" in terms
    if is_dstg:
        out["label"] = TERM_LABELS[dominant] if dominant else "mixed"
        # a structure head's kind: does the offset j - i alone explain its pattern (locality, the job the paper
        # gives the RP bias), or does it attend to absolute positions?
        if out["label"] == "structure" and _present(positional):
            out["structure_kind"] = "relative" if positional >= POSITIONAL_SCORE_MIN else "absolute"
    elif dominant == "rp":
        out["label"] = "RP"
    elif not _present(positional):
        out["label"] = "mixed"
    elif positional >= POSITIONAL_SCORE_MIN:
        out["label"] = "positional"
    elif positional < CONTENT_SCORE_MAX_POSITIONAL:
        out["label"] = "content"
    else:
        out["label"] = "mixed"
    return out


def dominant_term(terms: list[str], row: dict, dominant_share: float = DOMINANT_SHARE) -> str | None:
    """The term with share >= dominant_share whose removal also changes the pattern most, else None (``row``:
    ``share_{t}`` and ``js_without_{t}`` of each term t; ``analysis.head_split`` applies it to its own terms)."""
    shares = {t: row[f"share_{t}"] for t in terms if _present(row[f"share_{t}"])}
    if not shares:
        return None
    best = max(shares, key=shares.get)
    if shares[best] < dominant_share:
        return None
    effects = {t: row.get(f"js_without_{t}") for t in terms if _present(row.get(f"js_without_{t}"))}
    if effects and effects.get(best, -np.inf) < max(effects.values()):
        return None
    return best


def layer_permutation_test(heads: pd.DataFrame, model_a: str, model_b: str, column: str = "offset_driven",
                           n_permutations: int = 10_000, seed: int = 0) -> dict:
    """Do two models differ in the share of their heads in a class (``column``: a boolean column of ``heads``,
    e.g. ``offset_driven``)?  A two-sided permutation test whose unit is a (training seed, layer) cluster: a
    permutation swaps whole layers between the models, layer l of ``model_a`` with layer l of ``model_b`` at the
    same seed, so heads that share a layer's input stay together (they are not independent draws).  Exact when
    the 2^clusters swaps number at most ``n_permutations``, else ``n_permutations`` seeded random swaps.

    Returns share_a, share_b, difference (a - b), p_value (two-sided; a sampled test counts the observed
    split too, so p >= 1 / (n + 1)), n_clusters, n_permutations, exact, and the smallest p the design allows."""
    for name in ("model", "layer", column):
        if name not in heads.columns:
            raise ValueError(f"the head table lacks the column {name!r} (classify_heads adds offset_driven)")
    if n_permutations < 1 or n_permutations > 10_000_000:
        raise ValueError(f"n_permutations must be 1 to 10,000,000, got {n_permutations}")
    table = heads if "seed" in heads.columns else heads.assign(seed=0)
    counts = {}
    for model in (model_a, model_b):
        rows = table[table.model == model]
        if rows.empty:
            raise ValueError(f"no heads of model {model!r} in the table (models: {sorted(table.model.unique())})")
        flags = rows[column].astype(bool)
        counts[model] = flags.groupby([rows.seed, rows.layer]).agg(["sum", "size"])
    clusters = counts[model_a].index.intersection(counts[model_b].index)
    if len(clusters) == 0:
        raise ValueError(f"{model_a} and {model_b} share no (seed, layer): a layer-matched swap needs the same "
                         "seeds and layers")
    k = np.stack([counts[m].loc[clusters, "sum"].to_numpy(float) for m in (model_a, model_b)])  # [2, C]
    n = np.stack([counts[m].loc[clusters, "size"].to_numpy(float) for m in (model_a, model_b)])
    n_clusters = len(clusters)
    exact = 2 ** n_clusters <= n_permutations
    if exact:
        swaps = (np.arange(2 ** n_clusters)[:, None] >> np.arange(n_clusters)) & 1
    else:
        swaps = np.random.default_rng(seed).integers(0, 2, (n_permutations, n_clusters))
    swaps = swaps.astype(float)

    def differences(z: np.ndarray) -> np.ndarray:  # z: [N, C], 1 = the cluster's layers swapped
        share_a = ((1 - z) * k[0] + z * k[1]).sum(1) / ((1 - z) * n[0] + z * n[1]).sum(1)
        share_b = ((1 - z) * k[1] + z * k[0]).sum(1) / ((1 - z) * n[1] + z * n[0]).sum(1)
        return share_a - share_b

    observed = float(differences(np.zeros((1, n_clusters)))[0])
    extreme = np.abs(differences(swaps)) >= abs(observed) - 1e-12
    p_value = float(extreme.mean()) if exact else float((extreme.sum() + 1) / (len(swaps) + 1))
    return {"model_a": model_a, "model_b": model_b, "class": column,
            "share_a": float(k[0].sum() / n[0].sum()), "share_b": float(k[1].sum() / n[1].sum()),
            "difference": observed, "p_value": p_value, "n_clusters": n_clusters,
            "n_permutations": int(len(swaps)), "exact": bool(exact),
            "smallest_p": float(2 / 2 ** n_clusters if exact else 1 / (len(swaps) + 1))}


SWEEP_THRESHOLDS = tuple(np.round(np.arange(0.40, 0.901, 0.05), 2))


def threshold_sweep(stats: pd.DataFrame, thresholds=SWEEP_THRESHOLDS, by=("model", "seed"),
                    classify=None) -> pd.DataFrame:
    """Head counts per label for every dominant-share threshold: one row per (``by`` groups, threshold, label),
    with n_heads and the group's n_total.  ``stats``: head statistics or a ``classify_heads`` table (it keeps
    the var_* / js_* columns the rule reads); ``classify``: the rule (default ``classify_heads``;
    ``head_split.classify_split_heads`` for the position / context split of any encoder)."""
    by = [column for column in by if column in stats]
    classify = classify_heads if classify is None else classify
    tables = []
    for threshold in thresholds:
        labelled = classify(stats, dominant_share=float(threshold))
        counts = labelled.groupby(by + ["label"], sort=False).size().rename("n_heads").reset_index()
        counts["n_total"] = counts.groupby(by)["n_heads"].transform("sum")
        tables.append(counts.assign(threshold=float(threshold)))
    return pd.concat(tables, ignore_index=True)


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value))


def head_table(model, tokens, attention_mask=None, model_name: str | None = None) -> pd.DataFrame:
    """``classify_heads(head_summaries_from_cache(...))`` in one call."""
    return classify_heads(head_summaries_from_cache(model, tokens, attention_mask, model_name=model_name))


def ap_kernel_offsets(model, n_positions: int | None = None) -> pd.DataFrame:
    """Layer 0's AP logit kernel of a DSTG model, read from the weights alone: what each head's position term
    does before any content reaches the AP stream.

    At layer 0 the AP stream is the position table itself, so each head's AP logit is a fixed kernel
    ``L[i, j] = q_ap(norm T_i) . k_ap(norm T_j) / sqrt(d_head)`` over query position i and key position j
    (``n_positions``: the first rows of the table, default all).  One row per head:

    ``ap_logit_var``     the kernel's variance within each query (softmax ignores what is constant along a
                         query's keys), pooled over queries: which heads the AP term moves at all;
    ``offset_share``     the share of that variance explained by the offset j - i alone (eta^2 of the
                         within-query kernel on offset): 1 for a pure relative-offset (locality) head;
    ``key_share``        the same for the key's absolute position j: a head that attends to fixed positions;
    ``modal_offset``     the offset most often attended by the AP term alone (argmax of L over j, per query);
    ``modal_offset_frac`` the share of queries whose argmax is at that offset.

    The control for ``offset_share`` is a random table of the same shape through the same weights
    (``offset_share_random``, mean over 5 draws): what an offset reading is for a table with no structure."""
    if not model.config.spec.ap_stream:
        raise ValueError(f"ap_kernel_offsets needs a DSTG model (an AP stream), got variant {model.config.variant!r}")
    block = model.blocks[0]
    table = model.ap_table.detach().float()
    n = table.shape[0] if n_positions is None else int(n_positions)
    if not 2 <= n <= table.shape[0]:
        raise ValueError(f"n_positions must be 2..{table.shape[0]} (the table's rows), got {n}")

    def kernels(rows: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            normed = block.norm_attn_ap(rows[None])
            q, k, _ = block.attn._project(normed, block.attn.qkv_ap, block.attn.d_ap, "ap")
            return (q @ k.transpose(-1, -2) / np.sqrt(block.attn.d_head))[0].double().numpy()  # [H, n, n]

    queries, keys = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    offsets = (keys - queries).ravel() + n - 1

    def shares(kernel: np.ndarray) -> tuple[float, float, float]:
        centred = kernel - kernel.mean(axis=1, keepdims=True)  # within each query
        total = float((centred ** 2).sum())
        if total <= 0:
            return 0.0, float("nan"), float("nan")
        flat = centred.ravel()

        def eta2(groups: np.ndarray, n_groups: int) -> float:
            sums = np.bincount(groups, flat, n_groups)
            counts = np.bincount(groups, minlength=n_groups)
            explained = float((sums[counts > 0] ** 2 / counts[counts > 0]).sum())
            return explained / total

        return total / flat.size, eta2(offsets, 2 * n - 1), eta2(keys.ravel(), n)

    generator = torch.Generator().manual_seed(0)
    random_rows = [torch.randn(n, table.shape[1], generator=generator) * table[:n].std() for _ in range(5)]
    random_kernels = [kernels(rows) for rows in random_rows]
    rows = []
    for head, kernel in enumerate(kernels(table[:n])):
        variance, offset_share, key_share = shares(kernel)
        attended = kernel.argmax(axis=1) - np.arange(n)
        values, counts = np.unique(attended, return_counts=True)
        rows.append(dict(head=head, ap_logit_var=variance, offset_share=offset_share, key_share=key_share,
                         offset_share_random=float(np.mean([shares(k[head])[1] for k in random_kernels])),
                         modal_offset=int(values[counts.argmax()]), modal_offset_frac=float(counts.max() / n)))
    return pd.DataFrame(rows)
