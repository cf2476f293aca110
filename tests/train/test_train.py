"""Pretraining: the loss falls, resuming reproduces a straight run, DDP (gloo, 2 processes) matches, Ctrl-C is safe."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dstg_interp import load_model
from dstg_interp.cli.train import main
from dstg_interp.train import TrainConfig, train

from conftest import interrupt_when_ready, write_synthetic_corpus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    return write_synthetic_corpus(tmp_path / "corpus", n_docs=80)


def tiny_train_config(out_dir, corpus, **overrides):
    base = dict(
        out_dir=str(out_dir), corpus=str(corpus), model=dict(variant="dstg", d_sem=24, d_ap=8, n_layers=2, n_heads=4),
        max_length=64, vocab_size=200, batch_size=8, max_steps=12, warmup_steps=2, eval_every=6, eval_batches=2,
        save_every=6, log_every=1, lr=3e-3, progress=False, threads=1,
    )
    base.update(overrides)
    return TrainConfig(**base)


def read_log(out_dir):
    return [json.loads(line) for line in (Path(out_dir) / "log.jsonl").read_text().splitlines()]


def train_losses(out_dir):
    return {r["step"]: r["loss"] for r in read_log(out_dir) if "loss" in r}


@pytest.mark.parametrize("variant", ["dstg", "rope"])
def test_tiny_run_lowers_validation_loss(tmp_path, corpus, variant):
    model = dict(variant="dstg", d_sem=24, d_ap=8, n_layers=2, n_heads=4) if variant == "dstg" else dict(variant="rope", d_model=32, n_layers=2, n_heads=4)
    cfg = tiny_train_config(tmp_path / "run", corpus, model=model, max_steps=40, eval_every=1000, save_every=1000)
    result = train(cfg)
    validation = [r for r in read_log(tmp_path / "run") if "val_loss" in r]
    losses = train_losses(tmp_path / "run")
    assert losses[40] < losses[1] - 0.5
    assert validation[-1]["val_loss"] < losses[1]
    assert result["step"] == 40
    reloaded = load_model(tmp_path / "run" / "checkpoint")
    assert reloaded.tokenizer is not None and reloaded.config.variant == variant
    saved = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert saved["max_steps"] == 40 and saved["model"]["variant"] == variant


@pytest.mark.parametrize("batch_tokens", [None, 8 * 64])  # fixed batches of 8, token-budget batches
def test_resume_reproduces_a_straight_run(tmp_path, corpus, batch_tokens):
    straight = tiny_train_config(tmp_path / "straight", corpus, batch_tokens=batch_tokens)
    train(straight)
    interrupted = tiny_train_config(tmp_path / "resumed", corpus, batch_tokens=batch_tokens)
    train(interrupted, stop_after_step=6)
    assert max(train_losses(tmp_path / "resumed")) == 6
    train(tiny_train_config(tmp_path / "resumed", corpus, batch_tokens=batch_tokens), resume=True)
    a, b = train_losses(tmp_path / "straight"), train_losses(tmp_path / "resumed")
    assert a.keys() == b.keys() == set(range(1, 13))
    for step in a:
        assert a[step] == pytest.approx(b[step], abs=1e-5), step


def test_resume_refuses_a_different_recipe(tmp_path, corpus):
    train(tiny_train_config(tmp_path / "run", corpus), stop_after_step=6)
    with pytest.raises(ValueError, match="different lr"):
        train(tiny_train_config(tmp_path / "run", corpus, lr=1e-2), resume=True)


@pytest.mark.parametrize("state, said", [
    ({"step": 10**18}, "tokens_seen must be a whole number"),  # TR3: a traceback (KeyError: 'tokens_seen')
    ({"step": -5, "tokens_seen": 1, "train_seconds": 0.1}, "step must be a whole number >= 0"),  # TR6: no file named
    ({"step": 2, "tokens_seen": 1, "train_seconds": "x"}, "train_seconds must be a number"),
    ([1, 2], "expected a table"),
])
def test_resume_from_a_damaged_train_state_is_one_line_naming_the_file(state, said, tmp_path, corpus):
    train(tiny_train_config(tmp_path / "run", corpus), stop_after_step=6)
    (tmp_path / "run" / "checkpoint" / "train_state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=said) as caught:
        train(tiny_train_config(tmp_path / "run", corpus), resume=True)
    assert "train_state.json" in str(caught.value) and "\n" not in str(caught.value)


def test_fresh_run_refuses_to_overwrite(tmp_path, corpus):
    train(tiny_train_config(tmp_path / "run", corpus), stop_after_step=6)
    with pytest.raises(ValueError, match="already holds a checkpoint"):
        train(tiny_train_config(tmp_path / "run", corpus))


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, corpus, capsys):
    code = main(["--out", str(tmp_path / "none"), "--corpus", str(corpus), "--resume"])
    assert code == 2
    assert "holds no complete training checkpoint" in capsys.readouterr().err


def test_cli_rejects_empty_corpus(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    code = main(["--out", str(tmp_path / "run"), "--corpus", str(tmp_path / "empty"), "--steps", "5", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("dstg-train: error:") and err.count("\n") == 1
    assert not (tmp_path / "run" / "checkpoint").exists()


def test_bad_model_field_is_named():
    with pytest.raises(ValueError, match="ModelConfig.d_ap"):
        TrainConfig(model=dict(variant="dstg", d_sem=24, d_ap=6, n_heads=4))


def run_cli(args, env, **kwargs):
    return subprocess.run([sys.executable, "-m", "dstg_interp.cli.train", *args], env=env, cwd=REPO, capture_output=True, text=True, **kwargs)


def cli_args(out_dir, corpus, steps=12):
    return ["--out", str(out_dir), "--corpus", str(corpus), "--variant", "dstg", "--d-model", "32", "--d-ap", "8", "--n-layers", "2",
            "--n-heads", "4", "--max-length", "64", "--vocab-size", "200", "--batch-size", "8", "--steps", str(steps),
            "--warmup-steps", "2", "--eval-every", "6", "--save-every", "6", "--lr", "3e-3", "--quiet", "--threads", "1"]


@pytest.mark.slow
def test_two_process_gloo_ddp_matches_single_process(tmp_path, corpus):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    single = run_cli(cli_args(tmp_path / "single", corpus), env)
    assert single.returncode == 0, single.stderr
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517", "-m", "dstg_interp.cli.train",
         *cli_args(tmp_path / "ddp", corpus)], env=env, cwd=REPO, capture_output=True, text=True,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    a, b = train_losses(tmp_path / "single"), train_losses(tmp_path / "ddp")
    assert a.keys() == b.keys()
    for step in a:  # mean of per-rank means vs one mean over the batch: close, not bit-equal
        assert a[step] == pytest.approx(b[step], abs=0.05), step
    assert load_model(tmp_path / "ddp" / "checkpoint").config.variant == "dstg"


@pytest.mark.slow
def test_ddp_token_budget_batches_with_fewer_sequences_than_ranks(tmp_path, corpus):
    """--batch-tokens 64 at --max-length 64: a sequence of over 32 tokens is a batch of its own (this corpus's
    are: every one of the 12 steps here), so on 2 ranks rank 1 steps on a placeholder and rank 0 doubles its
    loss (rank_share): DDP's average is then rank 0's gradient, and the run is the single-process run."""
    from dstg_interp.train import LengthBucketedBatches, prepare_training_data

    lengths = prepare_training_data(tiny_train_config(tmp_path / "data", corpus)).train.lengths
    plan = LengthBucketedBatches(lengths, 8, 0, batch_tokens=64)
    assert [len(plan(step)) for step in range(12)] == [1] * 12  # the case under test, at every step
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = lambda out: [*cli_args(out, corpus), "--batch-tokens", "64", "--no-compile", "--log-every", "1"]  # noqa: E731
    single = run_cli(args(tmp_path / "single"), env)
    assert single.returncode == 0, single.stderr
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29518", "-m", "dstg_interp.cli.train",
         *args(tmp_path / "ddp")], env=env, cwd=REPO, capture_output=True, text=True,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    logs = {name: read_log(tmp_path / name) for name in ("single", "ddp")}
    seen = {name: [r["tokens_seen"] for r in log if "loss" in r] for name, log in logs.items()}
    assert seen["single"] == seen["ddp"] and len(seen["ddp"]) == 12  # the same batches, step by step
    a, b = train_losses(tmp_path / "single"), train_losses(tmp_path / "ddp")
    assert a.keys() == b.keys() == set(range(1, 13))
    for step in a:
        assert a[step] == pytest.approx(b[step], abs=1e-5), step
    validation = {name: [r["val_loss"] for r in log if "val_loss" in r] for name, log in logs.items()}
    assert validation["single"] == pytest.approx(validation["ddp"], abs=1e-5)


@pytest.mark.slow
def test_ctrl_c_leaves_the_last_checkpoint_intact(tmp_path, corpus):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # prepare the cached data first so the run reaches its first checkpoint quickly
    assert run_cli(cli_args(tmp_path / "warm", corpus, steps=6), env).returncode == 0
    # a long run compiles by default; this test is about Ctrl-C, so it runs eager and reaches a checkpoint fast
    proc = subprocess.Popen([sys.executable, "-m", "dstg_interp.cli.train", *cli_args(tmp_path / "run", corpus, steps=100000),
                             "--no-compile"],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    state = tmp_path / "run" / "checkpoint" / "train_state.json"
    _, err = interrupt_when_ready(proc, state)  # Ctrl-C once a checkpoint exists, however loaded the machine
    assert proc.returncode == 130
    assert "the last complete checkpoint" in err
    step = json.loads(state.read_text())["step"]
    assert step % 6 == 0 and step > 0
    load_model(tmp_path / "run" / "checkpoint")  # loads: nothing half-written
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_ctrl_c_of_dstg_launch_training_is_one_line_per_rank_and_one_of_its_own(tmp_path, corpus):
    """Two DDP ranks under dstg-launch, Ctrl-C (SIGINT to the launcher's process group, as a terminal sends it)
    once the first checkpoint exists: each rank's line, the launcher's line, exit 130, the checkpoint loads.
    (Plain torchrun ends the same way for the ranks, then prints its SignalException traceback.)"""
    import re

    env = dict(os.environ, OMP_NUM_THREADS="1")
    assert run_cli(cli_args(tmp_path / "warm", corpus, steps=6), env).returncode == 0  # the cached data, prepared
    proc = subprocess.Popen([sys.executable, "-m", "dstg_interp.cli.entry", "dstg-launch", "--nproc-per-node", "2",
                             "--shutdown-timeout", "300", "dstg-train",
                             *cli_args(tmp_path / "run", corpus, steps=100000), "--no-compile"],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    state = tmp_path / "run" / "checkpoint" / "train_state.json"
    out, err = interrupt_when_ready(proc, state)  # Ctrl-C once the first checkpoint is written
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130 and "Traceback" not in err + out, err
    assert len(lines) == 3, err
    for line in lines[:2]:
        assert re.fullmatch(r"dstg-train: interrupted \(Ctrl-C\): the last complete checkpoint \(step \d+\) in \S+ "
                            r"is untouched; continue with --resume", line), err
    assert lines[2].startswith("dstg-launch: interrupted (Ctrl-C): the 2 rank(s) of dstg-train were stopped"), err
    load_model(tmp_path / "run" / "checkpoint")  # loads: nothing half-written
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no lock left beside it


def test_random_offset_trains_the_table_beyond_the_sequence_length(tmp_path, corpus):
    """The authors' random_offset: with a 128-row table and 64-token sequences, rows past 64 are trained
    only when each sequence reads the table from a random start."""
    from dstg_interp import build_model

    rows = {}
    for random_offset in (False, True):
        cfg = tiny_train_config(tmp_path / f"run-{random_offset}", corpus, max_positions=128, random_offset=random_offset,
                                max_steps=6, eval_every=1000, save_every=1000)
        train(cfg)
        trained = load_model(tmp_path / f"run-{random_offset}" / "checkpoint")
        initial = build_model(trained.config)
        assert trained.config.max_positions == 128
        rows[random_offset] = (trained.ap_table - initial.ap_table).abs().amax(dim=1)  # [128] change per row
    # weight decay moves every row a little; gradient steps move the rows that were read
    assert rows[False][64:].max() < 0.1 * rows[False][:64].min()
    assert rows[True][64:].min() > 0.5 * rows[False][64:].max() and rows[True][100:].mean() > 0.3 * rows[True][:64].mean()
    saved = json.loads((tmp_path / "run-True" / "train_config.json").read_text())
    assert saved["random_offset"] is True and saved["max_positions"] == 128


def test_random_offset_config_errors():
    with pytest.raises(ValueError, match="random_offset.*'rope' model has none"):
        TrainConfig(model=dict(variant="rope", d_model=32, n_layers=2, n_heads=4), random_offset=True)
    with pytest.raises(ValueError, match="max_positions: must be >= max_length=256"):
        TrainConfig(max_positions=128)


def test_the_loop_adds_nothing_to_the_step(tmp_path, corpus):
    """train()'s eager losses are those of the recipe written out by hand (batches, masks, offsets, schedule,
    AdamW, clipping): whatever the loop does around the step (prefetch, pinning, logging, validation,
    checkpoints) must not change a loss."""
    import torch

    from dstg_interp import build_model
    from dstg_interp.train import (OFFSET_SEED_SHIFT, batch_order, learning_rate, make_optimizer, masked_batch,
                                   prepare_training_data, random_offsets, step_seed)

    cfg = tiny_train_config(tmp_path / "run", corpus, compile=False, random_offset=True, max_positions=96)
    train(cfg)
    logged = [loss for _, loss in sorted(train_losses(cfg.out_dir).items())]
    prepared = prepare_training_data(cfg)
    vocab_size = prepared.tokenizer.get_vocab_size()
    model = build_model(cfg.model_config(vocab_size)).train()
    optimizer = make_optimizer(model, cfg)
    batches = batch_order(prepared.train, cfg)
    by_hand = []
    for step in range(cfg.max_steps):
        seed = step_seed(cfg.seed, step)
        ids, mask, labels = masked_batch(prepared.train, batches(step), cfg, vocab_size, generator_seed=seed)
        offsets = random_offsets(mask, cfg.max_positions, seed + OFFSET_SEED_SHIFT)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg, step)
        loss = model(ids, None if bool(mask.all()) else mask, labels, masked_logits_only=True,
                     position_offset=offsets).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        by_hand.append(round(float(loss.detach()), 5))
    assert len(logged) == cfg.max_steps and by_hand == logged
