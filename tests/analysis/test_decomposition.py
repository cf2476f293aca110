"""Song & Zhong's position / context decomposition (analysis/decomposition.py): exact on a constructed grid,
per layer on our models, the authors' format and a tiny HF encoder; padding is one clear error."""

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hf_writers import write_tiny_bert

from dstg_interp import EncoderError
from dstg_interp.analysis import decompose, decomposition_by_layer
from dstg_interp.encoders import open_encoder
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
AUTHORS = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"


def test_a_constructed_grid_gives_back_its_parts():
    rng = np.random.default_rng(0)
    position = np.zeros((20, 48))
    position[:, :2] = rng.standard_normal((20, 2))  # rank 2, in dimensions 0-1
    context = np.zeros((12, 48))
    context[:, 10:15] = rng.standard_normal((12, 5))  # in dimensions 10-14: orthogonal to position
    position -= position.mean(0)
    context -= context.mean(0)
    noise = 0.01 * rng.standard_normal((12, 20, 48))
    noise -= noise.mean(0) + noise.mean(1)[:, None] - noise.mean((0, 1))
    states = 1.5 + position[None] + context[:, None] + noise
    parts = decompose(states)
    assert sum(parts[f"share_{p}"] for p in ("mean", "position", "context", "residual")) == pytest.approx(1.0)
    assert parts["share_position"] == pytest.approx(12 * (position**2).sum() / (states**2).sum())
    assert parts["position_rank_99"] == 2 and parts["max_cos_vectors"] < 1e-12 and parts["max_cos_bases"] < 1e-12
    assert parts["chance_max_cos_vectors"] > 0.2  # Gaussian directions in 48 dimensions are far from orthogonal
    aligned = decompose(1.5 + position[None] + 0.5 * np.roll(position, 3, axis=0)[:12, None] + noise)
    assert aligned["max_cos_bases"] > 0.9


def test_every_layer_of_ours_the_authors_and_a_tiny_hf_encoder(tmp_path):
    tokens = torch.randint(5, 97, (6, 14), generator=torch.Generator().manual_seed(0))
    encoder = open_encoder(tiny_model("dstg").eval())
    table = decomposition_by_layer(encoder, tokens)
    assert len(table) == 3 * 3 and set(table.subspace) == {"sem", "ap", "full"}
    layer0_ap = table[(table.layer == 0) & (table.subspace == "ap")].iloc[0]
    assert layer0_ap.share_context == 0 and layer0_ap.share_residual == 0  # the table rows: position only
    assert decomposition_by_layer(open_encoder(AUTHORS / "posneobert-dstg"), tokens, layers=[1]).shape[0] == 3
    write_tiny_bert(tmp_path, tiny_documents(n_docs=6))
    bert = decomposition_by_layer(open_encoder(tmp_path), tokens % 20)
    assert list(bert.layer) == [0, 1, 2] and (bert.share_residual > 0).all()


def test_padding_and_too_small_grids_are_one_clear_error():
    encoder = open_encoder(tiny_model("rope").eval())
    tokens = torch.randint(5, 97, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1, 8:] = False
    with pytest.raises(EncoderError, match="full grid"):
        decomposition_by_layer(encoder, tokens, mask)
    with pytest.raises(EncoderError, match="2 rows or more"):
        decomposition_by_layer(encoder, tokens[:1])
    with pytest.raises(ValueError, match="contexts >= 2"):
        decompose(np.zeros((1, 4, 3)))
