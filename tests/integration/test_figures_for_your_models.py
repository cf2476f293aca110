"""Every figure script on a researcher's own models (``--model`` / ``--name``): a mixed list -- a tiny DSTG
checkpoint folder, the authors' formats and a tiny Hugging Face encoder -- drawn under the names given, what
does not apply said in one line, and what cannot be drawn at all refused in one line (exit 2, nothing written).

The models are ``tests/your_models.py``'s (docs/your-models.md lays out the same), on the synthetic corpus
(``--tiny``) with the studies cut to a few documents: each script runs in seconds to a minute on 2 cores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from dstg_interp.tiny_zoo import tiny_documents
from experiments import (fig_ap_manifold, fig_decomposition, fig_erasure, fig_extrapolation, fig_geometry, fig_heads,
                         fig_interventions, fig_invariance, fig_logit_lens, fig_patching, fig_probes, fig_rope_bands,
                         holmes_suite)
from experiments.figure_inputs import run_as_command
from hf_writers import write_tiny_bert, write_tiny_rotary
from your_models import POSITIONS, write_your_models

torch.set_num_threads(1)
FIXTURE_BENCHMARK = Path(__file__).resolve().parents[1] / "fixtures" / "holmes" / "benchmark"
NAMES = ["mine", "PosNeoBERT", "MiniLM-like"]  # a DSTG of one's own, the authors' DSTG, an HF encoder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("your-models")
    return write_your_models(root / "models"), root


def run(script, prog: str, argv: list[str]) -> int:
    return run_as_command(lambda: script.main(argv), prog)


def mixed(models, out, *extra, names=NAMES, folders=("tiny-dstg", "posneobert-dstg", "tiny-bert")) -> list[str]:
    folders_of, root = models
    return ["--tiny", "--model", *[str(folders_of[f]) for f in folders], "--name", *names, "--out", str(out),
            "--store-root", str(root / "stores"), "--quiet", *extra]


def test_probes_name_every_model_of_the_list(models, tmp_path):
    out = tmp_path / "probes"
    assert run(fig_probes, "fig_probes", mixed(models, out, "--n-boot", "10", "--max-tokens", "1500")) == 0
    probes = pd.read_csv(out / "probes.csv")
    assert list(dict.fromkeys(probes.model)) == NAMES and set(probes.seed) == {0}
    assert set(probes[probes.model == "PosNeoBERT"].subspace) == {"ap", "sem", "full"}  # DSTG's streams
    assert set(probes[probes.model == "MiniLM-like"].subspace) == {"full"}  # entangled: the whole state only
    assert set(pd.read_csv(out / "probes_over_seeds.csv").model) == set(NAMES)
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"][0].endswith("tiny-dstg") and saved["name"] == NAMES
    assert "no AP / semantic split" in saved["inputs"]["notes"]["MiniLM-like"]
    figure = json.loads((out / "r2_by_layer.json").read_text())
    assert "PosNeoBERT" in json.dumps(figure) and "DSTG-NeoBERT" not in json.dumps(figure)  # never a slot's name


def test_heads_leave_out_the_hf_encoder_in_one_line(models, tmp_path, capsys):
    out = tmp_path / "heads"
    argv = [a for a in mixed(models, out) if a != "--quiet"]
    assert run(fig_heads, "fig_heads", argv) == 0
    heads = pd.read_csv(out / "heads.csv")
    assert list(dict.fromkeys(heads.model)) == ["mine", "PosNeoBERT"]
    assert set(json.loads((out / "summary.json").read_text())["models"]) == {"mine", "PosNeoBERT"}
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[fig_heads]")]
    assert said == ["[fig_heads] MiniLM-like: a Hugging Face encoder exposes its attention patterns only, no logit "
                    "terms: no head classification here (dstg-figures geometry classes its heads by the position / "
                    "context split of their q.k)"]


def test_ap_manifold_titles_tables_by_model_name(models, tmp_path, capsys):
    out = tmp_path / "ap_manifold"
    argv = mixed(models, out, "--control-draws", "2", "--projections", "2",
                 folders=("tiny-dstg", "posneobert-dstg", "neobert-hf", "tiny-bert"),
                 names=["mine", "PosNeoBERT", "NeoBERT", "MiniLM-like"])
    assert run(fig_ap_manifold, "fig_ap_manifold", [a for a in argv if a != "--quiet"]) == 0
    spectra = pd.read_csv(out / "spectra.csv")
    assert set(spectra[spectra.source == "learned table"].name) == {
        "mine AP table", "PosNeoBERT AP table", "MiniLM-like position table (entangled)"}
    layers = spectra[spectra.source == "layer states"]
    assert set(layers.model) == {"mine", "PosNeoBERT", "NeoBERT", "MiniLM-like"}
    err = capsys.readouterr().err
    assert "[fig_ap_manifold] NeoBERT: no learned position table" in err and "position basis of its hidden states" in err
    config = json.loads((out / "config.json").read_text())
    assert set(config["notes"]) == {"NeoBERT"} and set(config["stream_notes"]) == {"NeoBERT", "MiniLM-like"}


def test_interventions_on_every_model_with_a_position_state(models, tmp_path, capsys):
    out = tmp_path / "interventions"
    argv = mixed(models, out, "--n-sequences", "4", folders=("tiny-dstg", "posneobert-dstg-encoder", "neobert-hf", "tiny-bert"),
                 names=["mine", "PosNeoBERT-encoder", "NeoBERT", "MiniLM-like"])
    assert run(fig_interventions, "fig_interventions", [a for a in argv if a != "--quiet"]) == 0
    table = pd.read_csv(out / "interventions.csv")
    assert list(dict.fromkeys(table.model)) == ["mine", "PosNeoBERT-encoder", "MiniLM-like"]
    assert table[table.model == "mine"].mlm_kl.notna().all()  # an MLM head: KL measured
    assert table[table.model != "mine"].mlm_kl.isna().all() and table.output_change.notna().all()
    err = capsys.readouterr().err
    assert "[fig_interventions] NeoBERT: no absolute-position state" in err
    assert "[fig_interventions] PosNeoBERT-encoder: no MLM head" in err and "[fig_interventions] MiniLM-like: no MLM head" in err


def test_erasure_names_every_model(models, tmp_path):
    out = tmp_path / "erasure"
    assert run(fig_erasure, "fig_erasure", mixed(models, out)) == 0
    table = pd.read_csv(out / "erasure.csv")
    assert list(dict.fromkeys(table.model)) == NAMES
    assert table[table.model == "MiniLM-like"].loss_increase.isna().all()  # no MLM loss for an HF encoder here


def test_extrapolation_arms_of_our_models(models, tmp_path):
    out = tmp_path / "extrapolation"
    argv = mixed(models, out, "--factors", "2", "--max-windows", "16", "--n-draws", "1", "--max-tokens", "1500",
                 folders=("tiny-dstg", "neobert-hf", "tiny-bert"), names=["mine", "NeoBERT", "MiniLM-like"])
    assert run(fig_extrapolation, "fig_extrapolation", argv) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert set(zip(summary.model, summary.method)) == {("mine", m) for m in ("chunked", "curve", "repeat", "stretch")} \
        | {("NeoBERT", "chunked"), ("NeoBERT", "native")}


def test_invariance_names_every_model(models, tmp_path, capsys):
    out = tmp_path / "invariance"
    assert run(fig_invariance, "fig_invariance", [a for a in mixed(models, out) if a != "--quiet"]) == 0
    invariance = pd.read_csv(out / "invariance.csv")
    assert list(dict.fromkeys(invariance.model)) == NAMES
    assert "[fig_invariance] passages: 16-21 tokens" in capsys.readouterr().err  # cut to the 32 positions


def test_holmes_suite_takes_a_model_list(models, tmp_path):
    suite = tmp_path / "suite"
    for dataset in ("fx-sentence", "fx-tokens"):  # two datasets of the Holmes-format fixtures, as a built suite
        shutil.copytree(FIXTURE_BENCHMARK / dataset, suite / dataset)
    (suite / "suite.json").write_text("{}")
    out = tmp_path / "holmes"
    folders = models[0]
    argv = ["--model", str(folders["tiny-dstg"]), str(folders["tiny-bert"]), "--name", "mine", "MiniLM-like",
            "--suite-dir", str(suite), "--out", str(out)]
    assert run(holmes_suite, "holmes_suite", argv) == 0
    assert set(pd.read_csv(out / "results.csv").model) == {"mine", "MiniLM-like"}
    assert (out / "holmes_areas.png").is_file()


def test_patching_and_the_lens_read_every_masked_lm_of_the_list(models, tmp_path, capsys):
    folders, root = models
    bert_mlm = tmp_path / "tiny-bert-mlm"  # an HF masked LM (BertForMaskedLM): the HF path of both figures
    write_tiny_bert(bert_mlm, tiny_documents(40)[:20], mlm_head=True, max_positions=POSITIONS)
    names = ["mine", "PosNeoBERT", "BERT-MLM", "MiniLM-like"]
    argv = ["--tiny", "--model", str(folders["tiny-dstg"]), str(folders["posneobert-dstg"]), str(bert_mlm),
            str(folders["tiny-bert"]), "--name", *names, "--store-root", str(root / "stores")]
    assert run(fig_patching, "fig_patching", argv + ["--out", str(tmp_path / "patching")]) == 0
    patching = pd.read_csv(tmp_path / "patching" / "patching.csv")
    assert list(dict.fromkeys(patching.model)) == names[:3]  # MiniLM-like has no MLM head
    assert set(patching[patching.model == "BERT-MLM"].subspace) == {"full"}
    assert set(pd.read_csv(tmp_path / "patching" / "heads.csv").model) == {"mine", "PosNeoBERT"}  # no hook_z in HF
    offset = patching[(patching.model == "PosNeoBERT") & (patching.corruption == "offset")]
    assert len(offset) > 0  # 32 positions: the offset cut to fit, not refused
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[fig_patching]")]
    assert "[fig_patching] MiniLM-like: no masked-LM head: nothing to score" in said
    assert "[fig_patching] BERT-MLM: an HF encoder: no per-head patching (no hook_z)" in said
    assert "[fig_patching] PosNeoBERT: 32 positions: offset 8" in said

    assert run(fig_logit_lens, "fig_logit_lens", argv + ["--out", str(tmp_path / "lens")]) == 0
    lens = pd.read_csv(tmp_path / "lens" / "logit_lens.csv")
    assert list(dict.fromkeys(lens.model)) == names[:3]
    trained = lens[lens.control == "trained"]
    last = trained[trained.layer == trained.groupby(["model", "subspace"]).layer.transform("max")]
    assert (last.kl_to_final.abs() < 1e-5).all() and (last.top1_agreement == 1.0).all()  # the lens's known answer
    assert "[fig_logit_lens] MiniLM-like: no masked-LM head: nothing to score" in capsys.readouterr().err
    assert json.loads((tmp_path / "lens" / "config.json").read_text())["notes"] == {
        "MiniLM-like": "no masked-LM head: nothing to score"}


def test_rope_bands_read_the_rotary_models_of_the_list(models, tmp_path, capsys):
    folders, root = models
    out = tmp_path / "rope_bands"
    argv = ["--tiny", "--model", str(folders["neobert-hf"]), str(folders["tiny-dstg"]), "--name", "NeoBERT", "mine",
            "--out", str(out), "--store-root", str(root / "stores")]
    assert run(fig_rope_bands, "fig_rope_bands", argv) == 0
    heads = pd.read_csv(out / "heads.csv")
    assert set(heads.model) == {"NeoBERT", "NeoBERT-random init"} and heads.high_share.between(0, 1).all()
    assert "[fig_rope_bands] mine: no rotary heads: no frequency-band split" in capsys.readouterr().err


def test_geometry_reads_every_model_of_the_list_and_says_which_has_no_table(models, tmp_path, capsys):
    """A DSTG checkpoint, an HF BERT (its learned table) and the authors' rotary NeoBERT (no table: one line)."""
    folders, root = models
    out = tmp_path / "geometry"
    argv = ["--tiny", "--model", str(folders["tiny-dstg"]), str(folders["tiny-bert"]), str(folders["neobert-hf"]),
            "--name", "mine", "MiniLM-like", "NeoBERT", "--out", str(out), "--store-root", str(root / "stores"),
            "--stress-draws", "3"]
    assert run(fig_geometry, "fig_geometry", argv) == 0
    table = pd.read_csv(out / "geometry.csv", keep_default_na=False, na_values=[""])
    tables = table[table.source == "table"].set_index("model")
    assert tables.applies.to_dict() == {"mine": True, "MiniLM-like": True, "NeoBERT": False}
    assert tables.n_positions["MiniLM-like"] == POSITIONS and not pd.isna(tables.mds_stress["MiniLM-like"])
    layers = table[table.source == "layer"]
    assert set(layers.model) == {"mine", "MiniLM-like", "NeoBERT"} and layers.applies.all()
    assert set(layers[layers.model == "mine"].subspace) == {"ap", "sem", "full"}
    err = capsys.readouterr().err
    assert "[fig_geometry] NeoBERT table: no table row:" in err
    # head classes for every model of the list: the HF BERT's and the rotary NeoBERT's from the split of their q.k
    first = layers[(layers.subspace == "full") & (layers.layer == 0)].set_index("model")
    assert first.n_heads.notna().all() and first.heads_note.isna().all()
    assert set(pd.read_csv(out / "head_split.csv").model) == {"mine", "MiniLM-like", "NeoBERT"}
    # a model of 32 positions cannot hold the filler and a document: a row that says so, and one line
    bias = pd.read_csv(out / "start_end.csv", keep_default_na=False, na_values=[""]).set_index("model")
    assert set(bias.index) == {"mine", "MiniLM-like", "NeoBERT"} and not bias.applies["mine"]
    assert f"[fig_geometry] mine start-vs-end: {bias.notes['mine']}" in err


def test_rope_bands_read_a_hugging_face_modernbert_and_leave_another_rotary_family_out(tmp_path, capsys):
    """A tiny random ModernBERT (an HF RoPE encoder) is read end to end, its random-init twin beside it; a RoFormer
    (rotary heads, no row in the family table) is left out in one line; alone, it is refused (exit 2, nothing
    written)."""
    documents = tiny_documents(n_docs=6)
    for family in ("modernbert", "roformer"):
        write_tiny_rotary(tmp_path / family, documents, family)
    out = tmp_path / "rope_bands"
    argv = ["--tiny", "--model", str(tmp_path / "modernbert"), str(tmp_path / "roformer"), "--name", "ModernBERT",
            "RoFormer", "--n-sequences", "4", "--out", str(out), "--store-root", str(tmp_path / "stores")]
    assert run(fig_rope_bands, "fig_rope_bands", argv) == 0
    assert {"bands.csv", "heads.csv", "sweep.csv", "band_shares.png", "band_shares.json", "config.json"} <= {
        path.name for path in out.iterdir()}
    heads = pd.read_csv(out / "heads.csv")
    assert set(heads.model) == {"ModernBERT", "ModernBERT-random init"} and len(heads) == 2 * 3 * 4
    assert heads.high_share.between(0, 1).all()
    err = capsys.readouterr().err
    assert "[fig_rope_bands] RoFormer: a Hugging Face RoPE encoder of a family the band split does not read (it reads modernbert)" in err
    alone = tmp_path / "alone"
    argv = ["--tiny", "--model", str(tmp_path / "roformer"), "--out", str(alone), "--store-root", str(tmp_path / "stores")]
    assert run(fig_rope_bands, "fig_rope_bands", argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fig_rope_bands: error: fig_rope_bands needs rotary (RoPE) heads")
    assert "roformer: a Hugging Face RoPE encoder of a family" in err and not alone.exists()


def test_decomposition_names_every_model(models, tmp_path):
    out = tmp_path / "decomposition"
    assert run(fig_decomposition, "fig_decomposition", mixed(models, out)) == 0
    table = pd.read_csv(out / "decomposition.csv")
    assert list(dict.fromkeys(table.model)) == NAMES
    shares = table[[f"share_{part}" for part in ("mean", "position", "context", "residual")]].sum(axis=1)
    assert (shares - 1).abs().max() < 1e-6


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------------
@pytest.mark.parametrize("script, prog, argv, message", [
    (fig_probes, "fig_probes", ["--name", "a", "a"], "--name gives 'a' twice"),
    (fig_probes, "fig_probes", ["--name", "a"], "--name gives 1 name(s) for 2 --model(s)"),
    (holmes_suite, "holmes_suite", ["--name", "a", "a"], "--name gives 'a' twice"),
])
def test_one_name_twice_is_one_line(models, tmp_path, capsys, script, prog, argv, message):
    folders = models[0]
    out = tmp_path / "out"
    code = run(script, prog, ["--model", str(folders["tiny-dstg"]), str(folders["tiny-bert"]), *argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_the_same_model_twice_is_one_line(models, tmp_path, capsys):
    folder = str(models[0]["tiny-dstg"])
    assert run(fig_heads, "fig_heads", ["--model", folder, folder, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--model gives {folder} twice" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("script, prog, folder, needs", [
    (fig_heads, "fig_heads", "tiny-bert", "fig_heads needs separate attention-logit terms"),
    (fig_interventions, "fig_interventions", "neobert-hf", "fig_interventions needs a position state of its own"),
    (fig_extrapolation, "fig_extrapolation", "posneobert-dstg-encoder", "fig_extrapolation needs a model of ours with an MLM head"),
    # issue 40's bad input at the command line: a non-RoPE model to the band split, a model without an MLM head to
    # the lens (and to patching, which scores the MLM output)
    (fig_rope_bands, "fig_rope_bands", "tiny-dstg", "fig_rope_bands needs rotary (RoPE) heads"),
    (fig_rope_bands, "fig_rope_bands", "tiny-bert", "fig_rope_bands needs rotary (RoPE) heads"),
    (fig_logit_lens, "fig_logit_lens", "posneobert-dstg-encoder", "fig_logit_lens needs a masked-LM head"),
    (fig_logit_lens, "fig_logit_lens", "tiny-bert", "fig_logit_lens needs a masked-LM head"),
    (fig_patching, "fig_patching", "tiny-bert", "fig_patching needs a masked-LM head"),
])
def test_a_model_the_figure_cannot_read_is_one_line(models, tmp_path, capsys, script, prog, folder, needs):
    folders, root = models
    out = tmp_path / "out"
    argv = ["--tiny", "--model", str(folders[folder]), "--out", str(out), "--store-root", str(root / "stores")]
    assert run(script, prog, argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"{prog}: error: {needs}"), err
    assert not out.exists()


def test_models_of_two_trained_lengths_are_one_line_for_extrapolation(models, tmp_path, capsys):
    folders, root = models
    out = tmp_path / "out"
    argv = ["--tiny", "--model", "dstg", str(folders["tiny-dstg"]), "--out", str(out)]
    assert run(fig_extrapolation, "fig_extrapolation", argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run it once per length" in err and not out.exists()
