"""Masked-token evaluation: shared masks, the unigram baseline, held-out documents, the command line, HF masked-LMs."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from huggingface_hub import constants

from conftest import tiny_model, write_synthetic_corpus
from hf_writers import cache_repo, write_tiny_bert
from dstg_interp import EncoderError, load_hf_encoder, load_model, open_encoder
from dstg_interp.data import load_corpus, split_documents
from dstg_interp.data.tokenizer import build_tokenizer
from dstg_interp.cli.eval import main
from dstg_interp.evaluation import (RESULT_COLUMNS, Unigram, evaluation_documents, mlm_accuracy, select_documents,
                                    training_unigram)
from dstg_interp.model.checkpoint import save_checkpoint
from dstg_interp.train import CONFIG_FILE, TrainConfig, prepare_training_data

MAX_LENGTH = 24  # short, so the synthetic documents need several windows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A synthetic corpus, the training config of a tiny model trained on it, its prepared data."""
    root = tmp_path_factory.mktemp("evaluation")
    corpus = write_synthetic_corpus(root / "corpus", n_docs=60, seed=0)
    other = write_synthetic_corpus(root / "other", n_docs=30, seed=1)
    cfg = TrainConfig(out_dir=str(root / "run"), corpus=str(corpus), max_length=MAX_LENGTH, val_fraction=0.2,
                      max_steps=10, warmup_steps=0,
                      model=dict(variant="dstg", d_sem=24, d_ap=8, n_layers=2, n_heads=4, d_head=8))
    prepared = prepare_training_data(cfg, cache_dir=root / "cache")
    return SimpleNamespace(root=root, corpus=str(corpus), other=str(other), cfg=cfg, prepared=prepared,
                           cache=root / "cache", vocab=prepared.tokenizer.get_vocab_size())


def model_for(setup, variant, seed=0):
    model = tiny_model(variant, vocab_size=setup.vocab, max_positions=MAX_LENGTH, seed=seed)
    model.tokenizer = setup.prepared.tokenizer
    return model.eval()


def recording(model):
    """Wrap the model's forward to keep the (ids, labels) it is called with."""
    calls, forward = [], model.forward

    def record(ids, attention_mask, labels, **kwargs):
        calls.append((ids.clone(), labels.clone()))
        return forward(ids, attention_mask, labels, **kwargs)

    model.forward = record
    return calls


def evaluate(setup, model, corpus=None, **kwargs):
    return mlm_accuracy(model, corpus or setup.corpus, kwargs.pop("n_docs", 50), None, kwargs.pop("seed", 0),
                        train_config=setup.cfg, cache_dir=setup.cache, **kwargs)


def test_two_models_are_scored_on_the_same_masked_tokens(setup):
    dstg, rope = model_for(setup, "dstg"), model_for(setup, "rope")
    dstg_calls, rope_calls = recording(dstg), recording(rope)
    dstg_result, rope_result = evaluate(setup, dstg), evaluate(setup, rope)
    assert len(dstg_calls) == len(rope_calls) > 0
    for (ids_a, labels_a), (ids_b, labels_b) in zip(dstg_calls, rope_calls):
        assert torch.equal(ids_a, ids_b) and torch.equal(labels_a, labels_b)
    assert (ids_a == 4).sum() == (labels_a != -100).sum()  # every target is shown as [MASK]
    for key in ("n_tokens", "n_docs", "most_frequent_accuracy", "unigram_loss", "split"):
        assert dstg_result[key] == rope_result[key]
    assert dstg_result["loss"] != rope_result["loss"]
    assert dstg_result["n_tokens"] > 50

    # masks depend on (seed, sequence) only: another batch size gives the same measurement
    small_batches = evaluate(setup, model_for(setup, "dstg"), batch_size=3)
    assert small_batches["n_tokens"] == dstg_result["n_tokens"]
    assert small_batches["loss"] == pytest.approx(dstg_result["loss"], rel=1e-5)
    assert small_batches["accuracy"] == dstg_result["accuracy"]

    # another seed masks other tokens (of other documents, where there is a choice)
    other_calls = recording(other := model_for(setup, "dstg"))
    evaluate(setup, other, seed=1)
    assert [labels.tolist() for _, labels in other_calls] != [labels.tolist() for _, labels in dstg_calls]


class UnigramPredictor(torch.nn.Module):
    """Predicts every masked token from training frequencies alone: the no-context baseline as a model."""

    def __init__(self, unigram: Unigram, tokenizer, max_positions: int):
        super().__init__()
        self.log_probs = torch.nn.Parameter(torch.tensor(unigram.log_probs, dtype=torch.float32), requires_grad=False)
        self.config = SimpleNamespace(vocab_size=len(unigram.counts), max_positions=max_positions)
        self.tokenizer = tokenizer

    def forward(self, ids, attention_mask, labels, masked_logits_only=True):
        n_masked = int((labels != -100).sum())
        return SimpleNamespace(logits=self.log_probs[None].expand(n_masked, -1))


def test_a_unigram_predictor_scores_exactly_the_baseline(setup):
    unigram = training_unigram(model_for(setup, "dstg"), setup.cfg, setup.cache)
    result = evaluate(setup, UnigramPredictor(unigram, setup.prepared.tokenizer, MAX_LENGTH))
    assert result["loss"] == pytest.approx(result["unigram_loss"], rel=1e-5)
    assert result["accuracy"] == result["most_frequent_accuracy"]
    # the synthetic grammar's most frequent token ("the") is common, not a degenerate 0
    assert 0.05 < result["most_frequent_accuracy"] < 0.5
    # the frequencies are the training split's, counted without [CLS]/[SEP]
    train = setup.prepared.train
    expected = np.bincount(train.arrays["input_ids"][~train.arrays["is_special"]], minlength=setup.vocab) + 1
    assert np.array_equal(unigram.counts, expected)


def test_held_out_documents(setup):
    documents = load_corpus(setup.corpus, progress=False)
    train_docs, val_docs = split_documents(documents, val_fraction=0.2, seed=0)
    held_out, split = evaluation_documents(setup.corpus, setup.cfg)
    assert split == "validation" and [d.doc_id for d in held_out] == [d.doc_id for d in val_docs]
    result = evaluate(setup, model_for(setup, "rope"), n_docs=1000)
    assert result["n_docs"] == len(val_docs) and result["split"] == "validation"

    # another corpus is foreign to the model: all of its documents
    foreign, split = evaluation_documents(setup.other, setup.cfg)
    assert split == "all" and len(foreign) == 30
    assert evaluate(setup, model_for(setup, "rope"), corpus=setup.other, n_docs=12)["n_docs"] == 12

    # the seeded choice of documents does not depend on their order
    chosen = {d.doc_id for d in select_documents(foreign, 12, seed=0)}
    assert chosen == {d.doc_id for d in select_documents(foreign[::-1], 12, seed=0)}
    assert chosen != {d.doc_id for d in select_documents(foreign, 12, seed=1)}


def test_bad_input(setup):
    model = model_for(setup, "dstg")
    with pytest.raises(ValueError, match="n_docs must be a positive integer"):
        evaluate(setup, model, n_docs=0)
    with pytest.raises(ValueError, match="max_length must be in"):
        mlm_accuracy(model, setup.corpus, 5, MAX_LENGTH + 1, train_config=setup.cfg, cache_dir=setup.cache)
    with pytest.raises(ValueError, match="no train_config.json"):
        mlm_accuracy(model, setup.corpus, 5)
    tokenless = model_for(setup, "dstg")
    tokenless.tokenizer = None
    with pytest.raises(ValueError, match="has no tokenizer"):
        training_unigram(tokenless, setup.cfg, setup.cache)


def test_the_unigram_is_always_in_the_models_own_ids(setup):
    """N68: the baseline is counted in the model's token ids even when the cache's entry for the recipe
    trained another tokenizer (data prepared with the model's tokenizer gets a key of its own)."""
    stranger = model_for(setup, "dstg")
    stranger.tokenizer = build_tokenizer([f"tok{i}" for i in range(setup.vocab - 5)])
    own = training_unigram(model_for(setup, "dstg"), setup.cfg, setup.cache)
    other = training_unigram(stranger, setup.cfg, setup.cache)
    assert not np.array_equal(own.counts, other.counts)
    assert other.most_frequent == stranger.tokenizer.token_to_id("[UNK]")  # every word is unknown to it


@pytest.fixture
def checkpoint(setup, tmp_path, monkeypatch):
    """A tiny checkpoint with its train_config.json beside it, as the zoo ships them."""
    monkeypatch.setenv("DSTG_CACHE", str(setup.cache))
    model = model_for(setup, "dstg")
    return save_checkpoint(model, tmp_path / "dstg-tiny", tokenizer=model.tokenizer,
                           extra_files={CONFIG_FILE: setup.cfg.to_dict()})


def test_train_config_is_read_beside_the_checkpoint(setup, checkpoint):
    loaded = load_model(checkpoint)
    assert mlm_accuracy(loaded, setup.corpus, 20) == evaluate(setup, model_for(setup, "dstg"), n_docs=20)


def test_command_line_table_and_files(setup, checkpoint, tmp_path, capsys):
    out = tmp_path / "results" / "mlm.csv"
    assert main(["--model", str(checkpoint), "--corpus", setup.corpus, setup.other, "--n-docs", "10",
                 "--threads", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split() == RESULT_COLUMNS and "wrote" in printed
    table = pd.read_csv(out)
    assert list(table.columns) == RESULT_COLUMNS and list(table["split"]) == ["validation", "all"]
    assert np.allclose(table["accuracy_gain"], table["accuracy"] - table["most_frequent_accuracy"])
    assert not list(out.parent.glob(".*tmp*"))  # the temporary file was renamed
    assert main(["--model", str(checkpoint), "--corpus", setup.other, "--n-docs", "5",
                 "--out", str(tmp_path / "mlm.json")]) == 0
    record = json.loads((tmp_path / "mlm.json").read_text())
    assert record["arguments"]["n_docs"] == 5 and record["results"][0]["n_docs"] == 5


@pytest.mark.parametrize("arguments, message", [
    (["--model", "no-such-model"], "is not a directory"),
    (["--corpus", "no-such-corpus.xyz"], "corpus spec"),
    (["--n-docs", "0"], "--n-docs: expected a positive integer"),  # argparse: its usage line, then this one
    (["--out", "results.txt"], "name a .csv or .json"),
])
def test_command_line_bad_input_is_one_line_and_exit_2(setup, checkpoint, tmp_path, capsys, arguments, message):
    base = {"--model": str(checkpoint), "--corpus": setup.corpus, "--n-docs": "5", "--out": str(tmp_path / "r.csv")}
    base.update(dict(zip(arguments[::2], arguments[1::2])))
    try:
        code = main([item for pair in base.items() for item in pair])
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1]
    assert captured.out == "" and "Traceback" not in captured.err
    assert last.startswith("dstg-eval: error:") and message in last
    assert not (tmp_path / "r.csv").exists()


def test_an_accuracy_on_few_documents_is_said_to_rest_on_them(setup, checkpoint, capsys):
    """Reliability N71: an accuracy on 1 document (19 tokens) came with no warning."""
    assert main(["--model", str(checkpoint), "--corpus", setup.other, "--n-docs", "1", "--threads", "1", "--quiet"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dstg-eval: warning:") and "only 1 document(s)" in lines[0]
    assert main(["--model", str(checkpoint), "--corpus", setup.other, "--n-docs", "1", "--threads", "1"]) == 0
    captured = capsys.readouterr()  # without --quiet: one line per model x corpus says what is being scored
    assert captured.err.splitlines()[0] == (f"[dstg-tiny] {setup.other}: scoring masked tokens of up to 1 documents "
                                            "in 24-token windows")
    assert "accuracy_gain = accuracy - most_frequent_accuracy" in captured.out


def test_a_full_disk_leaves_no_temporary_and_no_folder(setup, checkpoint, tmp_path, capsys, monkeypatch):
    """Reliability N72: 'nothing was written', but an empty .ev.csv.tmp-PID was left (a tmpfs filled up)."""
    import errno

    def full_disk(self, path, *args, **kwargs):
        Path(path).write_text("")  # the file is created, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    out = tmp_path / "new" / "ev.csv"
    assert main(["--model", str(checkpoint), "--corpus", setup.other, "--n-docs", "10", "--out", str(out)]) == 2
    assert "disk full" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # neither the temporary nor the folder made for it


def test_eval_never_replaces_a_file_it_did_not_write(setup, checkpoint, tmp_path, capsys):
    mine = tmp_path / "notes.csv"
    mine.write_text("my,own\n1,2\n")
    assert main(["--model", str(checkpoint), "--corpus", setup.other, "--n-docs", "10", "--out", str(mine)]) == 2
    assert "never replaced" in capsys.readouterr().err and mine.read_text() == "my,own\n1,2\n"
    ours = tmp_path / "ev.csv"
    for _ in range(2):  # its own table is replaced by the next run
        assert main(["--model", str(checkpoint), "--corpus", setup.other, "--n-docs", "10", "--out", str(ours)]) == 0


# --------------------------------------------------------------------------- Hugging Face masked-LMs

@pytest.fixture(scope="module")
def hf_folders(setup, tmp_path_factory):
    """Tiny random BERTs saved as the Hub ships them: a masked-LM on the tiny zoo model's tokenizer, a
    masked-LM with a tokenizer of its own, and an encoder saved without its masked-LM head."""
    root = tmp_path_factory.mktemp("hf-mlm")
    documents = load_corpus(setup.other, progress=False)
    folders = SimpleNamespace(shared=root / "bert-shared", own=root / "bert-own", headless=root / "bert-headless")
    for folder in vars(folders).values():
        folder.mkdir()
    write_tiny_bert(folders.shared, documents, tokenizer=setup.prepared.tokenizer, mlm_head=True)
    write_tiny_bert(folders.own, documents, mlm_head=True)
    write_tiny_bert(folders.headless, documents, tokenizer=setup.prepared.tokenizer, mlm_head=False)
    return folders


def recording_logits(encoder):
    calls, mlm_logits = [], encoder.mlm_logits

    def record(ids, attention_mask):
        calls.append(ids.clone())
        return mlm_logits(ids, attention_mask)

    encoder.mlm_logits = record
    return calls


def test_an_hf_masked_lm_is_scored_on_exactly_the_zoo_models_masks(setup, hf_folders):
    encoder = open_encoder(hf_folders.shared, mlm_head=True)
    assert encoder.kind == "hf" and encoder.has_mlm_head and type(encoder.model).__name__ == "BertForMaskedLM"
    dstg = model_for(setup, "dstg")
    dstg_calls, hf_calls = recording(dstg), recording_logits(encoder)
    ours, theirs = evaluate(setup, dstg, n_docs=20), evaluate(setup, encoder, n_docs=20)
    assert len(dstg_calls) == len(hf_calls) > 0
    for (ids_ours, labels), ids_theirs in zip(dstg_calls, hf_calls):
        assert torch.equal(ids_ours, ids_theirs)  # the same tokens, the same positions shown as [MASK]
        assert (ids_theirs[labels != -100] == encoder.special.mask).all()
    assert theirs["masks"] == ours["masks"] and theirs["n_tokens"] == ours["n_tokens"] > 20
    # the same masked tokens, the same training frequencies: the same baseline to the last digit
    assert theirs["unigram_loss"] == ours["unigram_loss"]
    assert theirs["most_frequent_accuracy"] == ours["most_frequent_accuracy"]
    assert 0 <= theirs["accuracy"] <= 1 and np.isfinite(theirs["loss"]) and theirs["loss"] != ours["loss"]
    # the logits are the head's: a token predicted by the model's own forward
    ids, mask = encoder.pad([[2, 10, 4, 11, 3]])
    direct = encoder.model(input_ids=ids, attention_mask=mask.long()).logits
    assert torch.equal(encoder.mlm_logits(ids, mask), direct) and direct.shape[-1] == setup.vocab

    # a tokenizer of its own: the same rule and seed on its own tokens, so other masks (and it is said)
    other = evaluate(setup, open_encoder(hf_folders.own, mlm_head=True), n_docs=20)
    assert other["masks"] != ours["masks"] and other["n_docs"] == ours["n_docs"]


def test_dstg_eval_on_zoo_style_and_hf_models_in_one_table(setup, checkpoint, hf_folders, tmp_path, capsys):
    out = tmp_path / "mlm.json"
    assert main(["--model", str(checkpoint), str(hf_folders.shared), str(hf_folders.own), "--name", "mine", "bert",
                 "bert-own", "--corpus", setup.other, "--n-docs", "12", "--threads", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    table = pd.DataFrame(json.loads(out.read_text())["results"])
    assert list(table["model"]) == ["mine", "bert", "bert-own"]
    assert table["n_tokens"][0] == table["n_tokens"][1] != table["n_tokens"][2]
    assert table[["unigram_loss", "most_frequent_accuracy"]].iloc[1:].isna().all().all()  # no training record
    assert table[["unigram_loss", "most_frequent_accuracy"]].iloc[0].notna().all()
    masks_line = next(line for line in printed if line.startswith("masks"))
    assert "24-token windows" in masks_line and "mine, bert; bert-own" in masks_line  # the checkpoint's length
    record = json.loads(out.read_text())["arguments"]
    assert record["models"] == {"mine": str(checkpoint), "bert": str(hf_folders.shared), "bert-own": str(hf_folders.own)}
    assert record["masks"][setup.other]["mine"] == record["masks"][setup.other]["bert"]

    # without --name: the naming rule (the folders' own names)
    assert main(["--model", str(hf_folders.shared), "--corpus", setup.other, "--n-docs", "3", "--max-length", "16"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[1].split()[0] == "bert-shared" and "identical for all 1 model(s)" in printed


@pytest.mark.parametrize("extra, message", [
    (["--name", "a", "b"], "--name gives 2 name(s) for 1 --model(s)"),
    (["--model", "dstg", "--name", "a", "a"], "--name gives 'a' twice"),
])
def test_dstg_eval_names_that_do_not_fit_are_one_line(setup, hf_folders, tmp_path, capsys, extra, message):
    assert main(["--model", str(hf_folders.shared), *extra, "--corpus", setup.other, "--out", str(tmp_path / "r.csv")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith(f"dstg-eval: error: {message}")
    assert not (tmp_path / "r.csv").exists()


def test_an_hf_model_without_a_masked_lm_head_is_one_line_and_exit_2(setup, hf_folders, tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main(["--model", str(hf_folders.headless), "--corpus", setup.other, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and "Traceback" not in captured.err
    assert lines[0].startswith("dstg-eval: error:") and "has no masked-LM head" in lines[0]
    assert not out.exists()
    with pytest.raises(EncoderError, match="has no masked-LM head"):
        load_hf_encoder(hf_folders.headless, mlm_head=True)
    with pytest.raises(EncoderError, match="without a masked-LM head"):  # the API: an encoder opened without it
        mlm_accuracy(open_encoder(hf_folders.shared), setup.other, 3, train_config=setup.cfg, cache_dir=setup.cache)


def test_dstg_eval_reads_a_hub_id_from_the_hugging_face_cache(setup, hf_folders, tmp_path, monkeypatch, capsys):
    cache_repo(tmp_path / "hub", "org/bert-mlm", hf_folders.shared)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "hub.csv"
    assert main(["--model", "org/bert-mlm", str(hf_folders.shared), "--corpus", setup.other, "--n-docs", "4",
                 "--max-length", "20", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table["model"]) == ["org/bert-mlm", "bert-shared"]
    assert table["loss"][0] == table["loss"][1]  # the same weights, the same masks: the same numbers
    assert "identical for all 2 model(s)" in capsys.readouterr().out


def test_the_shipped_zoo_finds_its_tokenizer_in_any_checkout(tmp_path):
    """N71 (round 4): the zoo's train_config.json held the absolute tokenizer path of the machine that trained it,
    so `dstg-eval --model dstg` failed in every other checkout (`TrainConfig.tokenizer: ... does not exist`)."""
    import shutil

    from dstg_interp.evaluation import training_config
    from dstg_interp.model.checkpoint import ZOO_DIR
    from dstg_interp.train import portable_train_config

    for path in sorted(Path(ZOO_DIR).glob("*/train_config.json")):
        fields = json.loads(path.read_text())
        assert not any(Path(fields[key]).is_absolute() for key in ("tokenizer", "out_dir") if fields.get(key)), path
    copy = shutil.copytree(Path(ZOO_DIR) / "dstg", tmp_path / "elsewhere" / "dstg")
    cfg = training_config(load_model(copy))
    assert Path(cfg.tokenizer) == copy / "tokenizer.json"
    # what pretrain_zoo writes into a member: the tokenizer by the member's own copy, the run folder by its name
    cfg.out_dir = str(tmp_path / "runs" / "dstg")
    written = portable_train_config(cfg, copy)
    assert (written["tokenizer"], written["out_dir"]) == ("tokenizer.json", "dstg")
