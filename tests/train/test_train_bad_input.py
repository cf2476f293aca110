"""Training fails fast, in one line: a cut-short optimizer state or log on --resume, nonsense values in
TrainConfig.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import pytest

from dstg_interp import CheckpointError
from dstg_interp.data import DataError, load_corpus
from dstg_interp.cli.train import main as train_main
from dstg_interp.train import TrainConfig, read_resume_state, train, truncate_log
from reliability_setup import assert_one_line_error, run_main


# --- bad content ----------------------------------------------------------------------------------
def test_truncated_optimizer_state_on_resume(tiny, tmp_path, capsys):
    """#135: a cut-short optimizer.safetensors gave a SafetensorError traceback (the model file did not)."""
    _, corpus = tiny
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), model=dict(variant="dstg", d_sem=24, d_ap=8, n_layers=1, n_heads=4),
                      corpus=str(corpus), vocab_size=200, max_length=32, batch_size=2, max_steps=4, warmup_steps=1,
                      eval_every=100, eval_batches=1, save_every=2, progress=False, val_fraction=0.2)
    train(cfg, stop_after_step=2)
    optimizer = tmp_path / "run" / "checkpoint" / "optimizer.safetensors"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="optimizer.safetensors is corrupt"):
        read_resume_state(cfg)
    code, _, err = run_main(capsys, train_main, "--out", tmp_path / "run", "--resume")
    assert_one_line_error(code, err, "optimizer.safetensors is corrupt", prog="dstg-train")


def test_resume_log_with_a_half_written_last_line(tmp_path):
    """#137: a log line cut short by a crash blocked --resume with an unnamed JSON error."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n{"step": 30, "lo')
    truncate_log(log, 20)
    assert log.read_text() == '{"step": 10, "loss": 5.0}\n{"step": 20, "loss": 4.0}\n'
    log.write_text('{"step": 10}\ngarbage\n{"step": 20}\n')
    with pytest.raises(CheckpointError, match="log.jsonl line 2 is not a log record"):
        truncate_log(log, 20)


# --- nonsense values ------------------------------------------------------------------------------
def test_nonsense_values_in_the_api():
    with pytest.raises(DataError, match="max_docs must be a positive"):
        load_corpus("en-mix", max_docs=-5)
    for kwargs, fragment in ((dict(vocab_size=5), "vocab_size: at least"), (dict(threads=0), "threads"),
                             (dict(max_docs=-5), "max_docs"), (dict(random_offset=True), "random_offset: needs")):
        with pytest.raises(ValueError, match=fragment):
            TrainConfig(**kwargs)
