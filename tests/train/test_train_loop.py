"""The training loop's data order and recipe knobs: length-bucketed batches, seeds, schedules, tied heads,
position-table init, compiled vs eager training, and the recipe study on a tiny corpus."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from dstg_interp import ModelConfig, build_model, load_model
from dstg_interp.data.mlm import pad_width_to_multiple
from dstg_interp.train import LengthBucketedBatches, TrainConfig, learning_rate, prepare_training_data, train

from conftest import write_synthetic_corpus
from test_train import read_log, tiny_train_config, train_losses

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    return write_synthetic_corpus(tmp_path / "corpus", n_docs=80)


# --- length-bucketed batches -----------------------------------------------------------------------
def test_bucketed_batches_cover_every_sequence_once_per_epoch():
    lengths = np.random.default_rng(0).integers(5, 129, size=1003)
    batches = LengthBucketedBatches(lengths, batch_size=32, seed=3, chunk_batches=4)
    assert batches.batches_per_epoch == 32  # ceil(1003 / 32)
    for epoch in range(2):
        seen = np.concatenate([batches(epoch * batches.batches_per_epoch + i) for i in range(batches.batches_per_epoch)])
        assert sorted(seen.tolist()) == list(range(1003))
    # a new epoch is a new plan, and the plan is a function of (seed, epoch) only
    assert not np.array_equal(batches(0), batches(batches.batches_per_epoch))
    again = LengthBucketedBatches(lengths, batch_size=32, seed=3, chunk_batches=4)
    assert all(np.array_equal(batches(s), again(s)) for s in (5, 40, 17))
    other_seed = LengthBucketedBatches(lengths, batch_size=32, seed=4, chunk_batches=4)
    assert not np.array_equal(batches(0), other_seed(0))


def test_bucketed_batches_pad_less_than_random_batches():
    lengths = np.random.default_rng(1).integers(5, 129, size=4096)
    bucketed = LengthBucketedBatches(lengths, batch_size=32, seed=0)
    padding = lambda batch: (lengths[batch].max() - lengths[batch]).sum()
    bucketed_padding = sum(padding(bucketed(s)) for s in range(bucketed.batches_per_epoch))
    order = np.random.default_rng(0).permutation(len(lengths))
    random_padding = sum(padding(order[i : i + 32]) for i in range(0, len(order), 32))
    assert bucketed_padding < 0.2 * random_padding


def test_bucketed_batches_refuse_a_corpus_smaller_than_a_batch():
    with pytest.raises(ValueError, match="only 3 training sequences for a batch of 8"):
        LengthBucketedBatches(np.array([4, 5, 6]), batch_size=8, seed=0)


def old_epoch_plan(lengths, batch_size, seed, epoch, chunk_batches=64):
    """LengthBucketedBatches.epoch_plan as it was before token budgets (commit 0e580ff), copied verbatim."""
    order = np.random.default_rng([seed, epoch]).permutation(len(lengths))
    chunk = batch_size * chunk_batches
    batches = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    shuffle = np.random.default_rng([seed, epoch, 1]).permutation(len(batches))
    return [batches[i] for i in shuffle]


def test_default_plan_is_the_plan_before_token_budgets():
    lengths = np.random.default_rng(5).integers(5, 129, size=1003)
    for batch_size, seed, chunk_batches in ((32, 3, 4), (7, 0, 64), (16, 11, 2)):
        batches = LengthBucketedBatches(lengths, batch_size=batch_size, seed=seed, chunk_batches=chunk_batches)
        per_epoch = batches.batches_per_epoch
        for epoch in (0, 1, 4):
            old = old_epoch_plan(lengths, batch_size, seed, epoch, chunk_batches)
            assert per_epoch == len(old)
            assert all(np.array_equal(batches(epoch * per_epoch + i), b) for i, b in enumerate(old))
    # and a plan recorded from the code before the change, in case the copy above and the class drift together
    small = LengthBucketedBatches(np.array([9, 3, 7, 5, 8, 2, 6, 4, 1, 10]), batch_size=3, seed=0, chunk_batches=2)
    assert [small(s).tolist() for s in range(5)] == [[9], [6, 2, 4], [8, 1, 0], [5, 7, 3], [8, 1, 7]]


# --- token-budget batches ------------------------------------------------------------------------------
def budget_epoch(batches, epoch):
    first = sum(batches.batches_in_epoch(e) for e in range(epoch))
    return [batches(first + i) for i in range(batches.batches_in_epoch(epoch))]


def test_budget_batches_cover_every_sequence_once_within_the_budget():
    lengths = np.random.default_rng(0).integers(5, 129, size=1003)
    batches = LengthBucketedBatches(lengths, batch_size=32, seed=3, chunk_batches=4, batch_tokens=32 * 128)
    counts = [batches.batches_in_epoch(e) for e in range(3)]
    assert len(set(counts)) > 1  # the number of batches varies from epoch to epoch
    for epoch in range(3):
        plan = budget_epoch(batches, epoch)
        assert sorted(np.concatenate(plan).tolist()) == list(range(1003))
        assert all(len(b) * lengths[b].max() <= 32 * 128 for b in plan)
        positions = [len(b) * lengths[b].max() for b in plan]
        assert np.median(positions) > 0.9 * 32 * 128  # about the budget: few positions left empty
    sizes = [len(b) for b in budget_epoch(batches, 0)]
    assert max(sizes) > 2 * min(sizes) and max(sizes) > 32  # short sequences come many to a batch


def test_budget_cut_is_greedy():
    from dstg_interp.train import within_budget

    lengths = np.sort(np.random.default_rng(4).integers(1, 40, size=300))
    part = np.arange(1000, 1300)
    cut = within_budget(part, lengths, 100)
    assert np.array_equal(np.concatenate(cut), part)
    for batch, following in zip(cut, cut[1:]):  # each batch is full: the next (longer) sequence would not fit
        assert len(batch) * lengths[batch - 1000].max() <= 100 < (len(batch) + 1) * lengths[following[0] - 1000]
    assert [b.tolist() for b in within_budget(np.arange(5), np.array([2, 3, 3, 5, 9]), 9)] == [[0, 1, 2], [3], [4]]


def test_budget_batches_are_deterministic_and_resumable():
    lengths = np.random.default_rng(2).integers(3, 65, size=500)
    batches = LengthBucketedBatches(lengths, batch_size=8, seed=7, chunk_batches=8, batch_tokens=256)
    straight = [batches(s) for s in range(400)]  # several epochs
    assert batches.batches_in_epoch(0) < 400
    for step in (0, 399, 123, batches.batches_in_epoch(0), batches.batches_in_epoch(0) - 1):
        fresh = LengthBucketedBatches(lengths, batch_size=8, seed=7, chunk_batches=8, batch_tokens=256)
        assert np.array_equal(fresh(step), straight[step]), step  # a resumed run starts anywhere
    other = LengthBucketedBatches(lengths, batch_size=8, seed=8, chunk_batches=8, batch_tokens=256)
    assert not np.array_equal(other(0), straight[0])
    # the budget's epoch boundaries: the first batch of epoch 1 is epoch 1's plan's first
    assert np.array_equal(straight[batches.batches_in_epoch(0)], batches.epoch_plan(1)[0])


def test_budget_smaller_than_the_longest_sequence_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"batch_tokens=99 is less than the longest training sequence \(100 tokens\)"):
        LengthBucketedBatches(np.array([4, 100, 6, 7]), batch_size=2, seed=0, batch_tokens=99)
    with pytest.raises(ValueError, match="TrainConfig.batch_tokens: a batch must hold one sequence of max_length=256"):
        TrainConfig(batch_tokens=255)
    with pytest.raises(ValueError, match="drop --no-bucket-by-length"):
        TrainConfig(batch_tokens=4096, bucket_by_length=False)
    from dstg_interp.cli.train import main

    code = main(["--out", str(tmp_path / "run"), "--max-length", "64", "--batch-tokens", "63", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "set --batch-tokens to at least 64" in err
    assert not (tmp_path / "run").exists()


def test_a_tiny_run_with_token_budget_batches(tmp_path, corpus):
    cfg = tiny_train_config(tmp_path / "run", corpus, batch_tokens=8 * 64, max_steps=6, eval_every=6, save_every=6,
                            compile=False)
    result = train(cfg)
    assert result["step"] == 6 and json.loads((tmp_path / "run" / "train_config.json").read_text())["batch_tokens"] == 512
    batches = LengthBucketedBatches(prepare_training_data(cfg).train.lengths, 8, cfg.seed, batch_tokens=512)
    lengths = prepare_training_data(cfg).train.lengths
    real = [int(lengths[batches(s)].sum()) for s in range(6)]
    assert np.diff([0] + [r["tokens_seen"] for r in read_log(tmp_path / "run") if "loss" in r]).tolist() == real
    assert any(len(batches(s)) != 8 for s in range(6))


# --- padding to a multiple (bf16) ---------------------------------------------------------------------------
def test_pad_width_to_multiple_adds_only_ignored_padding():
    ids = torch.tensor([[2, 7, 8, 3, 0], [2, 9, 3, 0, 0]])
    mask = ids != 0
    labels = torch.tensor([[-100, 7, -100, -100, -100], [-100, 9, -100, -100, -100]])
    padded_ids, padded_mask, padded_labels = pad_width_to_multiple(ids, mask, labels, 4, limit=64)
    assert padded_ids.shape == padded_mask.shape == padded_labels.shape == (2, 8)
    assert torch.equal(padded_ids[:, :5], ids) and not padded_ids[:, 5:].any()
    assert torch.equal(padded_mask[:, :5], mask) and not padded_mask[:, 5:].any()
    assert torch.equal(padded_labels[:, :5], labels) and (padded_labels[:, 5:] == -100).all()
    assert pad_width_to_multiple(ids, mask, labels, 4, limit=6)[0].shape == (2, 6)  # never past the longest batch
    assert pad_width_to_multiple(ids, mask, labels, 5, limit=64)[0] is ids  # already a multiple
    with pytest.raises(ValueError, match="multiple must be a positive integer"):
        pad_width_to_multiple(ids, mask, labels, 0, limit=64)


def test_padding_is_16_under_bf16_and_off_in_float32_unless_given(tmp_path, capsys):
    assert TrainConfig().padding_multiple() == 1
    assert TrainConfig(bf16=True).padding_multiple() == 16
    assert TrainConfig(bf16=True, pad_to_multiple_of=1).padding_multiple() == 1
    assert TrainConfig(pad_to_multiple_of=8).padding_multiple() == 8
    with pytest.raises(ValueError, match="pad_to_multiple_of: must be a positive integer"):
        TrainConfig(pad_to_multiple_of=0)
    from dstg_interp.cli.train import main

    with pytest.raises(SystemExit) as exit_info:  # argparse: its usage, then the one error line
        main(["--out", str(tmp_path / "run"), "--pad-to-multiple-of", "0", "--quiet"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and last == "dstg-train: error: argument --pad-to-multiple-of: expected a positive integer, got 0"
    assert not (tmp_path / "run").exists()


def test_padded_batches_train_as_the_unpadded_ones(tmp_path, corpus):
    """Widths and masked-row counts padded to multiples of 16: the same real tokens, the same masks, the
    same losses (float32, where only the arithmetic's order can differ)."""
    runs = {}
    for multiple in (1, 16):
        cfg = tiny_train_config(tmp_path / f"pad{multiple}", corpus, max_steps=8, eval_every=8, save_every=8,
                                compile=False, pad_to_multiple_of=multiple)
        train(cfg)
        runs[multiple] = read_log(cfg.out_dir)
    lengths = prepare_training_data(cfg).train.lengths
    plan = LengthBucketedBatches(lengths, cfg.batch_size, cfg.seed)
    assert any(int(lengths[plan(s)].max()) % 16 for s in range(8))  # some batches were padded
    assert [r["tokens_seen"] for r in runs[1] if "loss" in r] == [r["tokens_seen"] for r in runs[16] if "loss" in r]
    a, b = train_losses(tmp_path / "pad1"), train_losses(tmp_path / "pad16")
    assert a.keys() == b.keys() and all(abs(a[s] - b[s]) < 1e-4 for s in a), (a, b)
    assert [r["val_loss"] for r in runs[1] if "val_loss" in r] == pytest.approx(
        [r["val_loss"] for r in runs[16] if "val_loss" in r], abs=1e-4)


# --- DDP: a batch of fewer sequences than ranks ------------------------------------------------------------
def test_rank_share_of_a_batch_smaller_than_the_ranks():
    from dstg_interp.train import rank_share

    ids = torch.arange(12).reshape(3, 4)
    mask, labels, offsets = torch.ones(3, 4, dtype=torch.bool), ids.clone(), torch.tensor([5, 6, 7])
    for rank in range(2):  # enough rows: rows rank::world_size, as ever, no scaling
        share = rank_share(ids, mask, labels, offsets, rank, 2)
        assert torch.equal(share[0], ids[rank::2]) and torch.equal(share[3], offsets[rank::2]) and share[4] is None
    shares = [rank_share(ids, mask, labels, offsets, rank, 5) for rank in range(5)]
    for rank, (r_ids, r_mask, r_labels, r_offsets, scale) in enumerate(shares):
        assert scale == 5 / 3 and r_mask.shape == (1, 4)
        if rank < 3:  # a sequence each
            assert torch.equal(r_ids, ids[rank : rank + 1]) and torch.equal(r_labels, labels[rank : rank + 1])
        else:  # a placeholder: the first row, no loss taken anywhere
            assert torch.equal(r_ids, ids[:1]) and bool((r_labels == -100).all()) and torch.equal(r_offsets, offsets[:1])


def test_ddp_average_over_a_small_batch_is_its_mean_over_the_ranks_with_a_sequence():
    """What DDP computes for a batch of 2 sequences on 4 ranks (the mean of the 4 ranks' gradients of their
    scaled losses), written out in one process: the mean of the 2 per-sequence gradients, as on 2 ranks."""
    from dstg_interp.train import rank_share

    model = build_model(ModelConfig(variant="dstg", vocab_size=50, max_positions=16, n_layers=1, n_heads=4, d_sem=24, d_ap=8))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (2, 10), generator=generator)
    labels = torch.where(torch.rand(2, 10, generator=generator) < 0.4, ids, torch.full_like(ids, -100))
    mask = torch.ones(2, 10, dtype=torch.bool)

    def gradients(r_ids, r_mask, r_labels, scale):
        model.zero_grad(set_to_none=True)
        loss = model(r_ids, r_mask, r_labels, masked_logits_only=True).loss
        (loss if scale is None else loss * scale).backward()
        return torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel()) for p in model.parameters()])

    shares = [rank_share(ids, mask, labels, None, rank, 4) for rank in range(4)]
    assert [share[4] for share in shares] == [2.0] * 4
    per_rank = [gradients(r_ids, r_mask, r_labels, scale) for r_ids, r_mask, r_labels, _, scale in shares]
    assert float(per_rank[2].abs().max()) == float(per_rank[3].abs().max()) == 0.0  # the placeholders
    ddp = torch.stack(per_rank).mean(0)  # DDP's allreduce: the mean of the ranks' gradients
    two_ranks = torch.stack([gradients(ids[i : i + 1], mask[i : i + 1], labels[i : i + 1], None) for i in range(2)]).mean(0)
    assert torch.allclose(ddp, two_ranks, atol=1e-7) and float(two_ranks.abs().max()) > 0


# --- seeds --------------------------------------------------------------------------------------------
def test_seeds_change_init_and_data_order_but_not_the_split(tmp_path, corpus):
    runs = {}
    for name, seed in (("a", 0), ("b", 1), ("c", 0)):
        cfg = tiny_train_config(tmp_path / name, corpus, seed=seed, max_steps=4, eval_every=4, save_every=4)
        train(cfg)
        runs[name] = cfg
    # the model init follows the training seed
    assert cfg.model_config(200).seed == 0 and runs["b"].model_config(200).seed == 1
    a, b, c = (load_model(tmp_path / n / "checkpoint") for n in "abc")
    assert not torch.equal(a.embed.weight, b.embed.weight)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), c.state_dict().values()))  # same seed, same run
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "c")
    assert train_losses(tmp_path / "a") != train_losses(tmp_path / "b")
    # the split (data_seed) is shared: same tokenizer, same validation tokens
    assert (tmp_path / "a" / "checkpoint" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "checkpoint" / "tokenizer.json").read_bytes()
    val = [next(r for r in read_log(tmp_path / n) if "val_tokens" in r)["val_tokens"] for n in "ab"]
    assert val[0] == val[1]


def test_negative_seed_is_refused(tmp_path):
    with pytest.raises(ValueError, match="TrainConfig.seed"):
        TrainConfig(out_dir=str(tmp_path), seed=-1)


# --- schedules, tied head, position-table init -------------------------------------------------------
def test_constant_schedule_holds_then_decays_linearly():
    cfg = TrainConfig(schedule="constant", lr=1e-3, warmup_steps=10, max_steps=100, decay_fraction=0.2, min_lr_ratio=0.1)
    assert learning_rate(cfg, 4) == pytest.approx(5e-4)
    assert learning_rate(cfg, 10) == learning_rate(cfg, 79) == pytest.approx(1e-3)
    assert learning_rate(cfg, 90) == pytest.approx(1e-3 * (1 - 0.9 * 0.5))
    assert learning_rate(cfg, 100) == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="decay_fraction"):
        TrainConfig(schedule="constant", decay_fraction=0.0)


@pytest.mark.parametrize("variant", ["dstg", "ap"])
def test_tied_head_stays_tied_through_save_and_load(tmp_path, variant):
    widths = dict(d_sem=24, d_ap=8) if variant == "dstg" else dict(d_model=32)
    model = build_model(ModelConfig(variant=variant, vocab_size=50, max_positions=16, n_layers=1, n_heads=4,
                                    tie_embeddings=True, pos_init_std=0.5, **widths))
    assert model.mlm_head.weight is model.embed.weight
    assert 0.4 < float(model.ap_table.detach().std()) < 0.6  # the table's own init scale
    assert float(model.embed.weight.detach().std()) < 0.05  # the rest keeps init_std
    with torch.no_grad():
        model.embed.weight[7] += 1.0
    model.save(tmp_path / "tied")
    reloaded = load_model(tmp_path / "tied")
    assert reloaded.mlm_head.weight is reloaded.embed.weight
    assert torch.equal(reloaded.mlm_head.weight, model.embed.weight.detach())


def test_tied_head_needs_the_embedding_width():
    with pytest.raises(ValueError, match="tie_embeddings"):
        ModelConfig(variant="dstg", d_sem=24, d_ap=8, n_heads=4, tie_embeddings=True, mlm_head_input="full")


# --- compiled training ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_compiled_training_gives_the_eager_losses_with_three_graphs(tmp_path, corpus):
    """A whole epoch and a step: full-width unpadded batches, padded batches of many widths (the full one
    included) and the epoch's smaller last batch (184 sequences = 26 x 7 + 2).  Compiled, that is three
    graphs: the encoder on unpadded and on padded batches, and the loss (compile_for_training declares the
    symbolic sizes); the losses are the eager ones."""
    steps = 28
    eager = tiny_train_config(tmp_path / "eager", corpus, batch_size=7, max_steps=steps, eval_every=steps, save_every=steps, compile=False)
    compiled = tiny_train_config(tmp_path / "compiled", corpus, batch_size=7, max_steps=steps, eval_every=steps, save_every=steps, compile=True)
    train(eager)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    train(compiled)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 3
    lengths = prepare_training_data(eager).train.lengths
    assert len(lengths) % 7 == 2 and LengthBucketedBatches(lengths, 7, eager.seed).batches_per_epoch < steps
    tokens_per_step = np.diff([0] + [r["tokens_seen"] for r in read_log(tmp_path / "eager") if "loss" in r])
    assert len(set(tokens_per_step)) > 5  # many widths
    a, b = train_losses(tmp_path / "eager"), train_losses(tmp_path / "compiled")
    assert a.keys() == b.keys()
    assert all(abs(a[s] - b[s]) < 1e-4 for s in a), (a, b)
    assert [r["val_loss"] for r in read_log(tmp_path / "eager") if "val_loss" in r] == pytest.approx(
        [r["val_loss"] for r in read_log(tmp_path / "compiled") if "val_loss" in r], abs=1e-4)


# --- the recipe study --------------------------------------------------------------------------------------
def run_recipe_study(tmp_path, corpus, *extra):
    command = [sys.executable, "-m", "experiments.recipe_study", "--corpus", str(corpus), "--tiny",
               "--steps", "8", "--eval-every", "4", "--eval-batches", "1", "--max-length", "48",
               "--out", str(tmp_path / "study"), "--runs", str(tmp_path / "runs"), "--threads", "1", *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)


@pytest.mark.slow
def test_recipe_study_on_a_tiny_corpus(tmp_path, corpus):
    result = run_recipe_study(tmp_path, corpus, "--variants", "ap", "--levers", "lr", "batch", "pos_init")
    assert result.returncode == 0, result.stderr[-2000:]
    curves = pd.read_csv(tmp_path / "study" / "curves.csv")
    assert set(curves.run) == {"base", "lr=0.003", "batch=16", "pos_init=0.2"}
    # the batch lever keeps the training tokens (sequences) fixed: twice the steps at half the batch
    last = curves.groupby("run").step.max()
    assert last["batch=16"] == 2 * last["base"]
    summary = pd.read_csv(tmp_path / "study" / "summary.csv")
    assert summary.set_index("run").loc["base", "gain_vs_base"] == 0
    assert all((tmp_path / "study" / f"recipe_curves.{kind}").is_file() for kind in ("png", "pdf", "json"))
    assert json.loads((tmp_path / "study" / "study.json").read_text())["config"]["levers"] == ["lr", "batch", "pos_init"]


def test_recipe_study_refuses_an_unknown_lever(tmp_path, corpus):
    result = run_recipe_study(tmp_path, corpus, "--levers", "lr", "dropout")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["recipe_study: error: unknown lever(s) dropout; choose from "
                                                  "lr, batch, pos_init, tie, schedule, warmup, d_ap, vocab"]
    assert not (tmp_path / "study").exists()


# --- the zoo command's seeds ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seeds, message", [(["0", "0"], "--seeds repeats a seed: 0 0"),
                                            (["1", "-2"], "--seeds must be integers from 0 to 4294967295, got 1 -2")])
def test_pretrain_zoo_refuses_bad_seeds(tmp_path, capsys, seeds, message):
    from experiments.pretrain_zoo import main as pretrain_zoo_main

    code = pretrain_zoo_main(["--seeds", *seeds, "--out", str(tmp_path / "zoo"), "--runs", str(tmp_path / "runs")])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"pretrain_zoo: error: {message}"]
    assert not (tmp_path / "zoo").exists() and not (tmp_path / "runs").exists()


def test_zoo_seeds_share_the_recipe_and_split_but_not_the_seed(tmp_path):
    from dstg_interp.model.checkpoint import zoo_member
    from experiments.pretrain_zoo import zoo_config

    configs = {seed: zoo_config("ap", tmp_path, None, None, seed) for seed in (0, 1, 2)}
    assert [Path(c.out_dir).name for c in configs.values()] == ["ap", "ap-seed1", "ap-seed2"] == [zoo_member("ap", s) for s in configs]
    differing = {k for c in configs.values() for k, v in c.to_dict().items() if v != configs[0].to_dict()[k]}
    assert differing == {"seed", "out_dir"}
    assert {c.data_seed for c in configs.values()} == {0}
    assert [c.model_config(8192).seed for c in configs.values()] == [0, 1, 2]


def test_the_one_zoo_architecture_is_the_shipped_zoo_s_and_the_recipe_s():
    from dstg_interp.model.checkpoint import ZOO_DIR, ZOO_FLOOR, ZOO_NAMES, ZOO_WIDTHS, zoo_architecture
    from dstg_interp.tiny_zoo import TINY_WIDTHS, tiny_config
    from experiments.pretrain_zoo import DEFAULT_RECIPE, RECIPES, zoo_config

    assert set(ZOO_WIDTHS) == set(TINY_WIDTHS) == {*ZOO_NAMES, ZOO_FLOOR}  # the four and the NoPE floor
    fields = ("variant", "d_sem", "d_ap", "d_model", "n_layers", "n_heads")
    for variant in (*ZOO_NAMES, "dstg-offset"):
        shipped = json.loads((ZOO_DIR / variant / "config.json").read_text())  # what the zoo was trained as
        recipe = "4x128" if variant == "dstg-offset" else "authors"  # dstg-offset: still the first zoo's 4 layers
        made = zoo_config(variant, Path("runs"), None, None, 0, recipe).model_config(8192).to_dict()
        assert {k: made[k] for k in fields} == {k: shipped[k] for k in fields}, variant
        assert dict(zoo_architecture(variant.split("-")[0]), **RECIPES[recipe]["depth"]).items() <= made.items()
    assert zoo_architecture("dstg")["n_layers"] == RECIPES[DEFAULT_RECIPE]["depth"]["n_layers"] == 6  # the shipped zoo's
    assert TrainConfig().model == dict(variant="dstg", d_sem=112, d_ap=16, n_layers=6, n_heads=4)  # its default, as before
    assert {k: tiny_config("dstg-offset", 97).to_dict()[k] for k in ("variant", "d_sem", "d_ap", "d_model")} == \
        dict(variant="dstg", d_sem=24, d_ap=8, d_model=32)
    assert tiny_config("rp", 97).d_model == 32 and tiny_config("rp", 97).n_layers == 2


def test_compile_is_on_by_default_only_where_it_pays_back(monkeypatch):
    from dstg_interp import train as train_module

    assert train_module.use_compile(TrainConfig(max_steps=50, warmup_steps=5)) == (False, None)  # compiling costs more than it saves
    assert train_module.use_compile(TrainConfig(max_steps=50, warmup_steps=5, compile=True)) == (True, None)
    monkeypatch.setattr(train_module.shutil, "which", lambda name: "/usr/bin/" + name)
    assert train_module.use_compile(TrainConfig(max_steps=4800)) == (True, None)
    assert train_module.use_compile(TrainConfig(max_steps=4800, compile=False)) == (False, None)
    monkeypatch.setattr(train_module.shutil, "which", lambda name: None)
    compiled, note = train_module.use_compile(TrainConfig(max_steps=4800))
    assert not compiled and "no C++ compiler" in note


def test_pretrain_zoo_refuses_a_zoo_of_another_recipe(tmp_path, capsys):
    """A zoo folder whose member was trained otherwise (here: 8000 steps) gets no member of this recipe (200
    steps): one line naming the member and what differs, before anything is trained or written."""
    from dstg_interp.model.checkpoint import ZOO_DIR
    from experiments.pretrain_zoo import check_zoo_recipe, main as pretrain_zoo_main, zoo_config

    for variant in ("dstg", "rope", "ap", "rp", "nope"):  # the shipped zoo is one recipe (dstg-offset: its own), the floor's
        for seed in (0, 3):
            check_zoo_recipe(ZOO_DIR, variant, zoo_config(variant, tmp_path, None, None, seed, precision="float32"))
    zoo = tmp_path / "zoo"
    (zoo / "ap").mkdir(parents=True)
    shutil.copy(ZOO_DIR / "ap" / "train_config.json", zoo / "ap" / "train_config.json")
    before = sorted(p.name for p in zoo.rglob("*"))
    code = pretrain_zoo_main(["--variants", "rp", "--steps", "200", "--out", str(zoo), "--runs", str(tmp_path / "runs"),
                              "--precision", "float32"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"pretrain_zoo: error: {zoo} holds ap, trained with another recipe (max_steps 7800 here vs 200")
    assert sorted(p.name for p in zoo.rglob("*")) == before and not (tmp_path / "runs").exists()


def test_pretrain_zoo_does_not_retrain_a_member_already_in_the_zoo(tmp_path, capsys, monkeypatch):
    """A member committed by an earlier session (its run folder gone: runs/ is not committed) is not trained again
    by the same command; the others are (here: refused before training by the stand-in)."""
    import experiments.pretrain_zoo as pretrain_zoo
    from dstg_interp.model.checkpoint import ZOO_DIR

    zoo = tmp_path / "zoo"
    shutil.copytree(ZOO_DIR / "ap", zoo / "ap")
    before = {p: p.stat().st_mtime_ns for p in zoo.rglob("*")}
    trained = []
    monkeypatch.setattr(pretrain_zoo, "train", lambda cfg, **kw: (trained.append(cfg.model["variant"]),
                                                                   (_ for _ in ()).throw(KeyboardInterrupt))[1])
    code = pretrain_zoo.main(["--variants", "ap", "rp", "--seeds", "0", "--out", str(zoo), "--runs", str(tmp_path / "runs"),
                              "--precision", "float32"])
    assert code == 130 and trained == ["rp"]
    assert f"ap: already in {zoo} (no run folder to resume); not retrained" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in zoo.rglob("*")} == before


def test_the_former_6_layer_recipe_is_the_4_layer_one_deeper_longer_on_en_large(tmp_path):
    """--recipe 6x128 (the former shipped zoo's) changes depth, corpus and steps only from the 4x128 before it."""
    from experiments.pretrain_zoo import PretrainZooConfig, zoo_config

    old, new = (zoo_config("rp", tmp_path, None, None, 0, recipe) for recipe in ("4x128", "6x128"))
    differing = {k for k, v in new.to_dict().items() if v != old.to_dict()[k]}
    assert differing == {"model", "corpus", "max_steps"}
    assert (new.model["n_layers"], new.corpus, new.max_steps, old.max_steps) == (6, "en-large", 8000, 4800)
    assert {k: v for k, v in new.model.items() if k != "n_layers"} == {k: v for k, v in old.model.items() if k != "n_layers"}
    assert PretrainZooConfig(recipe="4x128").steps is None and zoo_config("ap", tmp_path, 30, None, 0, "6x128").max_steps == 30


def test_the_shipped_zoo_is_the_default_authors_recipe_and_refuses_the_former_one(tmp_path):
    """The default recipe is ``authors`` at 7,800 steps, the shipped zoo's every member (float32, as trained); the
    shipped zoo refuses a member of the former 6x128 recipe in one line naming the fields that differ."""
    from dstg_interp.model.checkpoint import ZOO_DIR, ZOO_FLOOR, ZOO_NAMES
    from experiments.pretrain_zoo import DEFAULT_RECIPE, RECIPES, PretrainZooConfig, check_zoo_recipe, recipe_of, zoo_config

    assert DEFAULT_RECIPE == "authors" and PretrainZooConfig().recipe == "authors" and RECIPES["authors"]["steps"] == 7800
    for variant in (*ZOO_NAMES, ZOO_FLOOR):
        for seed in ((0, 1, 2) if variant != ZOO_FLOOR else (0,)):
            member = variant if seed == 0 else f"{variant}-seed{seed}"
            shipped = json.loads((ZOO_DIR / member / "train_config.json").read_text())
            wanted = zoo_config(variant, tmp_path, None, None, seed, precision="float32")
            assert recipe_of(shipped) == recipe_of(wanted.to_dict()), member  # trained as the default recipe says
            assert (shipped["max_steps"], shipped["batch_size"], shipped["windows"]) == (7800, 32, False)
    former = zoo_config("rp", tmp_path, None, None, 0, "6x128")
    with pytest.raises(ValueError, match=r"holds ap, trained with another recipe \(batch_size 32 here vs 16, "
                                         r"betas \[0\.9, 0\.95\] here vs \[0\.9, 0\.98\], max_steps 7800 here vs 8000, "
                                         r"schedule cosine here vs constant and 2 more\)"):
        check_zoo_recipe(ZOO_DIR, "rp", former)


def test_zoo_members_trained_before_token_budgets_keep_their_recipe(tmp_path):
    """A train_config.json that predates ``batch_tokens`` (the former zoos'): recipe_of fills the default (None,
    fixed batches), so it keeps the recipe of the zoo command, and a token-budget member would be another recipe."""
    from dstg_interp.model.checkpoint import ZOO_DIR
    from experiments.pretrain_zoo import check_zoo_recipe, recipe_of, zoo_config

    current = TrainConfig().to_dict()
    before = {k: v for k, v in current.items() if k != "batch_tokens"}
    assert recipe_of(before) == recipe_of(current) and recipe_of(current)["batch_tokens"] is None
    saved = json.loads((ZOO_DIR / "ap" / "train_config.json").read_text())
    assert saved["batch_tokens"] is None  # the shipped zoo: fixed batches, recorded
    older = {k: v for k, v in saved.items() if k != "batch_tokens"}  # as a member trained before the field reads
    wanted = zoo_config("ap", tmp_path, None, None, 0, precision="float32")
    assert wanted.batch_tokens is None and recipe_of(older) == recipe_of(saved) == recipe_of(wanted.to_dict())
    check_zoo_recipe(ZOO_DIR, "ap", wanted)
    budget = zoo_config("ap", tmp_path, None, None, 0, precision="float32")
    budget.batch_tokens = 16 * 128
    with pytest.raises(ValueError, match=r"batch_tokens None here vs 2048"):
        check_zoo_recipe(ZOO_DIR, "ap", budget)


def test_bf16_on_a_cpu_without_native_bfloat16_says_it_will_be_slow(tmp_path, monkeypatch):
    """--bf16 is emulated on an AVX2 CPU (17x a float32 step measured here): one line says so; not in float32,
    not where oneDNN has bfloat16, not on another device."""
    from dstg_interp.train import bf16_emulation_note

    cfg = tiny_train_config(tmp_path / "run", tmp_path, bf16=True)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    note = bf16_emulation_note(cfg, torch.device("cpu"))
    assert note is not None and "\n" not in note and "drop --bf16" in note
    assert bf16_emulation_note(tiny_train_config(tmp_path / "f32", tmp_path), torch.device("cpu")) is None
    assert bf16_emulation_note(cfg, torch.device("meta")) is None
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert bf16_emulation_note(cfg, torch.device("cpu")) is None


def test_a_seed_of_another_architecture_is_refused_though_the_training_recipe_matches(tmp_path):
    """recipe_of compares training fields and depth only, since the four variants differ in architecture by
    design; two seeds of one variant must share it all: a DSTG seed without the authors' normed residual is
    refused beside one with it, while a baseline (plain pre-norm by design) is accepted beside both."""
    from experiments.pretrain_zoo import check_zoo_recipe, model_recipe, zoo_config

    zoo = tmp_path / "zoo"
    normed = zoo_config("dstg", tmp_path, 100, None, 0, "authors")
    assert model_recipe(normed.to_dict())["residual_from_normed"] is True
    (zoo / "dstg").mkdir(parents=True)
    (zoo / "dstg" / "train_config.json").write_text(json.dumps(normed.to_dict()))
    check_zoo_recipe(zoo, "dstg", zoo_config("dstg", tmp_path, 100, None, 1, "authors"))  # seed 1, same model
    check_zoo_recipe(zoo, "rope", zoo_config("rope", tmp_path, 100, None, 0, "authors"))
    plain = zoo_config("dstg", tmp_path, 100, None, 1, "authors")
    plain.model = {**plain.model, "residual_from_normed": False}
    with pytest.raises(ValueError, match=r"holds dstg, trained with another recipe \(model.residual_from_normed True here vs False\)"):
        check_zoo_recipe(zoo, "dstg", plain)
