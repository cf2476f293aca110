"""Fail fast, in one line: bad content, absurd sizes, full disks, nonsense values, misleading statistics.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
"""

import errno
import shutil
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors import SafetensorError

import dstg_interp.data.corpora as corpora
import dstg_interp.data.en_mix as en_mix
import dstg_interp.model.checkpoint as checkpoint_module
import dstg_interp.model.saving as saving_module
from conftest import tiny_model, write_synthetic_corpus
from dstg_interp import CheckpointError, ModelConfig, StoreError, extract, load_model
from dstg_interp.cli.convert import main as convert_main
from dstg_interp.cli.extend import main as extend_main
from dstg_interp.data import DataError, load_corpus, load_tokenizer
from dstg_interp.model.checkpoint import NonFiniteWeightsWarning
from dstg_interp.store import ActivationStore
from dstg_interp.cli.cache import main as cache_main
from dstg_interp.store.config import ExtractionConfig
from dstg_interp.cli.train import main as train_main
from dstg_interp.train import TrainConfig, read_resume_state, train, truncate_log
from dstg_interp.cli.probe import compact_table, main as probe_main
from dstg_interp.cli.holmes import main as holmes_main
from dstg_interp.encoders.naming import model_label
from probes.positions import SmallSampleWarning, probe_positions
from reliability_setup import assert_one_line_error, make_tiny_setup, run_main

torch.set_num_threads(1)
FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "holmes" / "benchmark"
AUTHORS = FIXTURES / "authors-format" / "posneobert-dstg"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_setup(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))


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


def test_config_that_is_not_json_names_its_file(tmp_path, capsys):
    """#146: 'Expecting property name' with no file named."""
    bad = tmp_path / "recipe.json"
    bad.write_text("{nope")
    code, _, err = run_main(capsys, train_main, "--config", bad, "--out", tmp_path / "run")
    assert_one_line_error(code, err, "--config", "recipe.json", "not valid JSON")


def test_absurd_model_sizes(tiny, tmp_path, capsys):
    """#16: vocab_size 1e12 tried to allocate 448 TB; #153/#154: --factor inf / 100000."""
    with pytest.raises(ValueError, match="TB of memory.*vocab_size=1000000000000"):
        ModelConfig(variant="dstg", d_sem=24, d_ap=8, n_heads=4, vocab_size=10**12)
    checkpoint, _ = tiny
    huge = tmp_path / "huge"
    huge.mkdir()
    config = json.loads((checkpoint / "config.json").read_text())
    (huge / "config.json").write_text(json.dumps(dict(config, vocab_size=10**12)))
    (huge / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes())
    code, _, err = run_main(capsys, cache_main, "--model", huge, "--corpus", tiny[1], "--out", tmp_path / "s", "--quiet")
    assert_one_line_error(code, err, "huge/config.json", "TB of memory")
    for factor, fragment in (("inf", "finite"), ("100000", "TB of memory"), ("nan", "must be > 1")):
        code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", factor, "--out", tmp_path / "x")
        assert_one_line_error(code, err, fragment, prog="dstg-extend")
    assert not (tmp_path / "x").exists()


def test_model_too_big_for_this_machine(monkeypatch):
    monkeypatch.setattr(checkpoint_module, "physical_memory", lambda: 10**6)
    with pytest.raises(CheckpointError, match="needs about .* GB but this machine has"):
        checkpoint_module.build_model(ModelConfig(variant="rope", d_model=32, n_heads=4, vocab_size=10_000))


def test_nan_weights_are_reported_and_integer_weights_refused(tmp_path):
    """#22: a NaN checkpoint extracted a store full of NaN without a word; #23: int32 weights were cast."""
    model = tiny_model("rope")
    with torch.no_grad():
        model.blocks[0].mlp.w_out.weight[0, 0] = float("nan")
    model.save(tmp_path / "nan")
    with pytest.warns(NonFiniteWeightsWarning, match="model.safetensors: 1 tensor.*NaN"):
        load_model(tmp_path / "nan")
    from safetensors.torch import load_file, save_file

    state = load_file(str(tmp_path / "nan" / "model.safetensors"))
    state = {k: (v.to(torch.int32) if k == "tok_embed.weight" or k.endswith("embed.weight") else v.nan_to_num())
             for k, v in state.items()}
    save_file(state, str(tmp_path / "nan" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="has dtype int32; weights must be floating point"):
        load_model(tmp_path / "nan")


def test_truncated_optimizer_state_on_resume(tiny, tmp_path, capsys):
    """#135: a cut-short optimizer.safetensors gave a SafetensorError traceback (the model file did not)."""
    _, corpus = tiny
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), model=dict(variant="dstg", d_sem=24, d_ap=8, n_layers=1, n_heads=4),
                      corpus=str(corpus), vocab_size=200, max_length=32, batch_size=2, max_steps=4, warmup_steps=1,
                      eval_every=100, eval_batches=1, save_every=2, progress=False, val_fraction=0.2)
    train(cfg, stop_after_step=2)
    optimizer = tmp_path / "run" / "checkpoint" / "optimizer.safetensors"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="optimizer.safetensors is corrupt"):
        read_resume_state(cfg)
    code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", "--resume")
    assert_one_line_error(code, err, "optimizer.safetensors is corrupt", prog="dstg-train")


def test_resume_log_with_a_half_written_last_line(tmp_path):
    """#137: a log line cut short by a crash blocked --resume with an unnamed JSON error."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n{"step": 30, "lo')
    truncate_log(log, 20)
    assert log.read_text() == '{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n'
    log.write_text('{"step": 10}\ngarbage\n{"step": 20}\n')
    with pytest.raises(CheckpointError, match="log.jsonl line 2 is not a log record"):
        truncate_log(log, 20)


def test_damaged_store_is_named_and_rebuilt(tiny, tmp_path):
    """#78, #96: a truncated .npy was reused as complete; reading it gave 'mmap length is greater than file size'."""
    checkpoint, corpus = tiny
    model = load_model(checkpoint)
    documents = load_corpus(str(corpus), progress=False)
    store = extract(model, documents, tmp_path / "s", layers=(0,), progress=False)
    path = store.directory / "layer00_ap.npy"
    intact = path.read_bytes()
    path.write_bytes(intact[: len(intact) // 2])
    with pytest.raises(StoreError, match="layer00_ap.npy is cut short .*damaged: delete"):  # found on opening now
        ActivationStore(tmp_path / "s").states(0, "ap")
    extract(model, documents, tmp_path / "s", layers=(0,), progress=False)  # same identity: rebuilt, not reused
    assert path.read_bytes() == intact


def test_extract_of_plain_strings_is_one_clear_error(tiny):
    model = load_model(tiny[0])
    for bad in (["plain string"], None, "plain string"):
        with pytest.raises(StoreError, match="StructuredSequences or a list of Documents"):
            extract(model, bad, "unused", progress=False)


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


# --- the one line is the only line: third-party noise silenced, real warnings in our words --------
def authors_copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(AUTHORS, folder)
    return folder


def test_a_pickle_payload_is_refused_in_one_line(tmp_path, capsys):
    """N9 / N10: torch's 2-line 'Detected pickle protocol 4' UserWarning came before the refusal."""
    import os
    import pickle

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'PWNED'}",)

    folder = authors_copy(tmp_path, "pickle")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"embed.weight": Payload()}, protocol=4))
    code, _, err = run_main(capsys, convert_main, folder, tmp_path / "out", "--no-tokenizer")
    assert_one_line_error(code, err, "never unpickled", prog="dstg-convert")
    assert len(err.strip().splitlines()) == 1 and "UserWarning" not in err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


def test_nan_weights_are_one_warning_line_of_our_own(tmp_path, capsys):
    """N26: dstg-convert reported NaN weights as a raw Python warning with a source line."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = authors_copy(tmp_path, "nan")
    state = load_file(folder / "model.safetensors")
    name = next(key for key in state if "embed" in key)
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, folder / "model.safetensors")
    code, out, err = run_main(capsys, convert_main, folder, tmp_path / "out", "--no-tokenizer")
    assert code == 0 and out.startswith("wrote ")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dstg-convert: warning:") and "NaN" in lines[0], err


def test_a_tokenizer_far_smaller_than_the_embedding_is_said(tmp_path, capsys):
    """N31: a 25-token vocab.txt for a 100-row model was accepted silently."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(20)]) + "\n")
    code, _, err = run_main(capsys, convert_main, AUTHORS, tmp_path / "out", "--tokenizer", vocab)
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dstg-convert: warning:"), err
    assert "25 tokens for an embedding of 100 rows" in lines[0] and "another model's tokenizer" in lines[0]


# --- disk full ------------------------------------------------------------------------------------
def full_disk_save_file(*args, **kwargs):
    raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')


def test_disk_full_while_saving_a_checkpoint(tiny, tmp_path, capsys, monkeypatch):
    """#149, #160: safetensors' own error type escaped as a traceback; the previous checkpoint must stay."""
    checkpoint, _ = tiny
    monkeypatch.setattr(saving_module, "save_file", full_disk_save_file)
    code, _, err = run_main(capsys, extend_main, "--model", checkpoint, "--factor", "2", "--out", tmp_path / "longer")
    assert_one_line_error(code, err, "disk full while writing", "longer", prog="dstg-extend")
    assert list(tmp_path.iterdir()) == []  # no temporary folder left
    before = (checkpoint / "model.safetensors").read_bytes()
    with pytest.raises(OSError) as caught:
        load_model(checkpoint).save(checkpoint)
    assert caught.value.errno == errno.ENOSPC
    assert (checkpoint / "model.safetensors").read_bytes() == before
    assert [p.name for p in checkpoint.parent.iterdir() if p.name.startswith(".")] == []


def test_disk_full_while_writing_probe_results(tiny, tmp_path, capsys, monkeypatch):
    """#93: a traceback after the whole probe, and .results.*.tmp left behind; old results must survive."""
    checkpoint, corpus = tiny
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"command": "dstg-probe", "old": True}))
    (out / "results.csv").write_text("old\n")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    code, _, err = run_main(capsys, probe_main, "--model", checkpoint, "--task", "token", "--corpus", corpus, "--out", out,
                            "--layers", "0", "--subspaces", "ap", "--no-controls", "--quiet")
    assert_one_line_error(code, err, "disk full", prog="dstg-probe")
    assert sorted(p.name for p in out.iterdir()) == ["results.csv", "results.json"]
    assert (out / "results.csv").read_text() == "old\n"


def test_probe_refuses_an_unusable_out_before_probing(tiny, tmp_path, capsys, monkeypatch):
    """#90-#92: the whole probe ran, then a traceback at write time."""
    import dstg_interp.cli.probe as probe_cli

    monkeypatch.setattr(probe_cli, "run", lambda args: pytest.fail("probed although --out was unusable"))
    (tmp_path / "plain").write_text("x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.csv").write_text("someone else's")
    for out, fragment in ((tmp_path / "plain", "is a file"), (tmp_path / "plain" / "res", "which is a file"),
                          (foreign, "did not write")):
        code, _, err = run_main(capsys, probe_main, "--model", tiny[0], "--task", "token", "--out", out)
        assert_one_line_error(code, err, fragment, prog="dstg-probe")


# --- a full or too small cache disk names the cache, not --out (N88) ------------------------------
def test_a_full_cache_disk_names_the_cache_not_out(tiny, tmp_path, monkeypatch):
    """N88: with DSTG_CACHE on a full disk, the remedy said 'choose another out folder'."""
    import errno

    from dstg_interp import extract
    from dstg_interp.data import load_corpus
    from dstg_interp.model import load_model
    from dstg_interp.store import npy_writer
    from dstg_interp.store.manifest import StoreError

    checkpoint, corpus = tiny

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npy_writer.NpyWriter, "write", full_disk)
    store = tmp_path / "cache" / "stores" / "dstg-0123"
    with pytest.raises(StoreError, match="disk that holds .*cache/stores, or put the store elsewhere .*DSTG_CACHE"):
        extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, progress=False)
    assert not store.exists() and not [p for p in (tmp_path / "cache" / "stores").iterdir()]


def test_a_cache_disk_too_small_is_said_before_any_write_naming_the_cache(tiny, tmp_path, monkeypatch):
    """N88 again: the check before any file is reserved said 'choose another folder or export fewer layers'
    (the export's remedy) for a store dstg-probe caches."""
    import collections

    from dstg_interp import extract
    from dstg_interp.data import load_corpus
    from dstg_interp.model import load_model
    from dstg_interp.store import export
    from dstg_interp.store.manifest import StoreError

    checkpoint, corpus = tiny
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(export.shutil, "disk_usage", lambda path: usage(2**20, 2**20, 0))
    store = tmp_path / "cache" / "stores" / "dstg-0123"
    with pytest.raises(StoreError, match="needs about .* MiB free; free space on the disk that holds .*cache/stores, put "
                                         "the store elsewhere .*another DSTG_CACHE") as refused:
        extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, progress=False)
    assert "export" not in str(refused.value) and not store.exists()


# --- nonsense values ------------------------------------------------------------------------------
@pytest.mark.parametrize("main, args, fragment", [
    (cache_main, ["--model", "dstg", "--corpus", "x", "--out", "o", "--max-docs", "-5"], "--max-docs"),
    (cache_main, ["--model", "dstg", "--corpus", "x", "--out", "o", "--max-docs", "0"], "--max-docs"),
    (probe_main, ["--task", "token", "--max-docs", "-10"], "--max-docs"),
    (train_main, ["--out", "o", "--threads", "0"], "--threads"),
    (train_main, ["--out", "o", "--max-docs", "-1"], "--max-docs"),
    (holmes_main, ["run", "--holmes-dir", "h", "--model", "dstg", "--threads", "0"], "--threads"),
    (holmes_main, ["run", "--holmes-dir", "h", "--model", "dstg", "--seeds", "-2"], "--seeds"),
    (holmes_main, ["run", "--holmes-dir", "h", "--model", "dstg", "--layers", "x,y"], "--layers"),
    (holmes_main, ["build", "--out", "o", "--n-per-dataset", "0"], "--n-per-dataset"),
])
def test_nonsense_values_name_their_flag(main, args, fragment, capsys, tmp_path, monkeypatch):
    """#57, #58, #88, #121, #123, #127, #151 (threads 0): refused before anything runs, naming the flag."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, main, *args)
    assert_one_line_error(code, err, fragment)
    assert list(tmp_path.iterdir()) == [tmp_path / "cache"] or list(tmp_path.iterdir()) == []


def test_nonsense_values_in_the_api():
    with pytest.raises(DataError, match="max_docs must be a positive"):
        load_corpus("en-mix", max_docs=-5)
    for kwargs, fragment in ((dict(vocab_size=5), "vocab_size: at least"), (dict(threads=0), "threads"),
                             (dict(max_docs=-5), "max_docs"), (dict(random_offset=True), "random_offset: needs")):
        with pytest.raises(ValueError, match=fragment):
            TrainConfig(**kwargs)


def test_cuda_without_a_gpu(tmp_path, capsys):
    """#147: 'Expected a torch.device with a specified index' for --device cuda on a CPU machine."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", "--device", "cuda")
    assert_one_line_error(code, err, "--device cuda: no CUDA device")


def test_hf_layer_message_offers_no_final():
    """#27: the message for a missing HF layer offered 'final', which HF encoders then refuse."""
    with pytest.raises(StoreError) as caught:
        ExtractionConfig(layers=(7,)).resolve(6, ("full",), "hf:bert")
    assert "0..6" in str(caught.value) and "final" not in str(caught.value)


def test_holmes_benchmark_problems(tiny, tmp_path, capsys):
    """#118: a file called 'does not exist'; #119: every dataset malformed gave exit 0 and an empty table;
    #116: --layers was ignored with --task holmes."""
    (tmp_path / "file").write_text("x")
    only_bad = tmp_path / "onlybad"
    only_bad.mkdir()

    shutil.copytree(FIXTURE / "bad-label", only_bad / "bad-label")
    (tmp_path / "empty").mkdir()
    for benchmark, fragment in ((tmp_path / "file", "is a file"), (only_bad, "no dataset could be loaded (1 skipped"),
                                (tmp_path / "empty", "no dataset folders")):
        code, _, err = run_main(capsys, holmes_main, "run", "--holmes-dir", benchmark, "--model", tiny[0],
                                "--out", tmp_path / "o")
        assert_one_line_error(code, err, fragment, prog="dstg-holmes")
    assert not (tmp_path / "o").exists()
    code, _, err = run_main(capsys, probe_main, "--task", "holmes", "--benchmark", FIXTURE, "--model", tiny[0],
                            "--layers", "9", "--out", tmp_path / "p", "--quiet")
    assert_one_line_error(code, err, "layer 9 does not exist in", prog="dstg-probe")  # Encoder.resolve's one wording


def test_holmes_out_is_a_file(tiny, tmp_path, capsys):
    """#124, #128: a full run then FileExistsError; build gave NotADirectoryError."""
    (tmp_path / "plain").write_text("x")
    code, _, err = run_main(capsys, holmes_main, "run", "--holmes-dir", FIXTURE, "--model", tiny[0], "--out", tmp_path / "plain")
    assert_one_line_error(code, err, "is a file", prog="dstg-holmes")
    code, _, err = run_main(capsys, holmes_main, "build", "--out", tmp_path / "plain")
    assert_one_line_error(code, err, "is a file", prog="dstg-holmes")
    assert (tmp_path / "plain").read_text() == "x"


# --- seeds and steps are checked on the command line, before any work (N41, N43, N47, N51) --------
HUGE_SEED = "99999999999999999999"


def test_zoo_seed_and_steps_are_refused_before_any_work(tmp_path, capsys):
    """N41 / N43: a traceback after 21 s of data preparation (and an empty run folder)."""
    from experiments import pretrain_zoo

    common = ["--out", tmp_path / "zoo", "--runs", tmp_path / "runs", "--variants", "dstg", "--threads", "1"]
    for extra, needle in ((["--steps", "5", "--seeds", HUGE_SEED], "--seeds must be integers from 0 to 4294967295"),
                          (["--steps", "0", "--seeds", "0"], "--steps: expected a positive number of steps, got 0"),
                          (["--steps", "-3", "--seeds", "0"], "--steps: expected a positive number of steps")):
        code, _, err = run_main(capsys, pretrain_zoo.main, *common, *extra)
        assert_one_line_error(code, err, needle, prog="pretrain_zoo")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "zoo").exists()


def test_no_message_suggests_a_seed_that_would_fail(tmp_path, capsys):
    """N47: run_all advised `pretrain_zoo --seeds 99999999999999999999`, which then crashed."""
    from experiments import run_all
    from experiments.figure_inputs import run_as_command

    command = lambda argv: run_as_command(lambda: run_all.main(argv), "run_all")  # noqa: E731
    code, _, err = run_main(capsys, command, "--model-seeds", HUGE_SEED, "--out", tmp_path / "gallery")
    assert_one_line_error(code, err, "--model-seeds", "0 to 4294967295")
    assert "pretrain_zoo" not in err and not (tmp_path / "gallery").exists()


@pytest.mark.parametrize("prog, flag, args", [
    ("dstg-train", "--seed", ["--steps", "10", "--seed", HUGE_SEED]),
    ("dstg-train", "--data-seed", ["--steps", "10", "--data-seed", HUGE_SEED]),
    ("dstg-train", "--steps", ["--steps", "0"]),
    ("dstg-probe", "--seed", ["--task", "segment", "--seed", HUGE_SEED]),
    ("dstg-eval", "--seed", ["--model", "dstg", "--seed", HUGE_SEED]),
    ("dstg-holmes", "--seeds", ["run", "--seeds", f"0,{HUGE_SEED}"]),
])
def test_seed_and_step_flags_name_the_flag_and_its_range(prog, flag, args, tmp_path, capsys):
    """N51: `dstg-train --seed 99999999999999999999` said only 'Overflow when unpacking long long'."""
    import importlib

    from dstg_interp.cli import COMMANDS

    main = importlib.import_module(COMMANDS[prog]).main
    code, _, err = run_main(capsys, main, *args, "--out", tmp_path / "out")
    assert_one_line_error(code, err, f"argument {flag}", "positive" if flag == "--steps" else "0 to 4294967295")
    assert "Overflow" not in err and not (tmp_path / "out").exists()


# --- Holmes configs: sizes bounded before allocation, YAML read strictly (N92, N108, N109, N110) ---
GOOD_CONFIG = ("control_task_type: NONE\nnum_inputs: 1\nnum_labels: 2\nnum_probe_folds: 1\n"
               "probe_name: probe-x\nprobe_task_type: SENTENCE\nprobes_samples_path: samples.csv\n")
HOSTILE_CONFIGS = {  # dataset -> (config-none.yaml, what the skip reason must say)
    "huge-num-labels": (GOOD_CONFIG.replace("num_labels: 2", "num_labels: 100000000000"),
                        "key 'num_labels' must be an integer from 1 to 10,000"),
    "dup-keys": (GOOD_CONFIG + "num_labels: 9\n", "key 'num_labels' appears twice"),
    "norway": (GOOD_CONFIG.replace("control_task_type: NONE", "control_task_type: NO"),
               "'NO' (line 1) is a boolean in YAML 1.1"),
    "num-inputs-0": (GOOD_CONFIG.replace("num_inputs: 1", "num_inputs: 0"), "key 'num_inputs' must be an integer from 1 to 2"),
    "num-inputs-2": (GOOD_CONFIG.replace("num_inputs: 1", "num_inputs: 2"), "SENTENCE rows hold 1 sentence(s), got 2"),
    "name-bool": (GOOD_CONFIG.replace("probe_name: probe-x", "probe_name: true"), "key 'probe_name' must be a string"),
}


def hostile_benchmark(root: Path) -> Path:
    for name, (config, _) in HOSTILE_CONFIGS.items():
        shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", root / name)
        (root / name / "config-none.yaml").write_text(config)
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", root / "good")
    return root


def test_hostile_holmes_configs_are_skipped_with_their_reason(tmp_path):
    from probes.holmes.format import load_benchmark

    loaded, skipped = load_benchmark(hostile_benchmark(tmp_path / "bench"))
    assert [d.name for d in loaded] == ["good"]
    reasons = {s.dataset: s.reason for s in skipped}
    assert set(reasons) == set(HOSTILE_CONFIGS)
    for name, (_, needle) in HOSTILE_CONFIGS.items():
        assert needle in reasons[name] and "config-none.yaml" in reasons[name], reasons[name]
    # quoting the word, or a real boolean where none is expected, reads as the user meant
    (tmp_path / "bench" / "norway" / "config-none.yaml").write_text(GOOD_CONFIG.replace("NONE", "'NO'"))
    loaded, _ = load_benchmark(tmp_path / "bench")
    assert "norway" in [d.name for d in loaded]


def test_a_huge_num_labels_skips_one_dataset_and_the_run_goes_on(tiny, tmp_path, capsys):
    """N92: `num_labels: 100000000000` tried to allocate 6.4 TB; the 19 valid datasets were lost with it."""
    from dstg_interp.cli.holmes import main as holmes_main

    checkpoint, _ = tiny
    bench = tmp_path / "bench"
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", bench / "good")
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", bench / "huge")
    (bench / "huge" / "config-none.yaml").write_text(HOSTILE_CONFIGS["huge-num-labels"][0])
    code, out, err = run_main(capsys, holmes_main, "run", "--benchmark", bench, "--model", checkpoint, "--seeds", "0",
                              "--quiet", "--out", tmp_path / "out")
    assert code == 0, err
    assert "skipped: holmes dataset 'huge': config-none.yaml, key 'num_labels' must be an integer from 1 to 10,000" in err
    assert "Traceback" not in err and "1 skipped" in out
    import pandas as pd
    assert set(pd.read_csv(tmp_path / "out" / "results.csv").dataset) == {"good"}


# --- 6. statistics that mislead -------------------------------------------------------------------
def test_intervals_on_few_documents_are_undefined(tiny, tmp_path):
    """7 documents printed '± 0.000' everywhere: under 10 held-out documents the interval is NaN, with a warning."""
    checkpoint, corpus = tiny
    with pytest.warns(SmallSampleWarning, match=r"only 2 held-out document\(s\).*needs 10"):
        table = probe_positions(str(checkpoint), task="token", corpus=str(corpus), layers=[0], subspaces=["ap"],
                                controls=False, n_boot=50, store_root=tmp_path / "stores", progress=False)
    assert table.ci_low.isna().all() and table.ci_high.isna().all() and (table.n_test_docs == 2).all()
    assert "± n/a" in compact_table(table)
    many = write_synthetic_corpus(tmp_path / "many", n_docs=50)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        table = probe_positions(str(checkpoint), task="token", corpus=str(many), layers=[0], subspaces=["ap"],
                                controls=False, n_boot=50, store_root=tmp_path / "stores", progress=False)
    assert table.ci_low.notna().all() and (table.n_test_docs == 10).all()


def test_models_are_named_by_something_a_reader_recognises(tmp_path):
    """An HF folder named 'model' was labelled 'model' in the table; all-MiniLM-L6-v2 was labelled by the
    base checkpoint its config's _name_or_path records.  The rule (dstg_interp.encoders.naming): the model
    card's title, else the folder's own name (a generic one with its parent's)."""
    hf = tmp_path / "runs" / "model"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "bert", "_name_or_path": "nreimers/MiniLM-L6-H384-uncased"}))
    assert model_label(str(hf)) == "runs/model"
    (hf / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n\n# all-MiniLM-L6-v2\nThis is a model.\n")
    assert model_label(str(hf)) == "all-MiniLM-L6-v2"
    snapshot = tmp_path / "hub" / "models--org--tiny-encoder" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert model_label(str(snapshot)) == "org/tiny-encoder"
    ours = tmp_path / "runs" / "mine" / "checkpoint"
    ours.mkdir(parents=True)
    (ours / "config.json").write_text("{}")
    assert model_label(str(ours)) == "mine" and model_label("dstg") == "dstg"


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
