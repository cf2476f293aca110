"""WordNet-based and template-based builders (semantics and reasoning areas).

Items follow builders.py: `(sentences, label)` or `(targets, contexts, label)`, grouped by split unit.
"""

from __future__ import annotations

import re

import numpy as np

from probes.holmes.suite.sources import WordNet

# Ordered by typical size, smallest first (our own list; comparisons use index distance >= 3 to avoid
# borderline pairs).
SIZES = ("grain of sand ant bee mouse frog sparrow rabbit cat dog sheep pig horse cow car elephant bus "
         "house whale church ship mountain").split()
SIZES = ["grain of sand"] + SIZES[3:]
PEOPLE = ("Anna Ben Clara David Emma Frank Grace Henry Iris Jack Kate Leo Mia Noah Olga Paul Rosa Sam Tina "
          "Victor").split()
WORD_SENSE_LEXNAMES = ("noun.act", "noun.artifact", "noun.person", "noun.communication", "noun.state",
                       "noun.attribute", "noun.location", "noun.group")


def _antonym_pairs(wordnet) -> list[tuple[str, str]]:
    adjectives = wordnet["adj"]
    pairs = set()
    for synset in adjectives.values():
        for source, target in synset.antonyms:
            if target in adjectives and 0 <= source < len(synset.lemmas):
                a = synset.lemmas[source]
                for b in adjectives[target].lemmas[:1]:
                    if " " not in a + b and a.isalpha() and b.isalpha():
                        pairs.add(tuple(sorted((a, b))))
    return sorted(pairs)


def synonym_antonym(wordnet: WordNet, rng: np.random.Generator, n: int) -> list:
    """Two adjectives -> synonyms (same synset, 0) or antonyms (WordNet `!` link, 1)."""
    antonyms = _antonym_pairs(wordnet)
    synonyms = sorted({(s.lemmas[0], s.lemmas[i]) for s in wordnet["adj"].values() for i in range(1, len(s.lemmas))
                       if " " not in s.lemmas[0] + s.lemmas[i] and s.lemmas[0].isalpha() and s.lemmas[i].isalpha()
                       and s.lemmas[0] != s.lemmas[i]})
    out = []
    for label, pool in ((0, synonyms), (1, antonyms)):
        for i in rng.choice(len(pool), min(n // 2, len(pool)), replace=False):
            a, b = pool[i]
            out.append([((a, b) if rng.random() < 0.5 else (b, a), label)])
    return out


def word_sense(wordnet: WordNet, rng: np.random.Generator, n: int) -> tuple[list, list[str]]:
    """Target noun in a WordNet example sentence -> the lexicographer class (supersense) of that sense.
    Only nouns with senses in at least two of the classes, so the word form alone cannot decide."""
    lexnames_of = {}
    for synset in wordnet["noun"].values():
        for lemma in synset.lemmas:
            lexnames_of.setdefault(lemma, set()).add(synset.lexname)
    items = []
    for synset in wordnet["noun"].values():
        if synset.lexname not in WORD_SENSE_LEXNAMES:
            continue
        for example in synset.examples:
            for lemma in synset.lemmas:
                if " " in lemma or len(lexnames_of[lemma] & set(WORD_SENSE_LEXNAMES)) < 2:
                    continue
                match = re.search(r"\b%s\b" % re.escape(lemma), example, flags=re.IGNORECASE)
                if match and len(example.split()) >= 4:
                    items.append((((lemma, 0, match.start(), match.end()),), (example,),
                                  WORD_SENSE_LEXNAMES.index(synset.lexname)))
                    break
    per_label = {k: [] for k in range(len(WORD_SENSE_LEXNAMES))}
    for i in rng.permutation(len(items)):
        if len(per_label[items[i][-1]]) < n // len(WORD_SENSE_LEXNAMES):
            per_label[items[i][-1]].append([items[i]])
    return [g for k in per_label for g in per_label[k]], list(WORD_SENSE_LEXNAMES)


def antonym_negation(wordnet: WordNet, rng: np.random.Generator, n: int) -> list:
    """oLMpics-style: "It was not A, it was really B." is consistent when B is A's antonym (label 0);
    "It was really A, it was really B." contradicts itself (label 1)."""
    pairs = _antonym_pairs(wordnet)
    out = []
    for k, i in enumerate(rng.choice(len(pairs), min(n, len(pairs)), replace=False)):
        a, b = pairs[i] if rng.random() < 0.5 else pairs[i][::-1]
        first = "not" if k % 2 == 0 else "really"
        out.append([((f"It was {first} {a}, it was really {b}.",), k % 2)])
    return out


def age_comparison(rng: np.random.Generator, n: int) -> list:
    """"A 24 year old person is older than a 31 year old person." -> true (0) / false (1)."""
    out = []
    for _ in range(n):
        a, b = rng.choice(np.arange(5, 90), 2, replace=False)
        relation = "older" if rng.random() < 0.5 else "younger"
        truth = (a > b) == (relation == "older")
        out.append([((f"A {a} year old person is {relation} than a {b} year old person.",), int(not truth))])
    return out


def size_comparison(rng: np.random.Generator, n: int) -> list:
    """"The mouse is bigger than the horse." -> true (0) / false (1), from the size-ordered list."""
    out = []
    for _ in range(n):
        i, j = rng.choice(len(SIZES), 2, replace=False)
        if abs(i - j) < 3:
            continue
        relation = "bigger" if rng.random() < 0.5 else "smaller"
        truth = (i > j) == (relation == "bigger")
        out.append([((f"The {SIZES[i]} is {relation} than the {SIZES[j]}.",), int(not truth))])
    return out

