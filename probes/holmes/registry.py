"""Dataset -> phenomenon -> area for the 65 Holmes phenomena (68 area/phenomenon pairs).

Source: the Holmes leaderboard (Waldis et al., 2024). Three phenomena sit in two
areas (anaphor agreement, subject-verb agreement, NPI licensing); a dataset belongs to exactly one.
Datasets of our offline suite register themselves here with `register_dataset`, so results from the
real benchmark and from the offline re-creation aggregate through one table.

    from probes.holmes.registry import phenomenon_of, area_of, PHENOMENA
    area_of("blimp-causative")  # 'syntax'
"""

from __future__ import annotations

import re

import pandas as pd

__all__ = ["AREAS", "PHENOMENA", "DATASETS", "register_dataset", "phenomenon_of", "area_of", "phenomena_table"]

AREAS = ("morphology", "syntax", "semantics", "reasoning", "discourse")


def _expand(pattern: str) -> list[str]:
    """Brace expansion, so the leaderboard's `blimp-{a,b}` notation stays readable here."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [name for option in match.group(1).split(",") for name in _expand(head + option + tail)]


# (area, phenomenon) -> Holmes dataset name patterns. `*` on the leaderboard (licensed data) is dropped here.
_HOLMES = {
    ("morphology", "anaphor agreement"): ["blimp-anaphor_{gender,number}_agreement"],
    ("morphology", "determiner-noun agreement"): [
        "blimp-determiner_noun_agreement_{1,2,irregular_1,irregular_2,with_adj_1,with_adj_2,"
        "with_adj_irregular_1,with_adj_irregular_2}", "zorro-agreement_determiner_noun-between_neighbors"],
    ("morphology", "irregular forms"): ["blimp-irregular_past_participle_{adjectives,verbs}"],
    ("morphology", "subject-verb agreement"): [
        "blimp-distractor_agreement_{relational_noun,relative_clause}",
        "blimp-{irregular,regular}_plural_subject_verb_agreement_{1,2}"],
    ("syntax", "anaphor agreement"): ["zorro-anaphor_agreement-pronoun_gender"],
    ("syntax", "argument structure"): [
        "blimp-{animate_subject_passive,animate_subject_trans,causative,drop_argument,inchoative,"
        "intransitive,passive_1,passive_2,transitive}",
        "zorro-argument_structure-{dropped_argument,swapped_arguments,transitive}"],
    ("syntax", "bigram shift"): ["senteval-bigram_shift"],
    ("syntax", "binding"): ["blimp-principle_A_{c_command,case_1,case_2,domain_1,domain_2,domain_3,"
                            "reconstruction}", "zorro-binding-principle_a"],
    ("syntax", "case"): ["zorro-case-subjective_pronoun"],
    ("syntax", "constituent parsing"): ["const", "const_max_depth", "const_node_length"],
    ("syntax", "control/raising"): [
        "blimp-{existential_there_object_raising,existential_there_subject_raising,"
        "expletive_it_object_raising,tough_vs_raising_1,tough_vs_raising_2}"],
    ("syntax", "causative-inchoative alternation"): ["context-verb_causative"],
    ("syntax", "dependency parsing"): ["dep"],
    ("syntax", "ellipsis"): ["blimp-ellipsis_n_bar_{1,2}", "zorro-ellipsis-n_bar"],
    ("syntax", "filler-gap"): [
        "blimp-wh_questions_{object_gap,subject_gap,subject_gap_long_distance}",
        "blimp-wh_vs_that_{no_gap,no_gap_long_distance,with_gap,with_gap_long_distance}",
        "zorro-filler-gap-wh_question_{object,subject}"],
    ("syntax", "island effects"): [
        "blimp-{adjunct_island,complex_NP_island,coordinate_structure_constraint_complex_left_branch,"
        "coordinate_structure_constraint_object_extraction,left_branch_island_echo_question,"
        "left_branch_island_simple_question,sentential_subject_island,wh_island}",
        "zorro-island-effects-{adjunct_island,coordinate_structure_constraint}"],
    ("syntax", "local attractor"): ["zorro-local_attractor-in_question_with_aux"],
    ("syntax", "NPI licensing"): ["blimp-{only_npi_scope,sentential_negation_npi_scope}",
                                  "zorro-npi_licensing-{matrix_question,only_npi_licensor}"],
    ("syntax", "object number"): ["context-object_number", "senteval-obj_number"],
    ("syntax", "part-of-speech"): ["pos", "upos", "xpos"],
    ("syntax", "readability"): ["flesch"],
    ("syntax", "sentence length"): ["senteval-sentence_length"],
    ("syntax", "subject number"): ["context-subject_number", "senteval-subj_number"],
    ("syntax", "subject-verb agreement"): [
        "zorro-agreement_subject_verb-{across_prepositional_phrase,across_relative_clause,"
        "in_question_with_aux,in_simple_question}"],
    ("syntax", "top constituents"): ["senteval-top_constituents"],
    ("syntax", "tree depth"): ["senteval-tree_depth"],
    ("semantics", "complex words"): ["cwi"],
    ("semantics", "coordination inversion"): ["senteval-coordination_inversion"],
    ("semantics", "event structure"): ["event_structure-{distributive,event,has-natural-parts,"
                                       "has-similar-parts,is-dynamic,is-telic}"],
    ("semantics", "factuality"): ["factuality"],
    ("semantics", "genericity"): ["arg-is-{abstract,kind,particular}", "pred-is-{dynamic,hypothetical,particular}"],
    ("semantics", "metaphor"): ["metaphor-{lcc,trofi,vua_pos,vua_verb}"],
    ("semantics", "named entity labeling"): ["ner"],
    ("semantics", "NPI licensing"): [
        "blimp-{matrix_question_npi_licensor_present,npi_present_1,npi_present_2,"
        "only_npi_licensor_present,sentential_negation_npi_licensor_present}"],
    ("semantics", "object animacy"): ["context-object_animacy"],
    ("semantics", "object gender"): ["context-object_gender"],
    ("semantics", "subject animacy"): ["context-subject_animacy"],
    ("semantics", "subject gender"): ["context-subject_gender"],
    ("semantics", "verb dynamic"): ["context-verb_dynamic"],
    ("semantics", "passive"): ["passive"],
    ("semantics", "protoroles"): [
        "protoroles-{awareness,change_of_location,change_of_possession,change_of_state,"
        "change_of_state_continuous,changes_possession,existed_after,existed_before,existed_during,"
        "exists_as_physical,instigation,location_of_event,makes_physical_contact,partitive,"
        "predicate_changed_argument,sentient,stationary,volition,was_for_benefit,was_used}"],
    ("semantics", "quantifiers"): ["blimp-existential_there_quantifiers_{1,2}",
                                   "blimp-superlative_quantifiers_{1,2}",
                                   "zorro-quantifiers-{existential_there,superlative}"],
    ("semantics", "relation classification"): ["relation-classification"],
    ("semantics", "semantic odd man out"): ["senteval-odd_man_out"],
    ("semantics", "semantic role labeling"): ["srl"],
    ("semantics", "sentiment analysis"): ["sentiment-sentence"],
    ("semantics", "synonym/antonym detection"): ["synonym-antonym-hard"],
    ("semantics", "tense"): ["context-verb_tense", "senteval-past_present"],
    ("semantics", "time"): ["time"],
    ("semantics", "word content"): ["senteval-word_content"],
    ("semantics", "word sense"): ["wordsense"],
    ("reasoning", "age comparison"): ["olmpics-number_comparison_age_compare_masked"],
    ("reasoning", "always-never"): ["olmpics-coffee_cats_quantifiers"],
    ("reasoning", "antonym negation"): ["olmpics-antonym_synonym_negation"],
    ("reasoning", "encyclopedic composition"): ["olmpics-composition_v2"],
    ("reasoning", "multi-hop composition"): ["olmpics-compositional_comparison"],
    ("reasoning", "object comparison"): ["olmpics-size_comparison"],
    ("reasoning", "property conjunction"): ["olmpics-conjunction_filt4"],
    ("reasoning", "taxonomy conjunction"): ["olmpics-hypernym_conjunction"],
    ("reasoning", "negation"): ["SemAntoNeg", "{bioscope,fuse}-org-negation", "sherlock-negation",
                                "{bioscope,fuse}-negation-span-{classify,correspondence}"],
    ("reasoning", "speculation"): ["speculation-org", "speculation-span-{classify,correspondence}"],
    ("discourse", "bridging"): ["bridging-{edge,sentence}"],
    ("discourse", "coreference"): ["coref"],
    ("discourse", "discourse connective"): ["discourse-connective"],
    ("discourse", "discourse representation theory"): [
        "drt-{arg-correspondence,arg-rel,distance,explicit-class,explicit-coarse-class,implicit-class,"
        "implicit-coarse-class,arg-order}"],
    ("discourse", "next sentence prediction"): ["next-sentence-prediction"],
    ("discourse", "RST"): ["gum-rst-edu-{count,depth,type,distance,relation,relation-group,successively}",
                           "rst-edu-{count,depth,type,distance,relation,relation-group,successively}"],
    ("discourse", "sentence order"): ["ordering"],
}

#: (area, phenomenon) pairs in leaderboard order; 68 pairs, 65 distinct phenomenon names.
PHENOMENA: tuple[tuple[str, str], ...] = tuple(_HOLMES)
#: dataset name -> (area, phenomenon)
DATASETS: dict[str, tuple[str, str]] = {
    name: key for key, patterns in _HOLMES.items() for pattern in patterns for name in _expand(pattern)}


def register_dataset(name: str, area: str, phenomenon: str) -> None:
    """Add a dataset (e.g. from the offline suite) under an existing Holmes phenomenon."""
    if (area, phenomenon) not in _HOLMES:
        raise ValueError(f"({area!r}, {phenomenon!r}) is not one of the Holmes area/phenomenon pairs")
    DATASETS[name] = (area, phenomenon)


def phenomenon_of(dataset: str) -> str | None:
    return DATASETS.get(dataset, (None, None))[1]


def area_of(dataset: str) -> str | None:
    return DATASETS.get(dataset, (None, None))[0]


def phenomena_table():
    """One row per (area, phenomenon) with its number of Holmes datasets."""
    counts = {key: 0 for key in _HOLMES}
    for key in DATASETS.values():
        counts[key] += 1
    return pd.DataFrame([{"area": a, "phenomenon": p, "n_datasets": n} for (a, p), n in counts.items()])
