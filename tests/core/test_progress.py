"""Progress bars (dstg_interp.progress): in a log a bar writes a few whole lines, never carriage-return updates;
the probe fits and the corpus fetch have bars whose count reaches its total."""

import io
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from dstg_interp.data import en_mix
from dstg_interp.progress import LOG_INTERVAL_S, Bar, LineStream, heartbeat, progress_bar
from probes.positions import PositionProbeConfig, probe_store
from synthetic_store import FakeStore


def test_a_bar_in_a_log_writes_a_few_lines_without_carriage_returns():
    log = io.StringIO()  # not a terminal
    for _ in progress_bar(range(20_000), desc="work", file=log):
        pass
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert 1 <= len(lines) <= 3 and "20000/20000" in lines[-1]  # the last line: the bar done


def test_heartbeat_redraws_a_waiting_bar_once_its_interval_passed():
    log = io.StringIO()
    with progress_bar(total=10, desc="wait", file=log, mininterval=0) as bar:
        before = log.getvalue().count("\n")
        heartbeat(bar)
        assert log.getvalue().count("\n") == before + 1
    assert LOG_INTERVAL_S < 10  # a log hears from a bar at least every 10 s


@pytest.mark.parametrize("n_boot, controls", [(0, False), (50, True)])
def test_the_probe_fits_have_a_bar_that_reaches_its_total(n_boot, controls, capsys):
    table = probe_store(FakeStore(60, seed=3), PositionProbeConfig(task="token", n_boot=n_boot, controls=controls),
                        "synthetic", progress=True)
    assert len(table) == 1
    err = capsys.readouterr().err
    assert "synthetic: 1 ridge probe:" in err  # one probe, singular
    done = re.findall(r"\| (\d+)/(\d+) \[", err)
    assert done and done[-1][0] == done[-1][1]


def test_a_fetch_shows_a_byte_bar_and_keeps_the_pinned_file(tmp_path, capsys):
    payload = b"x" * 5000
    sha = __import__("hashlib").sha256(payload).hexdigest()
    command = [sys.executable, "-c", "import time; time.sleep(0.6); open('a.bin', 'wb').write(b'x' * 5000)"]
    path = en_mix.fetch_artifact(command, "a.bin", sha, tmp_path / "downloads", progress=True, size=len(payload))
    assert path.read_bytes() == payload
    err = capsys.readouterr().err
    assert "fetch a.bin" in err and "5.00k/5.00k" in err
    with pytest.raises(en_mix.PieceUnavailable, match="failed: boom"):
        en_mix.fetch_artifact([sys.executable, "-c", "import sys; sys.exit('boom')"], "b.bin", sha, tmp_path / "d")
    assert not [p for p in (tmp_path / "d").iterdir() if p.name.startswith(".fetch-")]


def test_the_heartbeat_thread_redraws_a_bar_whose_step_is_long():
    """progress_bar's bars beat every LOG_INTERVAL_S in a log; the same thread, beating every 0.1 s here."""
    log = io.StringIO()
    with Bar(total=2, desc="long step", file=LineStream(log), heartbeat_s=0.1, mininterval=0.05) as bar:
        lines = log.getvalue().count("\n")
        time.sleep(0.5)  # one step that takes long: no update
        assert log.getvalue().count("\n") >= lines + 2
        bar.update(2)
    assert "2/2" in log.getvalue().splitlines()[-1]


def test_a_bar_draws_on_a_terminal_that_reports_no_size():
    """A pseudo-terminal opened without a size reports 0 x 0; tqdm then hides every bar (each at or below the last
    row), so the package gives it a fallback size and the bar is drawn."""
    master, slave = pty.openpty()
    code = "from dstg_interp.progress import progress_bar\nfor _ in progress_bar(range(3), desc='sized'): pass\n"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    output = b""
    while select.select([master], [], [], 30)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its side
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    assert child.wait(timeout=60) == 0
    assert b"sized: 100%" in output and b"3/3" in output
