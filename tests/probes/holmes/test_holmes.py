"""Holmes format, pooling, probe protocol, aggregation and the bad-input path, on our own fixture."""

import re
import string
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny_model
from dstg_interp.cli.entry import launch
from dstg_interp.data import build_tokenizer, train_tokenizer
from probes.holmes import (HolmesProbe, HolmesRow, HolmesProbeConfig, Target, TaskType, a_vs_b, area_table,
                           encode_dataset, load_benchmark, load_dataset, register_dataset, run_holmes,
                           winning_rates)
from probes.holmes.encode import span_token_indices, tokenize_segments
from probes.holmes.format import HolmesConfig, HolmesDataset
from probes.holmes.protocol import evaluate_features

torch.set_num_threads(1)
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "holmes" / "benchmark"
BAD = {  # dataset -> fragments its one-line message must hold
    "bad-literal": ["'bad-literal'", "row 4", "column 'inputs'", "cannot parse Python literal"],
    "bad-label": ["'bad-label'", "row 7", "column 'label'", "outside the class ids 0..1"],
    "bad-span": ["'bad-span'", "row 2", "column 'inputs'", "outside its sentence"],
    "bad-missing-config": ["'bad-missing-config'", "missing config-none.yaml"],
    "bad-empty-split": ["'bad-empty-split'", "column 'set-0'", "split 'dev' is empty"],
    "bad-task-type": ["'bad-task-type'", "probe_task_type", "unsupported task type 'EDGE_PROBE'"],
}


def test_every_task_type_loads():
    datasets, skipped = load_benchmark(FIXTURE)
    assert {d.task_type for d in datasets} == set(TaskType)
    assert {d.name for d in datasets if d.is_regression} == {"fx-sentence-regression", "fx-pair-tokens-cross"}
    spans = next(d for d in datasets if d.task_type == TaskType.SENTENCE_SPANS)
    assert len(spans.rows[0].targets) == 3 and {t.span_id for t in spans.rows[0].targets} == {0, 1}
    pair = next(d for d in datasets if d.task_type == TaskType.SENTENCE_PAIR_TOKENS_BI)
    assert [t.context_index for t in pair.rows[0].targets] == [0, 1] and len(pair.rows[0].contexts) == 2
    assert all(len(d.split_indices(s)) for d in datasets for s in ("train", "dev", "test"))
    assert sorted(s.dataset for s in skipped) == sorted(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_message(name):
    _, skipped = load_benchmark(FIXTURE, datasets=[name])
    assert len(skipped) == 1 and "\n" not in skipped[0].reason
    for fragment in BAD[name]:
        assert fragment in skipped[0].reason


def test_literal_is_not_evaluated(tmp_path):
    """`inputs` goes through ast.literal_eval: code in a cell is a parse error, never executed."""
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config-none.yaml").write_text("probe_task_type: SENTENCE\nnum_labels: 2\n")
    (folder / "samples.csv").write_text("inputs,set-0,label\n\"__import__('os').getcwd()\",train,0\n")
    with pytest.raises(ValueError, match="row 1.*column 'inputs'"):
        load_dataset(folder)


@pytest.fixture(scope="module")
def span_tokenizer():
    return build_tokenizer(["the", "un", "##believ", "##able", "farmer", "##s", "sold", "a", "boat"]
                           + list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase])


def test_span_picks_exactly_its_subwords(span_tokenizer):
    text = "The unbelievable farmers sold a boat"
    sequence = tokenize_segments(span_tokenizer, (text,), max_length=64)
    pieces = [span_tokenizer.id_to_token(i) for i in sequence.ids]
    assert pieces == ["[CLS]", "the", "un", "##believ", "##able", "farmer", "##s", "sold", "a", "boat", "[SEP]"]
    start = text.index("unbelievable")
    assert span_token_indices(sequence, 0, start, start + len("unbelievable")) == [2, 3, 4]
    farmers = text.index("farmers")
    assert span_token_indices(sequence, 0, farmers, farmers + 7) == [5, 6]
    assert span_token_indices(sequence, 0, farmers, farmers + 6) == [5]  # "farmer" only
    assert span_token_indices(sequence, 0, start + 2, start + 3) == [3]  # one char inside "##believ"


def test_pooled_features_are_means_of_the_right_states(span_tokenizer):
    model = tiny_model("dstg", vocab_size=span_tokenizer.get_vocab_size(), max_positions=64)
    model.tokenizer = span_tokenizer
    a, b = "The unbelievable farmers sold a boat", "the farmer sold a boat"
    s = a.index("unbelievable")
    config = HolmesConfig(TaskType.SENTENCE_PAIR_TOKENS_CROSS, 2, 2)
    row = HolmesRow("0", "train", 0, targets=(Target("unbelievable", 0, s, s + 12), Target("boat", 1, 18, 22)),
                    contexts=(a, b))
    features = encode_dataset(model, HolmesDataset("t", config, [row]), layers="all")
    ids = tokenize_segments(span_tokenizer, (a, b), 64).ids
    _, cache = model.run_with_cache(torch.tensor([ids]), names_filter=lambda n: "resid_post" in n)
    sem = cache["blocks.1.hook_resid_post_sem"][0]
    boat = ids.index(span_tokenizer.token_to_id("boat"), 11)  # the boat of sentence b
    expected = torch.cat([sem[[2, 3, 4]].mean(0), sem[boat]]).numpy()
    np.testing.assert_allclose(features[(2, "sem")][0], expected, rtol=1e-5, atol=1e-6)
    assert features[(2, "full")].shape == (1, 2 * 32) and features[(0, "ap")].shape == (1, 2 * 8)


def _separable(n=480, d=32, seed=0):
    """Class signal spread over every dimension, as in pooled embeddings: Adam at lr 1e-3 moves each
    weight by at most ~lr per step, so the protocol needs many small coordinated moves, not one big one."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X += np.where(y == 1, 1.0, -1.0)[:, None]
    return X, y


def test_probe_separable_task_and_randomized_control():
    X, y = _separable()
    splits = {"train": np.arange(320), "dev": np.arange(320, 400), "test": np.arange(400, 480)}
    table = evaluate_features(X, y, splits, 2, HolmesProbeConfig(seeds=(0, 1, 2)))
    real = table[table.control == "none"]["score"]
    assert real.min() > 0.97
    # A permuted-label probe cannot beat chance (binary macro-F1 <= ~0.5) by much.
    assert table[table.control == "randomization"]["score"].mean() < 0.65
    probe = HolmesProbe(n_labels=2, seeds=(0,)).fit(X[:320], y[:320], X[320:400], y[320:400])
    assert probe.coef_.shape == (1, 32, 2) and probe.score(X[400:], y[400:]) > 0.97


def test_seed_results_do_not_depend_on_batching():
    X, y = _separable(n=200)
    alone = HolmesProbe(n_labels=2, seeds=(3,), max_epochs=3).fit(X[:120], y[:120], X[120:160], y[120:160])
    batched = HolmesProbe(n_labels=2, seeds=(1, 3), max_epochs=3).fit(X[:120], y[:120], X[120:160], y[120:160])
    np.testing.assert_allclose(alone.coef_[0], batched.coef_[1], rtol=1e-5, atol=1e-6)


def test_regression_probe_correlates():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 16)).astype(np.float32)
    target = X.sum(1) * 0.3 + 0.1 * rng.normal(size=400)
    probe = HolmesProbe(n_labels=1, seeds=(0, 1)).fit(X[:300], target[:300], X[300:350], target[300:350])
    # The protocol under-fits regression (Adam at 1e-3 for <= 20 epochs); Pearson still shows the signal.
    assert probe.score(X[350:], target[350:]) > 0.6


def test_aggregation_matches_hand_computation():
    register_dataset("hand-a", "syntax", "bigram shift")
    register_dataset("hand-b", "syntax", "sentence length")
    register_dataset("hand-c", "semantics", "tense")
    scores = pd.DataFrame({
        "dataset": ["hand-a"] * 3 + ["hand-b"] * 3 + ["hand-c"] * 3,
        "entry": ["A", "B", "C"] * 3,
        "score": [0.9, 0.5, 0.5,   0.2, 0.4, 0.6,   0.7, 0.7, 0.7],
    })
    scores["area"] = scores["dataset"].map({"hand-a": "syntax", "hand-b": "syntax", "hand-c": "semantics"})
    scores["phenomenon"] = scores["dataset"].map({"hand-a": "bigram shift", "hand-b": "sentence length",
                                                  "hand-c": "tense"})
    rates = winning_rates(scores).set_index(["dataset", "entry"])["winning_rate"]
    # hand-a: ranks (max ties) A=3, B=3? no: B=C=0.5 -> both rank 2, A rank 3 -> minmax: A 1, B 0, C 0
    assert rates["hand-a", "A"] == 1.0 and rates["hand-a", "B"] == 0.0 and rates["hand-a", "C"] == 0.0
    # hand-b: A<B<C -> 0, 0.5, 1; hand-c: all tie -> no information (NaN)
    assert (rates["hand-b", "A"], rates["hand-b", "B"], rates["hand-b", "C"]) == (0.0, 0.5, 1.0)
    assert rates[["hand-c"]].isna().all()
    areas = area_table(winning_rates(scores))
    assert areas.loc["A", "syntax"] == pytest.approx(50.0) and areas.loc["C", "overall"] == pytest.approx(50.0)
    assert areas.loc["B", "overall"] == pytest.approx(25.0)
    counts = a_vs_b(scores, "A", ["B", "C"]).set_index(["b", "area"])
    # A vs B: bigram shift win, sentence length loss, tense tie
    assert counts.loc[("B", "overall"), ["wins", "ties", "losses"]].tolist() == [1, 1, 1]
    assert counts.loc[("C", "syntax"), ["wins", "ties", "losses", "n_phenomena"]].tolist() == [1, 0, 1, 2]


def test_run_holmes_continues_past_bad_datasets(tmp_path):
    datasets, _ = load_benchmark(FIXTURE)
    texts = [s for d in datasets for r in d.rows for s in r.sentences + r.contexts]
    tokenizer = train_tokenizer(texts, vocab_size=120)
    models = {}
    for variant in ("dstg", "rope"):
        models[variant] = tiny_model(variant, vocab_size=tokenizer.get_vocab_size(), max_positions=64)
        models[variant].tokenizer = tokenizer
    results = run_holmes(models, FIXTURE, config=HolmesProbeConfig(seeds=(0,), max_epochs=2, flash_fraction=None),
                         out_dir=tmp_path, progress=False)
    assert set(results["dataset"]) == {d.name for d in datasets}
    assert set(results.loc[results.model == "dstg", "subspace"]) == {"ap", "sem", "full"}
    assert set(results.loc[results.model == "rope", "subspace"]) == {"full"}
    assert (results["layer"] == 2).all() and set(results["control"]) == {"none", "randomization"}
    skipped = pd.read_csv(tmp_path / "skipped.csv")
    assert sorted(skipped["dataset"]) == sorted(BAD) and len(results.attrs["skipped"]) == len(BAD)
    assert (tmp_path / "config.json").exists() and (tmp_path / "scores.csv").exists()


DOCS_PAGE = Path(__file__).parents[3] / "docs" / "holmes.md"
_DOC_FILE = re.compile(r"^`(mybench/[^`]+)`:\n\n```\w*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_worked_example_of_docs_holmes_md_parses_and_runs(tmp_path, capsys):
    """docs/holmes.md's worked example, written out exactly as the page shows it: the loader reads both
    datasets with nothing skipped, the rows say what the page says, and dstg-probe runs on the folder."""
    files = _DOC_FILE.findall(DOCS_PAGE.read_text())
    assert sorted(name for name, _ in files) == ["mybench/negation/config-none.yaml", "mybench/negation/samples.csv",
                                                 "mybench/verbs/config-none.yaml", "mybench/verbs/samples.csv"]
    for name, text in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
        if name.endswith(".csv"):
            assert len(text.strip().splitlines()) == 6  # the header and five rows
    datasets, skipped = load_benchmark(tmp_path / "mybench")
    assert skipped == [] and [d.name for d in datasets] == ["negation", "verbs"]
    negation, verbs = datasets
    assert negation.task_type == TaskType.SENTENCE and verbs.task_type == TaskType.SENTENCE_TOKENS
    assert [row.split for row in negation.rows] == ["train", "train", "train", "dev", "test"]
    assert negation.rows[0].sentences == ("the dog did not bark",) and list(negation.labels()) == [1, 0, 1, 1, 0]
    for row in verbs.rows:  # every target's offsets cut out its own text from its context sentence
        target = row.targets[0]
        assert row.contexts[target.context_index][target.char_start:target.char_end] == target.text
    assert list(verbs.labels()) == [0, 1, 1, 0, 1]
    out = tmp_path / "out"
    assert launch("dstg-probe", ["--model", "dstg", "--task", "holmes", "--benchmark", str(tmp_path / "mybench"),
                                 "--seeds", "0", "--out", str(out), "--quiet"]) == 0
    scores = pd.read_csv(out / "scores.csv")
    assert sorted(scores["dataset"].unique()) == ["negation", "verbs"]
