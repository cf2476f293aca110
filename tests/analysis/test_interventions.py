"""AP-stream interventions (known answers, missing hooks) and the position basis from hidden states."""

import copy

import numpy as np
import pytest
import torch

from dstg_interp.analysis.interventions import intervene
from dstg_interp.analysis.position_basis import position_basis
from dstg_interp.analysis.spectra import analyze_table
from dstg_interp.encoders import EncoderError, open_encoder
from dstg_interp.store import extract
from dstg_interp.tiny_zoo import tiny_zoo
from synthetic_store import write_synthetic_store

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def zoo():
    models, documents = tiny_zoo(["dstg", "ap", "rope", "rp"], n_docs=30)
    return {name: open_encoder(model) for name, model in models.items()}, documents


def batch(seed=0, size=3, length=14):
    tokens = torch.randint(5, 100, (size, length), generator=torch.Generator().manual_seed(seed))
    return tokens, torch.ones_like(tokens, dtype=torch.bool)


@pytest.mark.parametrize("name,layer", [("dstg", 0), ("dstg", 1), ("dstg", "final"), ("ap", 0)])
def test_interchanging_identical_position_states_changes_nothing(zoo, name, layer):
    encoders, _ = zoo
    tokens, mask = batch()
    result = intervene(encoders[name], tokens, mask, layer, "interchange")  # identity map, same source
    assert result.summary["mlm_kl"] == 0 and result.summary["top1_agreement"] == 1
    assert (result.heads.mean_abs_change == 0).all()


def test_the_layer_0_ap_state_of_other_tokens_is_the_same_state(zoo):
    encoders, _ = zoo
    tokens, mask = batch(0)
    other, _ = batch(1)
    result = intervene(encoders["dstg"], tokens, mask, 0, "interchange", source_tokens=other)
    assert result.summary["mlm_kl"] == 0
    later = intervene(encoders["dstg"], tokens, mask, 1, "interchange", source_tokens=other)
    assert later.summary["mlm_kl"] > 0  # after a block the AP stream depends on the tokens (the FFN reads both)


def test_moving_position_changes_the_output_and_the_ap_term(zoo):
    encoders, _ = zoo
    tokens, mask = batch()
    reverse = torch.arange(tokens.shape[1]).flip(0)
    for kind, options in (("interchange", {"position_map": reverse}), ("shift", {"shift": 9})):
        result = intervene(encoders["dstg"], tokens, mask, 1, kind, **options)
        assert result.summary["mlm_kl"] > 0
        ap = result.heads[result.heads.term == "ap"]
        assert set(ap.block) == {1} and (ap.relative_change > 0).all()
        assert (result.heads[result.heads.term == "rp"].mean_abs_change == 0).all()  # the RP bias never moves
    pos_embed = intervene(encoders["ap"], tokens, mask, 0, "shift", shift=9)
    assert pos_embed.summary["mlm_kl"] > 0 and set(pos_embed.heads.term) == {"content"}


def test_a_model_without_the_hook_is_one_clear_error(zoo):
    encoders, _ = zoo
    tokens, mask = batch()
    for name in ("rope", "rp"):
        with pytest.raises(EncoderError, match="no hook that holds an absolute-position state"):
            intervene(encoders[name], tokens, mask, 0, "interchange")
    with pytest.raises(EncoderError, match="only at its input"):
        intervene(encoders["ap"], tokens, mask, 1, "shift", shift=2)
    with pytest.raises(EncoderError, match="needs position_means"):
        intervene(encoders["dstg"], tokens, mask, 1, "mean")


def test_the_mean_intervention_keeps_position_and_drops_the_tokens(zoo, tmp_path):
    encoders, documents = zoo
    store = extract(encoders["dstg"], documents, tmp_path / "store", layers=[1], subspaces=["ap"], progress=False,
                    max_length=32, dtype="float32")
    basis = position_basis(store, 1, "ap", min_documents=2)
    means = np.zeros((32, basis.means.shape[1]))
    means[basis.positions] = basis.means
    tokens, mask = batch(length=12)
    result = intervene(encoders["dstg"], tokens, mask, 1, "mean", position_means=means)
    assert 0 < result.summary["mlm_kl"] < np.inf


# --- the position basis ------------------------------------------------------------------------------
def test_the_basis_of_a_model_with_a_learned_table_recovers_its_spectrum(zoo, tmp_path):
    encoders, documents = zoo
    encoder = open_encoder(copy.deepcopy(encoders["ap"].model))  # the fixture's model stays as it was
    positions = np.arange(encoder.max_positions)[:, None]
    rng = np.random.default_rng(0)
    planted = np.hstack([np.cos(np.pi * positions * f / 64) for f in (1, 2, 3)]) @ rng.standard_normal((3, 32))
    with torch.no_grad():  # a low-frequency table, well above the token embeddings' scale
        encoder.model.pos_embed.weight.copy_(torch.as_tensor(planted + 0.01 * rng.standard_normal(planted.shape)))
    store = extract(encoder, documents, tmp_path / "store", layers=[0], progress=False, max_length=40, dtype="float32")
    basis = position_basis(store, 0, "full", min_documents=5)
    table = analyze_table(encoder.ap_table.detach().numpy()[basis.positions], n_control_draws=0).summary
    for key in ("pc1", "pc1_pc2", "low_freq_share"):
        assert basis.summary[key] == pytest.approx(table[key], abs=0.02), key
    assert basis.summary["position_share"] > 0.5 and (basis.standard_error > 0).all()
    assert basis.gram.shape == (len(basis.positions), len(basis.positions))


def test_position_share_is_one_for_position_only_states_and_chance_for_noise(tmp_path):
    rng = np.random.default_rng(0)
    position = np.tile(np.arange(20), 50)
    docs = np.repeat(np.arange(50), 20)
    table = rng.standard_normal((20, 6))
    store = write_synthetic_store(tmp_path / "s", {"1/full": table[position], "2/full": rng.standard_normal((1000, 6))},
                                  {"token_position": position}, docs)
    assert position_basis(store, 1, "full").summary["position_share"] == pytest.approx(1.0)
    noise = position_basis(store, 2, "full").summary
    assert noise["position_share"] == pytest.approx(noise["chance_share"], abs=0.015)


# --- HF encoders with a learned absolute table (BERT-style embeddings.position_embeddings) -------------
@pytest.fixture(scope="module")
def tiny_berts(tmp_path_factory):
    from dstg_interp import load_hf_encoder
    from dstg_interp.tiny_zoo import tiny_documents
    from hf_writers import write_tiny_bert
    documents = tiny_documents(n_docs=8, seed=0)
    plain, head = tmp_path_factory.mktemp("bert"), tmp_path_factory.mktemp("bert-mlm")
    write_tiny_bert(plain, documents)
    write_tiny_bert(head, documents, mlm_head=True)
    return load_hf_encoder(plain), load_hf_encoder(head, mlm_head=True)


def test_hf_identity_changes_nothing_and_a_mirror_changes_the_output(tiny_berts):
    encoder, with_head = tiny_berts
    tokens, mask = batch(length=20)
    identity = intervene(encoder, tokens, mask, 0, "interchange")
    assert 0 <= identity.summary["output_change"] <= 1e-6 and len(identity.heads) == 0
    assert np.isnan(identity.summary["mlm_kl"]) and identity.summary["n_tokens"] == tokens.numel()
    mirror = intervene(encoder, tokens, mask, 0, "interchange", position_map=torch.arange(20).flip(0))
    shifted = intervene(encoder, tokens, mask, 0, "shift", shift=30)
    assert mirror.summary["output_change"] > 1e-4 and shifted.summary["output_change"] > 1e-4
    # the mean of the table rows is the table itself: the 'mean' intervention with the table changes nothing
    table = encoder.ap_table.detach().numpy()
    assert intervene(encoder, tokens, mask, 0, "mean", position_means=table).summary["output_change"] <= 1e-6
    # with an MLM head the KL and top-1 agreement are measured too
    same = intervene(with_head, tokens, mask, 0, "interchange")
    assert same.summary["mlm_kl"] == pytest.approx(0, abs=1e-9) and same.summary["top1_agreement"] == 1
    moved = intervene(with_head, tokens, mask, 0, "interchange", position_map=torch.arange(20).flip(0))
    assert moved.summary["mlm_kl"] > 0 and moved.summary["output_change"] > 1e-4


def test_hf_bad_interventions_are_one_clear_error_and_leave_no_hook(tiny_berts):
    encoder, _ = tiny_berts
    table = encoder.model.embeddings.position_embeddings
    tokens, mask = batch(length=20)
    with pytest.raises(EncoderError, match="past its 64-row position table"):
        intervene(encoder, tokens, mask, 0, "shift", shift=45)
    with pytest.raises(EncoderError, match="only at its input"):
        intervene(encoder, tokens, mask, 1, "interchange")
    with pytest.raises(RuntimeError):  # a replacement of the wrong width fails inside the forward
        intervene(encoder, tokens, mask, 0, "mean", position_means=np.zeros((64, 5)))
    assert not table._forward_hooks  # removed after the error too
    untabled = copy.copy(encoder)  # what the adapter records for a rotary / relative HF encoder: no table read
    untabled.position_offset = None
    with pytest.raises(EncoderError, match="no hook that holds an absolute-position state"):
        intervene(untabled, tokens, mask, 0, "interchange")
    clean = intervene(encoder, tokens, mask, 0, "interchange")
    assert clean.summary["output_change"] <= 1e-6
