"""DSTG as ground truth: the true AP basis, the principal-angle and interchange scores, each method, DAS (on a
planted linear subspace and at layer 0 of a tiny DSTG), and one clear error for each bad input."""

import numpy as np
import pytest
import torch

from dstg_interp.analysis import ground_truth as gt
from dstg_interp.encoders import EncoderError, open_encoder
from dstg_interp.encoders.edits import edit_states
from conftest import tiny_model

torch.set_num_threads(1)
SHIFT = 8


@pytest.fixture(scope="module")
def dstg():
    # At the default init (std 0.02) a random DSTG's MLM output barely depends on position (KL 2e-5 between an
    # input and the same input 8 positions later), so nothing causal could be read; std 0.2 makes it 0.47 nats.
    return open_encoder(tiny_model("dstg", init_std=0.2).eval())


def batch(size=8, length=16, seed=0):
    tokens = torch.randint(5, 97, (size, length), generator=torch.Generator().manual_seed(seed))
    return tokens, torch.ones_like(tokens, dtype=torch.bool)


def kl_to_counterfactual(encoder, logits, tokens, mask):
    offset = torch.full((tokens.shape[0],), SHIFT)
    with torch.no_grad():
        target = encoder.model(tokens, attention_mask=mask, position_offset=offset).double().log_softmax(-1)[mask]
    log_q = logits.double().log_softmax(-1)[mask]
    return float((target.exp() * (target - log_q)).sum(-1).mean())


def test_the_true_basis_is_the_ap_part_of_full_and_its_interchange_is_the_ap_interchange(dstg):
    true = gt.true_position_basis(dstg)
    d_sem, d_ap = dstg.config.d_sem, dstg.config.d_ap
    assert true.shape == (d_sem + d_ap, d_ap)
    tokens, mask = batch()
    states = dstg.states(tokens, [1], ["full", "ap"], attention_mask=mask)
    assert torch.equal(states[(1, "full")] @ torch.as_tensor(true, dtype=torch.float32), states[(1, "ap")])
    score = gt.subspace_score(true, true)
    assert score["mean_cos2"] == pytest.approx(1) and score["share_inside"] == pytest.approx(1)
    assert gt.true_position_basis(dstg, "ap").shape == (d_ap, d_ap)

    # layer 0: the semantic stream does not depend on position, so swapping the AP coordinates is the counterfactual
    exact = gt.interchange_effect(dstg, 0, true, tokens, mask, SHIFT)
    assert exact["kl"] < 1e-9 and exact["top1_agreement"] == 1 and exact["n_tokens"] == 8 * 16
    assert exact["kl_unedited"] > 0.1 and exact["top1_unedited"] < 0.5  # the shift does move the output

    # layer 1: the same as replacing the AP state through its own hook (a second path into the model)
    effect = gt.interchange_effect(dstg, 1, true, tokens, mask, SHIFT)
    shifted_ap = {}
    with edit_states(dstg, 1, "ap", lambda x: shifted_ap.setdefault("x", x.clone())), torch.no_grad():
        dstg.model(tokens, attention_mask=mask, position_offset=torch.full((8,), SHIFT))
    with edit_states(dstg, 1, "ap", lambda x: shifted_ap["x"].clone()), torch.no_grad():
        through_ap = dstg.mlm_logits(tokens, mask)
    assert effect["kl"] == pytest.approx(kl_to_counterfactual(dstg, through_ap, tokens, mask), rel=1e-6)
    assert 1e-4 < effect["kl"] < effect["kl_unedited"]  # after a block the semantic stream carries position too


def test_a_random_subspace_scores_its_chance_level():
    true = np.eye(32)[:, 24:]  # 8 of 32 coordinates
    narrow = [gt.subspace_score(gt.random_subspace(32, 4, seed), true) for seed in range(40)]
    assert narrow[0]["chance"] == 0.25 and narrow[0]["k"] == 4 and narrow[0]["k_true"] == 8
    assert np.mean([s["share_inside"] for s in narrow]) == pytest.approx(0.25, abs=0.05)
    assert np.mean([s["mean_cos2"] for s in narrow]) == pytest.approx(0.25, abs=0.05)  # k <= k_true: the same
    wide = [gt.subspace_score(gt.random_subspace(32, 16, seed), true) for seed in range(40)]
    assert np.mean([s["share_inside"] for s in wide]) == pytest.approx(0.25, abs=0.05)
    assert np.mean([s["mean_cos2"] for s in wide]) == pytest.approx(0.5, abs=0.05)  # 8 angles, each cos^2 ~ 16/32
    assert not np.allclose(gt.random_subspace(32, 4, 0), gt.random_subspace(32, 4, 1))


def test_das_recovers_a_planted_subspace_of_a_linear_model():
    d, k = 16, 4
    intervene_and_loss, planted = planted_linear_model(d, k)
    fit = gt.fit_rotation(intervene_and_loss, d, k, steps=300, lr=0.03, seed=0)
    assert gt.subspace_score(fit.basis, planted)["mean_cos2"] >= 0.95
    assert fit.losses[-1] < 1e-3 * fit.losses[0] and len(fit.losses) == 300
    assert gt.subspace_score(gt.random_subspace(d, k, 0), planted)["mean_cos2"] < 0.6


def test_das_at_layer_0_of_dstg_finds_the_ap_stream(dstg):
    # At layer 0 the source differs from the base only in its AP coordinates, and interchanging a k = d_ap subspace
    # reproduces the counterfactual only if it is those coordinates: the optimum is the AP stream (measured
    # cos^2 0.99998 after 150 steps; 0.9 leaves room for an optimiser that stops early)
    tokens, mask = batch()
    true = gt.true_position_basis(dstg)
    fit = gt.train_das(dstg, 0, true.shape[1], tokens, mask, SHIFT, steps=150, lr=0.03, seed=0)
    assert gt.subspace_score(fit.basis, true)["mean_cos2"] >= 0.9
    held_out, held_out_mask = batch(seed=1)
    found = gt.interchange_effect(dstg, 0, fit.basis, held_out, held_out_mask, SHIFT)
    control = gt.interchange_effect(dstg, 0, gt.random_subspace(32, true.shape[1], 0), held_out, held_out_mask, SHIFT)
    assert found["kl"] < 0.05 * found["kl_unedited"] and found["top1_agreement"] > 0.9
    assert control["kl"] > 0.5 * control["kl_unedited"] and control["top1_agreement"] < 0.5
    # the model's weights were frozen for the fit only, and took no gradient
    assert all(p.requires_grad and p.grad is None for p in dstg.model.parameters())


def test_das_keeps_the_restart_with_the_lowest_loss(dstg):
    tokens, mask = batch()
    k = gt.true_position_basis(dstg).shape[1]
    single = [gt.train_das(dstg, 0, k, tokens, mask, SHIFT, steps=20, seed=seed) for seed in (3, 4)]
    best = gt.train_das(dstg, 0, k, tokens, mask, SHIFT, steps=20, seed=3, restarts=2)
    assert best.losses[-1] == min(fit.losses[-1] for fit in single)
    with pytest.raises(ValueError, match="restarts"):
        gt.train_das(dstg, 0, k, tokens, mask, SHIFT, steps=1, restarts=0)


def planted_linear_model(d=16, k=4, n=256, seed=0):
    """h = M [z_planted | z_other], y = W h; the counterfactual takes the source's planted coordinates and the base's
    others, so only span(M[:, :k]) interchanges to it.  Returns the DAS closure and the planted basis [d, k]."""
    rng = np.random.default_rng(seed)
    mix = np.linalg.qr(rng.standard_normal((d, d)))[0]
    readout = torch.tensor(rng.standard_normal((24, d)), dtype=torch.float32)
    base, source = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    counterfactual = np.concatenate([source[:, :k], base[:, k:]], axis=1) @ mix.T
    h_base, h_source = (torch.tensor(z @ mix.T, dtype=torch.float32) for z in (base, source))
    target = torch.tensor(counterfactual, dtype=torch.float32) @ readout.T

    def intervene_and_loss(basis):
        h = h_base + (h_source - h_base) @ basis @ basis.T
        return ((h @ readout.T - target) ** 2).mean()
    return intervene_and_loss, mix[:, :k]


def test_boundless_das_learns_the_planted_width_and_subspace():
    intervene_and_loss, planted = planted_linear_model(k=4)
    fit = gt.fit_boundless_rotation(intervene_and_loss, 16, steps=300, width_cost=0.5, seed=0)
    assert fit.basis.shape == (16, 4)  # the width learned from d / 2 = 8, not given
    assert gt.subspace_score(fit.basis, planted)["mean_cos2"] >= 0.95
    assert fit.widths[0] == pytest.approx(8, abs=0.5) and fit.widths[-1] == pytest.approx(4, abs=0.2)
    nothing = float(intervene_and_loss(torch.zeros(16, 1)))  # the loss with nothing interchanged
    assert float(intervene_and_loss(torch.tensor(fit.basis, dtype=torch.float32))) < 1e-3 * nothing
    assert fit.losses[-1] == pytest.approx(0.5 * nothing * 4 / 16, rel=0.05)  # what is left: the 4 axes' price
    # a narrower truth gives a narrower width: the width is read from the model, not from the start
    narrow, planted_two = planted_linear_model(k=2, seed=1)
    assert gt.fit_boundless_rotation(narrow, 16, steps=300, width_cost=0.5, seed=0).basis.shape == (16, 2)
    with pytest.raises(ValueError, match="finite width_cost > 0"):
        gt.fit_boundless_rotation(intervene_and_loss, 16, steps=10, width_cost=0)


def test_boundless_das_at_layer_0_of_dstg_holds_the_ap_stream(dstg):
    # at layer 0 the source differs from the base only along AP: the learned subspace must hold all of it (any
    # semantic axes it keeps change nothing and cost only their price)
    tokens, mask = batch()
    true = gt.true_position_basis(dstg)
    fit = gt.train_boundless_das(dstg, 0, tokens, mask, SHIFT, steps=150, seed=0)
    assert true.shape[1] <= fit.basis.shape[1] < 32
    assert gt.subspace_score(fit.basis, true)["mean_cos2"] >= 0.95  # over the d_AP angles: AP inside the found span
    assert all(p.requires_grad and p.grad is None for p in dstg.model.parameters())


def test_the_sae_method_finds_the_ap_stream_at_layer_0(dstg):
    tokens, mask = batch(size=32, length=16, seed=1)
    X, p = gt.position_states(dstg, 0, tokens, mask)
    true = gt.true_position_basis(dstg)
    basis = gt.sae_position_subspace(X, p, true.shape[1], steps=300)
    assert basis.shape == (32, 8) and np.allclose(basis.T @ basis, np.eye(8))
    assert gt.subspace_score(basis, true)["mean_cos2"] > 0.8  # measured 0.97; chance 0.25
    assert np.allclose(basis, gt.sae_position_subspace(X, p, 8, steps=300))  # seeded


def test_the_state_methods_find_the_ap_stream_at_layer_0(dstg):
    tokens, mask = batch(size=64, length=32, seed=2)
    X, p = gt.position_states(dstg, 0, tokens, mask)
    assert X.shape == (64 * 32, 32) and p.max() == 31
    true = gt.true_position_basis(dstg)
    scores = {name: gt.subspace_score(method(X, p, 8), true)["mean_cos2"]
              for name, method in [("means", gt.position_means_pcs), ("probe", gt.probe_span),
                                   ("leace", gt.leace_subspace)]}
    assert scores["means"] > 0.9 and scores["leace"] > 0.9
    assert scores["probe"] > 0.5  # ridge reads position out of the sampled token embeddings too (measured 0.83)
    for name, method in [("means", gt.position_means_pcs), ("probe", gt.probe_span), ("leace", gt.leace_subspace)]:
        basis = method(X, p, 8)
        assert basis.shape == (32, 8) and np.allclose(basis.T @ basis, np.eye(8)), name


def test_inlp_removes_one_direction_per_round_and_finds_the_ap_stream_at_layer_0(dstg):
    tokens, mask = batch(size=64, length=32, seed=2)
    X, p = gt.position_states(dstg, 0, tokens, mask)
    true = gt.true_position_basis(dstg)
    basis = gt.inlp_subspace(X, p, 8)
    assert basis.shape == (32, 8) and np.allclose(basis.T @ basis, np.eye(8))
    assert gt.subspace_score(basis, true)["mean_cos2"] > 0.5  # measured 0.80; ridge also reads the token sample
    # the first round is the ridge of position itself: its direction is the first column
    centred = X - X.mean(axis=0)
    target = (p - p.mean()) / p.std()
    gram = centred.T @ centred / len(X)
    weights = np.linalg.solve(gram + 1e-3 * np.trace(gram) / 32 * np.eye(32), centred.T @ target / len(X))
    assert abs(basis[:, 0] @ weights) / np.linalg.norm(weights) == pytest.approx(1, abs=1e-8)
    # after k rounds nothing is left along the found directions, so position is predicted no better by them
    nulled = centred - centred @ basis @ basis.T
    assert np.abs(nulled @ basis).max() < 1e-8
    with pytest.raises(ValueError, match="fewer than k = 8"):
        gt.inlp_subspace(X[:, :1].repeat(32, axis=1), p, 8)


def test_the_attribution_matrix_is_the_first_order_change_of_the_interchange_loss(dstg):
    # tr(Q^T S Q) must be the derivative of the loss at eps = 0 when span(Q) is interchanged by a fraction eps
    tokens, mask = batch(size=4, length=16, seed=5)
    layer, k = 1, 4
    S = gt.attribution_matrix(dstg, layer, tokens, mask, SHIFT)
    assert S.shape == (32, 32) and np.allclose(S, S.T)
    offset = torch.full((tokens.shape[0],), SHIFT)
    held = {}

    def keep(x):
        held["source"] = x.detach().clone()
        return x
    with torch.no_grad(), edit_states(dstg, layer, "full", keep):
        dstg.model(tokens, attention_mask=mask, position_offset=offset)

    def loss(Q, eps):
        projection = torch.from_numpy(Q @ Q.T).float()
        with torch.no_grad(), edit_states(dstg, layer, "full", lambda x: x + eps * (held["source"] - x) @ projection):
            logits = dstg.mlm_logits(tokens, mask)
        return kl_to_counterfactual(dstg, logits, tokens, mask) * int(mask.sum())
    for Q in (gt.random_subspace(32, k, 0), gt.attribution_subspace(dstg, layer, k, tokens, mask, SHIFT)):
        slope = (loss(Q, 1e-2) - loss(Q, -1e-2)) / 2e-2
        assert slope == pytest.approx(float(np.trace(Q.T @ S @ Q)), rel=0.05, abs=1e-3)
    # the attribution subspace is the first-order optimum: no other k-subspace is predicted to lower the loss more
    found = gt.attribution_subspace(dstg, layer, k, tokens, mask, SHIFT)
    for candidate in (gt.true_position_basis(dstg)[:, :k], gt.random_subspace(32, k, 1)):
        assert np.trace(found.T @ S @ found) <= np.trace(candidate.T @ S @ candidate) + 1e-12
    assert all(p.requires_grad and p.grad is None for p in dstg.model.parameters())


def test_the_leace_subspace_is_where_concept_erasure_edits(dstg):
    concept_erasure = pytest.importorskip("concept_erasure")
    tokens, mask = batch(size=64, length=8, seed=3)  # 8 positions: one-hot position has rank 7 < d
    X, p = gt.position_states(dstg, 1, tokens, mask)
    one_hot = (p[:, None] == np.arange(8)[None, :]).astype(np.float64)
    fitter = concept_erasure.LeaceFitter(32, 8, method="leace", affine=True, constrain_cov_trace=False,
                                         shrinkage=False, svd_tol=1e-6, dtype=torch.float64)
    left = fitter.update(torch.from_numpy(X), torch.from_numpy(one_hot)).eraser.proj_left.numpy()
    left = left[:, np.abs(left).sum(axis=0) > 0]  # the package zeroes the columns it drops
    assert left.shape[1] == 7
    assert gt.subspace_score(gt.leace_subspace(X, p, 7), left)["mean_cos2"] == pytest.approx(1, abs=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda X, p: gt.probe_span(X, p, 0), r"k = 0: .* integer k in \[1, 32\]"),
    (lambda X, p: gt.leace_subspace(X, p, 33), r"k = 33: .* integer k in \[1, 32\]"),
    (lambda X, p: gt.random_subspace(32, 0), r"k = 0"),
    (lambda X, p: gt.position_means_pcs(np.where(np.arange(32) == 3, np.nan, X), p, 4), "NaN or infinite"),
    (lambda X, p: gt.subspace_score(np.eye(30)[:, :4], np.eye(32)[:, 24:]),
     "found basis has 30 rows but the true basis 32"),
    (lambda X, p: gt.subspace_score(np.eye(32)[:, [0, 1, 1]], np.eye(32)[:, 24:]), "rank-deficient.* only 2"),
    (lambda X, p: gt.subspace_score(np.zeros((32, 0)), np.eye(32)[:, 24:]), r"no columns \(k = 0\)"),
    (lambda X, p: gt.orthonormal_basis(np.ones((4, 5)), "the basis"), "5 columns but only 4 rows"),
    (lambda X, p: gt.position_means_pcs(X[p < 3], p[p < 3], 4), "3 positions span at most 2"),
])
def test_bad_input_is_one_clear_value_error(dstg, call, message):
    tokens, mask = batch(size=4, length=8)
    X, p = gt.position_states(dstg, 0, tokens, mask)
    with pytest.raises(ValueError, match=message):
        call(X, p)


def test_models_without_an_ap_stream_have_no_ground_truth(dstg):
    rope = open_encoder(tiny_model("rope").eval())
    with pytest.raises(EncoderError, match="'rope' model has no AP stream.*DSTG"):
        gt.true_position_basis(rope)
    tokens, mask = batch(size=2, length=8)
    with pytest.raises(EncoderError, match="learned absolute-position table.*not a 'rope' model"):
        gt.interchange_effect(rope, 0, np.eye(32)[:, :4], tokens, mask, SHIFT)
    with pytest.raises(ValueError, match=r"basis has 30 rows but the states are 32 wide"):
        gt.interchange_effect(dstg, 0, np.eye(30)[:, :4], tokens, mask, SHIFT)
    with pytest.raises(EncoderError, match=r"source_shift must be an integer in \[1, 32\]"):
        gt.train_das(dstg, 0, 8, tokens, mask, 33, steps=1)
    with pytest.raises(EncoderError, match="not 'sem'"):
        gt.true_position_basis(dstg, "sem")


# --- score_method: anyone's method against the truth and chance -------------------------------------------------
def test_score_method_the_truth_as_a_method_scores_one_and_the_ap_interchange(dstg):
    tokens, mask = batch(size=8, length=16, seed=4)
    true = gt.true_position_basis(dstg)

    def the_truth(X, p, k):
        return true

    scores = gt.score_method(the_truth, dstg, tokens, mask, layers=[0, 1], source_shift=SHIFT)
    assert list(scores.columns) == gt.SCORE_COLUMNS and len(scores) == 2 * 3
    assert list(scores.method.unique()) == ["the_truth", "ap_coordinates", "random"]
    mine = scores[scores.method == "the_truth"].set_index("layer")
    truth = scores[scores.method == "ap_coordinates"].set_index("layer")
    assert (mine.mean_cos2 == 1).all() and (mine.share_inside == 1).all() and (mine.chance == 8 / 32).all()
    for layer in (0, 1):  # the held-out half (sequences 4..7) scores the interchange: the AP interchange's own KL
        direct = gt.interchange_effect(dstg, layer, true, tokens[4:], mask[4:], SHIFT)
        assert mine.loc[layer, "kl"] == pytest.approx(direct["kl"], rel=1e-9, abs=1e-12)
        assert mine.loc[layer, "kl"] == pytest.approx(truth.loc[layer, "kl"], rel=1e-9, abs=1e-12)
        assert mine.loc[layer, "top1_agreement"] == direct["top1_agreement"]
        assert mine.loc[layer, "n_tokens"] == 4 * 16
    assert mine.loc[0, "kl"] < 1e-9 and mine.loc[0, "top1_agreement"] == 1


def test_score_method_a_random_method_scores_near_chance(dstg):
    tokens, mask = batch(size=64, length=16, seed=5)

    def guess(X, p, k):
        return np.random.default_rng(7).standard_normal((X.shape[1], k))  # not orthonormal: score_method makes it so

    scores = gt.score_method({"guess": guess, "leace": gt.leace_subspace}, dstg, tokens, mask, layers=[0], k=8,
                             source_shift=SHIFT)
    rows = scores.set_index("method")
    assert list(rows.index) == ["guess", "leace", "ap_coordinates", "random"]
    # a random 8-subspace of R^32 against 8 true coordinates: E[cos^2] = 1/4; 8 angles of one draw scatter by ~0.1
    assert abs(rows.loc["guess", "mean_cos2"] - 0.25) < 0.15 and rows.loc["guess", "chance"] == 0.25
    assert rows.loc["guess", "kl"] > 0.5 * rows.loc["guess", "kl_unedited"]  # it interchanges little of position
    assert rows.loc["leace", "mean_cos2"] > 0.8 and rows.loc["leace", "kl"] < 0.25 * rows.loc["leace", "kl_unedited"]


def test_score_method_takes_the_width_a_method_learns_when_it_says_so(dstg):
    tokens, mask = batch(size=4, length=8)

    def three(X, p, k):
        return np.eye(32)[:, -3:]  # 3 of the 8 AP coordinates, whatever k
    three.learns_width = True
    row = gt.score_method(three, dstg, tokens, mask, layers=[0], k=8).set_index("method").loc["three"]
    assert row.k == 3 and row.mean_cos2 == pytest.approx(1) and row.share_inside == pytest.approx(1)
    del three.learns_width
    with pytest.raises(ValueError, match="three's basis has 3 columns but k = 8"):
        gt.score_method(three, dstg, tokens, mask, layers=[0], k=8)


@pytest.mark.parametrize("returned, message", [
    (lambda X, k: np.eye(30)[:, :k], "broken's basis has 30 rows but the states are 32 wide"),
    (lambda X, k: np.eye(32)[:, [0] * k], "broken's basis is rank-deficient: its 8 columns span only 1"),
    (lambda X, k: np.full((32, k), np.nan), "broken's basis has NaN"),
    (lambda X, k: np.eye(32)[:, :3], "broken's basis has 3 columns but k = 8"),
    (lambda X, k: np.eye(32)[0], r"broken's basis must be a matrix \[d, k\]"),
])
def test_score_method_refuses_a_bad_basis_naming_the_method(dstg, returned, message):
    tokens, mask = batch(size=4, length=8)

    def broken(X, p, k):
        return returned(X, k)

    with pytest.raises(ValueError, match=message):
        gt.score_method(broken, dstg, tokens, mask, layers=[0], k=8)


def test_score_method_refuses_a_model_without_ground_truth_and_bad_calls(dstg):
    tokens, mask = batch(size=4, length=8)
    rope = open_encoder(tiny_model("rope").eval())
    with pytest.raises(EncoderError, match="'rope' model has no AP stream.*ground truth needs a DSTG model"):
        gt.score_method(gt.leace_subspace, rope, tokens, mask)
    with pytest.raises(ValueError, match="'random' is a control's"):
        gt.score_method({"random": gt.leace_subspace}, dstg, tokens, mask)
    with pytest.raises(ValueError, match="needs a callable method"):
        gt.score_method("leace", dstg, tokens, mask)
    with pytest.raises(ValueError, match="got 1 sequence; give at least 2"):
        gt.score_method(gt.leace_subspace, dstg, tokens[:1], mask[:1])
    with pytest.raises(EncoderError, match="layer"):
        gt.score_method(gt.leace_subspace, dstg, tokens, mask, layers=[9])


def test_score_method_reads_ap_neobert_on_interchange_alone():
    # AP-NeoBERT has no known position subspace but a learned absolute table, so a shifted source changes its
    # output: each method is scored on interchange beside the random control, its geometry left empty
    ap = open_encoder(tiny_model("ap", init_std=0.2).eval())
    tokens, mask = batch(size=8, length=16)
    assert gt.known_position_basis(ap) is None
    scores = gt.score_method({"leace": gt.leace_subspace}, ap, tokens, mask, layers=[0, 2], k=8, source_shift=SHIFT)
    assert list(scores.method) == ["leace", "random"] * 2 and (scores.k == 8).all()
    assert scores[["mean_cos2", "share_inside", "chance"]].isna().all().all()
    assert (scores.kl_unedited > 0.01).all() and not scores[["kl", "top1_agreement"]].isna().any().any()
    with pytest.raises(ValueError, match="no AP stream, so there is no d_AP to take k from: give k"):
        gt.score_method(gt.leace_subspace, ap, tokens, mask)
    with pytest.raises(EncoderError, match="relative-position model's .* does not change when every position shifts"):
        gt.known_position_basis(open_encoder(tiny_model("rope").eval()))
