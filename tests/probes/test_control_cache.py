"""The random-init control kept (probes/control_cache.py): a rerun reads the twin's R² instead of running the twin.

A run writes one entry under <cache>/controls; the next run with the same twin, tokens and probe reads it, runs
no forward pass through the twin and gives the same table, bit for bit. A damaged entry, one of another version
and one holding another key's numbers are each said in one line, recomputed and rewritten; --no-control-cache
(control_cache=False) neither reads nor writes.
"""

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

import probes.control_cache as control_cache
import probes.storeless as storeless
from dstg_interp.cli.probe import main as probe_main
from dstg_interp.data import load_corpus
from dstg_interp.encoders import open_encoder
from gloo_ranks import gloo_rank
from probes.positions import PositionProbeConfig, probe_positions, probe_sequences, probing_sequences
from reliability_setup import make_tiny_setup, run_main

torch.set_num_threads(1)
pytestmark = [pytest.mark.usefixtures("private_cache"),  # DSTG_CACHE in the test's own folder (conftest)
              pytest.mark.filterwarnings("ignore::probes.positions.SmallSampleWarning")]  # 4 held-out documents


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A 20-document synthetic corpus and a tiny DSTG checkpoint."""
    return make_tiny_setup(tmp_path_factory.mktemp("control_cache"), n_docs=20, vocab_size=120, name="dstg")


@pytest.fixture
def twin_forwards(monkeypatch):
    """The batches run through the random-init twin (the encoders whose name says so)."""
    counted = []
    run = storeless._Pass.run

    def counting(self, encoder, batch, hooks):
        if encoder.name.endswith("(random init)"):
            counted.append(len(batch))
        return run(self, encoder, batch, hooks)

    monkeypatch.setattr(storeless._Pass, "run", counting)
    return counted


def probe(setup, **fields):
    checkpoint, corpus = setup
    return probe_positions(str(checkpoint), task="segment", corpus=str(corpus), n_boot=20, layers=[0, 1],
                           **{"progress": False, **fields})


def entries(tmp_path):
    return sorted((tmp_path / "cache" / "controls").glob("random-init-*.json"))


def test_a_rerun_reads_the_control_and_runs_no_twin(setup, tmp_path, twin_forwards, capsys):
    first = probe(setup)
    assert twin_forwards and len(entries(tmp_path)) == 1
    stored = json.loads(entries(tmp_path)[0].read_text())
    assert stored["version"] == control_cache.CONTROL_CACHE_VERSION and stored["components"]["n_splits"] == 5
    assert len(stored["control_r2"]) == len(first)  # one number per (layer, subspace)
    capsys.readouterr()

    twin_forwards.clear()
    second = probe(setup, progress=True)
    assert twin_forwards == []  # the twin's forward pass was skipped
    err = capsys.readouterr().err
    assert f"random-init control: reused from {entries(tmp_path)[0]} (same twin, same tokens)" in err
    pd.testing.assert_frame_equal(first, second, check_exact=True)  # control_r2, selectivity, ... bit for bit
    assert first.random_init_r2.notna().all()

    uncached = probe(setup, control_cache=False)
    assert twin_forwards  # recomputed: the same floats
    pd.testing.assert_frame_equal(first, uncached, check_exact=True)


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _sign(stored: dict) -> dict:
    body = {name: value for name, value in stored.items() if name != "checksum"}
    return {**body, "checksum": {"algorithm": "xxh3_128", "digest": control_cache._checksum(body)}}


def _other_tokens(path):  # a whole, signed entry whose numbers are another tokens' (as if copied over this name)
    stored = json.loads(path.read_text())
    stored["components"]["sequences_sha256"] = "0" * 64
    stored["control_r2"] = [[layer, sub, 0.5] for layer, sub, _ in stored["control_r2"]]
    path.write_text(json.dumps(_sign(stored)))


def _another_version(path):
    stored = json.loads(path.read_text())
    stored["version"] = control_cache.CONTROL_CACHE_VERSION + 1
    path.write_text(json.dumps(_sign(stored)))


def _missing_keys(path):
    stored = json.loads(path.read_text())
    del stored["control_r2"]
    path.write_text(json.dumps(stored))


@pytest.mark.parametrize("spoil, says", [
    (_flip_a_byte, "damaged|unreadable|not a control cache entry"),
    (lambda path: path.write_text('{"format": "dstg-interp random-init contr'), "unreadable"),
    (_missing_keys, "keys missing"),
    (_another_version, "written by another version"),
    (_other_tokens, r"holds the control of other tokens \(key mismatch\)"),
])
def test_an_entry_that_cannot_be_used_is_said_recomputed_and_rewritten(setup, tmp_path, twin_forwards, spoil, says):
    first = probe(setup)
    (path,) = entries(tmp_path)
    spoil(path)
    twin_forwards.clear()
    with pytest.warns(control_cache.ControlCacheWarning, match=says) as caught:
        again = probe(setup)
    assert len([w for w in caught if w.category is control_cache.ControlCacheWarning]) == 1
    assert twin_forwards  # the twin ran again
    pd.testing.assert_frame_equal(first, again, check_exact=True)
    twin_forwards.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", control_cache.ControlCacheWarning)
        pd.testing.assert_frame_equal(first, probe(setup), check_exact=True)  # rewritten whole: read again
    assert twin_forwards == [] and entries(tmp_path) == [path]


def test_other_tokens_are_another_entry(setup, tmp_path, twin_forwards):
    probe(setup)
    twin_forwards.clear()
    probe(setup, max_docs=18)
    assert twin_forwards and len(entries(tmp_path)) == 2


def test_an_unwritable_cache_is_one_warning_and_the_table_stands(setup, tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "controls").write_text("a file where the folder goes")
    with pytest.warns(control_cache.ControlCacheWarning, match="not written"):
        table = probe(setup)
    assert table.random_init_r2.notna().all()


def test_no_control_cache_neither_reads_nor_writes(setup, tmp_path, twin_forwards, capsys):
    checkpoint, corpus = setup
    flags = ["--model", checkpoint, "--task", "segment", "--corpus", corpus, "--n-boot", "20", "--layers", "0,1"]
    code, _, err = run_main(capsys, probe_main, *flags, "--no-control-cache", "--out", tmp_path / "a")
    assert code == 0, err
    assert twin_forwards and not (tmp_path / "cache" / "controls").exists()  # nothing written

    assert run_main(capsys, probe_main, *flags, "--out", tmp_path / "b")[0] == 0  # writes the entry
    (path,) = entries(tmp_path)
    before = path.read_bytes()
    twin_forwards.clear()
    code, _, err = run_main(capsys, probe_main, *flags, "--no-control-cache", "--out", tmp_path / "c")
    assert code == 0 and twin_forwards and "reused" not in err  # not read
    assert path.read_bytes() == before and entries(tmp_path) == [path]
    tables = [pd.read_csv(tmp_path / out / "results.csv") for out in "abc"]
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)
    pd.testing.assert_frame_equal(tables[0], tables[2], check_exact=True)
    assert "control_cache" in (tmp_path / "c" / "results.json").read_text()


# --- under torchrun: rank 0 reads and writes, every rank follows its answer --------------------------------------
def _rank_main(rank, world_size, rendezvous, checkpoint, corpus, folder, report):
    with gloo_rank(rank, world_size, rendezvous) as ranks:
        encoder = open_encoder(str(checkpoint))
        sequences = probing_sequences(encoder, load_corpus(str(corpus), progress=False))
        counted = []
        run = storeless._Pass.run
        storeless._Pass.run = lambda self, model, batch, hooks: (
            counted.append(model.name) if model.name.endswith("(random init)") else None,
            run(self, model, batch, hooks))[1]
        config = PositionProbeConfig(task="segment", n_boot=20, layers=[0, 1])
        tables = []
        for _ in range(2):
            counted.clear()
            tables.append(probe_sequences(encoder, sequences, config, model_name="m", ranks=ranks, batch_size=4,
                                          control_cache=folder))
            tables[-1].to_csv(f"{report}.{rank}.{len(tables)}.csv", index=False)
            Path(f"{report}.{rank}.{len(tables)}").write_text(str(len(counted)))


@pytest.mark.slow
def test_two_gloo_ranks_share_one_entry_and_skip_the_twin_together(setup, tmp_path):
    checkpoint, corpus = setup
    folder = tmp_path / "controls"
    mp.spawn(_rank_main, args=(2, tmp_path / "rendezvous", checkpoint, corpus, folder, tmp_path / "report"), nprocs=2)
    entry = json.loads(next(folder.glob("random-init-*.json")).read_text())
    assert len(list(folder.iterdir())) == 1 and entry["components"]["world_size"] == 2  # rank 0's file, nothing else
    first, second = ({rank: int((tmp_path / f"report.{rank}.{run}").read_text()) for rank in (0, 1)} for run in (1, 2))
    assert min(first.values()) > 0 and second == {0: 0, 1: 0}  # each rank ran its share of the twin once, then none
    for rank in (0, 1):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / f"report.{rank}.1.csv"),
                                      pd.read_csv(tmp_path / f"report.{rank}.2.csv"), check_exact=True)
