"""Document forms (``dstg_interp.data.forms``): the same text cut into documents of another shape."""

import pytest

from dstg_interp.data import DataError, Document, load_corpus
from dstg_interp.data.catalog import corpus_version
from dstg_interp.data.en_large import PIECES, parse_spec
from dstg_interp.data.forms import apply_forms, first_cuts, pack_documents, recut_words, split_form_spec


def words(documents):
    return [word for doc in documents for sentence in doc.sentences for word in sentence.split()]


def doc(doc_id, *paragraphs, source="s"):
    return Document(doc_id, source, [list(p) for p in paragraphs])


DOCS = [
    doc("book/000", ["One two three four five.", "Six seven."], ["Eight nine ten eleven twelve thirteen fourteen."]),
    doc("book/001", ["Fifteen sixteen."]),
    doc("manual/000", ["A b c.", "D e f g h i j k l m n o p."], ["Q r."]),
    doc("single", ["Alone here."], source="t"),
]


def test_recut_keeps_every_word_in_order_and_bounds_each_document():
    recut = recut_words(DOCS, 6)
    assert words(recut) == words(DOCS)
    for piece in recut:  # at most 6 words, unless one sentence alone is longer
        assert len(words([piece])) <= 6 or len(piece.sentences) == 1
    assert [d.doc_id for d in recut[:3]] == ["book/000~0", "book/000~1", "book/000~2"]
    # a document opens at a paragraph start, or a sentence start inside a paragraph too long to keep whole
    assert recut[0].sentences == ["One two three four five."] and recut[2].paragraphs == [[DOCS[0].paragraphs[1][0]]]


def test_first_cut_keeps_the_first_document_of_each_source_unit():
    assert [d.doc_id for d in first_cuts(DOCS)] == ["book/000", "manual/000", "single"]


def test_pack_joins_consecutive_documents_of_a_source_and_keeps_their_text():
    packed = pack_documents(DOCS, 2)
    assert [d.doc_id for d in packed] == ["pack:book/000+1", "pack:manual/000+0", "pack:single+0"]
    assert packed[0].metadata["packed"] == ["book/000", "book/001"]
    assert words(packed) == words(DOCS)
    with pytest.raises(DataError, match="nothing to pack across"):
        pack_documents([DOCS[3]], 2)


@pytest.mark.parametrize("spec, message", [
    ("en-mix@words=0", "a document of no words is no document"),
    ("en-mix@words=abc", "words= takes a whole number"),
    ("en-mix@pack=1", "pack= takes a whole number from 2"),
    ("en-mix@shuffle", "unknown document form 'shuffle'"),
])
def test_a_bad_form_is_one_line_before_any_text_is_read(spec, message):
    with pytest.raises(DataError, match=message) as caught:
        split_form_spec(spec)
    assert "\n" not in str(caught.value)


def test_forms_apply_in_order_and_a_form_that_leaves_nothing_is_refused():
    assert [d.doc_id for d in apply_forms(DOCS, ["first-cut", "pack=5"])] == ["pack:book/000+1", "pack:single+0"]
    with pytest.raises(DataError, match="leaves no document"):
        apply_forms([], ["first-cut"], "x")


def test_a_folder_corpus_takes_forms_and_a_path_with_an_at_sign_stays_a_path(tmp_path):
    folder = tmp_path / "my@corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("First sentence here. Second one follows.\n\nA new paragraph starts.\n")
    (folder / "b.txt").write_text("Another document. It is short.\n")
    assert len(load_corpus(str(folder), progress=False)) == 2
    packed = load_corpus(f"{folder}@pack=2", progress=False)
    assert len(packed) == 1 and words(packed) == words(load_corpus(str(folder), progress=False))


def test_en_large_without_a_piece_and_its_cache_key():
    names, partial = parse_spec("en-large:-wikipedia")
    assert names == [name for name in PIECES if name != "wikipedia"] and not partial
    with pytest.raises(DataError, match="not both"):
        parse_spec("en-large:austen,-wikipedia")
    with pytest.raises(DataError, match="unknown"):
        parse_spec("en-large:-nothing")
    assert corpus_version("en-mix:wikipedia@pack=64") == corpus_version("en-mix:wikipedia")  # the spec keys the form
