"""Probes without a store (probes/storeless.py): the same table as the store route, no activations written.

The equality test compares every column of results.csv (controls, bootstrap intervals and the position-only
baseline included) of `dstg-probe --store` and the default storeless route; the sharded tests run two gloo
ranks, as tests/store/test_store_distributed.py does for extraction.
"""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from dstg_interp.cli.probe import main as probe_main
from dstg_interp.data import load_corpus
from dstg_interp.encoders import open_encoder
from probes.positions import PositionProbeConfig, probe_positions, probe_sequences, probing_sequences
from gloo_ranks import report_rank_outcome
from probes.statistics import PartStatistics
from reliability_setup import (assert_interrupted, assert_one_line_error, make_tiny_setup, run_main, self_signalled,
                               subprocess_env)

torch.set_num_threads(1)
TOLERANCE = 1e-8  # issue #39: the two routes agree to this, column by column


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A 50-document synthetic corpus (10 held out: intervals defined) and a tiny DSTG checkpoint."""
    return make_tiny_setup(tmp_path_factory.mktemp("storeless"), n_docs=50, vocab_size=120, name="dstg",
                           prepare=linear_ap_table)


def linear_ap_table(model) -> None:
    """An AP table linear in position along one axis: something for the probes to find."""
    with torch.no_grad():
        model.ap_embed.weight[:, 0] = torch.linspace(-1, 1, 64)


pytestmark = pytest.mark.usefixtures("private_cache")  # DSTG_CACHE in the test's own folder (conftest)


def assert_same_tables(a: pd.DataFrame, b: pd.DataFrame, tolerance: float = TOLERANCE) -> float:
    """Every column equal: text exactly, numbers to ``tolerance``, NaN where the other has NaN; the largest |diff|."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    largest = 0.0
    for column in a.columns:
        if pd.api.types.is_numeric_dtype(a[column]):
            x, y = a[column].to_numpy(dtype=float), b[column].to_numpy(dtype=float)
            assert np.array_equal(np.isnan(x), np.isnan(y)), column
            diff = np.abs(x - y)[~np.isnan(x)]
            largest = max(largest, float(diff.max(initial=0.0)))
            assert diff.max(initial=0.0) <= tolerance, (column, diff.max())
        else:
            assert a[column].tolist() == b[column].tolist(), column
    return largest


def test_every_column_of_results_csv_equals_the_store_route(setup, tmp_path, capsys):
    checkpoint, corpus = setup
    common = ["--model", checkpoint, "--task", "segment", "--corpus", corpus, "--n-boot", "200", "--quiet"]
    assert run_main(capsys, probe_main, *common, "--store", "--out", tmp_path / "store")[0] == 0
    assert run_main(capsys, probe_main, *common, "--out", tmp_path / "storeless")[0] == 0
    store = pd.read_csv(tmp_path / "store" / "results.csv")
    storeless = pd.read_csv(tmp_path / "storeless" / "results.csv")
    for column in ("ci_low", "random_init_r2", "shuffled_r2", "partial_ci_high", "position_selectivity_ci_low"):
        assert store[column].notna().all(), column  # the comparison covers controls, bootstrap and baseline
    largest = assert_same_tables(store, storeless)
    print(f"largest |difference| over every column: {largest:.1e}")
    assert (tmp_path / "cache" / "stores").is_dir() and any((tmp_path / "cache" / "stores").iterdir())


@pytest.mark.parametrize("task, segment, fields", [
    ("intra", "paragraph", {}),  # paragraph-crossing windows
    ("token", "sentence", {"max_tokens": 900, "layers": [0, 2], "subspaces": ["ap", "sem"]}),  # exact baseline
    ("segment", "sentence", {"n_boot": 0, "controls": False}),  # no second pass
])
def test_the_routes_agree_on_other_requests(setup, tmp_path, task, segment, fields):
    checkpoint, corpus = setup
    kwargs = {**dict(task=task, segment=segment, corpus=str(corpus), n_boot=100, progress=False), **fields}
    store = probe_positions(str(checkpoint), store=True, store_root=tmp_path / "stores", **kwargs)
    storeless = probe_positions(str(checkpoint), **kwargs)
    assert_same_tables(store, storeless)


def test_held_out_states_kept_in_memory_or_run_again_give_the_same_table(setup, tmp_path, monkeypatch):
    """Pass 1 keeps the held-out states for the predictions up to --held-out-memory-mb: all of them (one forward
    pass), some (a second pass over the rest) or none; the table is the store route's every time."""
    import probes.storeless as storeless

    checkpoint, corpus = setup
    # the twin run every time (no control cache): each count below is the same twin's plus the model's passes
    kwargs = dict(task="segment", corpus=str(corpus), n_boot=100, progress=False, control_cache=False)
    store = probe_positions(str(checkpoint), store=True, store_root=tmp_path / "stores", **kwargs)
    forwards, kept = [], []
    run, claim = storeless._Pass.run, storeless._HeldOut.claim
    monkeypatch.setattr(storeless._Pass, "run", lambda self, *a: forwards.append(len(a[1])) or run(self, *a))
    monkeypatch.setattr(storeless._HeldOut, "claim", lambda self, *a: (claim(self, *a), kept.append(self.used))[0])
    counts = {}
    for budget in (2048.0, "first batch", 0.0):
        if budget == "first batch":  # room for the first batch's held-out states, not for the next one's
            budget = sorted(set(kept))[0] / 2**20
        forwards.clear()
        assert_same_tables(store, probe_positions(str(checkpoint), held_out_memory_mb=budget, **kwargs))
        counts[budget] = sum(forwards)  # sequences through a model
    one_pass, partial, none = counts.values()  # one pass: every sequence through the model and its control once
    assert one_pass < partial < none, counts


def test_the_default_route_writes_no_activations(setup, tmp_path, capsys):
    checkpoint, corpus = setup
    code, out, _ = run_main(capsys, probe_main, "--model", checkpoint, "--task", "token", "--corpus", corpus,
                            "--n-boot", "0", "--out", tmp_path / "o")
    assert code == 0 and (tmp_path / "o" / "results.csv").is_file()
    assert not (tmp_path / "cache" / "stores").exists()
    assert '"route": "storeless"' in (tmp_path / "o" / "results.json").read_text()


def test_a_run_resolves_its_layers_once(setup, tmp_path, capsys, monkeypatch):
    """Issue 57: dstg-probe's default route resolved the request three times (two spellings of "all layers");
    the one resolution is at probe_positions' door, and the routes below carry its concrete values."""
    from dstg_interp.encoders.base import Encoder
    calls, resolve = [], Encoder.resolve
    monkeypatch.setattr(Encoder, "resolve", lambda self, *args, **kw: calls.append(args) or resolve(self, *args, **kw))
    checkpoint, corpus = setup
    for layers in ([], ["--layers", "0,last"]):
        calls.clear()
        code, _, _ = run_main(capsys, probe_main, "--model", checkpoint, "--task", "token", "--corpus", corpus,
                              "--n-boot", "0", "--no-controls", "--no-position-baseline", *layers, "--out", tmp_path / "o")
        assert code == 0 and len(calls) == 1, calls
        table = pd.read_csv(tmp_path / "o" / "results.csv")
        assert table.layer.unique().tolist() == ([0, 1, 2] if not layers else [0, 2])
        assert table.subspace.unique().tolist() == ["sem", "ap", "full"]  # the store's order


def test_store_and_no_store_at_once_is_one_line(setup, tmp_path, capsys):
    checkpoint, corpus = setup
    code, _, err = run_main(capsys, probe_main, "--model", checkpoint, "--task", "token", "--corpus", corpus,
                            "--store", "--no-store", "--out", tmp_path / "o")
    assert_one_line_error(code, err, "--no-store", "--store", prog="dstg-probe")
    assert not (tmp_path / "o").exists()


FLOAT32_TOLERANCE = 1e-5  # --gram-precision float32: 6e-7 at most on this corpus (docs/probes.md)


def test_float32_grams_give_the_float64_table_to_their_own_tolerance(setup):
    """--gram-precision float32 (the Gram products in float32, summed in float64) moves no column of the table by
    more than FLOAT32_TOLERANCE, and moves it at all (the products really are float32)."""
    checkpoint, corpus = setup
    kwargs = dict(task="intra", segment="sentence", corpus=str(corpus), n_boot=100, progress=False)
    exact = probe_positions(str(checkpoint), **kwargs)
    fast = probe_positions(str(checkpoint), gram_precision="float32", **kwargs)
    assert assert_same_tables(exact, fast, FLOAT32_TOLERANCE) > 0.0


def test_float32_grams_with_a_store_is_one_line(setup, tmp_path, capsys):
    """The store route's Grams are float64: --store with --gram-precision float32 asks two things at once."""
    checkpoint, corpus = setup
    code, _, err = run_main(capsys, probe_main, "--model", checkpoint, "--task", "token", "--corpus", corpus,
                            "--store", "--gram-precision", "float32", "--out", tmp_path / "o")
    assert_one_line_error(code, err, "--store", "--gram-precision", prog="dstg-probe")
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache" / "stores").exists()
    with pytest.raises(ValueError, match="gram_precision must be one of float64, float32"):
        PartStatistics(4, 1, 3, 2, gram_precision="float16")


def test_each_part_is_summed_in_near_equal_pieces():
    from probes.statistics import _pieces

    assert _pieces(10, 15, 2) == [slice(10, 12), slice(12, 15)]
    assert _pieces(3, 4, 2) == [slice(3, 4)] and _pieces(5, 5, 2) == []
    pieces = _pieces(0, 1001, 3)
    assert pieces[0].start == 0 and pieces[-1].stop == 1001 and all(a.stop == b.start for a, b in zip(pieces, pieces[1:]))
    assert max(p.stop - p.start for p in pieces) - min(p.stop - p.start for p in pieces) <= 1


def test_statistics_re_expressed_around_another_reference_are_the_same_sums():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(300, 5, generator=generator, dtype=torch.float64) + 3.0
    part, position = torch.randint(0, 3, (300,), generator=generator), torch.randint(0, 7, (300,), generator=generator)
    y = torch.randn(300, 2, generator=generator, dtype=torch.float64)
    whole, first, second = (PartStatistics(5, 2, 3, 7) for _ in range(3))
    whole.add(x, part, position, y)
    first.add(x[:150], part[:150], position[:150], y[:150])
    second.add(x[150:], part[150:], position[150:], y[150:])
    second.rereference(first.reference)
    means = np.random.default_rng(0).normal(size=(7, 5))
    merged = first.augmented(means) + second.augmented(means)
    np.testing.assert_allclose(merged, whole.augmented(means), rtol=1e-12, atol=1e-10)
    direct = torch.cat([x - torch.from_numpy(means)[position], y, torch.ones(300, 1, dtype=torch.float64)], dim=1)
    for f in range(3):
        rows = direct[part == f]
        np.testing.assert_allclose(whole.augmented(means)[f], (rows.T @ rows).numpy(), rtol=1e-12, atol=1e-10)


def test_statistics_without_the_held_out_parts_gram_are_the_folds_of_the_full_sums():
    """``gram_parts``: the held-out part's Gram is not summed (the route predicts those rows instead); the folds'
    sums are those of statistics with every Gram, the sums read have no held-out part, and a reference moved
    between ranks keeps them so."""
    from probes.gram import solve_folds

    generator = torch.Generator().manual_seed(2)
    x = torch.randn(500, 5, generator=generator, dtype=torch.float64) + 2.0
    part, position = torch.randint(0, 4, (500,), generator=generator), torch.randint(0, 7, (500,), generator=generator)
    y = torch.randn(500, 2, generator=generator, dtype=torch.float64)
    every, folds_only = PartStatistics(5, 2, 4, 7), PartStatistics(5, 2, 4, 7, gram_parts=3)
    for stats in (every, folds_only):
        stats.add(x, part, position, y)
    assert folds_only.gram.shape[0] == 3
    np.testing.assert_allclose(folds_only.augmented(np.zeros(5)), every.augmented(np.zeros(5))[:3], rtol=0, atol=0)
    folds_only.rereference(torch.ones(7, 5, dtype=torch.float64))
    np.testing.assert_allclose(folds_only.augmented(np.zeros(5)), every.augmented(np.zeros(5))[:3], rtol=1e-12,
                               atol=1e-10)
    shift = x.mean(dim=0).numpy()
    with_test, without = every.fold_sums(shift, np.zeros(2), [0, 1], 3), folds_only.fold_sums(shift, np.zeros(2), [0, 1], 3)
    assert with_test.gram.shape[0] == 4 and without.gram.shape[0] == 3
    alphas = np.array([0.1, 10.0])
    full, folds = solve_folds(with_test, alphas, True), solve_folds(without, alphas, True)
    np.testing.assert_allclose(folds.cv_scores, full.cv_scores, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(folds.coef, full.coef, rtol=1e-12, atol=1e-12)
    assert np.isfinite(full.test_r2).all() and np.isnan(folds.test_r2).all()
    with pytest.raises(ValueError, match="gram_parts"):
        PartStatistics(5, 2, 4, 7, gram_parts=5)


def test_parts_summed_on_several_threads_are_bit_for_bit_the_one_thread_sums(monkeypatch):
    """The parts' Grams are summed side by side, one product per thread (torch's thread count): the same calls as
    on one thread, so the same bits; and the threads are really used (each part's product on its own thread)."""
    import threading

    import probes.statistics as statistics

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2000, 40, generator=generator, dtype=torch.float64)
    part, position = torch.randint(0, 6, (2000,), generator=generator), torch.randint(0, 9, (2000,), generator=generator)
    y = torch.randn(2000, 3, generator=generator, dtype=torch.float64)
    threads_used = set()
    rows_gram = statistics.rows_gram
    monkeypatch.setattr(statistics, "rows_gram", lambda rows, out: (threads_used.add(threading.current_thread().name),
                                                                    rows_gram(rows, out))[1])
    sums = {}
    for threads in (1, 2):
        monkeypatch.setattr(statistics, "gram_threads", lambda threads=threads: threads)
        stats = PartStatistics(40, 3, 6, 9)
        for piece in range(4):
            rows = slice(500 * piece, 500 * (piece + 1))
            stats.add(x[rows], part[rows], position[rows], y[rows])
        sums[threads] = stats.augmented(np.zeros((9, 40)))
    assert np.array_equal(sums[1], sums[2])
    assert any(name.startswith("gram-sums") for name in threads_used) and threading.main_thread().name in threads_used


def test_a_failed_gram_piece_reaches_the_caller_and_leaves_the_threads_free(monkeypatch):
    """A product that fails (out of memory, say) raises from add(); the piece after it does not wait forever,
    so both of the pool's threads are free afterwards, and the next add sums as usual."""
    import threading

    import probes.statistics as statistics

    monkeypatch.setattr(statistics, "gram_threads", lambda: 2)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(600, 8, generator=generator, dtype=torch.float64)
    part, position = torch.randint(0, 3, (600,), generator=generator), torch.randint(0, 5, (600,), generator=generator)
    y = torch.randn(600, 1, generator=generator, dtype=torch.float64)
    rows_gram = statistics.rows_gram

    def failing(rows, out):  # the first piece of each part fails, the second (which waits for it) does not
        if sys._getframe(1).f_locals.get("j") == 0:
            raise MemoryError("a product that did not fit")
        return rows_gram(rows, out)

    monkeypatch.setattr(statistics, "rows_gram", failing)
    with pytest.raises(MemoryError, match="did not fit"):
        PartStatistics(8, 1, 3, 5).add(x, part, position, y)
    both = threading.Barrier(2, timeout=10)  # met only if both threads of the pool are free
    for done in [statistics._pool().submit(both.wait) for _ in range(2)]:
        done.result(timeout=20)
    monkeypatch.setattr(statistics, "rows_gram", rows_gram)
    stats = PartStatistics(8, 1, 3, 5)
    stats.add(x, part, position, y)
    z = torch.cat([x - stats.reference[position], y, torch.ones(600, 1, dtype=torch.float64)], dim=1)
    for f in range(3):
        np.testing.assert_allclose(stats.gram[f].numpy(), (z[part == f].T @ z[part == f]).numpy(), rtol=1e-12, atol=1e-12)


def test_the_passes_run_numpys_blas_on_one_thread_beside_torch(setup, monkeypatch):
    """OpenBLAS's idle threads spin and take the cores from torch's forward: the statistics pass and the
    prediction pass sum their Grams and predictions with numpy's BLAS limited to one thread."""
    from threadpoolctl import threadpool_info

    import probes.storeless as storeless

    checkpoint, corpus = setup
    seen = []
    add = storeless.PartStatistics.add
    monkeypatch.setattr(storeless.PartStatistics, "add", lambda self, *a: (
        seen.append({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}), add(self, *a))[1])
    probe_positions(str(checkpoint), task="segment", corpus=str(corpus), n_boot=0, controls=False, progress=False)
    assert seen and all(threads == {1} for threads in seen), seen


def test_statistics_summed_in_part_order_in_pieces_and_after_a_read_are_the_direct_sums():
    """Each part's Gram is added to in place: rows given in part order or not, in several pieces, with a read
    between two adds, the sums are the direct ones, and every Gram is exactly symmetric."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(400, 6, generator=generator, dtype=torch.float64) * 4.0
    part, position = torch.randint(0, 4, (400,), generator=generator), torch.randint(0, 9, (400,), generator=generator)
    y = torch.randn(400, 2, generator=generator, dtype=torch.float64)
    direct = PartStatistics(6, 2, 4, 9)
    direct.add(x, part, position, y)
    expected = direct.augmented(np.zeros(6))
    rows = torch.cat([x, y, torch.ones(400, 1, dtype=torch.float64)], dim=1)
    for f in range(4):  # the augmented sums around 0 are plain Grams of [x | y | 1]
        np.testing.assert_allclose(expected[f], (rows[part == f].T @ rows[part == f]).numpy(), rtol=1e-12, atol=1e-9)
    ordered, pieces = PartStatistics(6, 2, 4, 9), PartStatistics(6, 2, 4, 9)
    order = torch.argsort(part, stable=True)
    ordered.add(x[order], part[order], position[order], y[order])
    for piece in torch.arange(400).split(130):
        pieces.add(x[piece], part[piece], position[piece], y[piece])
        pieces.augmented(np.zeros(6))  # a read between adds
    for stats in (ordered, pieces):
        np.testing.assert_allclose(stats.augmented(np.zeros(6)), expected, rtol=1e-12, atol=1e-9)
        assert torch.equal(stats.gram, stats.gram.transpose(1, 2))


# --- under torchrun: statistics summed over ranks -------------------------------------------------
def _rank_main(rank, world_size, rendezvous, checkpoint, corpus, fail, report):
    def work(ranks):
        encoder = open_encoder(str(checkpoint))
        sequences = probing_sequences(encoder, load_corpus(str(corpus), progress=False))
        if rank == 1 and fail:
            sequences = FailingSequences(sequences, fail)
        table = probe_sequences(encoder, sequences, PositionProbeConfig(task="segment", n_boot=100), model_name="m",
                                ranks=ranks, batch_size=4)
        table.to_csv(f"{report}.{rank}.csv", index=False)

    report_rank_outcome(rank, world_size, rendezvous, report, work)


class FailingSequences:
    """Sequences whose reads break (``raise``) or kill the process (``die``) after the first batches."""

    def __init__(self, sequences, how):
        self.sequences, self.lengths, self.how, self.reads = sequences, sequences.lengths, how, 0

    def __len__(self):
        return len(self.sequences)

    def __getattr__(self, name):
        return getattr(self.sequences, name)

    def __getitem__(self, index):
        self.reads += 1
        if self.reads > 8:
            if self.how == "die":
                os._exit(9)  # as a rank killed by the OOM killer: no cleanup, no message to the others
            raise RuntimeError("disk went away")
        return self.sequences[index]


@pytest.mark.slow
def test_two_gloo_ranks_give_the_one_process_table(setup, tmp_path):
    checkpoint, corpus = setup
    mp.spawn(_rank_main, args=(2, tmp_path / "rendezvous", checkpoint, corpus, None, tmp_path / "report"), nprocs=2)
    assert [(tmp_path / f"report.{rank}").read_text() for rank in (0, 1)] == ["ok", "ok"]
    encoder = open_encoder(str(checkpoint))
    sequences = probing_sequences(encoder, load_corpus(str(corpus), progress=False))
    one = probe_sequences(encoder, sequences, PositionProbeConfig(task="segment", n_boot=100), model_name="m",
                          batch_size=4)
    one = pd.read_csv(pd.io.common.StringIO(one.to_csv(index=False)))  # through CSV, as the ranks wrote theirs
    for rank in (0, 1):
        assert_same_tables(one, pd.read_csv(tmp_path / f"report.{rank}.csv"))


@pytest.mark.slow
@pytest.mark.parametrize("how, says", [("raise", "other rank failed"), ("die", "peer lost")])
def test_a_failing_or_dead_rank_stops_the_others(setup, tmp_path, how, says):
    checkpoint, corpus = setup
    spawn = mp.get_context("spawn")  # not mp.spawn: it would SIGTERM rank 0 as soon as rank 1 dies
    ranks = [spawn.Process(target=_rank_main, args=(rank, 2, tmp_path / "rendezvous", checkpoint, corpus, how,
                                                     tmp_path / "report")) for rank in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=300)
    assert (tmp_path / "report.0").read_text() == says
    assert not list(tmp_path.glob("report.*.csv"))  # no table from a run that lost a rank


@pytest.mark.slow
def test_dstg_launch_runs_the_storeless_probe_on_two_ranks(setup, tmp_path):
    checkpoint, corpus = setup
    flags = ["--model", str(checkpoint), "--task", "segment", "--corpus", str(corpus), "--n-boot", "100", "--quiet"]
    env = subprocess_env(DSTG_CACHE=str(tmp_path / "cache"))
    del env["OMP_NUM_THREADS"]  # dstg-launch sets it, as torchrun does
    one = subprocess.run([sys.executable, "-m", "dstg_interp.cli.entry", "dstg-probe", *flags, "--out", str(tmp_path / "one")],
                         env=subprocess_env(DSTG_CACHE=str(tmp_path / "cache")), capture_output=True, text=True,
                         timeout=600)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "dstg_interp.cli.entry", "dstg-launch", "--nproc-per-node", "2", "dstg-probe",
                          *flags, "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("wrote ") == 1  # rank 0 reports and writes
    assert_same_tables(pd.read_csv(tmp_path / "one" / "results.csv"), pd.read_csv(tmp_path / "two" / "results.csv"))
    assert not (tmp_path / "cache" / "stores").exists()


# --- interrupted: nothing half-written ------------------------------------------------------------
@pytest.mark.parametrize("signal_name, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_statistics_pass_leaves_nothing(setup, tmp_path, signal_name, code):
    checkpoint, corpus = setup
    result = self_signalled("probes.storeless", "_float16_rows", signal_name, "dstg-probe", "--model", checkpoint,
                            "--task", "segment", "--corpus", corpus, "--out", tmp_path / "o", cwd=tmp_path)
    assert_interrupted(result, code, "dstg-probe", "no results were written")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cache"] or not (tmp_path / "o").exists()
    assert not (tmp_path / "cache" / "stores").exists()


def test_an_hf_encoder_gives_the_same_table_on_both_routes(setup, tmp_path):
    """The storeless route reads HF hidden states through the same encoder adapter as extraction."""
    from hf_writers import write_tiny_bert

    _, corpus = setup
    folder = tmp_path / "bert"
    write_tiny_bert(folder, load_corpus(str(corpus), progress=False))
    kwargs = dict(task="segment", corpus=str(corpus), n_boot=100, progress=False)
    store = probe_positions(str(folder), store=True, store_root=tmp_path / "stores", **kwargs)
    storeless = probe_positions(str(folder), **kwargs)
    assert set(storeless.subspace) == {"full"} and len(storeless) == 3
    assert_same_tables(store, storeless)


@pytest.mark.parametrize("value, refused", [(1.5, False), (65504.0, False), (65510.0, True), (7e4, True),
                                            (float("inf"), True), (float("nan"), False)])
def test_float16_rows_round_as_a_store_and_refuse_what_it_refuses(value, refused):
    """The rows the statistics sum are the store's float16 values, side by side per hook; a state beyond
    float16's range (inf included, the values just past the largest float16 too) is refused as the store refuses it."""
    from probes.storeless import _float16_rows
    torch.manual_seed(0)
    sem, ap = torch.randn(2, 3, 4), torch.randn(2, 3, 2)
    sem[1, 2, 3] = value
    mask = torch.tensor([[True, True, False], [True, True, True]])
    keep = torch.tensor([True, False, True, True, True])
    captured = {"sem": sem, "ap": ap}
    if refused:
        with pytest.raises(ValueError, match="sem: activations exceed the float16 range"):
            _float16_rows(captured, ["sem", "ap"], mask, keep)
        return
    rows = _float16_rows(captured, ["sem", "ap"], mask, keep)
    expected = torch.cat([sem[mask][keep], ap[mask][keep]], dim=1).to(torch.float16)
    assert rows.dtype == torch.float16 and rows.shape == (4, 6)
    assert torch.equal(rows.isnan(), expected.isnan()) and torch.equal(rows.nan_to_num(), expected.nan_to_num())


def test_the_documented_zero_budget_is_accepted_on_the_command_line():
    """S2: --held-out-memory-mb 0 was documented as "always a second pass" and refused by the flag's parser."""
    from dstg_interp.cli.flags import non_negative_float
    from dstg_interp.cli.probe import build_parser
    assert build_parser().parse_args(["--task", "token", "--held-out-memory-mb", "0"]).held_out_memory_mb == 0.0
    with pytest.raises(Exception, match="finite number >= 0"):
        non_negative_float("-1")
