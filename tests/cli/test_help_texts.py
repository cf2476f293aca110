"""--help from the stored texts (``dstg_interp.cli.help_text``): each equals its live parser's output, and the
entries print it without importing torch."""

import subprocess
import sys

import pytest

from dstg_interp.cli.help_text import HELP_DIR, help_key, help_path, stored_help
from experiments.help_texts import help_requests, rendered

REWRITE = "run `python -m experiments.help_texts` to write the texts again"


def test_every_stored_help_text_is_what_its_live_parser_prints():
    texts = rendered()
    assert len(texts) == len(help_requests()) >= 28
    stale = [key for key, text in texts.items() if stored_help(key) != text]
    assert not stale, f"help texts differ from their parsers: {stale}; {REWRITE}"
    orphans = set(HELP_DIR.glob("*.txt")) - {help_path(key) for key in texts}
    assert not orphans, f"help texts of no command: {sorted(p.name for p in orphans)}; {REWRITE}"


@pytest.mark.parametrize("argv, key", [
    (["--help"], "dstg-probe"), (["-h"], "dstg-probe"), (["run", "--help"], "dstg-probe run"),
    (["--model", "x", "--help"], None), (["--quiet", "--help"], None), (["--task", "segment"], None), ([], None),
])
def test_only_a_plain_help_request_reads_a_stored_text(argv, key):
    assert help_key("dstg-probe", argv) == key


@pytest.mark.parametrize("code", [
    "from dstg_interp.cli.entry import launch; code = launch('dstg-probe', ['--help'])",
    "from dstg_interp.cli.entry import launch; code = launch('dstg-holmes', ['run', '-h'])",
    "from experiments.figures import main; code = main(['heads', '--help'])",
])
def test_the_entries_answer_help_without_importing_torch(code):
    check = code + "; import sys; assert code == 0; assert 'torch' not in sys.modules, 'torch was imported'"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ") and result.stdout in {stored_help(k) for k in
                                                                     ("dstg-probe", "dstg-holmes run", "dstg-figures heads")}


def test_a_command_line_that_is_more_than_help_is_parsed_live():
    # --help after another flag: the live parser answers (the same text here, but torch is imported)
    check = ("from dstg_interp.cli.entry import launch; import sys\n"
             "try:\n    launch('dstg-verify', ['--quiet', '--help'])\nexcept SystemExit as stop:\n    code = stop.code\n"
             "assert code == 0 and 'torch' in sys.modules")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: dstg-verify")
