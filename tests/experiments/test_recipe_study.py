"""The recipe study's diagnosis: arm specs, the run plan, one token budget per run, resuming, bad input."""

import json
import math
import os
import shutil

import pandas as pd
import pytest

from experiments.recipe_levers import ARMS, ZOO_RECIPE, parse_arm, recipe_for
from experiments.recipe_readings import plateau_exit
from experiments.recipe_study import RecipeStudyConfig, diagnosis_plan, main

from conftest import write_synthetic_corpus


def test_named_arms_and_lever_overrides():
    arm = parse_arm("ap:reimpl,tie=false")
    assert arm.variant == "ap" and arm.label == "reimpl,tie=false"
    recipe = recipe_for(arm, "ap")
    assert recipe == dict(ZOO_RECIPE, batch=32, schedule="cosine", tie=False, windows=False, vocab=4096)
    # DSTG's FFN and RP levers of the named arm apply to DSTG only
    assert recipe_for(parse_arm("reimpl"), "dstg")["mlp"] == "mixed" and recipe_for(parse_arm("reimpl"), "dstg")["rp"] is False
    assert recipe_for(parse_arm("mixed"), "ap") is None
    assert recipe_for(parse_arm("zoo"), "rope") == ZOO_RECIPE
    assert recipe_for(parse_arm("windows=false,vocab=4096"), "rp") == dict(ZOO_RECIPE, windows=False, vocab=4096)


def test_the_corpus_lever_takes_a_spec_with_a_colon(tmp_path):
    """corpus=en-mix:wikipedia (a piece subset) keeps its colon; the run trains on it, the others on --corpus."""
    from experiments.recipe_study import train_config

    arm = parse_arm("ap:reimpl,corpus=en-mix:wikipedia")
    assert arm.variant == "ap" and arm.label == "reimpl,corpus=en-mix:wikipedia"
    assert parse_arm("corpus=en-mix:wikipedia").variant is None
    study = RecipeStudyConfig(runs=tmp_path / "runs", out=tmp_path / "out", arms=["ap:zoo"])
    cfg = train_config(study, "ap", recipe_for(arm, "ap"), arm.label, 0, 100, 50, 2)
    assert cfg.corpus == "en-mix:wikipedia" and cfg.vocab_size == 4096
    assert train_config(study, "ap", recipe_for(parse_arm("ap:zoo"), "ap"), "zoo", 0, 100, 50, 2).corpus == "en-mix"


@pytest.mark.parametrize("spec, message", [
    ("warmer", "unknown arm 'warmer'"),
    ("zoo,dropout=0.1", "unknown lever 'dropout'"),
    ("bert:zoo", "unknown variant 'bert'"),
    ("ap:mixed", "none of its levers applies to variant 'ap'"),
    ("ap:zoo,rp=false", "lever rp does not apply to variant 'ap'"),
    ("tie=maybe", "lever tie: expected true or false"),
    ("mlp=diagonal", "lever mlp: expected one of split, mixed"),
    ("batch=-4", "lever batch: must be positive"),
    ("zoo,", "expected [variant:]arm"),
    ("ap:corpus=", "lever corpus: expected corpus=value"),
])
def test_bad_arms_are_one_line_errors(spec, message):
    with pytest.raises(ValueError) as err:
        parse_arm(spec)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_plan_runs_each_arm_per_variant_and_seed_in_order():
    study = RecipeStudyConfig(arms=["ap:reimpl", "mixed", "zoo"], variants=["dstg", "ap"], seeds=[1, 0])
    plan = [(arm.label, variant, seed) for arm, variant, seed in diagnosis_plan(study)]
    assert plan == [("reimpl", "ap", 1), ("reimpl", "ap", 0), ("mixed", "dstg", 1), ("mixed", "dstg", 0),
                    ("zoo", "dstg", 1), ("zoo", "dstg", 0), ("zoo", "ap", 1), ("zoo", "ap", 0)]
    major = RecipeStudyConfig(arms=["ap:reimpl", "mixed"], variants=["dstg"], seeds=[0, 1], seed_major=True)
    assert [(arm.label, seed) for arm, _, seed in diagnosis_plan(major)] == [("reimpl", 0), ("mixed", 0), ("reimpl", 1), ("mixed", 1)]
    assert set(ARMS) >= {"zoo", "reimpl", "mixed", "no-rp", "tied", "doc-start", "vocab-4096", "batch-32"}


def test_plateau_exit_is_the_first_validation_clearly_below_unigram():
    curve = pd.DataFrame(dict(step=[10, 20, 30, 40], tokens=[100, 200, 300, 400], val_loss=[7.0, 6.8, 6.2, 6.0],
                              unigram_loss=[6.9] * 4))
    assert plateau_exit(curve) == (30.0, 300.0)
    assert all(math.isnan(x) for x in plateau_exit(curve.assign(val_loss=6.8)))


@pytest.mark.parametrize("argv, message", [
    (["--arms", "zoo", "warmer"], "unknown arm 'warmer'"),
    (["--arms", "zoo", "--seeds", "0", "0"], "--seeds repeats 0; give each once"),
    (["--arms", "zoo", "zoo"], "--arms repeats zoo; give each once"),
    (["--arms", "zoo", "--seeds", "-1"], "got -1"),
    (["--arms", "ap:mixed"], "none of its levers applies"),
    (["--arms", "dstg:authors,corpus=en-large:-wikipedia@words=0"], "a document of no words is no document"),
    (["--arms", "dstg:authors,corpus=en-mix:wikipedia@pack=1"], "pack= takes a whole number from 2"),
    (["--arms", "dstg:authors,window=100000"], "a training sequence holds 3 to 8192 tokens"),
])
def test_command_refuses_bad_input_in_one_line(tmp_path, capsys, argv, message):
    code = main([*argv, "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")])
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("recipe_study: error: ") and message in lines[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_diagnosis_on_a_tiny_corpus(tmp_path, monkeypatch, capsys):
    """Two arms x two seeds in seconds: one token budget per run, every reading present, outputs written,
    a rerun without --resume refused and one with --resume reading every run back without training."""
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=80)
    argv = ["--corpus", str(corpus), "--tiny", "--arms", "dstg:zoo", "ap:reimpl,tie=false", "--seeds", "0", "1",
            "--tokens", "2500", "--eval-tokens", "800", "--eval-sequences", "8", "--max-length", "48", "--threads", "1",
            "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]
    assert main(argv) == 0, capsys.readouterr().err
    runs = pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv")
    assert list(zip(runs.variant, runs.arm, runs.seed)) == [("dstg", "zoo", 0), ("dstg", "zoo", 1),
                                                           ("ap", "reimpl,tie=false", 0), ("ap", "reimpl,tie=false", 1)]
    # the same training tokens per run, whatever the batch size (16 vs 32) and sequence form
    assert runs.batch.tolist() == [16, 16, 32, 32]
    assert ((runs.train_tokens - 2500).abs() <= runs.batch * 48).all()  # within one step of the budget
    for column in ("heldout_gain_points", "pc1_pc2", "pc1_pc2_chance", "position_r2_first", "position_r2_last"):
        assert runs[column].notna().all(), column
    dstg_rows = runs[runs.variant == "dstg"]  # the smooth control, the layer-0 kernel, the data's form
    for column in ("pc1_pc2_walk_q95", "l0_offset_share", "l0_offset_share_random", "l0_modal_offsets",
                   "train_split_tokens", "ends_inside_window", "pc3", "pcs_95"):
        assert dstg_rows[column].notna().all(), column
    assert (dstg_rows.pc1_pc2_walk_q95 > dstg_rows.pc1_pc2_walk).all()
    assert ((0 <= dstg_rows.l0_offset_share) & (dstg_rows.l0_offset_share <= 1)).all()
    saved = json.loads((tmp_path / "runs" / "ap" / "reimpl,tie=false" / "seed0" / "train_config.json").read_text())
    assert (saved["windows"], saved["vocab_size"], saved["schedule"], saved["model"]["tie_embeddings"]) == (False, 4096, "cosine", False)
    dstg = json.loads((tmp_path / "runs" / "dstg" / "zoo" / "seed0" / "train_config.json").read_text())
    assert (dstg["model"]["mlp_mode"], dstg["model"]["rp_bias"], dstg["windows"]) == ("split", True, True)
    arms = pd.read_csv(tmp_path / "out" / "diagnosis_arms.csv")
    assert arms.n_seeds.tolist() == [2, 2] and arms.heldout_gain_points_sd.notna().all()
    assert all((tmp_path / "out" / f"diagnosis.{kind}").is_file() for kind in ("png", "pdf", "json"))
    assert json.loads((tmp_path / "out" / "diagnosis_study.json").read_text())["finished"] is True

    weights = tmp_path / "runs" / "dstg" / "zoo" / "seed0" / "checkpoint" / "model.safetensors"
    before = os.stat(weights).st_mtime_ns
    capsys.readouterr()
    assert main(argv) == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert os.stat(weights).st_mtime_ns == before
    assert pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv").equals(runs)

    # a zoo folder as one more arm: the dstg run exported as a zoo member reads what the run read
    run = tmp_path / "runs" / "dstg" / "zoo" / "seed0"
    member = tmp_path / "zoo" / "dstg"
    shutil.copytree(run / "checkpoint", member, ignore=shutil.ignore_patterns("optimizer*", "state*"))
    shutil.copy(run / "train_config.json", member)
    shutil.copy(run / "log.jsonl", member)
    first = runs.iloc[0]
    summary = dict(variant="dstg", seed=0, steps=int(first.steps), train_tokens=int(first.train_tokens),
                   val_loss=float(first.final_val_loss), unigram_loss=float(first.unigram_loss))
    (member / "training.json").write_text(json.dumps(summary))
    (tmp_path / "zoo" / "zoo.json").write_text(json.dumps({"dstg": summary}))
    assert main([*argv, "--resume", "--variants", "dstg", "--reference-zoo", str(tmp_path / "zoo")]) == 0
    reference = pd.read_csv(tmp_path / "out" / "diagnosis_reference_zoo.csv")
    assert reference.arm.tolist() == [f"zoo ({first.train_tokens / 1e6:.1f}M tokens)"]
    for column in ("heldout_gain_points", "pc1_pc2", "participation_ratio", "low_freq_share", "position_r2_first",
                   "position_r2_last"):
        assert reference[column].iloc[0] == pytest.approx(first[column], abs=1e-9), column
    assert "zoo (" in " ".join(pd.read_csv(tmp_path / "out" / "diagnosis_arms.csv").arm)
    assert main([*argv, "--resume", "--reference-zoo", str(tmp_path / "nothing")]) == 2
    assert "--reference-zoo" in capsys.readouterr().err


def test_shipped_zoo_reference_reads_the_committed_files():
    from experiments.figure_inputs import FIGURES_DIR, ZOO_DIR
    from experiments.recipe_readings import shipped_zoo_reference

    reference = shipped_zoo_reference(ZOO_DIR, FIGURES_DIR)
    assert sorted(zip(reference.variant, reference.seed)) == [("ap", 0), ("ap", 1), ("ap", 2), ("dstg", 0), ("dstg", 1), ("dstg", 2)]
    assert reference.train_tokens.between(28.3e6, 28.5e6).all()  # the shipped authors'-recipe zoo, its budget in its label
    assert set(reference.arm) == {"shipped zoo (28.4M tokens)"} and set(reference.batch) == {32}  # batch: each member's
    dstg = reference[reference.variant == "dstg"]
    assert dstg.plateau_exit_tokens.notna().all() and (dstg.pc1_pc2 > dstg.pc1_pc2_chance).all()
    assert reference[["heldout_gain_points", "position_r2_first", "position_r2_last"]].notna().all().all()


def test_diagnosis_and_corpus_tables_quote_the_committed_files():
    from experiments import report
    from experiments.figure_inputs import FIGURES_DIR

    for document in report.REPOSITORY_DOCUMENTS:
        text = document.read_text()
        assert "<!-- report:" in text
        assert report.rebuild(text, FIGURES_DIR) == text, f"{document} is out of date; run python -m experiments.report"


def test_collect_writes_the_finished_runs_and_names_the_missing(tmp_path, monkeypatch, capsys):
    """--collect trains nothing: the outputs hold the finished runs, one line names the runs left out; an arm's
    tokens lever gives it its own budget (and its own run folder)."""
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=80)
    common = ["--corpus", str(corpus), "--tiny", "--tokens", "1500", "--eval-tokens", "500", "--eval-sequences", "8",
              "--max-length", "48", "--threads", "1", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]
    assert main([*common, "--arms", "ap:zoo", "ap:zoo,tokens=3000", "--seeds", "0"]) == 0, capsys.readouterr().err
    runs = pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv")
    assert runs.arm.tolist() == ["zoo", "zoo,tokens=3000"]
    assert abs(runs.train_tokens.iloc[1] - 3000) <= 16 * 48 and abs(runs.train_tokens.iloc[0] - 1500) <= 16 * 48
    capsys.readouterr()
    assert main([*common, "--arms", "ap:zoo", "ap:zoo,tokens=3000", "--seeds", "0", "1", "--collect"]) == 0
    err = capsys.readouterr().err
    assert "2 run(s) of the grid not finished, left out: ap:zoo seed 1; ap:zoo,tokens=3000 seed 1" in err
    assert not (tmp_path / "runs" / "ap" / "zoo" / "seed1").exists()
    assert pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv").equals(runs)
    assert main([*common, "--arms", "ap:lr=0.002", "--collect"]) == 2
    assert "--collect: no run of the grid has finished" in capsys.readouterr().err


def test_zoo_curves_label_each_run_by_its_recipe_and_find_its_plateau_exit(tmp_path, capsys):
    """zoo_curves on an exported zoo: each run labelled by the named recipe it was trained with, its plateau exit
    (first validation 0.5 nats below unigram; none for a run that never gets there), the earlier curves beside."""
    from experiments import zoo_curves
    from experiments.pretrain_zoo import zoo_config

    zoo = tmp_path / "zoo"
    for name, variant, recipe, losses in [("ap", "ap", "6x128", [6.6, 6.4, 5.9, 5.0]),
                                         ("rope", "rope", "6x128", [6.0, 5.5, 5.0, 4.5]),
                                         ("rp", "rp", "4x128", [6.7, 6.7, 6.6, 6.5])]:
        cfg = zoo_config(variant, tmp_path / "runs", None, None, 0, recipe)
        (zoo / name).mkdir(parents=True)
        (zoo / name / "train_config.json").write_text(json.dumps(cfg.to_dict()))
        (zoo / name / "config.json").write_text(json.dumps(dict(variant=variant, max_positions=32, d_model=24)))
        table_curve = [dict(step=s, tokens=100 * s, pc1_pc2=pc, low_freq_share=pc / 2) for s, pc in zip((1, 2, 3, 4), (0.2, 0.4, 0.6, 0.8))]
        (zoo / name / "training.json").write_text(json.dumps(dict(
            variant=variant, seed=0, steps=4, train_tokens=400, train_seconds=1.0, val_loss=losses[-1], val_accuracy=0.2,
            unigram_loss=6.7, most_frequent_accuracy=0.05, **(dict(table_curve=table_curve) if variant == "ap" else {}))))
        log = [dict(step=s, tokens_seen=100 * s) for s in (1, 2, 3, 4)]
        log += [dict(step=s, val_loss=loss, val_accuracy=0.1) for s, loss in zip((1, 2, 3, 4), losses)]
        (zoo / name / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    earlier = tmp_path / "earlier.csv"
    pd.DataFrame([dict(variant="ap", recipe="older", seed=0, step=1, tokens=100, val_loss=6.9, val_accuracy=0.05,
                       unigram_loss=6.8)]).to_csv(earlier, index=False)
    out = tmp_path / "out"
    assert zoo_curves.main(["--zoo", str(zoo), "--out", str(out), "--against", str(earlier), "--prefix", "training",
                            "--stem", "by_recipe"]) == 0
    exits = pd.read_csv(out / "training_plateau_exits.csv").set_index(["variant", "recipe"])
    six, four = zoo_curves.named_label("6x128"), zoo_curves.named_label("4x128")
    assert six == "6x128 (6 layers, en-large, 8000 steps)"
    assert exits.loc[("ap", six), "exit_step"] == 3 and exits.loc[("ap", six), "exit_tokens"] == 300  # 5.9 <= 6.7 - 0.5
    assert exits.loc[("rope", six), "exit_step"] == 1
    assert math.isnan(exits.loc[("rp", four), "exit_step"]) and math.isnan(exits.loc[("ap", "older"), "exit_step"])
    assert (out / "by_recipe.png").is_file() and (out / "by_recipe.json").is_file()
    assert set(pd.read_csv(out / "training_curves.csv").recipe) == {six, four}
    # AP-NeoBERT recorded its table's spectrum as it trained: a curve per run beside a Gaussian table of its shape
    tables = pd.read_csv(out / "training_table_curves.csv")
    assert list(tables.pc1_pc2) == [0.2, 0.4, 0.6, 0.8] and set(tables.recipe) == {six}
    assert (tables.n_positions == 32).all() and (tables.width == 24).all()
    assert 0.0 < tables.control_pc1_pc2.iloc[0] < 0.4  # 32 x 24 Gaussian tables: far from one direction
    assert (out / "by_recipe_tables.png").is_file() and (out / "by_recipe_tables.json").is_file()
    assert zoo_curves.main(["--zoo", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("zoo_curves: error:")


def test_a_horizon_run_stops_part_way_and_the_ledger_outlives_the_run_folders(tmp_path, monkeypatch, capsys):
    """horizon > tokens: the schedule is planned over the horizon and the run stops at its budget; the table's
    reading is a curve over the validations; the new levers reach the TrainConfig; finished runs are read back
    from --out once their training folders are gone (a later session), and a later invocation with other arms
    keeps them in every output."""
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=80)
    common = ["--corpus", str(corpus), "--tiny", "--seeds", "0", "--tokens", "1500", "--eval-tokens", "400",
              "--eval-sequences", "8", "--max-length", "48", "--threads", "1", "--out", str(tmp_path / "out"),
              "--runs", str(tmp_path / "runs")]
    arm = "dstg:zoo,tokens=3000,horizon=6000,wd=0.01,normed=true,layers=3,beta2=0.95"
    assert main([*common, "--arms", arm]) == 0, capsys.readouterr().err
    run_dir = tmp_path / "runs" / "dstg" / arm.split(":", 1)[1] / "seed0"
    saved = json.loads((run_dir / "train_config.json").read_text())
    assert (saved["weight_decay"], saved["betas"], saved["model"]["n_layers"]) == (0.01, [0.9, 0.95], 3)
    assert saved["model"]["residual_from_normed"] is True
    stop = json.loads((run_dir / "study_stop.json").read_text())
    runs = pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv")
    assert runs.steps.iloc[0] == stop["stop_step"] < runs.schedule_steps.iloc[0] == saved["max_steps"]
    assert 1.6 <= saved["max_steps"] / stop["stop_step"] <= 2.4  # the schedule spans twice the run's tokens
    table = pd.read_csv(tmp_path / "out" / "diagnosis_table_curves.csv")
    assert len(table) >= 2 and table.pc1_pc2.between(0, 1).all() and (table.step.diff().dropna() > 0).all()

    shutil.rmtree(tmp_path / "runs")  # a later session: the training folders are gone, --out is committed
    capsys.readouterr()
    assert main([*common, "--arms", arm, "dstg:zoo", "--resume"]) == 0
    assert "read from" in capsys.readouterr().err
    assert not run_dir.exists()  # read from the ledger, not retrained
    both = pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv")
    assert both.arm.tolist() == [arm.split(":", 1)[1], "zoo"]
    assert both.iloc[0].equals(runs.iloc[0])
    assert main([*common, "--arms", "dstg:zoo,wd=0.05", "--resume"]) == 0  # other arms: the earlier rows stay
    assert pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv").arm.tolist() == [*both.arm, "zoo,wd=0.05"]
    capsys.readouterr()
    assert main([*common, "--arms", "dstg:zoo,horizon=1000"]) == 2
    assert "horizon=1000 is shorter than the run's 1500 tokens" in capsys.readouterr().err


def test_a_document_form_arm_trains_on_its_form(tmp_path, monkeypatch, capsys):
    """The data-form study's arms: the same corpus packed across documents into full windows, beside it whole."""
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=60)
    argv = ["--corpus", str(corpus), "--tiny", "--arms", "dstg:authors", f"dstg:authors,corpus={corpus}@pack=6,windows=true",
            "--seeds", "0", "--tokens", "1500", "--eval-tokens", "800", "--eval-sequences", "8", "--max-length", "48",
            "--threads", "1", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]
    assert main(argv) == 0, capsys.readouterr().err
    runs = pd.read_csv(tmp_path / "out" / "diagnosis_runs.csv").set_index("arm")
    packed = runs.loc[f"authors,corpus={corpus}@pack=6,windows=true"]
    whole = runs.loc["authors"]
    assert packed.ends_inside_window < whole.ends_inside_window  # packed windows run to the window's end
    assert packed.mean_sequence_length > whole.mean_sequence_length
    saved = json.loads((tmp_path / "runs" / "dstg" / f"authors,corpus={corpus}@pack=6,windows=true" / "seed0" /
                        "train_config.json").read_text())
    assert saved["corpus"].endswith("@pack=6") and saved["windows"] is True
