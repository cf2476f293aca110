"""Head classification: hand-built tiny models whose heads are made AP-, semantic- or RP-driven by zeroing weights."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny_model
from hand_built_heads import N_HEADS, hand_built_dstg, qk_rows
from dstg_interp.analysis.heads import (
    DOMINANT_SHARE,
    classify_heads,
    head_stats_from_store,
    head_summaries_from_cache,
    head_table,
)

torch.set_num_threads(1)


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(5, 97, (4, 24), generator=generator)
    attention_mask = torch.ones_like(tokens, dtype=torch.bool)
    attention_mask[2, 15:] = False
    tokens[2, 15:] = 0
    return tokens, attention_mask


def test_zeroed_heads_get_the_right_labels(batch):
    tokens, attention_mask = batch
    heads = head_table(hand_built_dstg(), tokens, attention_mask, model_name="hand-built")
    layer0 = heads[heads.layer == 0].set_index("head")
    assert list(layer0.label.loc[[0, 1, 2]]) == ["structure", "semantic", "RP"]
    assert layer0.share_ap[0] == pytest.approx(1.0) and layer0.share_sem[0] == 0.0
    assert layer0.share_sem[1] == pytest.approx(1.0) and layer0.js_without_ap[1] == pytest.approx(0.0, abs=1e-9)
    assert layer0.share_rp[2] == pytest.approx(1.0) and layer0.js_without_rp[2] > 0.05
    # a removed term that was zero anyway leaves the pattern unchanged; the driving term changes it
    assert layer0.js_without_sem[0] == pytest.approx(0.0, abs=1e-9) and layer0.js_without_ap[0] > 0.05
    assert set(heads.model) == {"hand-built"} and len(heads) == 2 * N_HEADS
    for column in ("share_sem", "share_ap", "share_rp"):
        assert heads[column].between(0, 1).all()
    assert np.allclose(heads[["share_sem", "share_ap", "share_rp"]].sum(axis=1), 1.0)


def test_statistics_match_a_direct_computation(batch):
    """Within-query variance and JS of one head, recomputed by hand from the hooks."""
    tokens, attention_mask = batch
    model = hand_built_dstg()
    stats = head_summaries_from_cache(model, tokens, attention_mask, batch_size=3)  # two forward passes
    _, cache = model.run_with_cache(tokens, attention_mask=attention_mask)
    layer, head = 1, 3
    terms = {t: cache[f"blocks.{layer}.attn.hook_logits_{t}"][:, head].double() for t in ("sem", "ap", "rp")}
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][:, head].double()
    squares, pairs, js, queries = 0.0, 0, 0.0, 0
    for b in range(tokens.shape[0]):
        n = int(attention_mask[b].sum())
        ap = terms["ap"][b, :n, :n]
        squares += float(((ap - ap.mean(-1, keepdim=True)) ** 2).sum())
        pairs += n * n
        p = pattern[b, :n, :n]
        q = (terms["sem"][b, :n, :n] + terms["rp"][b, :n, :n]).softmax(-1)  # AP term removed
        m = (p + q) / 2
        js += float((0.5 * (p * (p / m).log2()).sum(-1) + 0.5 * (q * (q / m).log2()).sum(-1)).sum())
        queries += n
    row = stats[(stats.layer == layer) & (stats["head"] == head)].iloc[0]
    assert row.n_pairs == pairs
    assert row.var_ap == pytest.approx(squares / pairs, rel=1e-5)
    assert row.js_without_ap == pytest.approx(js / queries, rel=1e-4)


def test_rule_on_a_hand_written_table():
    base = {"model": "m", "layer": 0, "cov_sem_ap": 0.0, "cov_sem_rp": 0.0, "cov_ap_rp": 0.0, "positional_score": 0.3}
    rows = [
        # shares 0.7 / 0.2 / 0.1 and AP removal hurts most -> structure
        dict(base, head=0, var_sem=0.2, var_ap=0.7, var_rp=0.1, js_without_sem=0.01, js_without_ap=0.2, js_without_rp=0.0),
        # no term reaches DOMINANT_SHARE -> mixed
        dict(base, head=1, var_sem=0.45, var_ap=0.45, var_rp=0.1, js_without_sem=0.1, js_without_ap=0.1, js_without_rp=0.0),
        # AP is large but the pattern follows the semantic term (JS disagrees) -> mixed
        dict(base, head=2, var_sem=0.3, var_ap=0.7, var_rp=0.0, js_without_sem=0.3, js_without_ap=0.1, js_without_rp=0.0),
        # covariances: reported as a share, not split between terms
        dict(base, head=3, var_sem=0.9, var_ap=0.1, var_rp=0.0, cov_sem_ap=-0.05,
             js_without_sem=0.4, js_without_ap=0.01, js_without_rp=0.0),
    ]
    heads = classify_heads(pd.DataFrame(rows)).set_index("head")
    assert list(heads.label) == ["structure", "mixed", "mixed", "semantic"]
    assert heads.cov_share[3] == pytest.approx(-0.1)
    assert heads.share_ap[0] == pytest.approx(0.7) and DOMINANT_SHARE <= 0.7
    assert heads.content_score[0] == pytest.approx(0.7)


def test_baseline_positional_score_separates_offset_heads_from_content_heads(batch):
    """RP-NeoBERT layer 0: head 0 attends to the previous token (bias only, no q/k); head 1 by content only."""
    tokens, attention_mask = batch
    model = tiny_model("rp")
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        attn = model.blocks[0].attn
        attn.qkv.weight.copy_(torch.randn(attn.qkv.weight.shape, generator=generator) * 0.6)
        attn.qkv.weight[qk_rows(0)] = 0.0
        attn.rel_bias.bias[1, 0] = 8.0  # bucket 1 = offset -1: a previous-token head
    heads = head_table(model, tokens, attention_mask).query("layer == 0").set_index("head")
    assert heads.label[0] == "RP" and heads.positional_score[0] > 0.8
    assert heads.label[1] == "content" and heads.positional_score[1] < 0.2
    assert math.isnan(heads.share_sem[1]) and heads.share_content[1] == pytest.approx(1.0)


@pytest.mark.parametrize("variant", ["rope", "ap"])
def test_single_term_baselines_are_labelled_by_positional_score(variant, batch):
    tokens, attention_mask = batch
    heads = head_table(tiny_model(variant), tokens, attention_mask)
    assert set(heads.label) <= {"positional", "content", "mixed"}
    assert heads.positional_score.between(0, 1).all()
    assert (heads.content_score + heads.positional_score).round(9).eq(1.0).all()


def test_store_adapter_agrees_with_the_cache_path(batch):
    """The store's attention summaries (pair-level variance) give the same head statistics as a batch: one accumulator."""
    from dstg_interp.store import attention
    tokens, attention_mask = batch
    model = hand_built_dstg()
    terms = attention.logit_terms("dstg")
    accumulator = attention.AttentionAccumulator(2, N_HEADS, list(terms), max_offset=8, max_positions=24)
    _, cache = model.run_with_cache(tokens, attention_mask=attention_mask)
    lengths = attention_mask.sum(1).tolist()
    for layer in range(2):
        accumulator.update(layer, [cache[f"blocks.{layer}.attn.{hook}"] for hook in terms.values()],
                           cache[f"blocks.{layer}.attn.hook_pattern"], lengths)
    summaries = attention.AttentionSummaries(terms=list(terms), arrays=accumulator.arrays())
    from_store = head_stats_from_store(summaries, model_name="hand-built")
    from_cache = head_summaries_from_cache(model, tokens, attention_mask, variance_over="pair")
    columns = ["var_sem", "var_ap", "var_rp", "cov_sem_ap", "cov_sem_rp", "cov_ap_rp",
               "js_without_sem", "js_without_ap", "js_without_rp", "n_pairs"]
    assert np.allclose(from_store[columns].to_numpy(float), from_cache[columns].to_numpy(float), rtol=1e-4, atol=1e-9)
    labels = classify_heads(from_store).query("layer == 0").label.tolist()
    assert labels[:3] == ["structure", "semantic", "RP"]


def test_a_batch_that_is_not_right_padded_is_refused(batch):
    tokens, attention_mask = batch
    attention_mask = attention_mask.clone()
    attention_mask[0, 3] = False  # a hole: the accumulator crops each sequence to its first n tokens
    with pytest.raises(ValueError, match="right-padded"):
        head_summaries_from_cache(tiny_model("dstg"), tokens, attention_mask)


def test_a_store_without_attention_summaries_is_refused():
    class StoreWithoutSummaries:
        attention = None

    with pytest.raises(ValueError, match="no attention summaries"):
        head_stats_from_store(StoreWithoutSummaries())


def test_threshold_sweep_relabels_a_head_at_its_share():
    from dstg_interp.analysis.heads import threshold_sweep

    # one head whose RP term carries 57% of the variance and matters most to its pattern, one clear AP head
    stats = pd.DataFrame([dict(model="dstg", seed=0, layer=0, head=0, var_sem=0.23, var_ap=0.2, var_rp=0.57,
                               js_without_sem=0.1, js_without_ap=0.1, js_without_rp=0.3),
                          dict(model="dstg", seed=0, layer=0, head=1, var_sem=0.05, var_ap=0.9, var_rp=0.05,
                               js_without_sem=0.01, js_without_ap=0.4, js_without_rp=0.01)])
    sweep = threshold_sweep(stats, thresholds=(0.5, 0.6, 0.95))
    labels = {(t, label): n for t, label, n in zip(sweep.threshold, sweep.label, sweep.n_heads)}
    assert labels[(0.5, "RP")] == 1 and labels[(0.5, "structure")] == 1
    assert (0.6, "RP") not in labels and labels[(0.6, "mixed")] == 1
    assert labels[(0.95, "mixed")] == 2 and (sweep.n_total == 2).all()
    with pytest.raises(ValueError, match="dominant_share must be in"):
        classify_heads(stats, dominant_share=0.0)
