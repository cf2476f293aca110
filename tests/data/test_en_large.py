"""The en-large corpus pieces on tiny fixtures written here: pod, HTML, reST and SWORD extraction, the
document rule, licence files never read, strict vs partial loading, the held-out split of en-mix kept."""

import io
import lzma
import tarfile

import pytest

from conftest import sword_blocks
from dstg_interp.data import en_large, en_mix, load_corpus, split_documents
from dstg_interp.data.corpora import DataError, Document
from dstg_interp.data.en_mix import RawUnit

LONG = "The quick reader follows every line of this paragraph with care."  # 11 words


def fake_deb(files: dict[str, bytes]) -> bytes:
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    data = lzma.compress(tar_bytes.getvalue())
    member = lambda name, body: f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) % 2)
    return b"!<arch>\n" + member("debian-binary", b"2.0\n") + member("data.tar.xz", data)


def test_pod_paragraphs_keep_prose_and_resolve_codes():
    pod = ("Text before any command is not documentation.\n\n=head1 NAME\n\nperlfake - a fake page\n\n"
           "=head1 DESCRIPTION\n\nUse C<print> and B<bold I<nested>> text, see L<the manual|perlfunc/print> "
           "or L<perlop>; 1 E<lt> 2 X<index>.\n\n    my $code = 1;  # verbatim: code\n\n"
           "=begin html\n\n<p>raw html</p>\n\n=end html\n\nLast paragraph.\n")
    assert en_large.pod_paragraphs(pod) == [
        "perlfake - a fake page",
        "Use print and bold nested text, see the manual or perlop; 1 < 2 .",
        "Last paragraph."]


def test_html_paragraphs_skip_code_tables_and_navigation():
    page = ("<html><nav><p>Home | Next</p></nav><h1>Title</h1><p>First <code>inline</code> &amp; text.</p>"
            "<pre><p>not prose</p></pre><table><tr><td><p>cell</p></td></tr></table>"
            "<div><p>Second\n   paragraph</p><p></p></div></html>")
    assert en_large.html_paragraphs(page) == ["First inline & text.", "Second paragraph"]


def test_rst_paragraphs_drop_headings_markup_and_code():
    source = ("Title\n=====\n\n.. note:: a directive\n\nThe driver reads :c:func:`foo_read` and ``bar`` values "
              "from the device every time.\n\n    indented code block that is long enough to count here.\n\n"
              "* a list item that is long enough to be a paragraph of prose.\n\nToo short.\n\n"
              "The following two points matter for the whole kernel here:\n")
    assert en_large.rst_paragraphs(source) == [
        "The driver reads foo_read and bar values from the device every time.",
        "The following two points matter for the whole kernel here."]


def test_chunk_documents_cut_at_paragraph_boundaries():
    unit = RawUnit("perl/perlfake", "perlfake", [LONG] * 5 + ["Too short to keep."] + [" ".join([LONG] * 4)])
    documents = en_large.chunk_documents([unit], doc_words=25)
    assert [d.unit_id for d in documents] == [f"perl/perlfake/{i:03d}" for i in range(4)]
    assert [len(d.paragraphs) for d in documents] == [2, 2, 1, 1]  # the 44-word paragraph alone
    assert all(sum(len(p.split()) for p in d.paragraphs) <= 25 for d in documents[:3])
    assert "Too short to keep." not in [p for d in documents for p in d.paragraphs]


def test_extractors_read_a_deb_and_never_its_licence_texts(tmp_path):
    blocks = [f'<div osisID="Gen" type="book"/><div sID="a" type="x-p"/>{LONG} <note>a footnote</note>'
              f'<div eID="a" type="x-p"/><div sID="b" type="x-p"/>{LONG}<div eID="b" type="x-p"/>']
    index, blob = sword_blocks(blocks)
    root = "./usr/share/sword/modules/texts/ztext/fakebible/"
    pod_root = "./usr/share/perl/5.36.0/pod/"
    deb = tmp_path / "fake.deb"
    deb.write_bytes(fake_deb({root + "ot.bzs": index, root + "ot.bzz": blob, root + "nt.bzs": b"", root + "nt.bzz": b"",
                              pod_root + "perlfake.pod": f"=head1 DESCRIPTION\n\n{LONG}\n".encode(),
                              pod_root + "perlgpl.pod": f"=head1 GPL\n\n{LONG} licence\n".encode(),
                              "./usr/share/doc/perl-doc/copyright": b"Copyright text"}))
    units = en_large.extract_sword_module("texts/ztext/fakebible")(deb)
    assert [(u.unit_id, u.paragraphs) for u in units] == [("fakebible/ot/Gen", [LONG, LONG])]
    pods = en_large.extract_perl_pods(deb)
    assert [(u.unit_id, u.paragraphs) for u in pods] == [("perl/perlfake.pod", [LONG])]
    assert set(en_large.deb_files(deb, r".")) == {root + n for n in ("ot.bzs", "ot.bzz", "nt.bzs", "nt.bzz")} | {pod_root + "perlfake.pod"}


def test_tdavid_rest_is_exactly_what_the_cap_leaves_out():
    paragraph = " ".join(["word"] * 45) + "."
    units = [RawUnit(f"tdavid/ps{n:03d}", None, [paragraph] * 20) for n in range(1, 4)]
    kept = {d.unit_id for d in en_mix.tdavid_documents(units, max_words=1000)}
    everything = {d.unit_id for d in en_mix.tdavid_documents(units, max_words=10**9)}
    rest = {d.unit_id for d in en_large.tdavid_rest(units, max_words=1000)}
    assert kept and rest and not kept & rest and kept | rest == everything


def test_every_piece_is_pinned_and_has_a_licence():
    assert set(en_large.PIECES) >= set(en_mix.PIECES) and len(en_large.PIECES) == 15
    for name, piece in en_large.PIECES.items():
        assert len(piece.artifact_sha256) == 64 and len(piece.text_sha256) == 64, name
        assert en_large.LICENCES[name]
    assert "pydocs" not in en_large.PIECES  # held-out sources stay out of training


def _fake_documents(piece, cache_dir, progress=True):
    if piece.name == "linux":
        raise en_mix.PieceUnavailable("apt-get failed: 404 Not Found")
    return [Document(f"{piece.name}/{i}", piece.name, [["A sentence."]]) for i in range(40)]


def test_strict_load_stops_on_a_missing_piece_and_partial_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(en_large, "load_piece", _fake_documents)
    with pytest.raises(DataError) as err:
        load_corpus("en-large:austen,linux", cache_dir=tmp_path)
    assert "piece linux cannot be fetched (apt-get failed: 404 Not Found)" in str(err.value)
    assert "'en-large:partial'" in str(err.value) and "\n" not in str(err.value)
    documents = load_corpus("en-large:austen,linux,partial", cache_dir=tmp_path, progress=False)
    assert {d.source for d in documents} == {"austen"}
    assert capsys.readouterr().err.strip().splitlines() == ["en-large: skipping linux: apt-get failed: 404 Not Found"]
    with pytest.raises(DataError, match="unknown or repeated piece"):
        load_corpus("en-large:austen,shakespeare", cache_dir=tmp_path)
    assert en_large.parse_spec("en-large:linux,austen") == (["austen", "linux"], False)
    assert en_large.parse_spec("en-large:partial") == (list(en_large.PIECES), True)


def test_version_names_pins_and_for_partial_the_pieces_present(tmp_path):
    strict = en_large.en_large_version("en-large:austen,linux", tmp_path)
    assert en_mix.PIECES["austen"].text_sha256[:16] in strict and "partial" not in strict
    before = en_large.en_large_version("en-large:austen,linux,partial", tmp_path)
    path = en_mix.processed_path(en_large.PIECES["austen"], tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("")
    assert en_large.en_large_version("en-large:austen,linux,partial", tmp_path) != before


def test_en_mix_held_out_documents_stay_held_out_in_en_large(tmp_path, monkeypatch):
    monkeypatch.setattr(en_large, "load_piece", lambda piece, cache, progress=True: [] if piece.name == "linux"
                        else _fake_documents(piece, cache))
    small = load_corpus("en-large:wikipedia,austen", cache_dir=tmp_path)
    large = load_corpus("en-large:wikipedia,austen,perl,git", cache_dir=tmp_path)
    held_small = {d.doc_id for d in split_documents(small, 0.05, 0)[1]}
    held_large = {d.doc_id for d in split_documents(large, 0.05, 0)[1]}
    assert held_small and held_small == {i for i in held_large if i.split("/")[0] in ("wikipedia", "austen")}
