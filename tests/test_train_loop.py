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
from dstg_interp.train import LengthBucketedBatches, TrainConfig, learning_rate, prepare_training_data, train

from conftest import write_synthetic_corpus
from test_train import read_log, tiny_train_config, train_losses

REPO = Path(__file__).resolve().parent.parent


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

    configs = {seed: zoo_config("ap", tmp_path, 4800, None, seed) for seed in (0, 1, 2)}
    assert [Path(c.out_dir).name for c in configs.values()] == ["ap", "ap-seed1", "ap-seed2"] == [zoo_member("ap", s) for s in configs]
    differing = {k for c in configs.values() for k, v in c.to_dict().items() if v != configs[0].to_dict()[k]}
    assert differing == {"seed", "out_dir"}
    assert {c.data_seed for c in configs.values()} == {0}
    assert [c.model_config(8192).seed for c in configs.values()] == [0, 1, 2]


def test_the_one_zoo_architecture_is_the_shipped_zoo_s_and_the_recipe_s():
    from dstg_interp.model.checkpoint import ZOO_DIR, ZOO_NAMES, ZOO_WIDTHS, zoo_architecture
    from dstg_interp.tiny_zoo import TINY_WIDTHS, tiny_config
    from experiments.pretrain_zoo import zoo_config

    assert set(ZOO_WIDTHS) == set(TINY_WIDTHS) == set(ZOO_NAMES)
    fields = ("variant", "d_sem", "d_ap", "d_model", "n_layers", "n_heads")
    for variant in (*ZOO_NAMES, "dstg-offset"):
        shipped = json.loads((ZOO_DIR / variant / "config.json").read_text())  # what the zoo was trained as
        made = zoo_config(variant, Path("runs"), 4800, None).model_config(8192).to_dict()
        assert {k: made[k] for k in fields} == {k: shipped[k] for k in fields}, variant
        assert zoo_architecture(variant.split("-")[0]).items() <= made.items()
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
    """A zoo folder whose member was trained otherwise (here: 4800 steps) gets no member of this recipe (200
    steps): one line naming the member and what differs, before anything is trained or written."""
    from dstg_interp.model.checkpoint import ZOO_DIR
    from experiments.pretrain_zoo import check_zoo_recipe, main as pretrain_zoo_main, zoo_config

    for variant in ("dstg", "rope", "ap", "rp"):  # the shipped zoo is one recipe (dstg-offset: its own)
        for seed in (0, 3):
            check_zoo_recipe(ZOO_DIR, variant, zoo_config(variant, tmp_path, 4800, None, seed))
    zoo = tmp_path / "zoo"
    (zoo / "ap").mkdir(parents=True)
    shutil.copy(ZOO_DIR / "ap" / "train_config.json", zoo / "ap" / "train_config.json")
    before = sorted(p.name for p in zoo.rglob("*"))
    code = pretrain_zoo_main(["--variants", "rp", "--steps", "200", "--out", str(zoo), "--runs", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"pretrain_zoo: error: {zoo} holds ap, trained with another recipe (max_steps 4800 here vs 200")
    assert sorted(p.name for p in zoo.rglob("*")) == before and not (tmp_path / "runs").exists()


def test_the_6_layer_recipe_is_the_zoo_recipe_deeper_longer_on_en_large(tmp_path):
    """--recipe 6x128 changes depth, corpus and steps only, and the shipped 4-layer zoo refuses its members."""
    from dstg_interp.model.checkpoint import ZOO_DIR
    from experiments.pretrain_zoo import PretrainZooConfig, check_zoo_recipe, zoo_config

    old, new = (zoo_config("rp", tmp_path, None, None, 0, recipe) for recipe in ("4x128", "6x128"))
    differing = {k for k, v in new.to_dict().items() if v != old.to_dict()[k]}
    assert differing == {"model", "corpus", "max_steps"}
    assert (new.model["n_layers"], new.corpus, new.max_steps, old.max_steps) == (6, "en-large", 8000, 4800)
    assert {k: v for k, v in new.model.items() if k != "n_layers"} == {k: v for k, v in old.model.items() if k != "n_layers"}
    with pytest.raises(ValueError, match=r"holds ap, trained with another recipe \(corpus en-mix here vs en-large, max_steps 4800 here vs 8000, n_layers 4 here vs 6\)"):
        check_zoo_recipe(ZOO_DIR, "rp", new)
    assert PretrainZooConfig(recipe="6x128").steps is None and zoo_config("ap", tmp_path, 30, None, 0, "6x128").max_steps == 30
