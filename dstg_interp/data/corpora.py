"""The pieces every corpus is made of: documents -> paragraphs -> sentences, and the local sources.

    from dstg_interp.data import load_corpus, split_documents, split_sentences
    split_sentences("Dr. Smith arrived. He sat down.")    # ['Dr. Smith arrived.', 'He sat down.']
    train_docs, val_docs = split_documents(load_corpus("en-mix"), val_fraction=0.05, seed=0)

Every text goes through `normalize_text` (NFKC, zero-width characters removed, whitespace collapsed)
and is split into sentences by pysbd, paragraph by paragraph (`make_document`).  Here too: the local
sources (a folder of *.txt, a .jsonl file, `hf:NAME[:CONFIG]:SPLIT`), the cache folder, the stable
train / validation split and the JSONL cache of processed documents.  The corpora by name -- `load_corpus`,
`probing_documents` -- are in `catalog.py`, which sits above this module and the recipes that use it
(`en_mix.py`, `pydocs.py`): imports run catalog -> en_mix / pydocs -> corpora, never back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import stat
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import pysbd
from dstg_interp.io import written_file
from dstg_interp.progress import progress_bar

# Bump when sentence splitting or normalisation changes: it keys the processed-corpus cache.
SPLITTER_VERSION = f"pysbd-{pysbd.__version__}-nfkc-quotes-v2"

# NFKC keeps these (they are "format" characters), but they break words invisibly for the tokenizer.
ZERO_WIDTH_CHARS = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_ZERO_WIDTH_RE = re.compile(f"[{ZERO_WIDTH_CHARS}]")
_WHITESPACE_RE = re.compile(r"\s+")
_BLANK_LINE_RE = re.compile(r"\n[ \t\r\f\v]*\n")


class DataError(ValueError):
    """Bad corpus input. The message is one line: what, where, what to do."""


@dataclass
class Document:
    """One document: `paragraphs[p][s]` is the s-th sentence of the p-th paragraph."""

    doc_id: str
    source: str
    paragraphs: list[list[str]]
    title: str | None = None
    metadata: dict = field(default_factory=dict)

    @property
    def sentences(self) -> list[str]:
        return [sentence for paragraph in self.paragraphs for sentence in paragraph]

    @property
    def text(self) -> str:
        return "\n\n".join(" ".join(paragraph) for paragraph in self.paragraphs)

    def to_json(self) -> dict:
        return {"doc_id": self.doc_id, "source": self.source, "title": self.title,
                "paragraphs": self.paragraphs, "metadata": self.metadata}

    @classmethod
    def from_json(cls, record: dict) -> "Document":
        return cls(record["doc_id"], record["source"], record["paragraphs"], record.get("title"),
                   record.get("metadata") or {})


# --------------------------------------------------------------------------- text -> sentences

def normalize_text(text: str) -> str:
    """NFKC, drop zero-width characters, collapse every whitespace run to one space."""
    text = unicodedata.normalize("NFKC", text)
    text = _ZERO_WIDTH_RE.sub("", text)
    return _WHITESPACE_RE.sub(" ", text).strip()


_SEGMENTER = None
# pysbd never splits inside quotes, so a quoted speech of many sentences (Austen) came out as one
# "sentence" of up to ~1,500 words. We blank the quote characters for pysbd, then put them back,
# giving each closing quote to the sentence it ends.
QUOTE_CHARS = '"\u201c\u201d'
_BLANK_QUOTES = {ord(q): " " for q in QUOTE_CHARS}


# pysbd's time grows with the square of its input (40k words: 35 s; a 5.8 MB line: never done), and a
# .txt file without blank lines is one paragraph. Longer text goes to pysbd in windows of this many
# characters; each window keeps the sentences pysbd closed inside it and the next one starts where the
# last, possibly cut, sentence began, so the cuts are pysbd's own boundaries and the cost is linear.
# Only a run this long without any sentence end is cut, at a space. (En-mix splits exactly as before.)
SEGMENT_WINDOW_CHARS = 10_000


def _segmenter():
    global _SEGMENTER
    if _SEGMENTER is None:
        # clean=False: segments are substrings of the input, so nothing is rewritten behind our back.
        _SEGMENTER = pysbd.Segmenter(language="en", clean=False)
    return _SEGMENTER


def _segment(text: str) -> list[str]:
    """pysbd's sentences of ``text``, fed to it in bounded windows (see SEGMENT_WINDOW_CHARS)."""
    segmenter, window_chars = _segmenter(), SEGMENT_WINDOW_CHARS
    pieces, start = [], 0
    while len(text) - start > window_chars:
        window = text[start:start + window_chars]
        found, cursor, last_start = [], 0, None
        for piece in segmenter.segment(window):
            at = window.find(piece.strip(), cursor) if piece.strip() else -1
            if at >= 0:
                found.append(piece)
                last_start, cursor = at, at + len(piece.strip())
        if len(found) >= 2 and last_start:
            pieces.extend(found[:-1])
            start += last_start
        else:  # no sentence end in the whole window: cut at its last space
            cut = window.rfind(" ", window_chars // 2) + 1 or window_chars
            pieces.append(window[:cut])
            start += cut
    pieces.extend(segmenter.segment(text[start:]))
    return pieces


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one normalised paragraph; text with no sentence end is one sentence (up to
    SEGMENT_WINDOW_CHARS characters)."""
    blanked = paragraph.translate(_BLANK_QUOTES)
    spans, cursor = [], 0
    for piece in _segment(blanked):
        piece = piece.strip()
        start = blanked.find(piece, cursor) if piece else -1
        if start < 0:
            continue
        spans.append([start, start + len(piece)])
        cursor = start + len(piece)
    if not spans:
        return [paragraph] if paragraph else []
    spans[0][0], spans[-1][1] = 0, len(paragraph)
    for left, right in zip(spans, spans[1:]):
        gap = paragraph[left[1]:right[0]]
        left[1] += len(gap) - len(gap.lstrip(QUOTE_CHARS))  # closing quotes end the left sentence
        right[0] = left[1]
    sentences = []
    for start, end in spans:
        sentence = paragraph[start:end].strip()
        # '"Hello!" he said.' is one sentence: a lowercase start after a closing quote continues it
        if sentences and sentence[:1].islower() and sentences[-1][-1:] in QUOTE_CHARS:
            sentences[-1] = f"{sentences[-1]} {sentence}"
        elif sentence:
            sentences.append(sentence)
    return sentences or [paragraph]


def make_document(doc_id: str, source: str, paragraph_texts: list[str], title: str | None = None,
                  metadata: dict | None = None) -> Document | None:
    """Normalise and sentence-split raw paragraph texts; None if nothing is left."""
    paragraphs = []
    for raw in paragraph_texts:
        paragraph = normalize_text(raw)
        if paragraph:
            paragraphs.append(split_sentences(paragraph))
    if not paragraphs:
        return None
    return Document(doc_id, source, paragraphs, title, metadata or {})


def paragraphs_from_text(text: str) -> list[str]:
    """Blank lines separate paragraphs; single newlines inside a paragraph are hard wraps."""
    return [block for block in _BLANK_LINE_RE.split(text.replace("\r\n", "\n")) if block.strip()]


# --------------------------------------------------------------------------- local sources

def decode_utf8(data: bytes, where: str, base_offset: int = 0) -> str:
    """Decode or raise a DataError that names the file and the byte offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{where}: not valid UTF-8 at byte offset {base_offset + error.start} "
                        f"(byte 0x{data[error.start]:02x}); re-encode the file as UTF-8") from None


# A .txt file above this size is streamed (read_text_document): read in chunks with a progress bar, each
# paragraph normalised and sentence-split STREAM_CHUNK_CHARS at a time.  Whole-text copies of a 200 MB
# one-line file (NFKC, whitespace, quote blanking: up to 4 bytes a character each) took 5 GB and more
# before pysbd, at ~0.1 MB/s, had printed anything.
LARGE_TEXT_BYTES = 4 * 2**20
STREAM_CHUNK_BYTES = 2**18
STREAM_CHUNK_CHARS = 2**18


class _StreamedParagraph:
    """The sentences of one paragraph fed in pieces: split STREAM_CHUNK_CHARS at a time, the last (possibly
    unfinished) sentence carried into the next chunk, so memory holds the sentences and one chunk."""

    def __init__(self):
        self.sentences: list[str] = []
        self.buffer = ""

    def feed(self, raw: str) -> None:
        self.buffer += raw
        while len(self.buffer) >= STREAM_CHUNK_CHARS:
            cut = max(self.buffer.rfind(" ", 0, STREAM_CHUNK_CHARS), self.buffer.rfind("\n", 0, STREAM_CHUNK_CHARS)) + 1
            cut = cut or STREAM_CHUNK_CHARS  # cut at whitespace, so no character sequence straddles two chunks
            head, rest = self.buffer[:cut], self.buffer[cut:]
            sentences = split_sentences(normalize_text(head))
            # the last sentence may go on in the next chunk (split_sentences keeps it under SEGMENT_WINDOW_CHARS)
            self.sentences.extend(sentences[:-1])
            self.buffer = (sentences[-1] + " " if sentences else "") + rest

    def close(self) -> list[str]:
        text = normalize_text(self.buffer)
        sentences = self.sentences + (split_sentences(text) if text else [])
        self.sentences, self.buffer = [], ""
        return sentences


def _utf8_prefix_end(data: bytes) -> int:
    """Where the last complete UTF-8 character of ``data`` ends (a chunk may stop inside one)."""
    end = len(data)
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0b1100_0000 != 0b1000_0000:  # a lead or ASCII byte: is its character complete?
            width = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return end if width <= back else end - back
    return end


_NOT_PLAIN = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
              (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def open_corpus_file(path: Path):
    """(binary handle, size) of a plain file of a corpus.  A FIFO, a device, a socket (or a link to one) is
    refused in one DataError line naming it: reading a FIFO blocked forever, a link to /dev/zero read without
    end (round 4, K2, K1).  Readers read ``size`` bytes, the size at opening: a file growing meanwhile is
    bounded too."""
    def refuse(mode: int) -> None:
        kind = next((what for test, what in _NOT_PLAIN if test(mode)), "not a plain file")
        raise DataError(f"{path} is {kind}, not a plain file; a corpus holds plain text files only: "
                        "remove it from the corpus or point --corpus elsewhere")

    mode = os.stat(path).st_mode  # follows links: where one points decides
    if not stat.S_ISREG(mode):
        refuse(mode)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there since does not block the open
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        refuse(info.st_mode)
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb"), info.st_size


def read_text_document(path: Path, doc_id: str, source: str, progress: bool = False) -> Document | None:
    """One .txt file as a Document (blank lines separate paragraphs).  A file above LARGE_TEXT_BYTES is
    streamed in bounded chunks with a progress bar of the bytes read (see _StreamedParagraph)."""
    handle, size = open_corpus_file(path)
    if size <= LARGE_TEXT_BYTES:
        with handle:
            return make_document(doc_id, source, paragraphs_from_text(decode_utf8(handle.read(size), str(path))))
    paragraphs, current, pending, carry, offset = [], _StreamedParagraph(), "", b"", 0
    with handle, progress_bar(total=size, unit="B", unit_scale=True, desc=f"reading {path.name}",
                              disable=not progress) as bar:
        while True:
            data = handle.read(min(STREAM_CHUNK_BYTES, size - offset - len(carry)))
            chunk = carry + data
            end = _utf8_prefix_end(chunk) if data else len(chunk)
            pending += decode_utf8(chunk[:end], str(path), base_offset=offset).replace("\r\n", "\n")
            offset, carry = offset + end, chunk[end:]
            blocks = _BLANK_LINE_RE.split(pending)
            for block in blocks[:-1]:  # complete paragraphs
                current.feed(block)
                sentences = current.close()
                if sentences:
                    paragraphs.append(sentences)
            last = blocks[-1]
            # keep from the last newline on: it may begin a blank line that the next chunk completes
            keep = last.rfind("\n") if data else len(last)
            keep = len(last) if keep < 0 else keep
            current.feed(last[:keep])
            pending = last[keep:]
            bar.update(len(data))
            if not data:
                break
    sentences = current.close()
    if sentences:
        paragraphs.append(sentences)
    return Document(doc_id, source, paragraphs, None, {}) if paragraphs else None


def load_text_folder(folder: Path, progress: bool = False) -> list[Document]:
    """Every `*.txt` under `folder` (sorted, recursive) is one document, id = path relative to folder."""
    documents = []
    for path in sorted(folder.rglob("*.txt")):
        doc = read_text_document(path, path.relative_to(folder).as_posix(), folder.name, progress=progress)
        if doc is not None:
            documents.append(doc)
    return documents


def load_jsonl(path: Path, text_field: str = "text") -> list[Document]:
    """One JSON object per line with a `text_field` and an optional `id` (default: the line number)."""
    documents, offset, line_number = [], 0, 0
    handle, size = open_corpus_file(path)
    with handle:
        while raw_line := handle.readline(size - offset):  # no further than the size at opening
            line_number += 1
            line = decode_utf8(raw_line, str(path), base_offset=offset).strip()
            offset += len(raw_line)
            if line_number == 1:
                line = line.removeprefix("\ufeff").strip()  # a byte-order mark some editors write
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{line_number}: not valid JSON ({err.msg} at column {err.colno}); "
                                f"expected one JSON object with a '{text_field}' string field per line") from None
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                found = "no such field" if not isinstance(record, dict) or text_field not in record else \
                    json.dumps(text)[:40]
                raise DataError(f"{path}:{line_number}: expected a JSON object with a '{text_field}' "
                                f"string field, found {found}") from None
            doc_id = str(record.get("id", line_number))
            title = record.get("title") if isinstance(record.get("title"), str) else None
            doc = make_document(doc_id, path.stem, paragraphs_from_text(text), title)
            if doc is not None:
                documents.append(doc)
    return documents


def hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """Why the Hugging Face Hub ($HF_ENDPOINT) cannot be reached in ``timeout_s``, or None when it can."""
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout_s).close()
    except OSError as err:
        return (err.strerror or str(err) or type(err).__name__).strip()
    return None


def load_hf_dataset(spec: str, max_docs: int | None, text_field: str = "text",
                    progress: bool = True) -> list[Document]:
    """`hf:NAME[:CONFIG]:SPLIT`, streamed; NAME may be a hub id or a local folder of jsonl/parquet.

    Web text marks paragraphs with single newlines, so here every non-empty line is a paragraph.
    """
    parts = spec[len("hf:"):].split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise DataError(f"corpus spec {spec!r}: expected hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT")
    name, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    if not Path(name).exists() and not os.environ.get("HF_HUB_OFFLINE") and not os.environ.get("HF_DATASETS_OFFLINE"):
        unreachable = hub_unreachable()
        if unreachable:  # else huggingface_hub retries for ~30 s, printing a line per try, before its own error
            raise DataError(f"{spec}: the Hugging Face Hub cannot be reached from here ({unreachable}) and {name} is "
                            "not a local folder; set HF_HUB_OFFLINE=1 to read a copy in the local Hugging Face cache, "
                            "or pass a local folder / .jsonl corpus")
    import datasets  # optional: a slow import that only the hf: source needs

    stream = datasets.load_dataset(name, config, split=split, streaming=True)
    documents = []
    for index, record in enumerate(stream):
        if max_docs is not None and len(documents) >= max_docs:
            break
        text = record.get(text_field)
        if not isinstance(text, str):
            raise DataError(f"{spec}: record {index} has no string field '{text_field}'; pass text_field=")
        doc_id = str(record.get("id", f"{name}/{split}/{index}"))
        doc = make_document(doc_id, name, text.split("\n"))
        if doc is not None:
            documents.append(doc)
        if progress and len(documents) % 10_000 == 0 and documents:
            print(f"{spec}: {len(documents)} documents", file=sys.stderr)
    return documents


# --------------------------------------------------------------------------- cache folder and splits

def default_cache_dir() -> Path:
    """$DSTG_CACHE, else $XDG_CACHE_HOME/dstg-interp, else ~/.cache/dstg-interp."""
    if os.environ.get("DSTG_CACHE"):
        return Path(os.environ["DSTG_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dstg-interp"


# The zoo's train/validation split, defined once: TrainConfig's defaults (val_fraction, data_seed), the
# prepared-data cache and probing_documents (the held-out en-mix documents every probe reads) use these.
ZOO_VAL_FRACTION = 0.05
ZOO_SPLIT_SEED = 0


class HasDocId(Protocol):
    """Anything with a ``doc_id``: what ``split_documents`` reads of a document."""

    @property
    def doc_id(self) -> str: ...


DocumentLike = TypeVar("DocumentLike", bound=HasDocId)


def split_documents(documents: list[DocumentLike], val_fraction: float = ZOO_VAL_FRACTION,
                    seed: int = ZOO_SPLIT_SEED) -> tuple[list[DocumentLike], list[DocumentLike]]:
    """Document-level (train, validation) split by a stable sha256 hash of doc_id (same on every run
    and machine, unlike Python's salted `hash`). Order within each part follows the input (any objects with a
    ``doc_id``: documents, or stand-ins that carry only the id)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    train: list[DocumentLike] = []
    validation: list[DocumentLike] = []
    for doc in documents:
        digest = hashlib.sha256(f"{seed}:{doc.doc_id}".encode()).digest()
        unit_interval = int.from_bytes(digest[:8], "big") / 2**64
        (validation if unit_interval < val_fraction else train).append(doc)
    return train, validation


def save_documents_jsonl(documents: list[Document], path: Path) -> None:
    """Write documents as JSONL atomically (this process's temp name, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_file(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps(doc.to_json(), ensure_ascii=False) + "\n")


def load_documents_jsonl(path: Path) -> list[Document]:
    with open(path, encoding="utf-8") as handle:
        return [Document.from_json(json.loads(line)) for line in handle if line.strip()]
