"""The attention view in a real browser (Debian's Chromium, headless): the page loads with no console message of
its own and, once its script has run, shows one card per head; a page that throws is caught the same way (so the
check can fail).  CI installs chromium (.ci/run).  What runs without chromium (the refusal when it is missing, a
screenshot it fails to draw) is in tests/plots/test_attention_view.py."""

import json
import re

import pytest

from experiments.fig_attention_view import chromium, headless, main

if chromium() is None:  # .ci/run installs it; a developer without it is told how
    pytest.skip("chromium is not on the PATH: apt-get install chromium", allow_module_level=True)


def console_lines(stderr: str) -> list[str]:
    """The page's console messages and uncaught errors, as --enable-logging=stderr prints them."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def loaded(page) -> tuple[str, list[str]]:
    done = headless("--dump-dom", page.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, console_lines(done.stderr)


def test_the_zoo_dstg_view_loads_clean_and_shows_every_head(tmp_path):
    main(["--model", "dstg", "--out", str(tmp_path), "--screenshot", "--width", "900", "--height", "700"])
    dom, console = loaded(tmp_path / "attention_view.html")
    assert console == []
    heads = re.findall(r'<div class="head" data-layer="(\d+)" data-head="(\d+)"', dom)
    assert len(heads) == 6 * 4 and len(set(heads)) == 24
    assert len(re.findall(r'<canvas[^>]*data-panel="(?:pattern|sem|ap|rp)"', dom)) == 24 * 4
    assert dom.count('class="label"') == 24  # every head's class, computed on the text
    png = (tmp_path / "attention_view.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    versions = json.loads((tmp_path / "config.json").read_text())["versions"]
    assert re.match(r"(Chromium|Google Chrome) \d+\.", versions["chromium"]) and versions["dstg_interp"]


def test_a_page_that_throws_is_caught(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert any("undefinedFunction" in line for line in loaded(page)[1])

