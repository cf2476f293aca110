"""Document forms: the same text cut into documents of another shape, named in the corpus spec after ``@``.

    load_corpus("en-large:-wikipedia@words=80")     # every document re-cut to <= 80 words (starts: paragraphs)
    load_corpus("en-large:-wikipedia@first-cut")    # only the first cut of each source document (real starts)
    load_corpus("en-mix:wikipedia@pack=64")         # 64 consecutive documents joined: windows cross their ends

A form changes where documents start and end, never their text, so one corpus read in several forms isolates
document form from genre and vocabulary (the data-form study, figures/recipe/DATA_FORM.md).  Forms apply in
the order written (``@first-cut@words=80``).  The spec, forms included, keys every cache a corpus feeds.

- ``words=N``: each document's paragraphs packed greedily into documents of at most N words; a paragraph
  longer than N is cut at sentence boundaries (a sentence longer than N is a document alone).  Ids
  ``<id>~<part>``.  Each new document opens at a paragraph (or, inside a long paragraph, a sentence) start.
- ``first-cut``: the first document of each source unit only, a unit being the id before its last ``/``
  (en-mix and en-large cut each source text -- a manual page, a Bible book, a chapter -- into ``<unit>/<part>``);
  a document whose id has no ``/`` is its own unit.
- ``pack=K``: K consecutive documents of the same source joined into one (paragraphs kept), ids
  ``pack:<first id>+<K-1>``; with sentence-boundary windows (``TrainConfig.windows``) sequences run across the
  joined documents' ends, and position 0 is a sentence inside a document, not its start.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .corpora import DataError, Document

FORM_SEPARATOR = "@"
MAX_FORM_WORDS = 1_000_000  # a document-size bound far above any text; a larger number is a typo
MAX_PACK = 100_000


def split_form_spec(spec: str) -> tuple[str, list[str]]:
    """``base@form@form`` -> (base, [form, ...]); each form checked, so a bad one fails before any text is read.
    Forms are taken off the end while what is left is not a path that exists, so a folder whose name holds
    an ``@`` is still that folder."""
    base, forms = spec, []
    while FORM_SEPARATOR in base and not Path(base).exists():
        base, _, form = base.rpartition(FORM_SEPARATOR)
        forms.insert(0, form)
    for form in forms:
        parse_form(form, spec)
    return base, forms


def parse_form(form: str, spec: str = "") -> tuple[str, int | None]:
    """One form -> (name, value); one line naming the spec and the choices when it is not a form."""
    where = f"corpus {spec!r}: " if spec else ""
    name, equals, text = form.partition("=")
    if name == "first-cut" and not equals:
        return name, None
    if name in ("words", "pack") and equals:
        try:
            value = int(text)
        except ValueError:
            value = 0
        upper = MAX_FORM_WORDS if name == "words" else MAX_PACK
        low = 1 if name == "words" else 2
        if not low <= value <= upper:
            raise DataError(f"{where}form {form!r}: {name}= takes a whole number from {low} to {upper:,}"
                            + (" (a document of no words is no document)" if name == "words" else
                               " (documents joined per packed document)"))
        return name, value
    raise DataError(f"{where}unknown document form {form!r}; choose words=N, first-cut or pack=K after '@'")


def recut_words(documents: list[Document], max_words: int) -> list[Document]:
    """Every document re-cut into documents of at most ``max_words`` words at paragraph, else sentence, boundaries."""
    return [Document(f"{doc.doc_id}~{part}", doc.source, paragraphs, doc.title, dict(doc.metadata))
            for doc in documents for part, paragraphs in enumerate(_recut(doc.paragraphs, max_words))]


def _recut(paragraphs: list[list[str]], max_words: int) -> list[list[list[str]]]:
    """One document's paragraphs as pieces (lists of paragraphs) of at most ``max_words`` words each."""
    pieces: list[list[list[str]]] = []
    current: list[list[str]] = []
    count = 0
    for paragraph in paragraphs:
        words = sum(len(sentence.split()) for sentence in paragraph)
        if words <= max_words:  # a whole paragraph: into this piece, or opening the next
            if current and count + words > max_words:
                pieces.append(current)
                current, count = [], 0
            current.append(list(paragraph))
            count += words
            continue
        if current:  # a long paragraph opens a piece of its own and is cut at sentence boundaries
            pieces.append(current)
        current, count = [], 0
        run: list[str] = []
        for sentence in paragraph:
            length = len(sentence.split())
            if run and count + length > max_words:
                pieces.append([run])
                run, count = [], 0
            run.append(sentence)
            count += length
        pieces.append([run])
        count = 0
    if current:
        pieces.append(current)
    return pieces


def first_cuts(documents: list[Document]) -> list[Document]:
    """The first document (in corpus order) of each source unit, the id before its last ``/``."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for doc in documents:
        unit = (doc.source, doc.doc_id.rsplit("/", 1)[0])
        if unit not in seen:
            seen.add(unit)
            kept.append(doc)
    return kept


def pack_documents(documents: list[Document], per_pack: int) -> list[Document]:
    """``per_pack`` consecutive documents of each source joined into one; a source's last pack may hold fewer."""
    by_source: dict[str, list[Document]] = {}
    for doc in documents:
        by_source.setdefault(doc.source, []).append(doc)
    if max(len(docs) for docs in by_source.values()) < 2:
        raise DataError("form pack: every source holds one document, so there is nothing to pack across; "
                        "give a corpus with several documents")
    packed = []
    for docs in by_source.values():
        for start in range(0, len(docs), per_pack):
            group = docs[start:start + per_pack]
            packed.append(Document(f"pack:{group[0].doc_id}+{len(group) - 1}", group[0].source,
                                   [list(p) for doc in group for p in doc.paragraphs], group[0].title,
                                   {"packed": [doc.doc_id for doc in group]}))
    return packed


FORMS: dict[str, Callable] = {
    "words": recut_words,
    "first-cut": lambda documents, _value: first_cuts(documents),
    "pack": pack_documents,
}


def apply_forms(documents: list[Document], forms: list[str], spec: str = "") -> list[Document]:
    """``documents`` in each form in turn; refuses a form that leaves no document."""
    for form in forms:
        name, value = parse_form(form, spec)
        documents = FORMS[name](documents, value)
        if not documents:
            raise DataError(f"corpus {spec!r}: form {form!r} leaves no document; choose another form")
    return documents
