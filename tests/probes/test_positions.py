"""Position probes and the dstg-probe command: targets, controls, the table, the CSV schema, error paths."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny_model, write_synthetic_corpus
from dstg_interp.data import load_corpus, train_tokenizer
from dstg_interp.cli.probe import main
from probes.positions import RESULT_COLUMNS, minimum_documents, probe_positions, shuffle_within_documents

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A synthetic corpus and tiny trained-tokenizer checkpoints of a DSTG and a RoPE model."""
    root = tmp_path_factory.mktemp("probe")
    corpus = write_synthetic_corpus(root / "corpus", n_docs=50)  # 10 held out: intervals defined
    tokenizer = train_tokenizer(load_corpus(str(corpus), progress=False), vocab_size=120)
    paths = {}
    for variant in ("dstg", "rope"):
        model = tiny_model(variant, vocab_size=tokenizer.get_vocab_size(), max_positions=64)
        if variant == "dstg":  # an AP table that is linear in position along one axis
            with torch.no_grad():
                model.ap_embed.weight[:, 0] = torch.linspace(-1, 1, 64)
        model.save(root / variant, tokenizer=tokenizer)
        paths[variant] = root / variant
    return root, corpus, paths


pytestmark = pytest.mark.usefixtures("private_cache")  # DSTG_CACHE in the test's own folder (conftest)


def run_cli(capsys, *args):
    code = main([*map(str, args), "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_shuffle_within_documents_keeps_each_documents_values():
    y = np.arange(12.0)
    groups = np.repeat([3, 1, 2], 4)
    shuffled = shuffle_within_documents(y, groups, seed=0)
    for g in (1, 2, 3):
        assert sorted(shuffled[groups == g]) == sorted(y[groups == g])
    assert not np.array_equal(shuffled, y)


def test_minimum_documents():
    assert minimum_documents(5, 0.2) == 6  # 6 docs -> 1 held out, 5 for the 5 CV folds
    assert minimum_documents(5, 0.5) == 9  # round(4.5) = 4 held out, 5 left


def test_probe_positions_table_and_controls(setup, tmp_path):
    root, corpus, paths = setup
    table = probe_positions(str(paths["dstg"]), task="token", corpus=str(corpus), n_boot=200, store_root=tmp_path / "stores",
                            progress=False, model_name="dstg-tiny")
    assert list(table.columns) == RESULT_COLUMNS
    assert set(table.subspace) == {"ap", "sem", "full"} and sorted(set(table.layer)) == [0, 1, 2]
    layer0_ap = table[(table.layer == 0) & (table.subspace == "ap")].iloc[0]
    # layer 0 of the AP stream is the position table itself, linear in position here
    assert layer0_ap.r2 > 0.99 and layer0_ap.ci_low <= layer0_ap.r2 <= layer0_ap.ci_high
    assert layer0_ap.random_init_r2 < 0.5  # a random table of 8 dims cannot encode 60 positions linearly
    layer0_sem = table[(table.layer == 0) & (table.subspace == "sem")].iloc[0]
    assert layer0_sem.r2 < 0.3  # token embeddings alone know no position
    assert (table.control_r2 >= table[["random_init_r2", "shuffled_r2"]].max(axis=1) - 1e-12).all()
    np.testing.assert_allclose(table.selectivity, table.r2 - table.control_r2)
    assert (table.n_docs == 50).all() and (table.n_test_docs == 10).all()


def test_cli_table_csv_and_json(setup, tmp_path, capsys):
    root, corpus, paths = setup
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "--model", paths["dstg"], paths["rope"], "--task", "segment", "--corpus", corpus,
                                "--out", out, "--layers", "0,2")
    assert code == 0, err
    assert "held-out R² (segment, sentence)" in stdout
    assert "dstg/ap" in stdout and "rope/full" in stdout
    assert "beyond token position" in stdout and "partial R² | position" in stdout and "position-only R²" in stdout
    results = pd.read_csv(out / "results.csv")
    assert list(results.columns) == RESULT_COLUMNS
    assert len(results) == 2 * 3 + 2 * 1 and set(results.layer) == {0, 2}
    record = json.loads((out / "results.json").read_text())
    assert record["arguments"]["task"] == "segment" and "torch" in record["versions"] and len(record["results"]) == 8
    # one position-only baseline per model (same tokens for every layer x subspace), intervals around each reading
    assert results.groupby("model").position_r2.nunique().eq(1).all() and results.position_r2.notna().all()
    for name in ("position", "partial", "position_selectivity"):
        column = "r2" if name != "position_selectivity" else ""
        value = results[f"{name}_{column}".rstrip("_")]
        assert ((results[f"{name}_ci_low"] <= value + 1e-9) & (value <= results[f"{name}_ci_high"] + 1e-9)).all()


def test_cli_paragraph_intra(setup, tmp_path, capsys):
    root, corpus, paths = setup
    code, stdout, err = run_cli(capsys, "--model", paths["rope"], "--task", "intra", "--segment", "paragraph", "--corpus", corpus,
                                "--out", tmp_path / "out", "--no-controls")
    assert code == 0, err
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert (results.segment == "paragraph").all() and results.control_r2.isna().all()


def assert_clean_failure(code, err, out, needle):
    assert code == 2
    assert err.startswith("dstg-probe: error:") and err.count("\n") == 1 and needle in err
    assert not (out / "results.csv").exists()


def test_cli_subspace_the_model_lacks(setup, tmp_path, capsys):
    root, corpus, paths = setup
    code, _, err = run_cli(capsys, "--model", paths["rope"], "--task", "segment", "--corpus", corpus, "--subspaces", "ap",
                           "--out", tmp_path)
    assert_clean_failure(code, err, tmp_path, "subspace 'ap' does not exist in a 'rope' model")


def test_cli_corpus_too_small(setup, tmp_path, capsys):
    root, _, paths = setup
    small = write_synthetic_corpus(tmp_path / "small", n_docs=4, seed=1)
    code, _, err = run_cli(capsys, "--model", paths["dstg"], "--task", "segment", "--corpus", small, "--out", tmp_path / "o")
    assert_clean_failure(code, err, tmp_path / "o", "needs at least 6")


def test_cli_constant_target(setup, tmp_path, capsys):
    root, _, paths = setup
    folder = tmp_path / "flat"
    folder.mkdir()
    for i in range(10):  # one sentence per document: sentence index is always 0
        (folder / f"d{i}.txt").write_text(f"The farmer sold a red boat number {i} to the teacher at the gate.")
    code, _, err = run_cli(capsys, "--model", paths["dstg"], "--task", "segment", "--segment", "sentence", "--corpus", folder,
                           "--out", tmp_path / "o")
    assert_clean_failure(code, err, tmp_path / "o", "is constant")
    # one paragraph per document: no window crosses a paragraph break, so paragraph probes have nothing to read
    code, _, err = run_cli(capsys, "--model", paths["dstg"], "--task", "segment", "--segment", "paragraph", "--corpus", folder,
                           "--out", tmp_path / "o")
    assert_clean_failure(code, err, tmp_path / "o", "crosses a paragraph break")
    # one document of several sentences among one-sentence ones: a CV fold of the baseline has no variance
    (folder / "d0.txt").write_text("The farmer sold a boat. The teacher bought it. The gate was red and old.")
    code, _, err = run_cli(capsys, "--model", paths["dstg"], "--task", "segment", "--corpus", folder, "--out", tmp_path / "o")
    assert "only 2 held-out document(s)" in err  # the warning, then the one-line refusal
    assert_clean_failure(code, err.split("\n", 1)[1], tmp_path / "o", "no variance inside fold")


def test_cli_nan_activations(setup, tmp_path, capsys):
    root, corpus, paths = setup
    from dstg_interp import load_model

    broken = load_model(paths["rope"])
    with torch.no_grad():
        broken.blocks[0].mlp.w_out.weight[0, 0] = float("nan")
    broken.save(tmp_path / "broken")
    code, _, err = run_cli(capsys, "--model", tmp_path / "broken", "--task", "token", "--corpus", corpus, "--out", tmp_path / "o",
                           "--no-controls")
    warning, error = err.split("\n", 1)  # the load names the bad weights, the probe then refuses
    assert warning.startswith("dstg-probe: warning:") and "model.safetensors" in warning and "NaN" in warning
    assert_clean_failure(code, error, tmp_path / "o", "NaN")


def test_cli_unknown_task(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "syntax"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'syntax'" in capsys.readouterr().err


def test_cli_missing_model(tmp_path, capsys):
    code, _, err = run_cli(capsys, "--model", tmp_path / "nothing", "--task", "token", "--out", tmp_path / "o")
    assert_clean_failure(code, err, tmp_path / "o", "is not a directory")


def test_cli_holmes_task_on_a_benchmark_folder(setup, tmp_path, capsys):
    from pathlib import Path

    root, _, paths = setup
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "holmes" / "benchmark"
    code, stdout, err = run_cli(capsys, "--model", paths["dstg"], "--task", "holmes", "--benchmark", fixture, "--out", tmp_path / "o")
    assert code == 0, err
    results = pd.read_csv(tmp_path / "o" / "results.csv")
    assert {"model", "dataset", "metric", "score", "area"} <= set(results.columns)
    assert set(results.subspace) == {"ap", "sem", "full"}
    assert "score" in stdout
