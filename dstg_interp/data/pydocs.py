"""`pydocs`: a held-out second text source, the prose of the Python 3.11 documentation.

    from dstg_interp.data import load_corpus
    docs = load_corpus("pydocs")          # fetched once into $DSTG_CACHE or ~/.cache/dstg-interp

Nothing of en-mix (encyclopedia leads, a novel, a Victorian commentary) is technical writing, so this
source checks the zoo on a register no model here was trained on, written by people outside the project.

Source: the reST sources in the Debian package `python3.11-doc` (`usr/share/doc/python3.11/html/_sources/
**/*.rst.txt`), licence PSF-2.0 (use, credit, never commit the text). Only the narrative sections are
kept (SECTIONS: tutorial, HOWTOs, FAQ, language reference, extending/embedding, setup and usage,
installing/distributing). The library and C-API references are mostly signatures, and they are the
part that Debian security updates rewrite (3.11.2-6+deb12u8 -> u9 changed four library files and nothing
else), so leaving them out keeps the extracted text identical across package versions.

Prose filter (`prose_sections`): blocks separated by blank lines; a heading (text + underline of one
punctuation character, optionally overlined) starts a new section; kept are unindented blocks that are
not directives or comments (`..`), lists, tables, field or option lists, line blocks or doctests, and
that end like a sentence (`.`, `!`, `?`, `:`) with at least MIN_PARAGRAPH_WORDS words.  Indented blocks
(code after `::`, directive bodies, definition-list bodies) are dropped.  Inline markup is reduced to
its text (`:func:`~os.path.join`` -> join, ``x`` -> x, `text <url>`_ -> text, *a* -> a).
A document is one section (heading to next heading) with at least MIN_DOCUMENT_WORDS words of prose.

Pinning: the text is pinned by the sha256 of the extracted sections (TEXT_SHA256).  Debian replaces the
package with each security update and old versions leave the mirror, so several versions are accepted,
each pinned by its .deb sha256 (PINNED_DEBS, tried in order, then any other version the signed apt lists
offer, with their sha256); whichever .deb is used, its extracted text must have the pinned hash.  When
nothing can be fetched, one line (DataError) says why.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from dstg_interp.data.corpora import DataError, Document
from dstg_interp.data.en_mix import Piece, PieceUnavailable, RawUnit, load_piece, read_deb_members

PACKAGE = "python3.11-doc"
SOURCES_PREFIX = "usr/share/doc/python3.11/html/_sources/"
SECTIONS = ("tutorial", "howto", "faq", "reference", "extending", "using", "installing", "distributing",
            "install")
# (version, sha256 of the .deb); the newest first
PINNED_DEBS = (
    ("3.11.2-6+deb12u9", "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"),
    ("3.11.2-6+deb12u8", "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b"),
)
TEXT_SHA256 = "6cff6e69d7414d527b85fc0900f9d6adf8194d9b4744e5026206bf432c60abfb"  # 792 sections, 137,486 words
MIN_PARAGRAPH_WORDS = 8
MIN_DOCUMENT_WORDS = 40

# --------------------------------------------------------------------------- reST -> prose

_UNDERLINE_RE = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}\s*$")
# lists (bullets, enumerations incl. "#." and "(a)"), field lists, tables, line blocks, doctests, options
_NOT_PROSE_START_RE = re.compile(r"^(?:[*+\-\u2022]\s|#\.\s|\(?\w{1,3}[.)]\s|:\w|[+=|]|>>>|\.\.\.\s|--?\w)")
_SENTENCE_END_RE = re.compile(r"[.!?:][\"')\]]*$")
_ROLE_RE = re.compile(r"(?::[\w.+-]+)+:`([^`]+)`")
_TARGET_RE = re.compile(r"^(.*?)\s*<[^<>]+>$", re.DOTALL)
_LITERAL_RE = re.compile(r"``(.+?)``")
_LINK_RE = re.compile(r"`([^`]+?)`__?")
_INTERPRETED_RE = re.compile(r"`([^`]+)`")
_FOOTNOTE_RE = re.compile(r"\s*\[(?:#[\w-]*|\d+|\*)\]_")
_STRONG_RE = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
_EMPHASIS_RE = re.compile(r"(?<![\w*])\*(\S(?:[^*]*?\S)?)\*(?![\w*])")
_SUBSTITUTION_RE = re.compile(r"\|([\w .-]+)\|")


def _role_text(match: re.Match) -> str:
    """`:ref:`title <target>`` -> title; `:func:`~os.path.join`` -> join (the `~` shows the last part);
    `:meth:`!spam`` -> spam (`!` suppresses the link)."""
    content = match.group(1)
    target = _TARGET_RE.match(content)
    if target and target.group(1):
        return target.group(1)
    if content.startswith("~"):
        return content[1:].rsplit(".", 1)[-1]
    return content.lstrip("!")


def _link_text(match: re.Match) -> str:
    target = _TARGET_RE.match(match.group(1))
    return target.group(1) if target and target.group(1) else match.group(1)


def _hidden(character: str) -> str:
    return f"\x00{ord(character)}\x01"


def strip_inline_markup(text: str) -> str:
    """reST inline markup -> plain text; a paragraph's final `::` (a code block follows) -> `:`."""
    text = re.sub(r"\s+::$", "", text.rstrip())  # "Paragraph ::" introduces code and reads as nothing
    text = re.sub(r"::$", ":", text)
    # ``literals`` and backslash-escaped characters are taken as written: hide them from the markup
    # patterns below, and restore them at the end
    text = _LITERAL_RE.sub(lambda m: "".join(_hidden(c) for c in m.group(1)), text)
    text = text.replace("\\ ", "")  # an escaped space joins its neighbours ("*word*\\ s")
    text = re.sub(r"\\(.)", lambda m: _hidden(m.group(1)), text)
    text = _ROLE_RE.sub(_role_text, text)
    text = _LINK_RE.sub(_link_text, text)
    text = _INTERPRETED_RE.sub(r"\1", text)
    text = _FOOTNOTE_RE.sub("", text)
    text = _STRONG_RE.sub(r"\1", text)
    text = _EMPHASIS_RE.sub(r"\1", text)
    text = _SUBSTITUTION_RE.sub(r"\1", text)
    return re.sub("\x00(\\d+)\x01", lambda m: chr(int(m.group(1))), text)


def _heading_lengths(lines: list[str], index: int) -> int:
    """How many lines a section title takes at lines[index] (0 if none): title + underline, or
    overline + title + underline."""
    def underline(i: int) -> bool:
        return i < len(lines) and bool(_UNDERLINE_RE.match(lines[i]))

    if index + 1 < len(lines) and lines[index].strip() and not underline(index) and underline(index + 1):
        return 2
    if underline(index) and index + 2 < len(lines) and lines[index + 1].strip() and underline(index + 2):
        return 3
    return 0


def _is_prose(lines: list[str]) -> bool:
    first = lines[0]
    if first[:1].isspace() or first.startswith(".."):
        return False
    if _NOT_PROSE_START_RE.match(first):
        return False
    # a definition list (term, then indented definition) or a quoted block inside the paragraph
    return not any(line[:1].isspace() for line in lines[1:])


def prose_sections(rest: str) -> list[tuple[str | None, list[str]]]:
    """[(section title, prose paragraphs)] of one reST file, sections in file order (see the module doc)."""
    lines = rest.replace("\r\n", "\n").replace("\t", "        ").split("\n")
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    block: list[str] = []

    def flush() -> None:
        if block and _is_prose(block):
            paragraph = strip_inline_markup(" ".join(line.strip() for line in block))
            if len(paragraph.split()) >= MIN_PARAGRAPH_WORDS and _SENTENCE_END_RE.search(paragraph):
                sections[-1][1].append(paragraph)
        block.clear()

    index = 0
    while index < len(lines):
        line = lines[index]
        # only an unindented title starts a section (an indented one is inside a directive)
        size = 0 if line[:1].isspace() else _heading_lengths(lines, index)
        if size:
            flush()
            title = lines[index + (1 if size == 3 else 0)].strip()
            sections.append((strip_inline_markup(title), []))
            index += size
            continue
        if line.strip():
            block.append(line)
        else:
            flush()
        index += 1
    flush()
    return [(title, paragraphs) for title, paragraphs in sections if paragraphs]


def pydocs_units(sources: dict[str, bytes]) -> list[RawUnit]:
    """{path relative to _sources (e.g. "tutorial/classes.rst.txt"): reST bytes} -> one unit per
    section with at least MIN_DOCUMENT_WORDS words; files outside SECTIONS are ignored."""
    units = []
    for path in sorted(sources):
        if path.split("/", 1)[0] not in SECTIONS or not path.endswith(".rst.txt"):
            continue
        page = path[: -len(".rst.txt")]
        text = sources[path].decode("utf-8")
        for number, (title, paragraphs) in enumerate(prose_sections(text)):
            if sum(len(p.split()) for p in paragraphs) >= MIN_DOCUMENT_WORDS:
                units.append(RawUnit(f"pydocs/{page}/{number:03d}", title, paragraphs, {"page": page}))
    return units


def extract_pydocs(deb_path: Path) -> list[RawUnit]:
    members = read_deb_members(deb_path.read_bytes(), lambda name: SOURCES_PREFIX in name)
    sources = {name.split(SOURCES_PREFIX, 1)[1]: data for name, data in members.items()}
    if not sources:
        raise PieceUnavailable(f"no {SOURCES_PREFIX}*.rst.txt in the .deb")
    return pydocs_units(sources)


# --------------------------------------------------------------------------- fetching

def deb_name(version: str) -> str:
    """apt-get's file name: the epoch colon is written %3a."""
    return f"{PACKAGE}_{version.replace(':', '%3a')}_all.deb"


def pinned_pieces(debs=PINNED_DEBS, text_sha256: str = TEXT_SHA256) -> list[Piece]:
    """One Piece per (version, .deb sha256); all share the pinned text hash and the processed cache."""
    return [Piece(PACKAGE, ["apt-get", "download", f"{PACKAGE}={version}"], deb_name(version), sha,
                  text_sha256, extract_pydocs, corpus="pydocs") for version, sha in debs]


def mirror_debs() -> list[tuple[str, str]]:
    """(version, .deb sha256) of every python3.11-doc the apt lists know; the lists are signed by Debian,
    so their hashes pin a version the code does not know yet. Empty where apt-cache is missing."""
    try:
        shown = subprocess.run(["apt-cache", "show", PACKAGE], check=True, timeout=60, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired, subprocess.CalledProcessError):
        return []
    return parse_apt_show(shown)


def parse_apt_show(shown: str) -> list[tuple[str, str]]:
    debs = []
    for stanza in re.split(r"\n\s*\n", shown):
        fields = dict(re.findall(r"^(Version|SHA256): (\S+)$", stanza, flags=re.MULTILINE))
        if "Version" in fields and "SHA256" in fields:
            debs.append((fields["Version"], fields["SHA256"]))
    return debs


def load_pydocs(cache_dir: Path, progress: bool = True, pieces: list[Piece] | None = None) -> list[Document]:
    """The pydocs documents: from the processed cache, else from the first pinned .deb that can be fetched,
    else from a version the mirror offers now if its extracted text has the pinned hash; else DataError."""
    if pieces is None:
        pinned = {version for version, _ in PINNED_DEBS}
        newer = [(version, sha) for version, sha in mirror_debs() if version not in pinned]
        pieces = pinned_pieces(PINNED_DEBS + tuple(newer))
    reasons = []
    for piece in pieces:
        try:
            return load_piece(piece, cache_dir, progress)
        except PieceUnavailable as reason:
            reasons.append(f"{piece.artifact_name}: {reason}")
    raise DataError(f"pydocs: could not fetch {PACKAGE} into {cache_dir} ({'; '.join(reasons) or 'nothing to try'}); "
                    "it needs apt-get and a Debian bookworm mirror (run apt-get update), "
                    "or pass a local folder/.jsonl corpus instead")
