"""The per-stream attention view (dstg_interp.plots.attention_view): what the page carries, the head classes beside
the maps, the one-line refusals, the command; the page in a real browser is tests/integration/test_attention_view_browser.py."""

import base64
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

import dstg_interp
from dstg_interp import open_encoder
from dstg_interp.encoders.hf import load_hf_encoder
from dstg_interp.plots.attention_view import AttentionViewError, attention_view
from dstg_interp.tiny_zoo import tiny_documents
from experiments import fig_attention_view, figures
from hf_writers import write_tiny_bert

TEXT = "The miller mended the green door at dawn."


def payload(fragment: str) -> dict:
    """The JSON the page's script is called with."""
    match = re.search(r"dstgAttentionView\(document\.getElementById\(\"[\w-]+\"\), (\{.*\})\);\n</script>", fragment, re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


def test_dstg_view_carries_every_head_with_its_three_terms_and_class():
    view = attention_view("dstg", TEXT)
    encoder = open_encoder("dstg")
    ids = encoder.tokenizer.encode(TEXT).ids
    assert view.panels == ("pattern", "sem", "ap", "rp")
    assert view.tokens[0] == "[CLS]" and len(view.tokens) == len(ids)
    data = payload(view._repr_html_())
    assert len(data["heads"]) == encoder.n_layers * encoder.n_heads == 24
    assert {h["label"] for h in data["heads"]} <= {"structure", "semantic", "RP", "mixed"}
    assert all(set(h["shares"]) == {"sem", "ap", "rp"} for h in data["heads"])
    # the maps are the encoder's attention, bit for bit through base64 float32
    attention = encoder.attention(torch.tensor([ids]))
    T = len(ids)
    for panel in view.panels:
        maps = np.frombuffer(base64.b64decode(data["maps"][panel]), dtype="<f4").reshape(6, 4, T, T)
        assert np.array_equal(maps[3], attention[3][panel][0].numpy()), panel
    pattern = np.frombuffer(base64.b64decode(data["maps"]["pattern"]), dtype="<f4").reshape(6, 4, T, T)
    assert np.allclose(pattern.sum(-1), 1.0, atol=1e-5)


def test_labels_from_a_study_table_and_a_panel_choice():
    table = pd.DataFrame({"model": ["dstg"] * 2, "seed": [0, 1], "layer": [0, 0], "head": [1, 1],
                          "label": ["structure", "semantic"], "share_sem": [0.1, 0.9], "share_ap": [0.8, 0.05],
                          "share_rp": [0.1, 0.05]})
    view = attention_view("dstg", TEXT, panels=["ap", "pattern"], heads=table)
    data = payload(view.fragment())
    assert data["panels"] == ["ap", "pattern"] and set(data["maps"]) == {"ap", "pattern"}
    labelled = [h for h in data["heads"] if h["label"]]
    assert labelled == [{"layer": 0, "head": 1, "label": "structure", "shares": {"sem": 0.1, "ap": 0.8, "rp": 0.1}}]
    with pytest.raises(AttentionViewError, match="no rows for model 'dstg'"):
        attention_view("dstg", TEXT, heads=table.assign(model="rope"))


@pytest.mark.parametrize("model, panels", [("rope", ("pattern", "content")), ("ap", ("pattern", "content")),
                                           ("rp", ("pattern", "content", "rp"))])
def test_baselines_show_their_own_terms(model, panels):
    view = attention_view(model, TEXT)
    assert view.panels == panels
    assert {h["label"] for h in payload(view.fragment())["heads"]} <= {"positional", "content", "mixed", "RP"}


def test_hf_encoder_shows_its_pattern_without_a_class(tmp_path):
    write_tiny_bert(tmp_path / "bert", tiny_documents(n_docs=8, seed=0))
    view = attention_view(load_hf_encoder(tmp_path / "bert"), "the miller mended the door")
    data = payload(view.to_html())
    assert data["panels"] == ["pattern"] and len(data["heads"]) == 2 * 4
    assert all(h["label"] is None for h in data["heads"])
    with pytest.raises(AttentionViewError, match=r"has no panel 'ap': its attention views are pattern$"):
        attention_view(load_hf_encoder(tmp_path / "bert"), "the door", panels=["ap"])


def test_refusals_are_one_line():
    with pytest.raises(AttentionViewError, match=r"^dstg has no panel 'semantic': its attention views are pattern, sem, ap, rp$"):
        attention_view("dstg", TEXT, panels=["semantic"])
    with pytest.raises(AttentionViewError, match=r"^the text is \d+ tokens; dstg reads at most 128 positions: shorten it$"):
        attention_view("dstg", "the door " * 100)


def test_a_text_with_a_script_end_cannot_break_out_of_the_page():
    view = attention_view("dstg", "</script><script>alert(1)</script> the door")
    page = view.to_html()
    assert page.count("</script>") == 1 and payload(page)["tokens"][0] == "[CLS]"


def test_the_command_writes_the_page_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "view"
    assert figures.main(["attention-view", "--model", "dstg", "--text", TEXT, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["attention_view.html", "config.json"]
    config = json.loads((out / "config.json").read_text())
    assert config["n_blocks"] == 6 and config["n_heads"] == 4 and config["panels"] == ["pattern", "sem", "ap", "rp"]
    assert config["versions"]["dstg_interp"] == dstg_interp.__version__
    assert config["versions"]["torch"] == torch.__version__ and "chromium" not in config["versions"]  # no screenshot
    capsys.readouterr()
    for flags in (["--panels", "xp"], ["--text", "the door " * 100]):
        assert figures.main(["attention-view", "--model", "dstg", "--out", str(tmp_path / "bad"), *flags]) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith("dstg-figures attention-view: error: ") and "\n" not in error
        assert not (tmp_path / "bad").exists()


def test_screenshot_without_chromium_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert figures.main(["attention-view", "--screenshot", "--out", str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err.strip()
    assert "needs chromium on the PATH" in error and "\n" not in error
    assert not (tmp_path / "x").exists()


def test_a_screenshot_chromium_fails_to_draw_leaves_nothing(tmp_path, monkeypatch, capsys):
    """A browser that exits without a PNG: one line, exit 2, and not even the page is left in --out."""
    monkeypatch.setattr(fig_attention_view, "chromium", lambda: "false")  # found, but draws nothing
    out = tmp_path / "view"
    assert figures.main(["attention-view", "--model", "dstg", "--text", TEXT, "--screenshot", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("dstg-figures attention-view: error: chromium wrote no screenshot (exit 1)")
    assert "\n" not in error and not out.exists()
