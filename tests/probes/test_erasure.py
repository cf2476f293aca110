"""Position erasure: known answers on a planted store, both LEACE routes agree, edits inside the forward pass,
the study on a tiny model, and dstg-erase's bad input (exit 2, nothing written)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from reliability_setup import assert_one_line_error, run_main
from synthetic_store import planted_store

from dstg_interp.cli import flags
from dstg_interp.cli.config_args import config_from_args
from dstg_interp.cli.erase import EraseCommand, build_parser
from dstg_interp.cli.erase import main as erase_main
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.edits import edit_states
from dstg_interp.store import extract
from dstg_interp.tiny_zoo import tiny_zoo
from probes.erasure import (
    ErasureError,
    LinearEraser,
    fit_eraser,
    fit_erasers,
    fit_leace,
    position_features,
    random_eraser,
)
from probes.erasure_effects import ErasureConfig, erasing, measure_erasure
from probes.ridge import RidgeProbe

torch.set_num_threads(1)


def held_out_r2(store, X, column, seed=0):
    """R² of a ridge probe of ``column`` trained on half the documents, scored on the other half."""
    y = store.labels[column].to_numpy().astype(float)
    docs = store.labels.doc_index.to_numpy()
    train, test = docs % 2 == 0, docs % 2 == 1
    predicted = RidgeProbe().fit(X[train], y[train], groups=docs[train]).predict(X[test])
    return 1 - ((y[test] - predicted) ** 2).sum() / ((y[test] - y[test].mean()) ** 2).sum()


# --- known answers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["leace", "inlp"])
def test_erasure_brings_the_planted_target_to_chance_and_keeps_the_orthogonal_one(tmp_path, method):
    store, u, _ = planted_store(tmp_path / "planted")
    X = np.asarray(store.states(1, "full"), dtype=np.float64)
    assert held_out_r2(store, X, "token_position") > 0.85 and held_out_r2(store, X, "sentence_index") > 0.85
    eraser = fit_eraser(store, 1, "full", method=method, encoding="linear")
    erased = eraser(X).astype(np.float32)
    assert held_out_r2(store, erased, "token_position") < 0.02  # chance: R² of the mean is 0
    assert held_out_r2(store, erased, "sentence_index") > 0.85  # the orthogonal target is intact
    assert eraser.rank == 1 and abs(np.linalg.svd(eraser.right)[2][0] @ u) > 0.99  # it removed u, nothing else


def test_a_random_eraser_of_the_same_rank_leaves_position_readable(tmp_path):
    store, _, _ = planted_store(tmp_path / "planted")
    X = np.asarray(store.states(1, "full"), dtype=np.float64)
    eraser = random_eraser(X.mean(axis=0), rank=1, seed=3)
    assert held_out_r2(store, eraser(X), "token_position") > 0.5


def test_the_package_and_the_closed_form_give_the_same_leace(tmp_path):
    store, _, _ = planted_store(tmp_path / "planted")
    X = np.asarray(store.states(1, "full"), dtype=np.float64)
    Z = position_features(store.labels.token_position, "dct", 4)
    package, used = fit_leace(X, Z, backend="concept-erasure")
    closed, _ = fit_leace(X, Z, backend="closed-form")
    assert used == "concept-erasure" and package.rank == closed.rank >= 1
    np.testing.assert_allclose(package(X), closed(X), atol=1e-9)


def test_a_saved_eraser_loads_back_and_a_foreign_file_is_refused(tmp_path):
    store, _, _ = planted_store(tmp_path / "planted")
    eraser = fit_eraser(store, 1, "full")
    loaded = LinearEraser.load(eraser.save(tmp_path / "eraser"))
    assert loaded.identity == eraser.identity and loaded.rank == eraser.rank
    X = np.asarray(store.states(1, "full"))
    np.testing.assert_allclose(loaded(X), eraser(X))
    (tmp_path / "eraser" / "eraser.json").write_text(json.dumps({"width": 10**9, "rank": 1, "method": "leace"}))
    with pytest.raises(ErasureError, match="not a valid eraser"):
        LinearEraser.load(tmp_path / "eraser")


def test_a_missing_layer_subspace_or_method_is_one_clear_error(tmp_path):
    store, _, _ = planted_store(tmp_path / "planted")
    with pytest.raises(ErasureError, match=r"layer\(s\) \[3\] are not in the store"):
        fit_eraser(store, 3, "full")
    with pytest.raises(ErasureError, match="subspace 'ap' is not in the store"):
        fit_eraser(store, 1, "ap")
    with pytest.raises(ErasureError, match="unknown erasure method"):
        fit_erasers(np.zeros((5, 2)), np.arange(5.0), np.arange(5), ("amnesia",))


# --- inside the forward pass ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    models, documents = tiny_zoo(["dstg", "rope"], n_docs=36)
    stores = {name: extract(open_encoder(model), documents[:24], tmp_path_factory.mktemp(name) / "store",
                            progress=False, max_length=48) for name, model in models.items()}
    return models, documents, stores


@pytest.mark.parametrize("subspace", ["full", "ap"])
def test_an_identity_edit_changes_nothing_and_a_joint_edit_reaches_both_streams(tiny, subspace):
    models, _, _ = tiny
    encoder = open_encoder(models["dstg"])
    tokens = torch.randint(5, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    clean = encoder.mlm_logits(tokens, mask)
    for layer in (0, 1, "final"):
        with edit_states(encoder, layer, subspace, lambda x: x.clone()):
            assert torch.equal(encoder.mlm_logits(tokens, mask), clean)
    with edit_states(encoder, 1, "full", lambda x: torch.cat([x[..., :24], torch.zeros_like(x[..., 24:])], -1)):
        zero_ap_joint = encoder.mlm_logits(tokens, mask)
    with edit_states(encoder, 1, "ap", torch.zeros_like):
        zero_ap = encoder.mlm_logits(tokens, mask)
    assert torch.allclose(zero_ap_joint, zero_ap) and not torch.allclose(zero_ap, clean)


def test_erasing_the_last_ap_state_costs_dstg_nothing(tiny):
    """The MLM head reads the semantic stream only: erasing position from the last AP state cannot change the loss."""
    models, documents, stores = tiny
    config = ErasureConfig(layers=[2], subspaces=["ap", "sem"], methods=("leace", "random"), n_docs=8, max_tokens=1500,
                           n_boot=20, attention_sequences=4)
    result = measure_erasure(open_encoder(models["dstg"]), stores["dstg"], documents[24:], config)
    table = result.table.set_index(["subspace", "method"])
    assert (table.loc["ap", "loss_increase"] == 0).all() and (table.loc["ap", "output_change"] < 1e-12).all()
    assert table.loc[("ap", "leace"), "r2_after"] < 0.05 < table.loc[("ap", "leace"), "r2_before"]
    assert (table.loc["sem", "output_change"] > 0).all()
    assert np.isnan(table.attention_js).all()  # layer 2 is the last block's output: no block reads it


def test_erasing_sentence_index_brings_its_probe_to_the_position_only_baseline_or_below(tiny):
    models, documents, stores = tiny
    config = ErasureConfig(layers=[1], subspaces=["full"], methods=("leace",), target="sentence_index", n_docs=4,
                           max_tokens=1500, n_boot=20, attention_sequences=2)
    row = measure_erasure(open_encoder(models["rope"]), stores["rope"], documents[24:], config).table.iloc[0]
    assert row.position_r2 > 0.3  # a later token sits in a later sentence
    assert row.r2_after <= min(row.position_r2, 0.02)


def test_an_eraser_or_store_of_another_model_is_refused(tiny):
    models, documents, stores = tiny
    eraser = fit_eraser(stores["rope"], 1, "full")
    with pytest.raises(ErasureError, match="fitted on a store of another model"), \
            erasing(open_encoder(models["dstg"]), eraser):
        pass
    with pytest.raises(ErasureError, match="extracted from another model"):
        measure_erasure(open_encoder(models["dstg"]), stores["rope"], documents[24:], ErasureConfig(n_docs=2))
    with pytest.raises(ErasureError, match="are in the store the erasers are fitted on"):
        measure_erasure(open_encoder(models["rope"]), stores["rope"], documents[:30], ErasureConfig(n_docs=2))


# --- the command ------------------------------------------------------------------------------------
def test_dstg_erase_uses_the_shared_flag_words():
    for where, text in flags.shared_help(build_parser()).items():
        flag = where.split()[-1]
        assert text == flags.HELP[flag] or text.startswith(flags.HELP[flag]), (where, text)


def test_dstg_erase_bad_input_is_one_line_exit_2_and_nothing_written(tiny, tmp_path, capsys):
    models, _, stores = tiny
    folder = tmp_path / "rope"
    models["rope"].save(folder, tokenizer=models["rope"].tokenizer)
    out = tmp_path / "out"
    cases = [
        (["--model", folder, "--store", stores["dstg"].directory], "extracted from another model"),
        (["--model", folder, "--store", stores["rope"].directory, "--layers", "1", "--subspaces", "ap"], "subspace 'ap'"),
        (["--model", folder, "--methods", "leace,lasso"], "unknown erasure method(s) ['lasso']"),
        (["--model", folder, "--test-fraction", "1.5"], "test_fraction must be in (0, 1)"),
        (["--model", folder, "--model", "rope"], "dstg-erase takes one --model"),
    ]
    for argv, message in cases:
        code, _, err = run_main(capsys, erase_main, *argv, "--out", out, "--quiet")
        assert_one_line_error(code, err, message, prog="dstg-erase")
        assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = run_main(capsys, erase_main, "--model", folder, "--store", stores["rope"].directory, "--out", out)
    assert_one_line_error(code, err, "not empty and not an earlier dstg-erase result", prog="dstg-erase")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_dstg_erase_writes_its_tables_and_replaces_only_its_own(tiny, tmp_path, capsys, monkeypatch):
    models, documents, _ = tiny
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "dstg"
    models["dstg"].save(folder, tokenizer=models["dstg"].tokenizer)
    corpus = tmp_path / "corpus.jsonl"
    paragraphs = ["\n\n".join(" ".join(sentences) for sentences in doc.paragraphs) for doc in documents]
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(paragraphs)))
    out = tmp_path / "out"
    argv = ["--model", folder, "--corpus", corpus, "--layers", "last", "--subspaces", "ap", "--methods", "leace,random",
            "--n-docs", "4", "--max-tokens", "1000", "--save-erasers", "--out", out, "--quiet"]
    for _ in range(2):  # the second run replaces the first one's folder
        code, printed, err = run_main(capsys, erase_main, *argv)
        assert code == 0, err
    table = pd.read_csv(out / "results.csv")
    assert list(table.method) == ["leace", "random"] and set(table.layer) == {2} and (table.loss_increase == 0).all()
    assert json.loads((out / "results.json").read_text())["command"] == "dstg-erase"
    assert LinearEraser.load(out / "erasers" / "layer2-ap-leace").identity["subspace"] == "ap"
    saved = EraseCommand.from_json(out / "config.json")  # the config the flags made, saved beside the tables
    assert saved == config_from_args(EraseCommand, build_parser().parse_args([str(a) for a in argv]))
    assert saved.erasure.methods == ("leace", "random") and saved.erasure.layers == ["last"] and not saved.progress
    assert json.loads((out / "results.json").read_text())["config"] == saved.erasure.to_dict()
    assert set(table.model) == {"dstg"} and printed.startswith("dstg: erasing token_position")  # the folder's name
    code, printed, err = run_main(capsys, erase_main, *argv, "--name", "DSTG-mine")  # --name: the table and the record
    assert code == 0, err
    assert set(pd.read_csv(out / "results.csv").model) == {"DSTG-mine"} and printed.startswith("DSTG-mine: erasing")
    assert json.loads((out / "results.json").read_text())["model_name"] == "DSTG-mine"
