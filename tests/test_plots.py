"""Every figure function writes a non-empty PNG, a PDF and the JSON numbers; bad folders are refused."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny_model
from dstg_interp.heads import head_table
from dstg_interp.plots import (
    FigureOutputError,
    model_color,
    plot_dct_power,
    plot_head_map,
    plot_holmes_areas,
    plot_holmes_counts,
    plot_pc_curves,
    plot_r2_by_layer,
    plot_scree,
    plot_share_scatter,
)
from dstg_interp.spectra import analyze_table, position_table

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def spectra():
    angle = np.pi * np.arange(30) / 30
    arc = np.stack([np.cos(angle), np.sin(angle)], axis=1) @ np.random.default_rng(0).standard_normal((2, 8))
    return [
        analyze_table(arc, name="dstg AP table", n_control_draws=3),
        analyze_table(position_table(tiny_model("ap")), name="ap table", n_control_draws=3),
        analyze_table(np.random.default_rng(1).standard_normal((30, 384)), name="minilm table", n_control_draws=0),
    ]


@pytest.fixture(scope="module")
def heads():
    tokens = torch.randint(5, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    return pd.concat([head_table(tiny_model(v), tokens) for v in ("dstg", "rope", "rp")], ignore_index=True)


@pytest.fixture
def probe_results():
    rows = []
    for model in ("dstg", "ap", "rope"):
        for task, segment in (("token", "sentence"), ("segment", "sentence"), ("intra", "paragraph")):
            for subspace in ("ap", "sem", "full") if model == "dstg" else ("full",):
                for layer in range(3):
                    r2 = 0.2 * layer + (0.3 if subspace == "ap" else 0.1)
                    rows.append(dict(model=model, task=task, segment=segment, layer=layer, subspace=subspace,
                                     r2=r2, ci_low=r2 - 0.05, ci_high=r2 + 0.05))
    return pd.DataFrame(rows)


@pytest.fixture
def holmes_scores():
    areas = ["morphology", "syntax", "semantics", "discourse", "reasoning"]
    return pd.DataFrame([dict(model=m, area=a, phenomenon=f"{a}-{i}", score=0.5 + 0.1 * k + 0.01 * i)
                         for k, m in enumerate(("dstg", "ap", "rope", "rp")) for a in areas for i in range(3)])


@pytest.fixture
def holmes_counts():
    return pd.DataFrame([dict(model_a="dstg", model_b=b, wins=49, ties=3, losses=13) for b in ("rope", "ap", "rp")])


def _check_outputs(paths, folder, stem):
    assert set(paths) == {"png", "pdf", "json"}
    for kind, path in paths.items():
        assert path == folder / f"{stem}.{kind}" and path.stat().st_size > 0
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths["pdf"].read_bytes()[:5] == b"%PDF-"
    numbers = json.loads(paths["json"].read_text())
    assert numbers
    assert not list(folder.glob(".*tmp*"))  # no temporary files left behind
    return numbers


def test_spectrum_figures(spectra, tmp_path):
    folder = tmp_path / "new" / "figures"  # created on demand
    numbers = _check_outputs(plot_scree(spectra, folder, stem="scree"), folder, "scree")
    assert numbers["dstg AP table"]["summary"]["pc1_pc2"] == pytest.approx(1.0)
    numbers = _check_outputs(plot_pc_curves(spectra[:2], folder, stem="curves"), folder, "curves")
    assert len(numbers["ap table"]["curves"]) == 2 * 40
    numbers = _check_outputs(plot_dct_power(spectra[0], folder, stem="dct"), folder, "dct")
    assert numbers["dstg AP table"]["n_low_bins"] == 4


def test_head_figures(heads, tmp_path):
    numbers = _check_outputs(plot_head_map(heads, tmp_path, stem="map"), tmp_path, "map")
    assert len(numbers["heads"]) == len(heads) == 3 * 2 * 4
    assert numbers["heads"][0]["share_content"] is None  # NaN in the table -> null in the JSON
    _check_outputs(plot_share_scatter(heads, tmp_path, stem="shares"), tmp_path, "shares")
    baselines_only = heads[heads.model != "dstg"]
    _check_outputs(plot_share_scatter(baselines_only, tmp_path, stem="shares_baselines"), tmp_path, "shares_baselines")


def test_probe_and_holmes_figures(probe_results, holmes_scores, holmes_counts, tmp_path):
    numbers = _check_outputs(plot_r2_by_layer(probe_results, tmp_path, stem="r2"), tmp_path, "r2")
    assert len(numbers["results"]) == len(probe_results)
    numbers = _check_outputs(plot_holmes_areas(holmes_scores, tmp_path, stem="areas"), tmp_path, "areas")
    assert len(numbers["per_area"]) == 4 * 5
    numbers = _check_outputs(plot_holmes_counts(holmes_counts, tmp_path, stem="counts"), tmp_path, "counts")
    assert numbers["counts"][0]["wins"] == 49


def test_unwritable_folder_gives_a_clear_error(spectra, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(FigureOutputError, match="cannot create the figure folder"):
        plot_scree(spectra, blocker / "figures")


def test_read_only_folder_gives_a_clear_error(spectra, tmp_path, monkeypatch):
    # Permission bits do not stop root (tests may run as root), so the write itself is made to fail
    # the way a read-only folder makes it fail.
    import tempfile

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(FigureOutputError, match="not writable"):
        plot_scree(spectra, tmp_path / "figures")


def test_missing_columns_and_colours(tmp_path):
    with pytest.raises(ValueError, match="lacks the column"):
        plot_r2_by_layer(pd.DataFrame({"model": ["dstg"], "r2": [0.5]}), tmp_path)
    with pytest.raises(ValueError, match="empty"):
        plot_holmes_counts(pd.DataFrame(columns=["model_a", "model_b", "wins", "ties", "losses"]), tmp_path)
    assert model_color("dstg") == model_color("dstg-seed1") != model_color("rope")
    assert model_color("minilm") not in {model_color(m) for m in ("dstg", "rope", "ap", "rp")}
