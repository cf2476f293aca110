"""Sharded extraction: torchrun with 2 gloo ranks writes the store one process writes, bit for bit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from conftest import tiny_model, write_synthetic_corpus
from dstg_interp import ActivationStore, extract
from dstg_interp.data import load_corpus, train_tokenizer
from dstg_interp.store.attention import AttentionAccumulator
from dstg_interp.cli.cache import main as cli_main
from gloo_ranks import report_rank_outcome
from test_store_format import V1Sequences

torch.set_num_threads(1)  # what torchrun gives each rank: the same kernels on both sides of a comparison
REPO = Path(__file__).resolve().parents[2]
TIMING_FIELDS = ("created",)  # the manifest's only field that depends on when it ran


def subprocess_env():
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the same thread count in both runs: the same kernels
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def checkpoint_and_corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharded")
    corpus = write_synthetic_corpus(folder / "docs", n_docs=9)
    tokenizer = train_tokenizer(load_corpus(str(corpus), progress=False), vocab_size=97)
    model = tiny_model("dstg", vocab_size=tokenizer.get_vocab_size())
    return model.save(folder / "ckpt", tokenizer=tokenizer), corpus


LAUNCHERS = {  # plain torchrun, and dstg-launch (torchrun with the commands' promise kept to its own end)
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "-m", "dstg_interp.cli.cache"],
    "dstg-launch": [sys.executable, "-m", "dstg_interp.cli.entry", "dstg-launch", "--nproc-per-node", "2", "dstg-cache"],
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_gloo_ranks_write_the_one_process_store(launcher, checkpoint_and_corpus, tmp_path):
    checkpoint, corpus = checkpoint_and_corpus
    flags = ["--model", str(checkpoint), "--corpus", str(corpus), "--max-length", "24", "--batch-size", "3",
             "--layers", "0,1,2,final", "--quiet"]
    assert cli_main(flags + ["--out", str(tmp_path / "one")]) == 0
    env = subprocess_env()
    if launcher == "dstg-launch":  # torchrun sets OMP_NUM_THREADS=1 itself, with a notice dstg-launch silences
        del env["OMP_NUM_THREADS"]
    sharded = subprocess.run([*LAUNCHERS[launcher], *flags, "--out", str(tmp_path / "two")],
                             env=env, capture_output=True, text=True, timeout=600)
    assert sharded.returncode == 0, sharded.stderr
    assert sharded.stdout.count("tokens, layers") == 1  # rank 0 reports, rank 1 stays quiet
    if launcher == "dstg-launch":  # none of torchrun's own log (its notice, the agent's reports)
        assert "OMP_NUM_THREADS" not in sharded.stderr and "torch/distributed/" not in sharded.stderr, sharded.stderr

    one, two = ActivationStore(tmp_path / "one"), ActivationStore(tmp_path / "two")
    assert one.n_sequences > 2 * 3  # several batches each side, so both ranks wrote rows
    files = sorted(path.name for path in one.directory.iterdir())
    assert files == sorted(path.name for path in two.directory.iterdir())
    assert "layer01_sem.npy" in files and "labels_doc_index.npy" in files
    for name in files:
        if name != "manifest.json":
            assert (one.directory / name).read_bytes() == (two.directory / name).read_bytes(), name
    strip = lambda manifest: {k: v for k, v in manifest.items() if k not in TIMING_FIELDS}  # noqa: E731
    assert strip(one.manifest) == strip(two.manifest)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one", "two"]  # no temporary folder left


def _rank_main(rank, world_size, rendezvous, out, fail_rank, sequences, report):
    """One rank of an in-process gloo job; records what extract did on this rank in ``report``."""

    def work(ranks):
        model = tiny_model("dstg").eval()
        extract(model, FailingSequences(sequences) if rank == fail_rank else sequences, out, batch_size=1,
                progress=False, attention_summaries=True, ranks=ranks)

    report_rank_outcome(rank, world_size, rendezvous, report, work)


class FailingSequences:
    """Sequences that break on this rank's second batch (mid-extraction, after its first rows were written)."""

    def __init__(self, sequences):
        self.sequences, self.lengths, self.meta, self.reads = sequences, sequences.lengths, sequences.meta, 0

    def __len__(self):
        return len(self.sequences)

    def __getitem__(self, index):
        self.reads += 1
        if self.reads > len(self.sequences) + 1:  # hashing reads each once first; then one batch goes through
            raise RuntimeError("disk went away")
        return self.sequences[index]


@pytest.mark.slow
def test_a_failing_rank_stops_every_rank_and_leaves_nothing(tmp_path):
    out = tmp_path / "store"
    mp.spawn(_rank_main, args=(2, tmp_path / "rendezvous", out, 1, V1Sequences(), tmp_path / "report"), nprocs=2)
    assert (tmp_path / "report.0").read_text() == "other rank failed"
    assert (tmp_path / "report.1").read_text() == "own error: disk went away"
    # no store, no temp folder; "rendezvous" is this test's own torch FileStore file, which torch removes only when
    # every rank closes it cleanly (a rank that dies first may leave it: seen once in CI)
    left = sorted(path.name for path in tmp_path.iterdir() if path.name != "rendezvous")
    assert left == ["report.0", "report.1"]


@pytest.mark.slow
def test_two_ranks_with_attention_summaries(tmp_path):
    out = tmp_path / "two"
    mp.spawn(_rank_main, args=(2, tmp_path / "rendezvous", out, None, V1Sequences(), tmp_path / "report"), nprocs=2)
    assert [(tmp_path / f"report.{rank}").read_text() for rank in (0, 1)] == ["ok", "ok"]
    one = extract(tiny_model("dstg").eval(), V1Sequences(), tmp_path / "one", batch_size=1, progress=False,
                  attention_summaries=True)
    two = ActivationStore(out)
    for layer in one.layers:
        for subspace in one.subspaces:
            assert np.array_equal(np.asarray(one.states(layer, subspace)), np.asarray(two.states(layer, subspace)))
    for name, value in one.attention.arrays.items():  # partial sums merged: equal up to rounding
        np.testing.assert_allclose(two.attention.arrays[name], value, rtol=1e-9, atol=1e-12, err_msg=name)


def test_merged_attention_sums_equal_one_accumulator():
    rng = torch.Generator().manual_seed(0)
    shape = dict(n_layers=2, n_heads=3, terms=["sem", "ap"], max_offset=4, max_positions=12)
    whole, first, second = (AttentionAccumulator(**shape) for _ in range(3))
    batches = []
    for _ in range(4):
        terms = [torch.randn(2, 3, 12, 12, generator=rng) for _ in range(2)]
        batches.append((terms, sum(terms).softmax(dim=-1), [12, 7]))
    for index, (terms, pattern, lengths) in enumerate(batches):
        for layer in range(2):
            whole.update(layer, terms, pattern, lengths)
            (first if index % 2 == 0 else second).update(layer, terms, pattern, lengths)
    first.merge(second)
    for name, value in whole.arrays().items():
        np.testing.assert_allclose(first.arrays()[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
    assert json.dumps(first.terms) == json.dumps(whole.terms)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_without_a_gpu_is_one_clear_error(checkpoint_and_corpus, tmp_path, capsys):
    checkpoint, corpus = checkpoint_and_corpus
    code = cli_main(["--model", str(checkpoint), "--corpus", str(corpus), "--out", str(tmp_path / "s"), "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "dstg-cache: error: device cuda: no CUDA device is available here; use --device cpu"
    assert not (tmp_path / "s").exists()
