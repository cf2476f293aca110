"""RoPE heads by frequency band (analysis/rope_bands.py): the planes add up to the head's logit, a head that
reads only position scores positional, a low-frequency content head semantic; the authors' NeoBERT layout and a
Hugging Face ModernBERT are read (its planes add up to its own attention scores); a model without rotary heads,
or an HF rotary family the table has no row for, is one clear error."""

import copy
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hf_writers import write_tiny_bert, write_tiny_rotary
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.modernbert.modeling_modernbert import eager_attention_forward

from dstg_interp import EncoderError
from dstg_interp.analysis import band_stats, band_sweep, classify_band_heads, logit_lens
from dstg_interp.analysis.rope_bands import frequency_entropy, plane_logits, rotary_of, spectral_entropy
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.edits import edit_hooks
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
AUTHORS = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"


def batch(rows=3, length=24):
    return torch.randint(5, 97, (rows, length), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def rope():
    return open_encoder(tiny_model("rope", init_std=0.2).eval())


def test_the_planes_add_up_to_the_heads_logit(rope):
    tokens = batch()
    _, cache = rope.model.run_with_cache(tokens, names_filter=lambda n: n.endswith(("hook_q", "hook_k", "hook_logits")))
    for block in range(rope.n_layers):
        planes = plane_logits(cache[f"blocks.{block}.attn.hook_q"], cache[f"blocks.{block}.attn.hook_k"],
                              rope.model.blocks[block].attn.rotary)
        torch.testing.assert_close(planes.sum(-1).float(), cache[f"blocks.{block}.attn.hook_logits"], atol=1e-5, rtol=1e-5)


def test_a_head_that_reads_only_position_is_positional_and_a_slow_content_head_semantic(rope):
    tokens = batch()
    constant = torch.randn(8, generator=torch.Generator().manual_seed(1))

    def position_only(x):  # head 0: the same query and key for every token, so only the offset moves its logit
        x = x.clone()
        x[:, :, 0] = constant
        return x

    def slow_content(x):  # head 1: the token's query / key, in the slowest plane only
        x = x.clone()
        keep = torch.zeros(8, dtype=torch.bool)
        keep[[3, 7]] = True
        x[:, :, 1] = torch.where(keep, x[:, :, 1], torch.zeros(()))
        return x

    edits = {"blocks.0.attn.hook_q": lambda x: slow_content(position_only(x)),
             "blocks.0.attn.hook_k": lambda x: slow_content(position_only(x))}
    with edit_hooks(rope, edits):
        stats = band_stats(rope, tokens, n_bands=4)
    heads = classify_band_heads(stats).set_index(["layer", "head"])
    assert heads.loc[(0, 0), "label"] == "positional" and heads.loc[(0, 0), "high_share"] > 0.99
    # the offset explains nearly all of it (not all: each query centres over its own keys)
    assert heads.loc[(0, 0), "positional_score"] > 0.99 > heads.loc[(0, 1), "positional_score"]
    assert heads.loc[(0, 1), "label"] == "semantic" and heads.loc[(0, 1), "share_band3"] == pytest.approx(1.0)
    shares = stats.groupby(["layer", "head"]).share.sum()
    np.testing.assert_allclose(shares, 1.0)
    sweep = band_sweep(stats.assign(model="rope"))
    assert set(sweep.threshold) == {0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9}
    assert (sweep.groupby("threshold").n_heads.sum() == 2 * rope.n_heads).all()


def test_the_authors_neobert_layout_is_read():
    encoder = open_encoder(AUTHORS / "neobert-hf")
    ids = torch.from_numpy(np.load(AUTHORS / "inputs" / "input_ids_a.npy"))
    mask = torch.from_numpy(np.load(AUTHORS / "inputs" / "attention_mask_a.npy"))
    heads = classify_band_heads(band_stats(encoder, ids, mask, n_bands=2))
    assert len(heads) == encoder.n_layers * encoder.n_heads and heads.high_share.between(0, 1).all()


def test_a_model_without_rotary_heads_is_one_clear_error(tmp_path):
    for encoder in (open_encoder(tiny_model("dstg").eval()), open_encoder(AUTHORS / "posneobert-baseline-ap")):
        with pytest.raises(EncoderError, match="needs rotary"):
            band_stats(encoder, batch())
    write_tiny_bert(tmp_path / "bert", tiny_documents(n_docs=6))
    with pytest.raises(EncoderError, match="needs rotary .* has none"):
        band_stats(open_encoder(tmp_path / "bert"), batch() % 20)
    with pytest.raises(EncoderError, match="n_bands"):
        band_stats(open_encoder(tiny_model("rope").eval()), batch(), n_bands=9)


# --- a Hugging Face RoPE encoder: ModernBERT read, another rotary family refused ---------------------------
@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    """A tiny random ModernBERT masked LM (layer 0 global, layers 1-2 local with a window of 8 keys, attention
    biases so that a head can be made constant), opened through the HF adapter."""
    folder = tmp_path_factory.mktemp("modernbert")
    write_tiny_rotary(folder, tiny_documents(n_docs=6), "modernbert", attention_bias=True)
    return open_encoder(folder, mlm_head=True)


@contextmanager
def recorded_scores(encoder):
    """While inside, each forward of the ModernBERT records {layer: (q.k * scale before the mask, the additive
    mask)} as its attention computes them (eager attention through transformers' own interface)."""
    recorded = {}

    def recording(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        recorded[module.layer_idx] = (torch.matmul(query, key.transpose(2, 3)) * scaling, attention_mask)
        return eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout)

    AttentionInterface.register("dstg-test-recording", recording)
    AttentionMaskInterface.register("dstg-test-recording", eager_mask)
    before = encoder.model.config._attn_implementation
    encoder.model.set_attn_implementation("dstg-test-recording")
    try:
        yield recorded
    finally:
        encoder.model.set_attn_implementation(before)


def test_a_modernberts_planes_add_up_to_its_own_attention_scores(modernbert):
    """Known answer: each head's planes, read from Wqkv before the rotation and rotated with the layer's own
    rotary table, sum to the scores the model's attention computes after its rotation; the pairs scored are the
    ones its mask lets through (a local layer's window); each layer's slowest plane turns at its own theta."""
    tokens = batch(length=20) % modernbert.vocab_size
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[1, 14:] = False
    names = [f"blocks.{block}.attn.hook_{x}" for block in range(modernbert.n_layers) for x in "qk"]
    with recorded_scores(modernbert) as recorded, torch.no_grad():
        captured = modernbert.capture(tokens, mask, names)
    stats = band_stats(modernbert, tokens, mask, n_bands=4)
    config = modernbert.model.config
    for block in range(modernbert.n_layers):
        scores, additive = recorded[block]
        planes = plane_logits(captured[f"blocks.{block}.attn.hook_q"], captured[f"blocks.{block}.attn.hook_k"],
                              rotary_of(modernbert, block, positions=tokens.shape[1]))
        torch.testing.assert_close(planes.sum(-1), scores.double(), atol=1e-5, rtol=1e-5)
        allowed = (additive[:, 0] == 0) & mask[:, :, None]  # keys the mask lets each real query see
        layer = stats[stats.layer == block]
        assert (layer.n_pairs == int(allowed.sum())).all()
        local = config.layer_types[block] == "sliding_attention"
        theta = config.rope_parameters[config.layer_types[block]]["rope_theta"]
        assert theta == (10_000.0 if local else 160_000.0)
        slowest = layer[layer.band == 3].frequency_low.iloc[0]
        assert slowest == pytest.approx(theta ** (-6 / 8), rel=1e-5)
    assert stats.layer.nunique() == 3 and len(classify_band_heads(stats)) == 3 * modernbert.n_heads


def test_a_modernbert_head_of_constant_queries_and_keys_is_positional_and_a_slow_plane_head_semantic(modernbert):
    """Known answer through the weights (Wqkv rows: q then k then v, head-major, plane i = dims i and i + 4): in
    layer 0, head 0 with no weights (queries and keys its biases alone) reads position only; head 1 keeps the
    slowest plane only, head 2 the fastest only."""
    edited = copy.copy(modernbert)
    edited.model = copy.deepcopy(modernbert.model)
    attention = edited.model.base_model.layers[0].attn
    wqkv, d_model, d_head = attention.Wqkv, modernbert.config.d_model, attention.head_dim
    keep = {1: [3, 7], 2: [0, 4]}
    with torch.no_grad():
        for part in (0, 1):  # queries, keys
            rows = slice(part * d_model, part * d_model + d_head)  # head 0
            wqkv.weight[rows] = 0.0
            wqkv.bias[rows] = torch.randn(d_head, generator=torch.Generator().manual_seed(part))
            for head, dims in keep.items():
                start = part * d_model + head * d_head
                dropped = [start + i for i in range(d_head) if i not in dims]
                wqkv.weight[dropped], wqkv.bias[dropped] = 0.0, 0.0
    heads = classify_band_heads(band_stats(edited, batch() % modernbert.vocab_size, layers=[0])).set_index("head")
    assert heads.loc[0, "label"] == "positional" and heads.loc[0, "high_share"] > 0.99
    # the offset explains nearly all of it (each query centres over its own keys)
    assert heads.loc[0, "positional_score"] > 0.95 > heads.loc[1, "positional_score"]
    assert heads.loc[1, "label"] == "semantic" and heads.loc[1, "share_band3"] == pytest.approx(1.0)
    assert heads.loc[2, "label"] == "positional" and heads.loc[2, "share_band0"] == pytest.approx(1.0)


def test_a_modernberts_logit_lens_at_the_last_layer_is_its_output(modernbert):
    lens = logit_lens(modernbert, batch(length=12) % modernbert.vocab_size, n_masked=2)
    assert lens.kl_to_final.iloc[-1] == pytest.approx(0.0, abs=1e-5) and lens.top1_agreement.iloc[-1] == 1.0


@pytest.mark.parametrize("family", ["eurobert", "roformer"])
def test_a_hugging_face_rope_family_not_in_the_table_is_refused_naming_those_read(tmp_path, family):
    """EuroBERT and RoFormer have rotary heads the table has no row for: one line naming the families read; the
    adapter serves their hidden states, not their queries and keys."""
    write_tiny_rotary(tmp_path / family, tiny_documents(n_docs=6), family)
    encoder = open_encoder(tmp_path / family)
    tokens = batch(length=12) % encoder.vocab_size
    with pytest.raises(EncoderError, match=f"hf:{family}\\) whose heads .* does not read: .* it reads modernbert") as err:
        band_stats(encoder, tokens)
    assert "\n" not in str(err.value)
    with pytest.raises(EncoderError, match="exposes hidden_states.0..3 only .* families bert, camembert, .*modernbert"):
        encoder.capture(tokens, torch.ones_like(tokens, dtype=torch.bool), ["blocks.0.attn.hook_q"])


def test_spectral_entropy_is_0_for_a_sinusoid_and_near_1_for_white_noise():
    t = np.arange(128)
    assert spectral_entropy(3 + np.sin(2 * np.pi * 5 * t / 128)) < 1e-12  # all power at one frequency
    noise = np.mean([spectral_entropy(np.random.default_rng(s).standard_normal(128)) for s in range(20)])
    assert 0.8 < noise < 0.95  # an even spectrum, up to the sampling spread of a periodogram
    two = spectral_entropy(np.sin(2 * np.pi * 5 * t / 128) + np.sin(2 * np.pi * 9 * t / 128))
    assert two == pytest.approx(np.log(2) / np.log(64), rel=1e-9)  # two equal peaks of 64 frequencies
    assert np.isnan(spectral_entropy(np.ones(16)))
    with pytest.raises(ValueError, match="at least 4 values"):
        spectral_entropy([1.0, 2.0])


def test_frequency_entropy_reads_each_planes_query_norm_along_the_sequence(rope):
    tokens = batch(rows=4, length=24)
    table = frequency_entropy(rope, tokens, torch.ones_like(tokens, dtype=torch.bool))
    n_heads, d_head = rope.n_heads, rope.config.d_head
    assert len(table) == rope.n_layers * n_heads * d_head // 2
    assert table.frequency_entropy.between(0, 1).all() and (table.groupby(["layer", "head"]).norm_rank.min() == 0).all()
    assert table.noise_entropy_q05.nunique() == 1 and 0.5 < table.noise_entropy_q05.iloc[0] < table.noise_entropy.iloc[0] < 1
    # the plane norms, computed here from hook_q, give the entropies of the table
    q = rope.capture(tokens, torch.ones_like(tokens, dtype=torch.bool), ["blocks.0.attn.hook_q"])["blocks.0.attn.hook_q"]
    half = d_head // 2
    norm = (q[..., 0, 0] ** 2 + q[..., 0, half] ** 2).sqrt().double().mean(0).numpy()  # head 0, plane 0
    row = table[(table.layer == 0) & (table["head"] == 0) & (table.plane == 0)].iloc[0]
    assert row.frequency_entropy == pytest.approx(spectral_entropy(norm), abs=1e-6)  # float32 norms here
    with pytest.raises(EncoderError, match="needs rotary"):
        frequency_entropy(open_encoder(tiny_model("dstg").eval()), tokens)
