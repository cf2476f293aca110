"""Offline-suite builders on tiny sources written here (no registry access), the written format, MDL."""

import numpy as np
import torch

from probes.holmes import HolmesProbeConfig, evaluate_features, load_dataset
from probes.holmes.format import TaskType
from probes.holmes.suite import SUITE
from probes.holmes.suite.build import _to_rows
from probes.holmes.suite import builders as B
from probes.holmes.suite import lexical as L
from probes.holmes.format import write_dataset
from probes.holmes.registry import area_of
from probes.holmes.suite.sources import TaggedSentence

torch.set_num_threads(1)


def tagged(text_tags: str) -> TaggedSentence:
    pairs = [token.rsplit("/", 1) for token in text_tags.split()]
    return TaggedSentence(tuple(w for w, _ in pairs), tuple(t for _, t in pairs), "x")


BROWN = [tagged(s) for s in (
    "This/dt farmer/nn sold/vbd a/at boat/nn ./.",
    "The/at farmers/nns were/bed tired/jj ./.",
    "He/pps has/hvz taken/vbn the/at road/nn home/nr ./.",
    "The/at sailor/nn was/bedz not/* seen/vbn again/rb ./.",
    "They/ppss found/vbd themselves/ppls alone/jj at/in night/nn ./.",
)] * 4
PARAGRAPHS = [("d1", ["The mill stood by the river.", "It was built in 1820 by a farmer.",
                      "Later it burned down in a storm.", "Nobody rebuilt it after that."])] * 20


def test_minimal_pairs_swap_exactly_one_word():
    rng = np.random.default_rng(0)
    for builder, swapped in ((B.det_noun, ("This", "These")), (B.subject_verb, ("were", "was")),
                             (B.irregular, ("taken", "took")), (B.anaphor, ("themselves", "himself")),
                             (B.case, ("He", "Him"))):
        groups = builder(BROWN, rng, 4)
        assert groups, builder.__name__
        (good, label_good), (bad, label_bad) = groups[0]
        assert (label_good, label_bad) == (0, 1)
        diff = [(a, b) for a, b in zip(good[0].split(), bad[0].split()) if a != b]
        assert diff == [swapped], (builder.__name__, diff)


def test_gold_tag_labels():
    rng = np.random.default_rng(0)
    tense = {item[0][0]: item[1] for g in B.tense(BROWN, rng, 40) for item in g}
    assert tense["This farmer sold a boat ."] == 0 and tense["He has taken the road home ."] == 1
    passive = {item[0][0]: item[1] for g in B.passive(BROWN, rng, 40) for item in g}
    assert passive["The sailor was not seen again ."] == 1 and passive["This farmer sold a boat ."] == 0
    negation = {item[0][0]: item[1] for g in B.negation(BROWN, rng, 40) for item in g}
    assert negation["The sailor was not seen again ."] == 1
    items, labels = B.part_of_speech(BROWN, rng, 10)
    for (targets, contexts, label), in items:
        text, _, start, end = targets[0]
        assert contexts[0][start:end] == text and labels[label] in B.COARSE_POS


def test_sentence_order_spans_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    groups = B.sentence_order(PARAGRAPHS, rng, 20)
    rows = _to_rows(groups, TaskType.SENTENCE_TOKENS, rng)
    write_dataset(tmp_path / "offline-sentence_order", TaskType.SENTENCE_TOKENS, 4, rows, ["1", "2", "3", "4"])
    dataset = load_dataset(tmp_path / "offline-sentence_order")
    for row in dataset.rows:
        target = row.targets[0]
        assert row.contexts[0][target.char_start:target.char_end] == target.text
        assert PARAGRAPHS[0][1][row.label] == target.text
    assert {r.label for r in dataset.rows} == {0, 1, 2, 3}


def test_templates_are_true_or_false_as_labelled():
    rng = np.random.default_rng(0)
    for (sentence,), label in (g[0] for g in L.age_comparison(rng, 50)):
        a, relation, b = int(sentence.split()[1]), sentence.split()[6], int(sentence.split()[9])
        assert ((a > b) == (relation == "older")) == (label == 0)
    for (sentence,), label in (g[0] for g in L.size_comparison(rng, 50)):
        words = sentence.rstrip(".").split(" is ")
        x, rest = words[0][4:], words[1].split(" than the ")
        bigger = L.SIZES.index(x) > L.SIZES.index(rest[1])
        assert (bigger == (rest[0] == "bigger")) == (label == 0)


def test_every_suite_dataset_is_registered():
    assert {area_of(d.name) for d in SUITE} == {"morphology", "syntax", "semantics", "reasoning", "discourse"}
    assert len({d.phenomenon for d in SUITE}) == len(SUITE)


def test_mdl_online_code_in_bits():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 600)
    X = (rng.normal(size=(600, 16)) + np.where(y == 1, 1.0, -1.0)[:, None]).astype(np.float32)
    splits = {"train": np.arange(400), "dev": np.arange(400, 500), "test": np.arange(500, 600)}
    table = evaluate_features(X, y, splits, 2, HolmesProbeConfig(seeds=(0,), mdl=True, randomized_control=False,
                                                           max_epochs=5))
    code = table.set_index("metric")["score"]
    assert code["mdl_uniform_bits"] == 400.0
    assert code["mdl_online_bits"] < 0.5 * code["mdl_uniform_bits"] and code["mdl_compression"] > 2


def test_the_suite_face_serves_the_catalogue_and_the_builder():
    import probes.holmes.suite as face
    from probes.holmes.suite import build, catalog

    for name in face.__all__:
        assert getattr(face, name) is getattr(catalog if hasattr(catalog, name) else build, name), name
    assert {d.task_type for d in catalog.SUITE} == {catalog.SENTENCE, catalog.TOKENS, catalog.PAIR_BI, catalog.PAIR_CROSS}
    assert not [alias for alias in vars(catalog) if len(alias) <= 2 and not alias.startswith("_")]  # full names only
