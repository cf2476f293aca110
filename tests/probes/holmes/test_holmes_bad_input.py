"""Holmes fails fast, in one line: benchmark folders that are files or hold nothing usable, an --out that is a
file, hostile dataset configs skipped with their reason while the run goes on.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import shutil
from pathlib import Path

from dstg_interp.cli.probe import main as probe_main
from dstg_interp.cli.holmes import main as holmes_main
from reliability_setup import FIXTURES, assert_one_line_error, run_main

FIXTURE = FIXTURES / "holmes" / "benchmark"


# --- nonsense values ------------------------------------------------------------------------------
def test_holmes_benchmark_problems(tiny, tmp_path, capsys):
    """#118: a file called 'does not exist'; #119: every dataset malformed gave exit 0 and an empty table;
    #116: --layers was ignored with --task holmes."""
    (tmp_path / "file").write_text("x")
    only_bad = tmp_path / "onlybad"
    only_bad.mkdir()

    shutil.copytree(FIXTURE / "bad-label", only_bad / "bad-label")
    (tmp_path / "empty").mkdir()
    for benchmark, fragment in ((tmp_path / "file", "is a file"), (only_bad, "no dataset could be loaded (1 skipped"),
                                (tmp_path / "empty", "no dataset folders")):
        code, _, err = run_main(capsys, holmes_main, "run", "--holmes-dir", benchmark, "--model", tiny[0],
                                "--out", tmp_path / "o")
        assert_one_line_error(code, err, fragment, prog="dstg-holmes")
    assert not (tmp_path / "o").exists()
    code, _, err = run_main(capsys, probe_main, "--task", "holmes", "--benchmark", FIXTURE, "--model", tiny[0],
                            "--layers", "9", "--out", tmp_path / "p", "--quiet")
    assert_one_line_error(code, err, "layer 9 does not exist in", prog="dstg-probe")  # Encoder.resolve's one wording


def test_holmes_out_is_a_file(tiny, tmp_path, capsys):
    """#124, #128: a full run then FileExistsError; build gave NotADirectoryError."""
    (tmp_path / "plain").write_text("x")
    code, _, err = run_main(capsys, holmes_main, "run", "--holmes-dir", FIXTURE, "--model", tiny[0], "--out", tmp_path / "plain")
    assert_one_line_error(code, err, "is a file", prog="dstg-holmes")
    code, _, err = run_main(capsys, holmes_main, "build", "--out", tmp_path / "plain")
    assert_one_line_error(code, err, "is a file", prog="dstg-holmes")
    assert (tmp_path / "plain").read_text() == "x"


# --- Holmes configs: sizes bounded before allocation, YAML read strictly (N92, N108, N109, N110) ---
GOOD_CONFIG = ("control_task_type: NONE\nnum_inputs: 1\nnum_labels: 2\nnum_probe_folds: 1\n"
               "probe_name: probe-x\nprobe_task_type: SENTENCE\nprobes_samples_path: samples.csv\n")
HOSTILE_CONFIGS = {  # dataset -> (config-none.yaml, what the skip reason must say)
    "huge-num-labels": (GOOD_CONFIG.replace("num_labels: 2", "num_labels: 100000000000"),
                        "key 'num_labels' must be an integer from 1 to 10,000"),
    "dup-keys": (GOOD_CONFIG + "num_labels: 9\n", "key 'num_labels' appears twice"),
    "norway": (GOOD_CONFIG.replace("control_task_type: NONE", "control_task_type: NO"),
               "'NO' (line 1) is a boolean in YAML 1.1"),
    "num-inputs-0": (GOOD_CONFIG.replace("num_inputs: 1", "num_inputs: 0"), "key 'num_inputs' must be an integer from 1 to 2"),
    "num-inputs-2": (GOOD_CONFIG.replace("num_inputs: 1", "num_inputs: 2"), "SENTENCE rows hold 1 sentence(s), got 2"),
    "name-bool": (GOOD_CONFIG.replace("probe_name: probe-x", "probe_name: true"), "key 'probe_name' must be a string"),
}


def hostile_benchmark(root: Path) -> Path:
    for name, (config, _) in HOSTILE_CONFIGS.items():
        shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", root / name)
        (root / name / "config-none.yaml").write_text(config)
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", root / "good")
    return root


def test_hostile_holmes_configs_are_skipped_with_their_reason(tmp_path):
    from probes.holmes.format import load_benchmark

    loaded, skipped = load_benchmark(hostile_benchmark(tmp_path / "bench"))
    assert [d.name for d in loaded] == ["good"]
    reasons = {s.dataset: s.reason for s in skipped}
    assert set(reasons) == set(HOSTILE_CONFIGS)
    for name, (_, needle) in HOSTILE_CONFIGS.items():
        assert needle in reasons[name] and "config-none.yaml" in reasons[name], reasons[name]
    # quoting the word, or a real boolean where none is expected, reads as the user meant
    (tmp_path / "bench" / "norway" / "config-none.yaml").write_text(GOOD_CONFIG.replace("NONE", "'NO'"))
    loaded, _ = load_benchmark(tmp_path / "bench")
    assert "norway" in [d.name for d in loaded]


def test_a_huge_num_labels_skips_one_dataset_and_the_run_goes_on(tiny, tmp_path, capsys):
    """N92: `num_labels: 100000000000` tried to allocate 6.4 TB; the 19 valid datasets were lost with it."""
    from dstg_interp.cli.holmes import main as holmes_main

    checkpoint, _ = tiny
    bench = tmp_path / "bench"
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", bench / "good")
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", bench / "huge")
    (bench / "huge" / "config-none.yaml").write_text(HOSTILE_CONFIGS["huge-num-labels"][0])
    code, out, err = run_main(capsys, holmes_main, "run", "--benchmark", bench, "--model", checkpoint, "--seeds", "0",
                              "--quiet", "--out", tmp_path / "out")
    assert code == 0, err
    assert "skipped: holmes dataset 'huge': config-none.yaml, key 'num_labels' must be an integer from 1 to 10,000" in err
    assert "Traceback" not in err and "1 skipped" in out
    import pandas as pd
    assert set(pd.read_csv(tmp_path / "out" / "results.csv").dataset) == {"good"}
