"""Every registered figure refuses an --out holding files no figure script wrote (round 5: FO1, FO2, FO5, FO6).

The check runs when the script's flags are parsed (``figure_config``), before any model is read, so each case
here is quick; a figure added to ``experiments.figures.FIGURES`` is in this test without a line of its own.
"""

import shutil

import pytest

from experiments.figures import FIGURES
from experiments.figures import main as figures_main
from reliability_setup import assert_one_line_error, run_main


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_keeps_a_users_folder_and_a_model_folder(name, tiny, tmp_path, capsys):
    checkpoint, _ = tiny
    user = tmp_path / "user"
    user.mkdir()
    (user / "config.json").write_text("my notes")
    (user / "logit_lens.csv").write_text("my own numbers")
    model = tmp_path / "model"
    shutil.copytree(checkpoint, model)
    for folder in (user, model):
        before = snapshot(folder)
        code, _, err = run_main(capsys, figures_main, name, "--out", folder)
        assert_one_line_error(code, err, f"--out {folder} holds files no figure script wrote",
                              prog=f"dstg-figures {name}")
        assert snapshot(folder) == before


def test_a_folder_a_figure_wrote_is_written_into_again(tmp_path):
    from experiments.figure_inputs import ScriptConfig, check_figure_out, save_config
    config = ScriptConfig(out=tmp_path / "figs")
    save_config(config, "experiments/fig_example.py")
    (tmp_path / "figs" / "table.csv").write_text("a,b\n")
    check_figure_out(tmp_path / "figs")  # the tool's own folder: no error
    check_figure_out(tmp_path / "absent")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder of figures"):
        check_figure_out(tmp_path / "a-file")


@pytest.mark.parametrize("argv, said", [
    (["patching", "--n-sequences", "-3"], "--n-sequences"),  # PA2: ran on every window but three
    (["patching", "--offset", "-5"], "--offset"),  # PA7: the offset corruption silently dropped
    (["patching", "--n-sequences", "0"], "--n-sequences"),  # PA1: the flag was not named
    # R6-GT1, R6-GT2: a field's minimum above 1 was not enforced (-3 windows ran the figure)
    (["ground-truth", "--tiny", "--n-sequences", "-3"], "--n-sequences: expected an integer >= 4, got -3"),
    (["ground-truth", "--tiny", "--length", "1"], "--length: expected an integer >= 2, got 1"),
    (["ground-truth", "--tiny", "--das-lr", "inf"], "must be finite and > 0, got inf"),  # R6-GT3: a NaN loss later
])
def test_out_of_range_figure_flags_are_refused_naming_the_flag(argv, said, capsys):
    code, _, err = run_main(capsys, figures_main, *argv)
    assert code == 2 and said in err.strip().splitlines()[-1], err


def test_a_window_longer_than_every_document_is_refused_naming_the_flag():
    # PA4: the error was pad_batch's "needs at least one sequence"
    from dstg_interp.encoders import open_encoder
    from dstg_interp.tiny_zoo import tiny_zoo
    from experiments.fig_interventions import windows
    from experiments.figure_inputs import FigureCannotRead
    models, documents = tiny_zoo(("dstg",), n_docs=6)
    encoder = open_encoder(models["dstg"], name="dstg")
    assert windows(encoder, documents, 8, 2)[0].shape == (2, 8)
    with pytest.raises(FigureCannotRead, match="no held-out window of 200 tokens.*lower --length"):
        windows(encoder, documents, 200, 2)  # past the model's 64 positions


def test_a_layer_past_the_model_is_refused_not_clamped(tmp_path):
    """SA3: sae_streams --layers 99 under --tiny was clamped to the last layer and ran."""
    from experiments.sae_streams import main as sae_main
    with pytest.raises(ValueError, match="--layers asked for 99"):
        sae_main(["--tiny", "--layers", "99", "--out", str(tmp_path / "s")])
    assert not (tmp_path / "s").exists()
