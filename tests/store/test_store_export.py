"""Store export to a Hugging Face datasets folder, and the disk-space check before extraction or export."""

import datasets
import numpy as np
import pytest
import torch

from dstg_interp.cli.export import ExportCommand, main as export_main
from dstg_interp.store import StoreError, extract
from dstg_interp.store import export as export_module
from dstg_interp.store.export import export_size, export_store
from dstg_interp.tiny_zoo import tiny_zoo
from reliability_setup import assert_one_line_error, run_main

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    models, documents = tiny_zoo(["dstg"], n_docs=12)
    return extract(models["dstg"], documents, tmp_path_factory.mktemp("export") / "store", progress=False,
                   max_length=40, layers=[1, "final"])


def test_load_from_disk_gives_the_store_s_values(store, tmp_path):
    out = export_store(store, tmp_path / "hf", progress=False)
    table = datasets.load_from_disk(str(out)).with_format("numpy")
    assert len(table) == store.n_tokens
    for layer in (1, "final"):
        for subspace in ("sem", "ap", "full"):
            np.testing.assert_array_equal(table[f"layer_{layer}_{subspace}"], np.asarray(store.states(layer, subspace)))
    labels = store.labels
    for column in ("token_position", "sentence_index", "doc_index", "is_special"):
        np.testing.assert_array_equal(table[column], labels[column].to_numpy())
    assert list(table["doc_id"][:3]) == list(labels.doc_id[:3])
    assert sum(f.stat().st_size for f in out.glob("*.arrow")) <= export_size(store)


def test_a_selection_exports_only_those_columns(store, tmp_path):
    out = export_store(store, tmp_path / "hf", layers=[1], subspaces=["ap"], progress=False)
    columns = datasets.load_from_disk(str(out)).column_names
    assert [c for c in columns if c.startswith("layer_")] == ["layer_1_ap"]
    with pytest.raises(StoreError, match="layer 2 is not in this store"):
        export_store(store, tmp_path / "other", layers=[2], progress=False)
    assert not (tmp_path / "other").exists()


def test_a_non_empty_folder_or_a_small_disk_is_refused_and_nothing_written(store, tmp_path, monkeypatch):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep")
    with pytest.raises(StoreError, match="not an empty folder"):
        export_store(store, taken, progress=False)
    assert [p.name for p in taken.iterdir()] == ["mine.txt"]

    class Usage:
        free = 1000

    monkeypatch.setattr(export_module.shutil, "disk_usage", lambda path: Usage)
    with pytest.raises(StoreError, match="MiB free"):
        export_store(store, tmp_path / "full", progress=False)
    models, documents = tiny_zoo(["dstg"], n_docs=4)
    with pytest.raises(StoreError, match="MiB free"):
        extract(models["dstg"], documents, tmp_path / "store", progress=False, max_length=40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_dstg_export_writes_the_folder_and_refuses_bad_input_with_exit_2(store, tmp_path, capsys):
    code, printed, err = run_main(capsys, export_main, "--store", store.directory, "--out", tmp_path / "hf",
                                  "--layers", "1", "--subspaces", "ap", "--quiet")
    assert code == 0, err
    assert datasets.load_from_disk(str(tmp_path / "hf")).num_rows == store.n_tokens
    saved = ExportCommand.from_json(tmp_path / "hf" / "config.json")  # the flags' config, beside the files
    assert saved == ExportCommand(store=str(store.directory), out=str(tmp_path / "hf"), layers=[1], subspaces=["ap"],
                                  progress=False)
    for argv, message in ((["--store", store.directory, "--out", tmp_path / "hf"], "not an empty folder"),
                          (["--store", store.directory, "--out", tmp_path / "x", "--layers", "2"], "layer 2"),
                          (["--store", tmp_path / "nothing", "--out", tmp_path / "y"], "no such store folder")):
        code, _, err = run_main(capsys, export_main, *argv)
        assert_one_line_error(code, err, message, prog="dstg-export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
