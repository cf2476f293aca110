"""The result tables of README.md and figures/REPORT.md are rebuilt from the committed gallery (so they
cannot drift from it), and the Holmes figure script draws from the aggregation's CSVs."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from experiments import fig_holmes, report
from experiments.figure_inputs import FIGURES_DIR
from probes.holmes.aggregate import a_vs_b, dataset_scores, winning_rates
from probes.holmes.registry import register_dataset


@pytest.mark.parametrize("document", [report.README, FIGURES_DIR / report.REPORT_NAME], ids=["README", "REPORT"])
def test_documents_quote_the_committed_gallery(document):
    text = document.read_text()
    assert "<!-- report:" in text
    # every marked block is one the rebuild sees (a name it cannot parse would be left as it is, silently)
    assert len(report.BLOCK.findall(text)) == len(re.findall(r"<!-- report:\S+ -->\n", text))
    assert report.rebuild(text, FIGURES_DIR) == text, (
        f"{document.name} is out of date with figures/; run python -m experiments.report")


def test_the_same_probe_number_everywhere():
    """DSTG's final-layer AP sentence-index R², as README, REPORT.md and claims.json quote it, is the mean over
    the zoo's seeds in probes_over_seeds.csv, and that is the mean of probes.csv's per-seed rows."""
    probes = pd.read_csv(FIGURES_DIR / "probes" / "probes_over_seeds.csv")
    per_seed = pd.read_csv(FIGURES_DIR / "probes" / "probes.csv")
    rows = per_seed[(per_seed.model == "dstg") & (per_seed.subspace == "ap") & (per_seed.task == "segment")
                    & (per_seed.segment == "sentence")]
    assert rows[rows.layer == rows.layer.max()].seed.nunique() == 3
    row = probes[(probes.model == "dstg") & (probes.subspace == "ap") & (probes.task == "segment")
                 & (probes.segment == "sentence")]
    value = row[row.layer == row.layer.max()].r2.iloc[0]
    assert value == pytest.approx(rows[rows.layer == rows.layer.max()].r2.mean())
    claim = {c["id"]: c for c in json.loads((FIGURES_DIR / "claims.json").read_text())}["final_segment_sentence"]
    assert f"dstg ap {value:.2f}" in claim["detail"]  # the claim itself reads the partial R² given token position
    for document in (report.README, FIGURES_DIR / report.REPORT_NAME):
        assert f"| sentence index | {value:.3f} |" in document.read_text()


def test_missing_inputs_and_unknown_tables(tmp_path):
    text = "before\n<!-- report:probes_final -->\nstale | numbers\n<!-- /report:probes_final -->\nafter\n"
    rebuilt = report.rebuild(text, tmp_path)
    assert "stale" not in rebuilt and "not measured: probes/probes.csv" in rebuilt
    assert rebuilt.startswith("before\n") and rebuilt.endswith("after\n")
    with pytest.raises(ValueError, match="unknown report table 'nope'"):
        report.rebuild("<!-- report:nope -->\n<!-- /report:nope -->", tmp_path)


def test_fig_holmes_draws_each_results_folder(tmp_path):
    register_dataset("report-a", "syntax", "bigram shift")
    register_dataset("report-b", "semantics", "tense")
    rows = [dict(model=m, dataset=d, layer=4, subspace="full", control=c, seed=0, metric="f1_macro",
                 score=0.5 if c == "randomization" else s + 0.1 * (d == "report-b"))
            for m, s in (("dstg", 0.8), ("rope", 0.7), ("ap", 0.6)) for d in ("report-a", "report-b")
            for c in ("none", "randomization")]
    scores = dataset_scores(pd.DataFrame(rows))
    folder = tmp_path / "holmes"
    folder.mkdir()
    winning_rates(scores).to_csv(folder / "winning_rates.csv", index=False)
    a_vs_b(scores, "dstg", ["rope", "ap"]).to_csv(folder / "a_vs_b.csv", index=False)
    scores.to_csv(folder / "scores.csv", index=False)
    config = fig_holmes.HolmesFigureConfig(results=[folder, tmp_path / "empty"])
    assert fig_holmes.run(config) == "ok"
    for stem in ("holmes_areas", "holmes_a_vs_b", "holmes_scores"):
        assert all((folder / f"{stem}.{kind}").stat().st_size > 100 for kind in ("png", "pdf", "json"))
    saved = json.loads((folder / "figure_config.json").read_text())
    assert saved["script"] == "experiments/fig_holmes.py" and saved["out"] == str(folder)
    assert not (tmp_path / "empty").exists()
    assert fig_holmes.run(fig_holmes.HolmesFigureConfig(results=[tmp_path / "empty"])).startswith("skipped")
    # --out: the figures go there, the results folder keeps only its tables
    fresh = tmp_path / "fresh"
    shutil.copytree(folder, fresh, ignore=shutil.ignore_patterns("holmes_*", "figure_config.json"))
    assert fig_holmes.main(["--results", str(fresh), "--out", str(tmp_path / "figs")]) == "ok"
    assert (tmp_path / "figs" / "holmes_areas.png").stat().st_size > 100
    assert not list(fresh.glob("holmes_*")) and not (fresh / "figure_config.json").exists()


def test_every_committed_markdown_table_is_rectangular():
    """Every row of every table in the README, the docs, the benchmarks and the gallery has its header's number of
    cells (a ragged row, e.g. a 5-layer model under a 7-layer header, or a bare | inside code, breaks the table)."""
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *(root / "docs").rglob("*.md"), *(root / "figures").rglob("*.md"),
             *(root / "benchmarks").rglob("*.md")]
    ragged = []
    for page in pages:
        width = None
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if not line.startswith("|"):
                width = None
                continue
            cells = len(re.split(r"(?<!\\)\|", line.strip())) - 2
            width = cells if width is None else width
            if cells != width:
                ragged.append(f"{page.relative_to(root)}:{number}: {cells} cells under a {width}-cell header")
    assert len(pages) > 5 and not ragged, ragged


def _heldout(gains: dict[str, list[float]], n_tokens: int = 10_000, most_frequent: float = 0.05) -> pd.DataFrame:
    """A held-out table (``zoo_heldout.heldout_table``'s columns) with the given gains in points per seed."""
    rows = [dict(variant=variant, seed=seed, corpus="en-mix", accuracy=most_frequent + gain / 100,
                 most_frequent_accuracy=most_frequent, n_tokens=n_tokens, gain_points=gain)
            for variant, seeds in gains.items() for seed, gain in enumerate(seeds)]
    return pd.DataFrame(rows)


def test_zoo_targets_verdicts_and_their_noise():
    from experiments.zoo_heldout import zoo_targets

    targets = zoo_targets(_heldout({"dstg": [12.0, 12.4, 11.6], "rope": [13.0, 13.2, 12.8], "ap": [9.0, 7.9, 8.5],
                                    "rp": [10.0, 10.0, 10.0]}))
    by = {(t.target, t.variant): t for t in targets.itertuples()}
    # lowest seed: AP's 7.9 misses +8, but its interval (sampling error of 10,000 masked tokens) straddles it
    ap = by[("gain, every seed", "ap")]
    assert ap.value == pytest.approx(7.9) and not ap.met and not ap.outside_noise and ap.low < 8 < ap.high
    assert by[("gain, every seed", "dstg")].met and by[("gain, every seed", "dstg")].outside_noise
    # DSTG's mean 12.0 against the best baseline's (RoPE, 13.0): -1.0 >= -2, clear of the noise of three seeds each
    gap = by[("DSTG minus best baseline", "dstg")]
    assert gap.compared_with == "rope" and gap.value == pytest.approx(-1.0) and gap.met and gap.outside_noise
    assert gap.high - gap.value == pytest.approx(1.96 * (0.4 ** 2 / 3 + 0.2 ** 2 / 3) ** 0.5)
    # AP's sd 0.55 <= 1, but three seeds cannot tell: the chi-square interval of an sd reaches past 1
    sd = by[("AP-NeoBERT seed sd", "ap")]
    assert -sd.value == pytest.approx(pd.Series([9.0, 7.9, 8.5]).std()) and sd.met and not sd.outside_noise
    # one seed: no interval for the gap, no sd at all
    single = zoo_targets(_heldout({"dstg": [12.0], "rope": [20.0], "ap": [9.0]}))
    assert "AP-NeoBERT seed sd" not in set(single.target)
    one_gap = single[single.target == "DSTG minus best baseline"].iloc[0]
    assert one_gap.value == pytest.approx(-8.0) and not one_gap.met and not one_gap.outside_noise
    # the report's table reads the same function on the committed gallery
    text = report.zoo_targets(FIGURES_DIR)
    assert "| en-mix | DSTG minus best baseline | DSTG |" in text and "| AP-NeoBERT seed sd |" in text
