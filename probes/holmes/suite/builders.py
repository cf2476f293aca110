"""One builder per offline dataset: real sentences + real annotation -> labelled items.

A builder returns a list of *groups*; a group is a list of items that must share a split (the two
members of a minimal pair). An item is `(sentences, label)` for sentence tasks or
`(targets, contexts, label)` for token tasks. Every builder draws only from its `rng`, so the suite is
deterministic given the seed and the pinned sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from probes.holmes.suite.sources import Paragraphs, TaggedSentence

# Brown tag groups used below (Brown tagset; suffixes -tl/-hl/-nc already stripped).
SG_NOUN, PL_NOUN = {"nn"}, {"nns"}
PAST = {"vbd", "bedz", "bed", "hvd", "dod"}
PRESENT = {"vbz", "bez", "ber", "bem", "hvz", "doz"}
COARSE_POS = {"NOUN": ("nn", "nns", "nr", "nrs"), "PROPN": ("np", "nps"), "VERB": ("vb", "vbd", "vbg", "vbn", "vbz"),
              "AUX": ("be", "bed", "bedz", "beg", "bem", "ben", "ber", "bez", "hv", "hvd", "hvg", "hvn", "hvz",
                      "do", "dod", "doz", "md"),
              "ADJ": ("jj", "jjr", "jjs", "jjt"), "ADV": ("rb", "rbr", "rbt", "ql", "wrb", "rn"), "ADP": ("in",),
              "DET": ("at", "ap", "dt", "dti", "dts", "dtx", "abn", "abx", "wdt"),
              "PRON": ("pps", "ppss", "ppo", "pp$", "ppl", "ppls", "pn", "wps", "wpo"), "CONJ": ("cc", "cs"),
              "NUM": ("cd", "od")}
TAG_TO_POS = {tag: pos for pos, tags in COARSE_POS.items() for tag in tags}
# Irregular verbs: past tense -> past participle (our own list of common English forms).
IRREGULAR = dict(pair.split(":") for pair in (
    "took:taken wrote:written ate:eaten gave:given saw:seen went:gone spoke:spoken broke:broken chose:chosen "
    "drove:driven fell:fallen forgot:forgotten froze:frozen hid:hidden rode:ridden rose:risen shook:shaken "
    "stole:stolen swore:sworn tore:torn wore:worn knew:known grew:grown threw:thrown flew:flown drew:drawn "
    "began:begun sang:sung swam:swum rang:rung drank:drunk sank:sunk did:done forgave:forgiven bit:bitten "
    "hid:hidden showed:shown blew:blown mistook:mistaken undertook:undertaken overtook:overtaken").split())
PARTICIPLE_TO_PAST = {v: k for k, v in IRREGULAR.items()}
SWAPS_DET = {"this": "these", "these": "this", "that": "those", "those": "that"}
SWAPS_AGREE = {"is": "are", "are": "is", "was": "were", "were": "was", "has": "have", "have": "has",
               "does": "do", "do": "does"}
SWAPS_REFLEXIVE = {"himself": "themselves", "herself": "themselves", "itself": "themselves",
                   "themselves": "himself"}
SUBJECT_CASE = {"he": "him", "she": "her", "they": "them", "we": "us", "i": "me"}
CONNECTIVES = ("however", "therefore", "thus", "also", "for example", "in addition", "instead", "meanwhile",
               "finally", "moreover")


def _cap(word: str, like: str) -> str:
    return word.capitalize() if like[:1].isupper() else word


def _replace_word(sentence, index: int, new: str) -> str:
    words = list(sentence.words)
    words[index] = _cap(new, words[index])
    return " ".join(words)


def _short(sentences, low=5, high=30):
    return [s for s in sentences if low <= len(s.words) <= high]


def minimal_pairs(brown: list[TaggedSentence], rng: np.random.Generator, n: int,
                  find: Callable[[TaggedSentence], tuple[int, str] | None]) -> list:
    """Acceptable Brown sentence (label 0) + its perturbation (label 1), as in BLiMP's label coding.
    `find(sentence)` returns (index, replacement) or None."""
    groups = []
    for sentence in rng.permutation(len(brown)):
        sentence = brown[sentence]
        hit = find(sentence)
        if hit is None:
            continue
        groups.append([((sentence.text,), 0), ((_replace_word(sentence, *hit),), 1)])
        if len(groups) * 2 >= n:
            break
    return groups


def det_noun(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    def find(s):
        for i in range(len(s.words) - 1):
            if s.words[i].lower() in SWAPS_DET and s.tags[i] in ("dt", "dts") and s.tags[i + 1] in ("nn", "nns"):
                return i, SWAPS_DET[s.words[i].lower()]
    return minimal_pairs(_short(brown), rng, n, find)


def subject_verb(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    def find(s):
        for i in range(1, len(s.words)):
            if s.words[i].lower() in SWAPS_AGREE and s.tags[i - 1] in ("nn", "nns") and s.tags[i] in PRESENT | PAST | {"hv", "do"}:
                return i, SWAPS_AGREE[s.words[i].lower()]
    return minimal_pairs(_short(brown), rng, n, find)


def irregular(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    def find(s):
        for i, (w, t) in enumerate(zip(s.words, s.tags)):
            if t == "vbn" and w.lower() in PARTICIPLE_TO_PAST and PARTICIPLE_TO_PAST[w.lower()] != w.lower():
                return i, PARTICIPLE_TO_PAST[w.lower()]
    return minimal_pairs(_short(brown), rng, n, find)


def anaphor(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    def find(s):
        for i, (w, t) in enumerate(zip(s.words, s.tags)):
            if t in ("ppl", "ppls") and w.lower() in SWAPS_REFLEXIVE:
                return i, SWAPS_REFLEXIVE[w.lower()]
    return minimal_pairs(_short(brown), rng, n, find)


def case(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    def find(s):
        if s.tags[0] in ("pps", "ppss") and s.words[0].lower() in SUBJECT_CASE:
            return 0, SUBJECT_CASE[s.words[0].lower()]
    return minimal_pairs(_short(brown), rng, n, find)


def _balanced(candidates, rng, n, n_labels):
    """Up to n/n_labels items per label, drawn in random order."""
    per_label = {k: [] for k in range(n_labels)}
    for i in rng.permutation(len(candidates)):
        item = candidates[i]
        if len(per_label[item[-1]]) < n // n_labels:
            per_label[item[-1]].append([item])
    return [g for k in per_label for g in per_label[k]]


def first_finite(s: TaggedSentence, tags: set[str]) -> int | None:
    return next((i for i, t in enumerate(s.tags) if t in tags), None)


def subject_number(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    items = []
    for s in _short(brown):
        i = first_finite(s, PRESENT | PAST)
        if i and s.tags[i - 1] in SG_NOUN | PL_NOUN:
            items.append(((s.text,), int(s.tags[i - 1] in PL_NOUN)))
    return _balanced(items, rng, n, 2)


def object_number(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    items = []
    for s in _short(brown):
        i = first_finite(s, {"vbd", "vbz"})
        if i is None:
            continue
        j = i + 1
        while j < len(s.tags) and s.tags[j] in ("at", "ap", "jj", "cd", "pp$", "dt", "dts"):
            j += 1
        if j < len(s.tags) and s.tags[j] in SG_NOUN | PL_NOUN and (j + 1 == len(s.tags) or s.tags[j + 1] not in ("nn", "nns")):
            items.append(((s.text,), int(s.tags[j] in PL_NOUN)))
    return _balanced(items, rng, n, 2)


def tense(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    items = []
    for s in _short(brown):
        i = first_finite(s, PAST | PRESENT)
        if i is not None:
            items.append(((s.text,), int(s.tags[i] in PRESENT)))
    return _balanced(items, rng, n, 2)


def passive(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    items = []
    for s in _short(brown):
        be = [i for i, t in enumerate(s.tags) if t.startswith("be")]
        is_passive = any(s.tags[j] == "vbn" for i in be for j in (i + 1, i + 2) if j < len(s.tags)
                         and all(t in ("vbn", "rb", "*") for t in s.tags[i + 1:j + 1]))  # "was not seen"
        if is_passive or "vbn" not in s.tags:  # active = no participle at all, so no unclear cases
            items.append(((s.text,), int(is_passive)))
    return _balanced(items, rng, n, 2)


def negation(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    items = [((s.text,), int("*" in s.tags or any(t.endswith("*") for t in s.tags))) for s in _short(brown)]
    return _balanced(items, rng, n, 2)


def odd_man_out(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> list:
    nouns = sorted({w.lower() for s in brown for w, t in zip(s.words, s.tags) if t == "nn" and w.isalpha()})
    items = []
    for k in rng.permutation(len(brown))[: 4 * n]:
        s = brown[k]
        if not 5 <= len(s.words) <= 30:
            continue
        positions = [i for i, t in enumerate(s.tags) if t == "nn" and s.words[i].isalpha()]
        if not positions:
            continue
        if len(items) % 2:
            i = positions[rng.integers(len(positions))]
            items.append(((_replace_word(s, i, nouns[rng.integers(len(nouns))]),), 1))
        else:
            items.append(((s.text,), 0))
    return [[item] for item in items[:n]]


def part_of_speech(brown: list[TaggedSentence], rng: np.random.Generator, n: int) -> tuple[list, list[str]]:
    labels = sorted(COARSE_POS)
    items = []
    for k in rng.permutation(len(brown)):
        s = brown[k]
        eligible = [i for i, t in enumerate(s.tags) if t in TAG_TO_POS]
        if not 5 <= len(s.words) <= 40 or not eligible:
            continue
        i = eligible[rng.integers(len(eligible))]
        start, end = s.offsets()[i]
        items.append([(((s.words[i], 0, start, end),), (s.text,), labels.index(TAG_TO_POS[s.tags[i]]))])
        if len(items) >= n:
            break
    return items, labels


# ----------------------------------------------------------------------------- en-mix sentences

def _sentences(paragraphs, low=6, high=35):
    return [s for _, p in paragraphs for s in p if low <= len(s.split()) <= high]


def bigram_shift(paragraphs: Paragraphs, rng: np.random.Generator, n: int) -> list:
    pool = _sentences(paragraphs)
    out = []
    for k, i in enumerate(rng.choice(len(pool), n, replace=False)):
        words = pool[i].split()
        if k % 2:
            j = int(rng.integers(len(words) - 1))
            words[j], words[j + 1] = words[j + 1], words[j]
        out.append([((" ".join(words),), k % 2)])
    return out


LENGTH_BINS = (5, 9, 13, 17, 21, 26, 31)  # words; 6 bins as in SentEval


def sentence_length(paragraphs: Paragraphs, rng: np.random.Generator, n: int) -> list:
    items = []
    for s in _sentences(paragraphs, 5, 30):
        length = len(s.split())
        items.append(((s,), sum(length >= b for b in LENGTH_BINS[1:])))
    return _balanced(items, rng, n, 6)


def syllables(word: str) -> int:
    word = word.lower()
    groups = re.findall(r"[aeiouy]+", word)
    count = len(groups) - (1 if word.endswith("e") and len(groups) > 1 and not word.endswith("le") else 0)
    return max(1, count)


def flesch(paragraphs: Paragraphs, rng: np.random.Generator, n: int) -> list:
    pool = _sentences(paragraphs)
    out = []
    for i in rng.choice(len(pool), n, replace=False):
        words = re.findall(r"[A-Za-z]+", pool[i])
        if not words:
            continue
        score = 206.835 - 1.015 * len(words) - 84.6 * sum(map(syllables, words)) / len(words)
        out.append([((pool[i],), round(score, 3))])
    return out


def coordination_inversion(paragraphs: Paragraphs, rng: np.random.Generator, n: int) -> list:
    out = []
    pool = _sentences(paragraphs, 10, 40)
    for i in rng.permutation(len(pool)):
        match = re.match(r"^(.{20,}?[a-z]), (and|but) ([a-z].{15,}?)([.!?])$", pool[i])
        if not match:
            continue
        first, conj, second, stop = match.groups()
        if "," in first or len(first.split()) < 5 or len(second.split()) < 5:
            continue  # "a, b, and c" lists are not clause coordination
        label = len(out) % 2
        if label:
            first, second = second, first[0].lower() + first[1:]
            first = first[0].upper() + first[1:]
        out.append([((f"{first}, {conj} {second}{stop}",), label)])
        if len(out) >= n:
            break
    return out


def word_content(paragraphs: Paragraphs, rng: np.random.Generator, n: int, n_words: int = 20) -> tuple[list, list[str]]:
    pool = _sentences(paragraphs)
    counts = {}
    for s in pool:
        for w in set(re.findall(r"[a-z]+", s.lower())):
            counts[w] = counts.get(w, 0) + 1
    # Mid-frequency content words (SentEval takes words ranked 2k-3k); ours: 50..400 sentences.
    targets = sorted(w for w, c in counts.items() if 50 <= c <= 400 and len(w) >= 5)
    targets = [targets[i] for i in sorted(rng.choice(len(targets), n_words, replace=False))]
    index = {w: k for k, w in enumerate(targets)}
    items = []
    for s in pool:
        present = set(re.findall(r"[a-z]+", s.lower())) & set(targets)
        if len(present) == 1:
            items.append(((s,), index[present.pop()]))
    return _balanced(items, rng, n, n_words), targets


def next_sentence(paragraphs: Paragraphs, rng: np.random.Generator, n: int) -> list:
    pairs = [(p[i], p[i + 1]) for _, p in paragraphs for i in range(len(p) - 1)
             if 4 <= len(p[i].split()) <= 40 and 4 <= len(p[i + 1].split()) <= 40]
    pool = _sentences(paragraphs, 4, 40)
    out = []
    for k, i in enumerate(rng.choice(len(pairs), n, replace=False)):
        first, second = pairs[i]
        if k % 2:
            second = pool[rng.integers(len(pool))]
        out.append([((first, second), k % 2)])
    return out


def sentence_order(paragraphs: Paragraphs, rng: np.random.Generator, n: int, n_positions: int = 4) -> list:
    """Context = the first four sentences of a paragraph; target = one of them; label = its index."""
    eligible = [p[:n_positions] for _, p in paragraphs
                if len(p) >= n_positions and all(4 <= len(s.split()) <= 30 for s in p[:n_positions])]
    out = []
    for k, i in enumerate(rng.choice(len(eligible), min(n, len(eligible)), replace=False)):
        sentences = eligible[i]
        context = " ".join(sentences)
        label = k % n_positions
        start = sum(len(s) + 1 for s in sentences[:label])
        out.append([(((sentences[label], 0, start, start + len(sentences[label])),), (context,), label)])
    return out


def discourse_connective(paragraphs: Paragraphs, rng: np.random.Generator, n: int) -> tuple[list, list[str]]:
    pattern = re.compile(r"^(%s), (.+)$" % "|".join(c.capitalize() for c in CONNECTIVES))
    items = []
    for _, p in paragraphs:
        for i in range(1, len(p)):
            match = pattern.match(p[i])
            if match and len(p[i - 1].split()) <= 40:
                rest = match.group(2)
                items.append(((p[i - 1], rest[0].upper() + rest[1:]), CONNECTIVES.index(match.group(1).lower())))
    keep = [c for c in range(len(CONNECTIVES)) if sum(1 for _, l in items if l == c) >= 60]
    items = [(s, keep.index(label)) for s, label in items if label in keep]
    return _balanced(items, rng, n, len(keep)), [CONNECTIVES[c] for c in keep]
