"""Sparse autoencoders on a stream (dstg_interp.analysis.sae, EleutherAI's sparsify): training on a tiny model's
store (the loss falls, the held-out reconstruction beats the mean and rank-k PCA), the saved folder read back by
the library, a latent's position-only R², and the refusals (an unknown stream, a store without the stream).

The training test runs a few hundred sparsify steps (a few seconds): sparsify is in the ``test`` extra, so CI
runs it."""

import json

import numpy as np
import pytest
import sparsify  # in [test]: a CI without it fails here instead of skipping the SAE tests
import torch

from dstg_interp.analysis.sae import SAEConfig, SAEError, TrainedSAE, check_stream, document_split, train_sae
from dstg_interp.store.extract import extract
from probes.position_baseline import position_r2_of_columns
from conftest import RandomSequences, tiny_model


@pytest.fixture(scope="module")
def tiny_stores(tmp_path_factory):
    """The stores of a tiny random DSTG (sem / ap / full) and RoPE model (full) over 60 random sequences."""
    root = tmp_path_factory.mktemp("sae")
    sequences = RandomSequences(np.random.default_rng(0).integers(20, 41, 60), sentence=7, paragraph=14)
    dstg = extract(tiny_model("dstg").eval(), sequences, root / "dstg", layers=(0, 2), dtype="float32", progress=False)
    rope = extract(tiny_model("rope").eval(), sequences, root / "rope", layers=(2,), dtype="float32", progress=False)
    return dstg, rope


def test_sae_on_the_ap_stream_learns_and_reconstructs(tiny_stores, tmp_path):
    torch.set_num_threads(1)
    dstg, _ = tiny_stores
    trained = train_sae(dstg, 2, "ap", SAEConfig(num_latents=32, k=2, steps=300, batch_size=256, log_every=25))
    curve = trained.curve
    assert curve.step.iloc[-1] == 300
    # the loss falls: the last quarter of the curve well under its start
    assert curve.fvu.iloc[-3:].mean() < 0.5 * curve.fvu.iloc[:2].mean()
    # held out: far better than the mean (FVU ~1) and than the best dense code of the same size (rank-2 PCA)
    assert 0.95 < trained.fvu_mean < 1.1
    assert trained.fvu < 0.2
    assert trained.fvu < 0.5 * trained.fvu_pca
    # no held-out document was trained on
    doc = dstg.labels.doc_index.to_numpy()
    assert not set(doc[trained.train_rows]) & set(doc[trained.test_rows])
    assert not dstg.labels.is_special.to_numpy()[np.r_[trained.train_rows, trained.test_rows]].any()
    # the codes: k nonzero latents per token, and decoding them gives the FVU reported
    codes = trained.encode(dstg.states(2, "ap")[trained.test_rows])
    assert codes.shape == (len(trained.test_rows), 32) and ((codes != 0).sum(1) <= 2).all()
    # saved as sparsify's own folder: the library reads it back and encodes the same
    folder = trained.save(tmp_path / "sae-l2-ap")
    loaded = sparsify.SparseCoder.load_from_disk(folder)
    again = TrainedSAE(loaded, trained.config, 2, "ap", trained.scale, trained.train_rows, trained.test_rows,
                       trained.curve, trained.fvu, trained.fvu_pca, trained.fvu_mean, 0.0)
    assert np.allclose(again.encode(dstg.states(2, "ap")[trained.test_rows[:50]]), codes[:50], atol=1e-6)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["stream"] == "ap" and metrics["sparsify"] == sparsify.__version__
    assert SAEConfig.from_json(folder / "sae_config.json") == trained.config


def test_unknown_stream_and_missing_stream_are_refused(tiny_stores, tmp_path):
    dstg, rope = tiny_stores
    with pytest.raises(SAEError, match="unknown stream 'semantic'.*sem, ap, full"):
        train_sae(dstg, 2, "semantic")
    with pytest.raises(SAEError, match="has no 'ap' stream \\(it has full\\).*read full"):
        train_sae(rope, 2, "ap")
    with pytest.raises(SAEError, match="cannot exceed"):
        SAEConfig(num_latents=4, k=8)
    check_stream("full", rope.subspaces, "rope")  # what it has passes


def test_document_split_keeps_documents_whole():
    doc = np.repeat(np.arange(10), 5)
    train, test = document_split(doc, 0.2, seed=0)
    assert len(np.unique(doc[test])) == 2 and not set(doc[train]) & set(doc[test])
    with pytest.raises(SAEError, match="at least 2 documents"):
        document_split(np.zeros(5, int), 0.2, 0)


def test_position_r2_of_columns_finds_a_position_latent():
    """A latent that fires by position is explained by position alone (R² ~1); a random one is not (~0); one
    that never fires on the held-out tokens gets NaN."""
    rng = np.random.default_rng(0)
    n_docs, length = 40, 30
    position = np.tile(np.arange(length), n_docs)
    doc = np.repeat(np.arange(n_docs), length)
    positional = np.where(position % 5 == 0, 1.0 + position / length, 0.0)
    noise = np.maximum(rng.standard_normal(len(position)), 0)
    silent = np.where(doc < 30, noise, 0.0)  # never fires on documents 30..39
    values = np.c_[positional + 0.01 * rng.standard_normal(len(position)), noise, silent]
    test = doc >= 30
    r2 = position_r2_of_columns(values, position, doc, np.flatnonzero(~test), np.flatnonzero(test), n_splits=3,
                                min_nonzero=5)
    assert r2[0] > 0.95 and abs(r2[1]) < 0.1 and np.isnan(r2[2])


def test_sparsify_trainer_trains_on_our_hook_points(tmp_path):
    """sparsify's own Trainer, on a model of ours: it needs base_model, device and dummy_inputs (the
    PreTrainedModel conventions EncoderForMLM gives), finds the hook point by name and learns its width."""
    from datasets import Dataset

    torch.manual_seed(0)
    model = tiny_model("dstg").eval()
    tokens = torch.randint(5, 97, (64, 24), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = 2, 3
    dataset = Dataset.from_dict({"input_ids": tokens.tolist()}).with_format("torch")
    config = sparsify.TrainConfig(sparsify.SaeConfig(num_latents=16, k=2), batch_size=8, log_to_wandb=False,
                                  hookpoints=["blocks.1.hook_resid_post_ap"], exclude_tokens=[0, 2, 3],
                                  save_dir=str(tmp_path / "saes"), save_every=10_000)
    trainer = sparsify.Trainer(config, dataset, model)
    trainer.fit()
    sae = trainer.saes["blocks.1.hook_resid_post_ap"]
    assert (sae.d_in, sae.num_latents) == (model.config.d_ap, 16)
    assert trainer.global_step == 8 and (tmp_path / "saes").is_dir()


@pytest.mark.parametrize("variant, stream", [("dstg", "sem"), ("dstg", "ap"), ("rope", "full"), ("ap", "full"),
                                             ("rp", "full"), ("hf", "full")])
def test_an_sae_trains_on_every_zoo_variant_and_an_hf_encoder(variant, stream, tmp_path):
    """Each variant's store (and a tiny Hugging Face BERT's, read by the adapter) trains an SAE whose held-out
    reconstruction beats the mean code (FVU ~1) within a hundred steps."""
    from dstg_interp.encoders import open_encoder
    from dstg_interp.tiny_zoo import tiny_documents
    from hf_writers import write_tiny_bert

    torch.set_num_threads(1)
    if variant == "hf":
        documents = tiny_documents(n_docs=30, seed=0)
        write_tiny_bert(tmp_path / "bert", documents)
        store = extract(open_encoder(tmp_path / "bert"), documents, tmp_path / "store", layers=(2,), dtype="float32",
                        progress=False, max_length=64)
    else:
        sequences = RandomSequences(np.random.default_rng(1).integers(20, 41, 40), sentence=7, paragraph=14)
        store = extract(tiny_model(variant).eval(), sequences, tmp_path / "store", layers=(2,), dtype="float32",
                        progress=False)
    trained = train_sae(store, 2, stream, SAEConfig(num_latents=32, k=4, steps=100, batch_size=128, log_every=25))
    assert trained.curve.step.iloc[-1] == 100 and np.isfinite(trained.fvu)
    assert trained.fvu < 0.7 * trained.fvu_mean
