"""Round 3 of the hostile-input report (docs/RELIABILITY.md, notes/reliability-turn3.md): one test per case.

Each test names its case (N18 ... N116, old #27 / #45 / #93) and runs it on tiny models and fixtures.
"""

import shutil
import sys
from pathlib import Path

import pytest

from dstg_interp.cli.convert import main as convert_main
from dstg_interp.io import OutputError, check_replaceable, lock_path
from reliability_setup import assert_one_line_error, make_tiny_setup, run_main

FIXTURES = Path(__file__).parent / "fixtures"
AUTHORS = FIXTURES / "authors-format" / "posneobert-dstg"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_setup(tmp_path_factory.mktemp("round3"))


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- 1. dstg-convert replaces only a checkpoint it wrote (N18, N19) --------------------------------
def test_convert_overwrite_never_replaces_a_user_folder(tmp_path, capsys):
    """N18: `dstg-convert SRC out/cv-user --overwrite` deleted the user's notes.txt."""
    user = tmp_path / "cv-user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        code, _, err = run_main(capsys, convert_main, AUTHORS, user, "--no-tokenizer", *extra)
        assert_one_line_error(code, err, "notes.txt", "never replaced", "cv-user-converted", prog="dstg-convert")
        assert "--overwrite" not in err  # the refusal offers a new folder, not the flag
    assert snapshot(user) == {"notes.txt": b"mine"}


def test_convert_never_replaces_the_folder_holding_its_source(tmp_path, capsys):
    """N19: `dstg-convert models/posbert-src models --overwrite` wiped models/, the source included."""
    models = tmp_path / "models"
    shutil.copytree(AUTHORS, models / "posbert-src")
    (models / "other-model.txt").write_text("other")
    before = snapshot(models)
    code, _, err = run_main(capsys, convert_main, models / "posbert-src", models, "--no-tokenizer", "--overwrite")
    assert_one_line_error(code, err, "holds the input", "never replaced", str(models / "posbert-src-converted"))
    assert "pass --overwrite" not in err
    assert snapshot(models) == before


def test_convert_replaces_its_own_checkpoint_only_when_asked(tmp_path, capsys):
    out = tmp_path / "converted"
    assert run_main(capsys, convert_main, AUTHORS, out, "--no-tokenizer")[0] == 0
    code, _, err = run_main(capsys, convert_main, AUTHORS, out, "--no-tokenizer")
    assert_one_line_error(code, err, "already holds a checkpoint", "--overwrite")
    assert run_main(capsys, convert_main, AUTHORS, out, "--no-tokenizer", "--overwrite")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    code, _, err = run_main(capsys, convert_main, out, out, "--no-tokenizer", "--overwrite")
    assert_one_line_error(code, err, "is the input")
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    code, _, err = run_main(capsys, convert_main, AUTHORS, plain, "--no-tokenizer", "--overwrite")
    assert_one_line_error(code, err, "is a file", "never replaced")
    assert plain.read_text() == "x"


def test_every_replacing_command_refuses_a_folder_that_holds_its_input(tiny, tmp_path):
    """The same rule in the shared check: a folder that is or holds an input is never replaced."""
    checkpoint, _ = tiny
    parent = tmp_path / "models"
    shutil.copytree(checkpoint, parent / "ck")
    ours = lambda path: []  # noqa: E731  (every entry "ours": only the input rule can refuse)
    with pytest.raises(OutputError, match="holds the input"):
        check_replaceable(parent, "a checkpoint", ours, overwrite=True, inputs=[parent / "ck"])
    with pytest.raises(OutputError, match="is the input"):
        check_replaceable(parent / "ck", "a checkpoint", ours, overwrite=True, inputs=[parent / "ck"])
    (tmp_path / "link").symlink_to(parent)
    with pytest.raises(OutputError, match="symbolic link"):
        check_replaceable(tmp_path / "link", "a checkpoint", ours, overwrite=True)


# --- 4. seeds and steps are checked on the command line, before any work (N41, N43, N47, N51) --------
HUGE_SEED = "99999999999999999999"


def test_zoo_seed_and_steps_are_refused_before_any_work(tmp_path, capsys):
    """N41 / N43: a traceback after 21 s of data preparation (and an empty run folder)."""
    from experiments import pretrain_zoo

    common = ["--out", tmp_path / "zoo", "--runs", tmp_path / "runs", "--variants", "dstg", "--threads", "1"]
    for extra, needle in ((["--steps", "5", "--seeds", HUGE_SEED], "--seeds must be integers from 0 to 4294967295"),
                          (["--steps", "0", "--seeds", "0"], "--steps: expected a positive number of steps, got 0"),
                          (["--steps", "-3", "--seeds", "0"], "--steps: expected a positive number of steps")):
        code, _, err = run_main(capsys, pretrain_zoo.main, *common, *extra)
        assert_one_line_error(code, err, needle, prog="pretrain_zoo")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "zoo").exists()


def test_no_message_suggests_a_seed_that_would_fail(tmp_path, capsys):
    """N47: run_all advised `pretrain_zoo --seeds 99999999999999999999`, which then crashed."""
    from experiments import run_all
    from experiments.figure_inputs import run_as_command

    command = lambda argv: run_as_command(lambda: run_all.main(argv), "run_all")  # noqa: E731
    code, _, err = run_main(capsys, command, "--model-seeds", HUGE_SEED, "--out", tmp_path / "gallery")
    assert_one_line_error(code, err, "--model-seeds", "0 to 4294967295")
    assert "pretrain_zoo" not in err and not (tmp_path / "gallery").exists()


@pytest.mark.parametrize("prog, flag, args", [
    ("dstg-train", "--seed", ["--steps", "10", "--seed", HUGE_SEED]),
    ("dstg-train", "--data-seed", ["--steps", "10", "--data-seed", HUGE_SEED]),
    ("dstg-train", "--steps", ["--steps", "0"]),
    ("dstg-probe", "--seed", ["--task", "segment", "--seed", HUGE_SEED]),
    ("dstg-eval", "--seed", ["--model", "dstg", "--seed", HUGE_SEED]),
    ("dstg-holmes", "--seeds", ["run", "--seeds", f"0,{HUGE_SEED}"]),
])
def test_seed_and_step_flags_name_the_flag_and_its_range(prog, flag, args, tmp_path, capsys):
    """N51: `dstg-train --seed 99999999999999999999` said only 'Overflow when unpacking long long'."""
    import importlib

    from dstg_interp.entry import COMMANDS

    main = importlib.import_module(COMMANDS[prog]).main
    code, _, err = run_main(capsys, main, *args, "--out", tmp_path / "out")
    assert_one_line_error(code, err, f"argument {flag}", "positive" if flag == "--steps" else "0 to 4294967295")
    assert "Overflow" not in err and not (tmp_path / "out").exists()


# --- 3. torchrun teardown: a dead peer or a signal is one line per rank, never a traceback (N74, N75) ----
# The ranks' sitecustomize (imported by every python that starts with it on PYTHONPATH): rank 1 meets its
# fault at its first row write, mid-extraction. "kill": it SIGKILLs itself. "int": it says it is ready and
# waits, and the test presses Ctrl-C (SIGINT to the launcher's process group, as a terminal does).
RANK_FAULT = """
import os
if os.environ.get("RANK") == "1" and os.environ.get("FAULT"):
    import signal
    from pathlib import Path
    from dstg_interp.store import npy_writer

    def fault(self, *args, **kwargs):
        if os.environ["FAULT"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        Path(os.environ["READY"]).touch()
        signal.pause()
    npy_writer.NpyWriter.write = fault
"""
LAUNCHERS = {  # --shutdown-timeout: a rank slowed by a loaded machine is never SIGKILLed mid-cleanup here
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "--shutdown-timeout", "300", "--tee", "2", "-m", "dstg_interp.cli.cache"],
    "dstg-launch": [sys.executable, "-m", "dstg_interp.entry", "dstg-launch", "--nproc-per-node", "2",
                    "--shutdown-timeout", "300", "dstg-cache"],
}
INTERRUPTED_LINE = r"dstg-cache: interrupted \(Ctrl-C\): extraction into \S+ was interrupted; the partial work was removed"
# rank 0 after rank 1's SIGKILL: it found the peer gone, or torchrun's SIGTERM came first (mid-extraction, or
# while it removed the temporary after finding the peer gone: "no store was written")
RANK0_LINE = (r"dstg-cache: (error: rank 0: another rank stopped \(.*\); no store was written"
              r"|interrupted \(SIGTERM\): (extraction into \S+ was interrupted|no store was written))")


def run_with_a_rank_fault(launcher: str, fault: str, tiny, tmp_path: Path):
    """A second store extracted under ``launcher`` over a complete first one, rank 1 meeting ``fault``:
    (completed process, the first store's manifest md5 before)."""
    import hashlib
    import os
    import signal
    import subprocess
    import time

    from dstg_interp.cli.cache import main as cache_main
    from reliability_setup import REPO, subprocess_env

    checkpoint, corpus = tiny
    out = tmp_path / "store"
    args = ["--model", checkpoint, "--corpus", corpus, "--quiet", "--batch-size", "1", "--out", out]
    assert cache_main([str(a) for a in args]) == 0
    manifest = hashlib.md5((out / "manifest.json").read_bytes()).hexdigest()
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(RANK_FAULT)
    ready = tmp_path / "inject" / "rank1-ready"
    env = subprocess_env(FAULT=fault, READY=str(ready),
                         PYTHONPATH=os.pathsep.join([str(tmp_path / "inject"), str(REPO)]))
    other_store = ["--overwrite", "--layers", "0,1"]  # another store, so rank 1 gets to write rows
    process = subprocess.Popen([*LAUNCHERS[launcher], *map(str, args), *other_store], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        if fault == "int":  # Ctrl-C once rank 1 is mid-extraction: waits on its signal, however slow the machine
            deadline = time.monotonic() + 600
            while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ready.exists(), process.communicate(timeout=60)
            os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert hashlib.md5((out / "manifest.json").read_bytes()).hexdigest() == manifest  # the first store, untouched
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == [], left  # no temporary, no lock left
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("fault, codes", [("kill", {2, 143, -15}), ("int", {130})])
def test_torchrun_teardown_after_a_dead_or_interrupted_rank(fault, codes, tiny, tmp_path):
    """N75: after `kill -9` of rank 1, rank 0's cleanup called all_reduce on the broken group (a project
    traceback); N74: Ctrl-C of torchrun. Now: one line per live rank, exit 2 / 143 / 130, store untouched.
    (Plain torchrun still ends a Ctrl-C with its own SignalException traceback: dstg-launch, below, does not.)"""
    import re

    run = run_with_a_rank_fault("torchrun", fault, tiny, tmp_path)
    lines = (run.stderr + run.stdout).splitlines()
    rank_lines = {rank: [line.split("]:", 1)[1] for line in lines if line.startswith(f"[default{rank}]:")]
                  for rank in (0, 1)}  # what each rank printed (--tee 2)
    own = [line for line in rank_lines[0] if line.strip()]
    assert len(own) == 1 and re.match(INTERRUPTED_LINE if fault == "int" else RANK0_LINE, own[0]), run.stderr
    assert "dstg_interp" not in "\n".join(rank_lines[0] + rank_lines[1])  # no project traceback on any rank
    if fault == "int":
        assert rank_lines[1] == rank_lines[0], run.stderr  # rank 1: the same one line
    else:  # torchrun's report: rank 1 died of SIGKILL (-9); rank 0 ended with one of ``codes``
        # (2: it found the peer gone; 143 / -15: torchrun's SIGTERM came first, before or after its one line)
        exit_codes = {int(code) for code in re.findall(r"exitcode\s*:\s*(-?\d+)", run.stderr)}
        assert exit_codes - {-9} <= codes and exit_codes & codes, run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["int", "kill"])
def test_dstg_launch_ends_a_ctrl_c_or_a_dead_rank_in_one_line_of_its_own(fault, tiny, tmp_path):
    """N74: after a clean Ctrl-C of both ranks, torchrun's agent printed its SignalException traceback (exit 1).
    dstg-launch: the ranks' lines, then one line of the launcher, exit 130; a killed rank: exit 2."""
    import re

    run = run_with_a_rank_fault("dstg-launch", fault, tiny, tmp_path)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert "Traceback" not in run.stderr + run.stdout and run.stdout == "", run.stderr
    if fault == "int":
        assert run.returncode == 130, run.stderr
        assert len(lines) == 3 and lines[0] == lines[1] and re.match(INTERRUPTED_LINE, lines[0]), run.stderr
        assert lines[2].startswith("dstg-launch: interrupted (Ctrl-C): the 2 rank(s) of dstg-cache were stopped")
    else:
        assert run.returncode == 2, run.stderr
        assert re.fullmatch(r"dstg-launch: dstg-cache failed: rank 0 (exit code 2|exit code 143 \(SIGTERM\)|killed "
                            r"by SIGTERM), rank 1 killed by SIGKILL \(each rank's own message is above\)", lines[-1]), lines
        assert len(lines) <= 2 and all(re.match(RANK0_LINE, line) for line in lines[:-1]), run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["dstg-cache", "--model", "dstg", "--max-docs", "0", "--out", "x"], "dstg-cache: error: argument --max-docs"),
    (["dstg-probe", "--task", "segment"], "dstg-launch: error: dstg-probe does not share its work"),
    (["dstg-nope"], "dstg-launch: error: 'dstg-nope' is not a dstg-* command"),
])
def test_dstg_launch_refuses_bad_commands_once_before_any_rank_starts(args, says, tmp_path):
    from reliability_setup import run_entry

    run = run_entry("dstg-launch", "--nproc-per-node", "2", *args, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(says) and run.stderr.count("error:") == 1, run.stderr
    assert list(tmp_path.iterdir()) == []


# --- 6. locks follow the real path; dstg-probe and dstg-holmes run lock their --out (N80, N81, N116) ---
def test_a_symlinked_out_shares_the_folders_lock(tmp_path):
    """N80: `--out out/xl3-alias` (-> xl3) took another lock than `--out out/xl3`; both trained at once."""
    from dstg_interp.io import OutputLocked, output_lock

    (tmp_path / "xl3").mkdir()
    (tmp_path / "xl3-alias").symlink_to("xl3")
    assert lock_path(tmp_path / "xl3-alias") == lock_path(tmp_path / "xl3") == lock_path(tmp_path / "a" / ".." / "xl3")
    with output_lock(tmp_path / "xl3", "first run"):
        with pytest.raises(OutputLocked, match="in use by another run .*first run"):
            with output_lock(tmp_path / "xl3-alias"):
                pass


def test_cache_names_a_symlinked_out_as_a_link(tiny, tmp_path, capsys):
    """N81: a symlinked --out was refused (safely) but called 'a file'."""
    from dstg_interp.cli.cache import main as cache_main

    checkpoint, corpus = tiny
    store = tmp_path / "store"
    args = ["--model", checkpoint, "--corpus", corpus, "--quiet", "--layers", "0"]
    assert run_main(capsys, cache_main, *args, "--out", store)[0] == 0
    (tmp_path / "st-link").symlink_to(store)
    code, _, err = run_main(capsys, cache_main, *args, "--layers", "0,1", "--overwrite", "--out", tmp_path / "st-link")
    assert_one_line_error(code, err, "is a symbolic link", "never replaced")
    assert "is a file" not in err


@pytest.mark.parametrize("command", ["probe", "holmes"])
def test_probe_and_holmes_runs_lock_their_out(command, tiny, tmp_path, capsys):
    """N116: two `dstg-holmes run` on one --out both reported success; the first run's tables were gone."""
    from dstg_interp.cli.holmes import main as holmes_main
    from dstg_interp.cli.probe import main as probe_main
    from dstg_interp.io import output_lock

    checkpoint, corpus = tiny
    out = tmp_path / "results"
    if command == "probe":
        main, args = probe_main, ["--task", "segment", "--model", checkpoint, "--corpus", corpus, "--layers", "1"]
    else:
        main, args = holmes_main, ["run", "--benchmark", FIXTURES / "holmes" / "benchmark", "--model", checkpoint]
    with output_lock(out, "the first run"):
        code, _, err = run_main(capsys, main, *args, "--quiet", "--out", out)
    assert_one_line_error(code, err, "is in use by another run", "the first run")
    assert not out.exists()


# --- 8. every table has its header, also with no rows (a_vs_b.csv of a one-model Holmes run) ---------------
def test_a_one_model_holmes_run_writes_readable_tables(tiny, tmp_path, capsys):
    import pandas as pd

    from dstg_interp.cli.holmes import main as holmes_main

    checkpoint, _ = tiny
    out = tmp_path / "holmes"
    shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", tmp_path / "bench" / "fx-sentence")
    code, _, err = run_main(capsys, holmes_main, "run", "--benchmark", tmp_path / "bench", "--model", checkpoint,
                            "--seeds", "0", "--quiet", "--out", out)
    assert code == 0, err
    for table in sorted(out.glob("*.csv")):
        frame = pd.read_csv(table)  # a 1-byte a_vs_b.csv raised EmptyDataError here
        assert len(frame.columns) > 0, table.name
    assert list(pd.read_csv(out / "a_vs_b.csv").columns) == ["a", "b", "area", "wins", "ties", "losses", "n_phenomena"]


# --- 2. Holmes configs: sizes bounded before allocation, YAML read strictly (N92, N108, N109, N110) --------
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


# --- 7. a long single line is streamed: bounded chunks, progress at once (N64) ---------------------------
def test_a_long_one_line_file_is_read_in_bounded_chunks_with_progress(tmp_path, monkeypatch, capsys):
    """N64: a 200 MB one-line file printed nothing for 150 s while memory passed 4.9 GB."""
    from dstg_interp.data import corpora, load_corpus

    words = ["alpha", "beta", "Gamma", "délta", "\u201cquoted\u201d", "eta"]
    text = " ".join(words[i % 6] + ("." if i % 15 == 14 else "") for i in range(30_000))
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "one-line.txt").write_text(text + "\n\nA second paragraph. It is short.")
    reference = corpora.make_document("one-line.txt", "corpus", corpora.paragraphs_from_text(text + "\n\nA second "
                                                                                            "paragraph. It is short."))
    monkeypatch.setattr(corpora, "LARGE_TEXT_BYTES", 1000)  # stream this small file, in small chunks
    monkeypatch.setattr(corpora, "STREAM_CHUNK_BYTES", 4093)
    monkeypatch.setattr(corpora, "STREAM_CHUNK_CHARS", 20_000)
    longest = []
    normalize = corpora.normalize_text
    monkeypatch.setattr(corpora, "normalize_text", lambda raw: longest.append(len(raw)) or normalize(raw))
    (document,) = load_corpus(str(folder), progress=True)
    assert document.paragraphs == reference.paragraphs  # the same sentences as reading the file whole
    assert max(longest) <= 20_000 + corpora.SEGMENT_WINDOW_CHARS + 1  # one chunk plus a carried sentence
    assert "reading one-line.txt" in capsys.readouterr().err  # a progress bar from the first chunk on


# --- 8. the one line is the only line: third-party noise silenced, real warnings in our words ------------
def authors_copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(AUTHORS, folder)
    return folder


def test_a_pickle_payload_is_refused_in_one_line(tmp_path, capsys):
    """N9 / N10: torch's 2-line 'Detected pickle protocol 4' UserWarning came before the refusal."""
    import os
    import pickle

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'PWNED'}",)

    folder = authors_copy(tmp_path, "pickle")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"embed.weight": Payload()}, protocol=4))
    code, _, err = run_main(capsys, convert_main, folder, tmp_path / "out", "--no-tokenizer")
    assert_one_line_error(code, err, "never unpickled", prog="dstg-convert")
    assert len(err.strip().splitlines()) == 1 and "UserWarning" not in err
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


def test_nan_weights_are_one_warning_line_of_our_own(tmp_path, capsys):
    """N26: dstg-convert reported NaN weights as a raw Python warning with a source line."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = authors_copy(tmp_path, "nan")
    state = load_file(folder / "model.safetensors")
    name = next(key for key in state if "embed" in key)
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, folder / "model.safetensors")
    code, out, err = run_main(capsys, convert_main, folder, tmp_path / "out", "--no-tokenizer")
    assert code == 0 and out.startswith("wrote ")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dstg-convert: warning:") and "NaN" in lines[0], err


def test_a_tokenizer_far_smaller_than_the_embedding_is_said(tmp_path, capsys):
    """N31: a 25-token vocab.txt for a 100-row model was accepted silently."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(20)]) + "\n")
    code, _, err = run_main(capsys, convert_main, AUTHORS, tmp_path / "out", "--tokenizer", vocab)
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dstg-convert: warning:"), err
    assert "25 tokens for an embedding of 100 rows" in lines[0] and "another model's tokenizer" in lines[0]


def tiny_hf_folder(folder: Path, extra_rows: int) -> Path:
    """A tiny BertForMaskedLM folder (heads and all, as the Hub ships them) whose embedding has ``extra_rows``
    rows past its tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForMaskedLM

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                                 [f"w{i}" for i in range(85)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab) + extra_rows, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_a_padded_hf_embedding_loads_without_transformers_report(tmp_path, capsys):
    """N38: 98 rows for 90 tokens (a padded embedding, common in published encoders) was refused;
    old #27: transformers' 15-line LOAD REPORT (unused MLM head, no pooler) came before every line."""
    from dstg_interp.encoders.hf import load_hf_encoder

    folder = tiny_hf_folder(tmp_path / "padded", extra_rows=8)
    capsys.readouterr()  # transformers' own bar while the test writes the folder
    encoder = load_hf_encoder(folder)
    assert encoder.vocab_size == 98
    captured = capsys.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out and captured.err.strip() == ""
    with pytest.raises(Exception, match="only 85 rows"):
        load_hf_encoder(tiny_hf_folder(tmp_path / "short", extra_rows=-5))


def test_a_full_cache_disk_names_the_cache_not_out(tiny, tmp_path, monkeypatch):
    """N88: with DSTG_CACHE on a full disk, the remedy said 'choose another out folder'."""
    import errno

    from dstg_interp import extract
    from dstg_interp.data import load_corpus
    from dstg_interp.model import load_model
    from dstg_interp.store import npy_writer
    from dstg_interp.store.manifest import StoreError

    checkpoint, corpus = tiny

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npy_writer.NpyWriter, "write", full_disk)
    store = tmp_path / "cache" / "stores" / "dstg-0123"
    with pytest.raises(StoreError, match="disk that holds .*cache/stores, or put the store elsewhere .*DSTG_CACHE"):
        extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, progress=False)
    assert not store.exists() and not [p for p in (tmp_path / "cache" / "stores").iterdir()]


def test_a_cache_disk_too_small_is_said_before_any_write_naming_the_cache(tiny, tmp_path, monkeypatch):
    """N88 again: the check before any file is reserved said 'choose another folder or export fewer layers'
    (the export's remedy) for a store dstg-probe caches."""
    import collections

    from dstg_interp import extract
    from dstg_interp.data import load_corpus
    from dstg_interp.model import load_model
    from dstg_interp.store import export
    from dstg_interp.store.manifest import StoreError

    checkpoint, corpus = tiny
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(export.shutil, "disk_usage", lambda path: usage(2**20, 2**20, 0))
    store = tmp_path / "cache" / "stores" / "dstg-0123"
    with pytest.raises(StoreError, match="needs about .* MiB free; free space on the disk that holds .*cache/stores, put "
                                         "the store elsewhere .*another DSTG_CACHE") as refused:
        extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, progress=False)
    assert "export" not in str(refused.value) and not store.exists()


def test_a_hub_dataset_without_network_is_one_line_at_once(tmp_path, monkeypatch, capsys):
    """Old #45: huggingface_hub retried for ~28 s (5 'Retrying' lines) before the one-line error."""
    import socket
    import time

    from dstg_interp.cli.cache import main as cache_main
    from dstg_interp.data import corpora

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(corpora.socket, "create_connection", no_network)
    started = time.monotonic()
    code, _, err = run_main(capsys, cache_main, "--model", "dstg", "--corpus", "hf:nonexistent-org/nonexistent-ds:train",
                            "--layers", "0", "--quiet", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "cannot be reached from here (Name or service not known)", "HF_HUB_OFFLINE=1")
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - started < 20


# --- 5. one tokenizer per recipe key (N68) ---------------------------------------------------------------
TRAIN_IN_A_PROCESS = """
import sys
from dstg_interp.data import load_corpus
from dstg_interp.data.tokenizer import tokenizer_hash, train_tokenizer
print(tokenizer_hash(train_tokenizer(load_corpus(sys.argv[1], progress=False), vocab_size=400)))
"""


def test_training_a_tokenizer_gives_the_same_one_in_every_process():
    """N68's cause: the trainer numbered continuation symbols in hash order, so two processes preparing the
    same recipe trained different tokenizers (en-mix: 8104f001... or cb52c2bc..., by chance)."""
    import subprocess
    import sys

    from reliability_setup import subprocess_env

    corpus = str(FIXTURES / "tiny_corpus.jsonl")
    hashes = {subprocess.run([sys.executable, "-c", TRAIN_IN_A_PROCESS, corpus], env=subprocess_env(), check=True,
                             capture_output=True, text=True, timeout=120).stdout.strip() for _ in range(4)}
    assert len(hashes) == 1 and len(next(iter(hashes))) == 64


def test_the_zoo_recipe_prepares_the_shipped_zoos_tokenizer(tmp_path):
    from dstg_interp.data.prepare import prepare_data
    from dstg_interp.data.tokenizer import load_tokenizer, tokenizer_hash
    from dstg_interp.model.checkpoint import ZOO_TOKENIZER
    from experiments.pretrain_zoo import zoo_config

    shipped = tokenizer_hash(load_tokenizer(ZOO_TOKENIZER))
    cfg = zoo_config("dstg", tmp_path / "runs", steps=10, threads=1)
    assert cfg.tokenizer == str(ZOO_TOKENIZER)
    for member in ("rope", "ap-seed1", "rp-seed2"):  # every member holds the one tokenizer
        assert tokenizer_hash(load_tokenizer(ZOO_TOKENIZER.parent.parent / member / "tokenizer.json")) == shipped
    from conftest import write_synthetic_corpus

    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=30)
    prepared = prepare_data(str(corpus), max_length=32, vocab_size=cfg.vocab_size, tokenizer_path=cfg.tokenizer,
                            cache_dir=tmp_path / "cache", progress=False)
    assert tokenizer_hash(prepared.tokenizer) == shipped


def test_a_cache_entry_with_another_tokenizer_names_itself(tmp_path):
    from dstg_interp.data.corpora import DataError
    from dstg_interp.data.prepare import prepare_data
    from dstg_interp.data.tokenizer import build_tokenizer, save_tokenizer

    from conftest import write_synthetic_corpus

    corpus = str(write_synthetic_corpus(tmp_path / "corpus", n_docs=30))
    first = prepare_data(corpus, max_length=32, vocab_size=120, cache_dir=tmp_path / "cache", progress=False)
    save_tokenizer(build_tokenizer(["a", "b"]), first.directory / "tokenizer.json")  # damaged from outside
    with pytest.raises(DataError, match=f"remove {first.directory} and run again"):
        prepare_data(corpus, max_length=32, vocab_size=120, cache_dir=tmp_path / "cache", progress=False)


# --- leftovers on a full disk: no empty --out (old #93, N89) --------------------------------------------
@pytest.mark.parametrize("command", ["probe", "holmes"])
def test_a_full_disk_leaves_no_empty_out(command, tiny, tmp_path, capsys, monkeypatch):
    import errno

    import pandas as pd

    from dstg_interp.cli.holmes import main as holmes_main
    from dstg_interp.cli.probe import main as probe_main

    checkpoint, corpus = tiny

    def full_disk(self, path, *args, **kwargs):
        Path(path).write_text("")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    out = tmp_path / "new" / "results"
    if command == "probe":
        args = [probe_main, "--task", "token", "--model", checkpoint, "--corpus", corpus, "--layers", "0",
                "--subspaces", "ap", "--no-controls"]
    else:
        shutil.copytree(FIXTURES / "holmes" / "benchmark" / "fx-sentence", tmp_path / "bench" / "fx-sentence")
        args = [holmes_main, "run", "--benchmark", tmp_path / "bench", "--model", checkpoint, "--seeds", "0"]
    code, _, err = run_main(capsys, *args, "--quiet", "--out", out)
    assert_one_line_error(code, err, "disk full")
    assert not (tmp_path / "new").exists()  # neither --out nor the folder above it, made for it, is left
