"""Small things a researcher meets in the first hour: a run folder where its checkpoint is meant."""

from conftest import tiny_model
from dstg_interp import load_model, open_encoder


def test_a_run_folder_loads_its_checkpoint(tmp_path):
    tiny_model("rope").save(tmp_path / "mine" / "checkpoint")
    assert load_model(tmp_path / "mine").config.variant == "rope"
    assert open_encoder(str(tmp_path / "mine")).name == "mine"
