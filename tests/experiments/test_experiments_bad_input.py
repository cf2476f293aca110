"""The experiment scripts refuse bad seeds and steps before any work, and advise no command that would fail.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

from reliability_setup import assert_one_line_error, run_main


# --- seeds and steps are checked on the command line, before any work (N41, N43, N47, N51) --------
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
