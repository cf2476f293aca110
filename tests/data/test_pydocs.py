"""The held-out `pydocs` source: reST prose extraction on a fixture written here, and the pinning logic."""

import io
import lzma
import sys
import tarfile

import pytest

from dstg_interp.data import DataError, load_corpus
from dstg_interp.data import en_mix, pydocs

# A made-up reST page exercising what the prose filter must drop: code after "::", directives and their
# bodies, comments, lists, tables, field lists, doctests, definition lists, short or unfinished lines.
DEMO_PAGE = """\
.. _demo-page:

**************
A Demo Chapter
**************

Kettles boil water for tea, and this chapter explains how a :class:`~kitchen.appliances.Kettle` object
does it with :func:`boil` and the ``watts`` attribute, see :ref:`the appendix <demo-appendix>`. [#]_
Nothing here is copied from anywhere: the project wrote this page for its tests.

Here is how you create one and switch it on::

    kettle = Kettle(watts=2000)
    kettle.boil()

.. note::

   This indented note body is a directive and must not be kept as prose at all.

* a bullet item that is long enough to pass the word count, but it is a list.
#. an enumerated item that is also long enough to pass the word count filter.
1. another enumerated item that is long enough to pass the word count filter.

+--------+--------+
| a cell | b cell |
+--------+--------+

=====  =====
col a  col b
=====  =====

:param watts: the power of the kettle in watts, which is a field list entry.

>>> Kettle(watts=1).boil()  # a doctest line that is long enough to count

A term of a definition list that is long enough
    followed by its indented definition, which is not running prose.

Too short to keep.

This line is long enough but has no sentence end so it is dropped

Using the kettle
================
The kettle **must** be filled *before* it is switched on, otherwise the `element <https://example.org>`_
overheats and the |product| safety switch trips, as every cook knows.
A second line of the same paragraph belongs to it, and so does a third one.

Tiny
----

Only eight words here so the section is dropped.
"""


def test_prose_sections_keep_running_text_only():
    sections = pydocs.prose_sections(DEMO_PAGE)
    assert [title for title, _ in sections] == ["A Demo Chapter", "Using the kettle", "Tiny"]
    first = sections[0][1]
    assert first == [
        "Kettles boil water for tea, and this chapter explains how a Kettle object does it with boil and the "
        "watts attribute, see the appendix. Nothing here is copied from anywhere: the project wrote this page for its tests.",
        "Here is how you create one and switch it on:",
    ]
    assert sections[1][1] == ["The kettle must be filled before it is switched on, otherwise the element overheats "
                              "and the product safety switch trips, as every cook knows. A second line of the same "
                              "paragraph belongs to it, and so does a third one."]


def test_inline_markup():
    assert pydocs.strip_inline_markup(":py:meth:`!spam` and :mod:`os.path` and `PEP 8`_.") == "spam and os.path and PEP 8."
    assert pydocs.strip_inline_markup("Define it as follows ::") == "Define it as follows"
    assert pydocs.strip_inline_markup("a `default role` and \\*not emphasis\\*") == "a default role and *not emphasis*"
    assert pydocs.strip_inline_markup("the backslash, ``\\``, and ``*args`` or C:\\\\Temp.") == "the backslash, \\, and *args or C:\\Temp."


def test_units_keep_narrative_sections_and_long_enough_sections():
    sources = {"tutorial/demo.rst.txt": DEMO_PAGE.encode(), "library/demo.rst.txt": DEMO_PAGE.encode(),
               "tutorial/notes.txt": DEMO_PAGE.encode()}
    units = pydocs.pydocs_units(sources)
    # the library copy and the non-.rst.txt file are ignored; "Tiny" has fewer than MIN_DOCUMENT_WORDS
    assert [(u.unit_id, u.title) for u in units] == [("pydocs/tutorial/demo/000", "A Demo Chapter"),
                                                     ("pydocs/tutorial/demo/001", "Using the kettle")]
    assert units[0].metadata == {"page": "tutorial/demo"}


def fake_deb(pages: dict[str, str]) -> bytes:
    """A .deb (ar archive) whose data.tar.xz holds the pages under the python3.11-doc sources folder."""
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
        for name, text in pages.items():
            data = text.encode()
            info = tarfile.TarInfo("./" + pydocs.SOURCES_PREFIX + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    body = lzma.compress(tar_bytes.getvalue())
    member = lambda name, data: f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data + b"\n" * (len(data) % 2)
    return b"!<arch>\n" + member("debian-binary", b"2.0\n") + member("data.tar.xz", body)


def test_pinning_tries_versions_in_order_and_checks_the_text(tmp_path, capsys):
    deb = tmp_path / "src" / "python3.11-doc_9.9_all.deb"
    deb.parent.mkdir()
    deb.write_bytes(fake_deb({"tutorial/demo.rst.txt": DEMO_PAGE, "library/os.rst.txt": DEMO_PAGE}))
    units = pydocs.extract_pydocs(deb)
    text_sha = en_mix.units_sha256(units)
    copy = [sys.executable, "-c", f"import shutil; shutil.copy({str(deb)!r}, {deb.name!r})"]
    gone = en_mix.Piece(pydocs.PACKAGE, ["no-such-fetcher-xyz"], "python3.11-doc_9.10_all.deb", "0" * 64, text_sha,
                        pydocs.extract_pydocs, corpus="pydocs")
    good = en_mix.Piece(pydocs.PACKAGE, copy, deb.name, en_mix.sha256_file(deb), text_sha, pydocs.extract_pydocs,
                        corpus="pydocs")
    documents = pydocs.load_pydocs(tmp_path / "cache", progress=False, pieces=[gone, good])
    assert [d.doc_id for d in documents] == ["pydocs/tutorial/demo/000", "pydocs/tutorial/demo/001"]
    assert documents[0].source == pydocs.PACKAGE and documents[0].title == "A Demo Chapter"
    assert documents[1].paragraphs[0][0].startswith("The kettle must be filled")
    assert (tmp_path / "cache" / "downloads" / deb.name).is_file()
    assert len(list((tmp_path / "cache" / "pydocs").glob("*.jsonl"))) == 1

    # a .deb whose extracted text differs from the pinned hash is refused; the error is one line
    other_text = en_mix.Piece(pydocs.PACKAGE, copy, deb.name, en_mix.sha256_file(deb), "1" * 64,
                              pydocs.extract_pydocs, corpus="pydocs")
    with pytest.raises(DataError) as error:
        pydocs.load_pydocs(tmp_path / "other", progress=False, pieces=[gone, other_text])
    message = str(error.value)
    assert "\n" not in message and "extracted text sha256" in message and "not found" in message
    assert "python3.11-doc_9.10_all.deb" in message and "apt-get update" in message


def test_load_corpus_pydocs_tries_pinned_then_mirror_versions(tmp_path, monkeypatch):
    tried = []

    def unavailable(piece, cache_dir, progress=True):
        tried.append((piece.artifact_name, piece.artifact_sha256, piece.text_sha256, piece.fetch_command))
        raise en_mix.PieceUnavailable("offline")

    monkeypatch.setattr(pydocs, "load_piece", unavailable)
    known = pydocs.PINNED_DEBS[0]
    monkeypatch.setattr(pydocs, "mirror_debs", lambda: [known, ("3.11.2-6+deb12u10", "f" * 64)])
    with pytest.raises(DataError, match="pydocs: could not fetch python3.11-doc"):
        load_corpus("pydocs", cache_dir=tmp_path, progress=False)
    names = [name for name, *_ in tried]
    assert names == [pydocs.deb_name(v) for v, _ in pydocs.PINNED_DEBS] + ["python3.11-doc_3.11.2-6+deb12u10_all.deb"]
    assert tried[-1][1] == "f" * 64 and tried[-1][3] == ["apt-get", "download", "python3.11-doc=3.11.2-6+deb12u10"]
    assert {text for _, _, text, _ in tried} == {pydocs.TEXT_SHA256}  # every version must give the pinned text


def test_parse_apt_show():
    shown = ("Package: python3.11-doc\nVersion: 3.11.2-6+deb12u9\nSize: 1\nSHA256: " + "a" * 64 + "\n\n"
             "Package: python3.11-doc\nVersion: 1:3.11.2-6\nSHA256: " + "b" * 64 + "\nDescription: x\n\n"
             "Package: python3.11-doc\nVersion: 3.0\n")
    assert pydocs.parse_apt_show(shown) == [("3.11.2-6+deb12u9", "a" * 64), ("1:3.11.2-6", "b" * 64)]
    assert pydocs.deb_name("1:3.11.2-6") == "python3.11-doc_1%3a3.11.2-6_all.deb"
