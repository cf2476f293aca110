"""Structure labels on a hand-checked example, truncation, windows, save/load."""

import numpy as np
import pytest

from dstg_interp.data import CLS_ID, SEP_ID, Document, StructuredSequences, build_structured_sequences, build_tokenizer

# One word = one token, so every label below can be checked by hand.
TOKENIZER = build_tokenizer(list("abcdefg") + ["."])
# sentences: "a b ." (3 tokens) "c ." (2) | "d e f ." (4)
DOC = Document("d0", "test", [["a b .", "c ."], ["d e f ."]])


def ids(text):
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def test_full_document_labels_by_hand():
    seqs = build_structured_sequences([DOC], TOKENIZER, max_length=64)
    assert len(seqs) == 1 and seqs.n_tokens == 11
    item = seqs[0]
    assert item["input_ids"].tolist() == [CLS_ID] + ids("a b . c . d e f .") + [SEP_ID]
    assert item["token_position"].tolist() == list(range(11))
    assert item["sentence_index"].tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2]
    assert item["paragraph_index"].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert item["intra_sentence_position"].tolist() == [-1, 0, 1, 2, 0, 1, 0, 1, 2, 3, -1]
    assert item["intra_paragraph_position"].tolist() == [-1, 0, 1, 2, 3, 4, 0, 1, 2, 3, -1]
    assert item["doc_index"].tolist() == [0] * 11
    assert item["is_special"].tolist() == [True] + [False] * 9 + [True]


def test_truncation_keeps_sep_last():
    item = build_structured_sequences([DOC], TOKENIZER, max_length=6)[0]
    assert item["input_ids"].tolist() == [CLS_ID] + ids("a b . c") + [SEP_ID]
    assert item["sentence_index"].tolist() == [0, 0, 0, 0, 1, 1]
    assert item["intra_sentence_position"].tolist() == [-1, 0, 1, 2, 0, -1]
    assert item["intra_paragraph_position"].tolist() == [-1, 0, 1, 2, 3, -1]


def test_windows_start_at_sentence_boundaries():
    seqs = build_structured_sequences([DOC], TOKENIZER, max_length=6, windows=True)
    assert [seqs[i]["input_ids"].tolist() for i in range(len(seqs))] == [
        [CLS_ID] + ids("a b . c") + [SEP_ID],   # sentence "c ." is cut: the next window starts there
        [CLS_ID] + ids("c . d e") + [SEP_ID],
        [CLS_ID] + ids("d e f .") + [SEP_ID],
    ]
    second = seqs[1]
    assert second["sentence_index"].tolist() == [0, 0, 0, 1, 1, 1]
    assert second["paragraph_index"].tolist() == [0, 0, 0, 1, 1, 1]
    assert second["intra_sentence_position"].tolist() == [-1, 0, 1, 0, 1, -1]
    # window opens mid-paragraph: intra-paragraph positions count from the first token it holds
    assert second["intra_paragraph_position"].tolist() == [-1, 0, 1, 0, 1, -1]
    for i in range(len(seqs)):
        assert seqs[i]["intra_sentence_position"][1] == 0  # every window starts a sentence


def test_overlong_sentence_does_not_loop_or_repeat():
    doc = Document("long", "test", [["a b c d e f g a b c .", "d ."]])
    seqs = build_structured_sequences([doc], TOKENIZER, max_length=6, windows=True)
    assert [seqs[i]["input_ids"].tolist() for i in range(len(seqs))] == [
        [CLS_ID] + ids("a b c d") + [SEP_ID], [CLS_ID] + ids("d .") + [SEP_ID]]


def test_several_documents_and_save_load_round_trip(tmp_path):
    docs = [DOC, Document("d1", "other", [["g ."]]), Document("empty", "other", [[""]])]
    seqs = build_structured_sequences(docs, TOKENIZER, max_length=8, windows=True, corpus_spec="unit")
    assert {int(seqs[i]["doc_index"][0]) for i in range(len(seqs))} == {0, 1}  # empty doc: no sequence
    seqs.save(tmp_path / "seqs")
    seqs.save(tmp_path / "seqs")  # overwriting an existing folder works too
    loaded = StructuredSequences.load(tmp_path / "seqs")
    assert len(loaded) == len(seqs) and loaded.n_tokens == seqs.n_tokens
    for i in range(len(seqs)):
        for name, array in seqs[i].items():
            np.testing.assert_array_equal(loaded[i][name], array)
    assert loaded.meta["corpus_spec"] == "unit" and loaded.documents[1] == {"doc_id": "d1", "source": "other"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seqs"]  # no temp folders left behind
    table = loaded.to_dataframe()
    assert len(table) == loaded.n_tokens
    assert table.loc[table["doc_index"] == 1, "doc_id"].unique().tolist() == ["d1"]
    with pytest.raises(IndexError):
        loaded[len(loaded)]
