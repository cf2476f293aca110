"""Corpora and tokenizers fail fast, in one line: bad content (JSONL fields, a byte order mark, a tokenizer
that is not JSON, a damaged cached piece), sentence splitting and long lines in bounded time, the Hub without
a network.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import numpy as np
import pytest

import dstg_interp.data.corpora as corpora
import dstg_interp.data.en_mix as en_mix
from dstg_interp.data import DataError, load_corpus, load_tokenizer
from dstg_interp.cli.cache import main as cache_main
from dstg_interp.cli.train import main as train_main
from reliability_setup import assert_one_line_error, run_main


# --- bad content ----------------------------------------------------------------------------------
def test_jsonl_text_that_is_not_a_string(tiny, tmp_path, capsys):
    """#40: {"text": 42} gave AttributeError: 'int' object has no attribute 'replace'."""
    checkpoint, _ = tiny
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"text": "A fine sentence."}\n{"text": 42}\n')
    code, _, err = run_main(capsys, cache_main, "--model", checkpoint, "--corpus", corpus, "--out", tmp_path / "s", "--quiet")
    assert_one_line_error(code, err, "docs.jsonl:2", "'text' string field", "found 42")
    corpus.write_text('{"text": "A fine sentence."}\n{"text": "unterminated\n')
    with pytest.raises(DataError, match=r"docs.jsonl:2: not valid JSON"):
        load_corpus(str(corpus))


def test_jsonl_with_a_byte_order_mark(tmp_path):
    """#42: line 1 was reported as 'expected a JSON object' although it was one, after a BOM."""
    corpus = tmp_path / "bom.jsonl"
    corpus.write_bytes(b'\xef\xbb\xbf{"text": "First line. Second sentence."}\n')
    assert load_corpus(str(corpus), progress=False)[0].paragraphs == [["First line.", "Second sentence."]]


def test_tokenizer_that_is_not_json(tiny, tmp_path, capsys):
    """#145: --tokenizer pointing at a non-JSON file gave a bare 'Exception' traceback."""
    bad = tmp_path / "tokenizer.json"
    bad.write_text("this is not json")
    with pytest.raises(ValueError, match="tokenizer.json: not a readable tokenizer.json"):
        load_tokenizer(bad)
    _, corpus = tiny
    code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", "--tokenizer", bad, "--corpus", corpus,
                            "--steps", "2", "--warmup-steps", "1", "--quiet")
    assert_one_line_error(code, err, "tokenizer.json", prog="dstg-train")
    assert not (tmp_path / "run").exists()  # #130: no empty output folder left behind


def test_damaged_en_mix_cache_is_rebuilt(tmp_path, monkeypatch, capsys):
    """#48: a damaged cached piece gave 'Unterminated string' forever, naming no file."""
    piece = en_mix.PIECES["wikipedia"]
    processed = (tmp_path / "en-mix" / f"{piece.name}-{piece.text_sha256[:16]}-{en_mix.EN_MIX_RULES_VERSION}-"
                 f"{en_mix.SPLITTER_VERSION}.jsonl")
    processed.parent.mkdir(parents=True)
    processed.write_text('{"doc_id": "x", "source": "wiki", "paragraphs": [["cut sh')

    def offline(*args, **kwargs):
        raise en_mix.PieceUnavailable("offline in this test")

    monkeypatch.setattr(en_mix, "fetch_artifact", offline)
    with pytest.raises(en_mix.PieceUnavailable):
        en_mix.load_piece(piece, tmp_path, progress=False)
    assert not processed.exists()  # removed, so the next run with network access heals the cache
    assert f"{processed} is damaged" in capsys.readouterr().err


# --- 3. sentence splitting in linear time ---------------------------------------------------------
def normal_paragraph(n_sentences: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    words = "the farmer sold a red boat near the river while Mr. Smith watched it from the old mill".split()
    sentences = []
    for _ in range(n_sentences):
        picked = [words[i] for i in rng.integers(0, len(words), int(rng.integers(5, 15)))]
        sentences.append(" ".join(picked).capitalize() + rng.choice([".", "!", "?"]))
    return " ".join(sentences)


class RecordingSegmenter:
    def __init__(self, real):
        self.real, self.lengths = real, []

    def segment(self, text):
        self.lengths.append(len(text))
        return self.real.segment(text)


def test_long_paragraphs_reach_pysbd_in_bounded_windows(monkeypatch):
    """#36, #37: pysbd on a whole paragraph is quadratic (40k words: 35 s; a 5.8 MB line never finished)."""
    monkeypatch.setattr(corpora, "SEGMENT_WINDOW_CHARS", 600)
    paragraph = normal_paragraph(400)  # ~25k characters
    reference = corpora._segmenter()
    recorder = RecordingSegmenter(reference)
    monkeypatch.setattr(corpora, "_SEGMENTER", recorder)
    sentences = corpora.split_sentences(paragraph)
    # every call is bounded, so the total work grows linearly with the paragraph
    assert max(recorder.lengths) <= 600 and sum(recorder.lengths) < 2.5 * len(paragraph)
    # and the windows change nothing: the same sentences as pysbd on the whole paragraph
    monkeypatch.setattr(corpora, "SEGMENT_WINDOW_CHARS", 10**9)
    assert sentences == corpora.split_sentences(paragraph) and len(sentences) > 300


def test_text_without_sentence_ends_is_cut_at_spaces(monkeypatch):
    monkeypatch.setattr(corpora, "SEGMENT_WINDOW_CHARS", 500)
    paragraph = " ".join(["word"] * 1000)  # 4,999 characters, no sentence end at all
    sentences = corpora.split_sentences(paragraph)
    assert " ".join(sentences) == paragraph and max(map(len, sentences)) <= 500
    assert all(s.split() == ["word"] * len(s.split()) for s in sentences)  # cut between words only


# --- a long single line is streamed: bounded chunks, progress at once (N64) -----------------------
def test_a_long_one_line_file_is_read_in_bounded_chunks_with_progress(tmp_path, monkeypatch, capsys):
    """N64: a 200 MB one-line file printed nothing for 150 s while memory passed 4.9 GB."""
    from dstg_interp.data import corpora, load_corpus

    words = ["alpha", "beta", "Gamma", "délta", "\u201cquoted\u201d", "eta"]
    text = " ".join(words[i % 6] + ("." if i % 15 == 14 else "") for i in range(30_000))
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "one-line.txt").write_text(text + "\n\nA second paragraph. It is short.")
    reference = corpora.make_document("one-line.txt", "corpus", corpora.paragraphs_from_text(text + "\n\nA second "
                                                                                            "paragraph. It is short."))
    monkeypatch.setattr(corpora, "LARGE_TEXT_BYTES", 1000)  # stream this small file, in small chunks
    monkeypatch.setattr(corpora, "STREAM_CHUNK_BYTES", 4093)
    monkeypatch.setattr(corpora, "STREAM_CHUNK_CHARS", 20_000)
    longest = []
    normalize = corpora.normalize_text
    monkeypatch.setattr(corpora, "normalize_text", lambda raw: longest.append(len(raw)) or normalize(raw))
    (document,) = load_corpus(str(folder), progress=True)
    assert document.paragraphs == reference.paragraphs  # the same sentences as reading the file whole
    assert max(longest) <= 20_000 + corpora.SEGMENT_WINDOW_CHARS + 1  # one chunk plus a carried sentence
    assert "reading one-line.txt" in capsys.readouterr().err  # a progress bar from the first chunk on


# --- the Hub without a network: one line at once (old #45) ----------------------------------------
def test_a_hub_dataset_without_network_is_one_line_at_once(tmp_path, monkeypatch, capsys):
    """Old #45: huggingface_hub retried for ~28 s (5 'Retrying' lines) before the one-line error."""
    import socket
    import time

    from dstg_interp.cli.cache import main as cache_main
    from dstg_interp.data import corpora

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(corpora.socket, "create_connection", no_network)
    started = time.monotonic()
    code, _, err = run_main(capsys, cache_main, "--model", "dstg", "--corpus", "hf:nonexistent-org/nonexistent-ds:train",
                            "--layers", "0", "--quiet", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "cannot be reached from here (Name or service not known)", "HF_HUB_OFFLINE=1")
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - started < 20
