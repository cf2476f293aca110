"""Holmes readings a researcher can trust: the test over training seeds (tie inside the seed spread, win far
outside it), the reference protocol against an independent implementation of the benchmark's published
algorithm, and the train split never cut behind a user's back."""

import argparse
import math

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import f1_score

from probes.holmes.protocol import HolmesProbeConfig, evaluate_features
from probes.holmes.run import flash_fraction_for
from probes.holmes.significance import seed_test, seed_test_counts, variant_of

torch.set_num_threads(1)


# --- the seed test -------------------------------------------------------------------------------
def seed_scores(gaps: dict, spread: float = 0.02, n_seeds: int = 3, seed: int = 0) -> pd.DataFrame:
    """dataset_scores-shaped rows: variants a and b, ``n_seeds`` training seeds each, two datasets per
    phenomenon; b's score on phenomenon p is a's shifted by -gaps[p]; seed-to-seed sd ``spread``."""
    rng = np.random.default_rng(seed)
    rows = []
    for variant, sign in (("a", 0.0), ("b", 1.0)):
        for s in range(n_seeds):
            model = variant if s == 0 else f"{variant}-seed{s}"
            for phenomenon, gap in gaps.items():
                for k in range(2):
                    rows.append(dict(model=model, dataset=f"{phenomenon}-{k}", layer=4, subspace="full", area="syntax",
                                     phenomenon=phenomenon, score=0.6 - sign * gap + spread * rng.standard_normal()))
    return pd.DataFrame(rows)


def test_seed_test_tie_inside_the_spread_win_far_outside():
    tests = seed_test(seed_scores({"close": 0.005, "far": 0.20, "behind": -0.20}), "a", ["b"])
    outcome = tests[tests.area == "syntax"].set_index("phenomenon").outcome
    assert outcome.to_dict() == {"behind": "loss", "close": "tie", "far": "win"}
    far = tests[(tests.phenomenon == "far") & (tests.area == "syntax")].iloc[0]
    assert far.seeds_a == far.seeds_b == 3 and far.ci_low > 0 and far.difference == pytest.approx(0.2, abs=0.05)
    counts = seed_test_counts(tests).set_index("area")
    assert counts.loc["overall", ["wins", "ties", "losses", "n_phenomena"]].tolist() == [1, 1, 1, 3]
    assert counts.loc["overall", "margin"] == 0.01


def test_seed_test_margin():
    """A consistent difference smaller than the margin is a tie, however small the spread."""
    tests = seed_test(seed_scores({"p": 0.008}, spread=1e-4), "a", ["b"], margin=0.01)
    assert set(tests.outcome) == {"tie"} and (tests.ci_low > 0).all()
    assert set(seed_test(seed_scores({"p": 0.008}, spread=1e-4), "a", ["b"], margin=0.0).outcome) == {"win"}


def test_seed_test_needs_two_seeds():
    with pytest.raises(ValueError, match="at least 2 training seeds of every variant; 'a' has 1"):
        seed_test(seed_scores({"p": 0.1}, n_seeds=1), "a", ["b"])


def test_variant_of():
    assert variant_of("dstg-seed2") == ("dstg", 2) and variant_of("rope") == ("rope", 0)


# --- the reference protocol against the published algorithm ---------------------------------------
def reference_probe_scores(X, y, splits, n_labels, seeds):
    """holmes-evaluation's linear probe, written from its published description (Holmes-Benchmark/
    holmes-evaluation, GeneralProbeWorker): Dropout(0.2) -> Linear; softmax of the outputs, then
    CrossEntropyLoss (classification) or SmoothL1Loss on raw targets (regression); Adam lr 1e-3 with
    transformers' linear warm-up (10% of 20 epochs of steps) and decay, stepped every batch; batch 16,
    shuffled; at most 20 epochs; dev loss after each epoch; the best dev-loss weights are tested, and
    training stops after 5 epochs without improvement; raw features; macro-F1 or Pearson r.  One plain
    torch loop per seed."""
    regression = n_labels == 1
    X = torch.tensor(X, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.float32 if regression else torch.long)
    train, dev, test = (torch.as_tensor(splits[k]) for k in ("train", "dev", "test"))
    scores = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Dropout(0.2), torch.nn.Linear(X.shape[1], 1 if regression else n_labels))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        total = math.ceil(len(train) / 16) * 20
        warmup = int(0.1 * total)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: step / max(1, warmup) if step < warmup
                                                     else max(0.0, (total - step) / max(1, total - warmup)))

        def loss_of(out, target):
            if regression:
                return torch.nn.functional.smooth_l1_loss(out[:, 0], target)
            return torch.nn.functional.cross_entropy(out.softmax(-1), target)

        best, best_state, waiting = math.inf, None, 0
        for _ in range(20):
            model.train()
            for batch in train[torch.randperm(len(train))].split(16):
                loss = loss_of(model(X[batch]), y[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
            model.eval()
            with torch.no_grad():
                dev_loss = float(loss_of(model(X[dev]), y[dev]))
            if dev_loss < best:
                best, waiting = dev_loss, 0
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
            else:
                waiting += 1
                if waiting >= 5:
                    break
        model.load_state_dict(best_state)
        with torch.no_grad():
            out = model(X[test])
        if regression:
            scores.append(float(np.corrcoef(out[:, 0].numpy(), y[test].numpy())[0, 1]))
        else:
            scores.append(f1_score(y[test].numpy(), out.argmax(-1).numpy(), average="macro"))
    return np.array(scores)


def fixture(regression: bool, seed: int = 0):
    """Raw-scale features with a large shared offset (as a pre-norm residual stream has) that carry the
    label weakly: the regime where the protocols differ."""
    rng = np.random.default_rng(seed)
    n, d = 360, 16
    latent = rng.standard_normal(n)
    X = 4.0 + rng.standard_normal((n, d)) * 0.5
    X[:, :3] += 0.5 * latent[:, None]
    if regression:
        y = 50 + 15 * latent + 5 * rng.standard_normal(n)  # a 0-100 target, as Flesch
        n_labels = 1
    else:
        y = np.digitize(latent + 0.5 * rng.standard_normal(n), [-0.8, 0.0, 0.8])  # 4 classes
        n_labels = 4
    splits = {"train": np.arange(240), "dev": np.arange(240, 300), "test": np.arange(300, 360)}
    return X.astype(np.float32), y, splits, n_labels


@pytest.mark.parametrize("regression", [False, True])
def test_reference_protocol_reproduces_the_reference_algorithm(regression):
    X, y, splits, n_labels = fixture(regression)
    seeds = (0, 1, 2, 3, 4)
    ours = evaluate_features(X, y, splits, n_labels, HolmesProbeConfig(seeds=seeds, randomized_control=False))
    ours = ours.score.to_numpy()
    reference = reference_probe_scores(X, y, splits, n_labels, seeds)
    noise = math.sqrt(ours.var(ddof=1) / 5 + reference.var(ddof=1) / 5)
    assert abs(ours.mean() - reference.mean()) < 2 * noise + 0.01, (ours, reference)
    if not regression:  # the standardised variant scores another number on the same fixture: the protocol matters
        standardised = evaluate_features(X, y, splits, n_labels, HolmesProbeConfig(seeds=seeds, randomized_control=False,
                                                                             protocol="standardised")).score.to_numpy()
        assert standardised.mean() - reference.mean() > 2 * noise + 0.01, (standardised, reference)


def test_protocol_names_and_fields():
    assert HolmesProbeConfig().protocol == "reference" and HolmesProbeConfig().standardize is False and HolmesProbeConfig().double_softmax
    standardised = HolmesProbeConfig(protocol="standardised")
    assert standardised.standardize is True and standardised.double_softmax is False
    with pytest.raises(ValueError, match="unknown Holmes protocol 'ours'"):
        HolmesProbeConfig(protocol="ours")


def test_benchmark_folders_are_never_cut_by_default():
    assert HolmesProbeConfig().flash_fraction is None
    assert flash_fraction_for("some/flash-holmes") is None  # FlashHolmes files are already cut
    assert flash_fraction_for(None) == 1 / 32 and flash_fraction_for(None, full=True) is None  # the offline suite
    assert flash_fraction_for("some/holmes", 0.25) == 0.25
    with pytest.raises(ValueError, match="--full and --flash-fraction"):
        flash_fraction_for(None, 0.5, full=True)


def test_cli_flags(capsys):
    from dstg_interp.cli.holmes import build_parser, parse_args

    config = parse_args(["run", "--model", "dstg", "--benchmark", "somewhere"]).config()
    assert config.probe.flash_fraction is None and config.probe.protocol == "reference"
    args = build_parser().parse_args(["run", "--model", "dstg", "--flash-fraction", "0.5", "--protocol", "standardised"])
    config = parse_args(["run", "--model", "dstg", "--flash-fraction", "0.5", "--protocol", "standardised"]).config()
    assert config.probe.flash_fraction == 0.5 and config.probe.standardize
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--model", "dstg", "--flash-fraction", "2"])
    assert "expected a fraction in (0, 1]" in capsys.readouterr().err
    assert isinstance(args, argparse.Namespace)
