"""Attention summaries: streaming statistics vs a brute-force pass over every (query, key) pair."""

import json

import numpy as np
import pytest
import torch

from conftest import tiny_model
from dstg_interp import extract
from dstg_interp.data import collate
from dstg_interp.encoders import length_sorted_batches as batch_plan
from dstg_interp.store.attention import AttentionSummaries, jensen_shannon, logit_terms

torch.set_num_threads(1)


class TinySequences:
    """Random sequences of mixed lengths with trivial labels: all the store needs."""

    def __init__(self, n=7, seed=0):
        rng = np.random.default_rng(seed)
        self.items = []
        for length in rng.integers(3, 19, size=n):
            ids = rng.integers(5, 97, size=length).astype(np.int32)
            zeros = np.zeros(length, dtype=np.int32)
            self.items.append({"input_ids": ids, "token_position": np.arange(length, dtype=np.int32),
                               "sentence_index": zeros, "paragraph_index": zeros, "intra_sentence_position": zeros,
                               "intra_paragraph_position": zeros, "doc_index": zeros,
                               "is_special": np.zeros(length, dtype=bool)})
        self.meta = {"documents": []}

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def brute_force(model, sequences, max_offset, batch_size):
    """Every valid pair of every sequence, from run_with_cache on the same padded batches, in float64 numpy."""
    terms = list(logit_terms(model.config.variant).values())
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    values = [[[] for _ in range(n_heads)] for _ in range(n_layers)]
    mass = np.zeros((n_layers, n_heads, 2 * max_offset + 1))
    js = np.zeros((n_layers, n_heads, len(terms)))
    n_queries = 0
    lengths = np.array([len(item["input_ids"]) for item in sequences.items])
    for batch in batch_plan(lengths, batch_size):
        tokens, mask, _ = collate([sequences.items[i]["input_ids"] for i in batch])
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=lambda name: ".attn.hook_" in name)
        for b, n in enumerate(lengths[batch]):
            n_queries += n
            offsets = np.clip(np.arange(n)[None, :] - np.arange(n)[:, None], -max_offset, max_offset) + max_offset
            for layer in range(n_layers):
                x = np.stack([cache[f"blocks.{layer}.attn.{t}"][b, :, :n, :n].double().numpy() for t in terms], -1)
                pattern = cache[f"blocks.{layer}.attn.hook_pattern"][b, :, :n, :n].double().numpy()
                for head in range(n_heads):
                    values[layer][head].append(x[head].reshape(-1, len(terms)))
                    np.add.at(mass[layer, head], offsets.ravel(), pattern[head].ravel())
                    p = torch.from_numpy(x[head].sum(-1)).softmax(-1)
                    for k in range(len(terms)):
                        q = torch.from_numpy(x[head].sum(-1) - x[head][..., k]).softmax(-1)
                        js[layer, head, k] += jensen_shannon(p, q).sum().item()
    stacked = [[np.concatenate(values[l][h]) for h in range(n_heads)] for l in range(n_layers)]
    mean = np.array([[v.mean(0) for v in row] for row in stacked])
    cov = np.array([[np.cov(v, rowvar=False, bias=True).reshape(len(terms), len(terms)) for v in row] for row in stacked])
    return dict(mean=mean, cov=cov, offset_mass=mass / n_queries, js_removal=js / n_queries)


@pytest.mark.parametrize("variant", ["dstg", "rp", "rope"])
def test_summaries_match_brute_force(variant, tmp_path):
    model = tiny_model(variant, init_std=0.3).eval()  # larger weights: logits well away from zero
    if variant in ("dstg", "rp"):
        with torch.no_grad():  # a non-zero RP bias, so every covariance entry is exercised
            for block in model.blocks:
                block.attn.rel_bias.bias.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(1))
    sequences = TinySequences()
    store = extract(model, sequences, tmp_path / "s", layers=(0,), attention_summaries=True, max_offset=5,
                    batch_size=3, progress=False)
    summaries = store.attention
    assert summaries.terms == list(logit_terms(variant))
    expected = brute_force(model, sequences, max_offset=5, batch_size=3)
    n_pairs = sum(len(item["input_ids"]) ** 2 for item in sequences.items)
    assert np.all(summaries.pairs == n_pairs)
    for name in ("mean", "cov", "offset_mass", "js_removal"):
        np.testing.assert_allclose(getattr(summaries, name), expected[name], rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(summaries.var, np.diagonal(expected["cov"], axis1=-2, axis2=-1), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(summaries.offset_mass.sum(-1), 1.0, rtol=1e-6)
    assert summaries.js_removal.min() > 0  # every term here moves the pattern
    table = summaries.to_dataframe()
    assert len(table) == 2 * 4 * len(summaries.terms) and set(table.columns) >= {"layer", "head", "term", "js_removal"}


def test_the_one_jensen_shannon_is_in_bits_and_old_nats_stores_read_as_bits(tmp_path):
    disjoint = jensen_shannon(torch.tensor([[1.0, 0.0], [0.5, 0.5]]), torch.tensor([[0.0, 1.0], [0.5, 0.5]]))
    assert disjoint.tolist() == [1.0, 0.0]  # log base 2: disjoint distributions are 1 bit apart, equal ones 0
    p, q = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), torch.tensor([0.1, 0.3, 0.6], dtype=torch.float64)
    m = (p + q) / 2
    by_hand = 0.5 * (p * (p / m).log2()).sum() + 0.5 * (q * (q / m).log2()).sum()
    assert float(jensen_shannon(p, q)) == pytest.approx(float(by_hand), rel=1e-12)
    assert float(jensen_shannon(torch.full((3,), float("nan")), p)) == 0.0  # a query with no valid key
    model = tiny_model("dstg", init_std=0.3).eval()
    store = extract(model, TinySequences(), tmp_path / "s", layers=(0,), attention_summaries=True, progress=False)
    bits = store.attention.js_removal
    description = json.loads((store.directory / "attention.json").read_text())
    assert description["js_unit"] == "bits"
    del description["js_unit"]  # as a store written before the unit was bits: its js_removal was in nats
    (store.directory / "attention.json").write_text(json.dumps(description))
    with np.load(store.directory / "attention.npz", allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    np.savez(store.directory / "attention.npz", **{**arrays, "js_removal": arrays["js_removal"] * np.log(2.0)})
    np.testing.assert_allclose(AttentionSummaries.load(store.directory).js_removal, bits, rtol=1e-12)


@pytest.mark.parametrize("variant", ["dstg", "rp"])
def test_removing_an_all_zero_term_changes_nothing(variant, tmp_path):
    model = tiny_model(variant).eval()  # the RP bias is zero at init
    store = extract(model, TinySequences(), tmp_path / "s", layers=(1,), attention_summaries=True, progress=False)
    rp = store.attention.terms.index("rp")
    assert np.all(store.attention.js_removal[..., rp] == 0.0)
    assert np.all(store.attention.mean[..., rp] == 0.0) and np.all(store.attention.var[..., rp] == 0.0)
    assert np.all(store.attention.js_removal[..., 0] > 0)


def test_summaries_leave_the_states_unchanged(tmp_path):
    """The summaries force the materialised attention path; states must still match the fused path closely."""
    model = tiny_model("dstg").eval()
    plain = extract(model, TinySequences(), tmp_path / "a", dtype="float32", progress=False)
    with_summaries = extract(model, TinySequences(), tmp_path / "b", dtype="float32", attention_summaries=True,
                             progress=False)
    for layer in plain.layers:
        np.testing.assert_allclose(with_summaries.states(layer, "full"), plain.states(layer, "full"), atol=1e-6)
