"""Figure: one text's attention through one model, every head's pattern and logit terms side by side, as a
standalone HTML page (``dstg_interp.plots.attention_view``), and optionally its screenshot by headless Chromium.

    dstg-figures attention-view --model dstg --text "The miller mended the door." --out views/dstg
    python -m experiments.fig_attention_view --model dstg --heads figures/heads/heads.csv --screenshot \\
        --out figures/attention_view                 # the committed view: the study's head classes, a PNG beside it

Writes into ``--out`` (default dstg-results/figures/attention_view/): ``attention_view.html`` (open it in any
browser; nothing is fetched), ``config.json`` (the config, what was drawn and the versions: dstg_interp, torch,
transformers, and chromium's with a screenshot), and with ``--screenshot`` ``attention_view.png`` (needs
``chromium`` on the PATH: Debian's package).  Bad input (a text longer than the model's positions, a panel the model
does not have, no chromium for ``--screenshot``) is one line and exit code 2, nothing written; so is a screenshot
chromium fails to draw (the page is drawn in a scratch folder first).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dstg_interp.plots.attention_view import AttentionViewError, attention_view
from dstg_interp.store.manifest import versions
from experiments.figure_inputs import OUTPUT_DIR, ScriptConfig, figure_config, run_as_command, save_config

DEFAULT_TEXT = ("The miller mended the green door at dawn. Her cousin lost a copper pot after supper.\n\n"
                "The captain counted the long rope before the storm.")
HTML_NAME, PNG_NAME = "attention_view.html", "attention_view.png"


@dataclass
class AttentionViewConfig(ScriptConfig):
    out: Path = OUTPUT_DIR / "attention_view"
    model: str = field(default="dstg", metadata={"help": "a zoo name, checkpoint or run folder, HF folder or hub id "
                                                           "(what dstg-probe --model takes)"})
    text: str = field(default=DEFAULT_TEXT, metadata={"help": "the text to show (at most the model's positions)"})
    panels: list[str] | None = field(default=None, metadata={
        "help": "what each head shows: pattern and the model's logit terms (DSTG: sem ap rp; default: all)"})
    heads: Path | None = field(default=None, metadata={
        "help": "head classes from this heads.csv (dstg-figures heads) instead of classifying on the text"})
    name: str | None = field(default=None, metadata={"help": "the model's name on the page and in --heads"})
    screenshot: bool = field(default=False, metadata={"help": "also attention_view.png, drawn by headless chromium"})
    width: int = field(default=1050, metadata={"help": "screenshot width in pixels"})
    height: int = field(default=2100, metadata={"help": "screenshot height in pixels"})

    def __post_init__(self) -> None:
        super().__post_init__()
        self.heads = Path(self.heads) if self.heads is not None else None
        if self.heads is not None and not self.heads.is_file():
            raise AttentionViewError(f"--heads {self.heads}: no such file (a heads.csv written by dstg-figures heads)")
        if self.screenshot and chromium() is None:
            raise AttentionViewError("--screenshot needs chromium on the PATH (apt-get install chromium)")
        if self.width < 100 or self.height < 100:
            raise AttentionViewError(f"--width and --height are pixels, at least 100; got {self.width} x {self.height}")


def chromium() -> str | None:
    return next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)


def headless(*flags: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Headless Chromium with ``flags``; stderr carries the page's console lines (``--enable-logging=stderr``)."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--enable-logging=stderr", "--v=0", *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def chromium_version() -> str:
    """``chromium --version``'s line (e.g. ``Chromium 150.0.7871.100 built on Debian ...``), for the manifest."""
    done = subprocess.run([chromium(), "--version"], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else f"unknown (exit {done.returncode})"


def run(config: AttentionViewConfig) -> dict:
    started = time.perf_counter()
    heads = pd.read_csv(config.heads) if config.heads is not None else None
    view = attention_view(config.model, config.text, panels=config.panels, heads=heads, name=config.name)
    if config.heads is not None:
        view.label_source = f"from {config.heads}"
    found = versions()
    with tempfile.TemporaryDirectory() as scratch:  # the screenshot first: a failed one leaves --out untouched
        if config.screenshot:
            shot = Path(scratch) / PNG_NAME
            draft = view.save(Path(scratch) / HTML_NAME)
            done = headless(f"--window-size={config.width},{config.height}", f"--screenshot={shot}",
                            draft.resolve().as_uri())
            if not shot.is_file():
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise AttentionViewError(f"chromium wrote no screenshot (exit {done.returncode}): {last}")
            found["chromium"] = chromium_version()
        config.out.mkdir(parents=True, exist_ok=True)
        written = [view.save(config.out / HTML_NAME)]
        if config.screenshot:
            shutil.move(str(shot), config.out / PNG_NAME)
            written.append(config.out / PNG_NAME)
    save_config(config, "experiments/fig_attention_view.py", model_name=view.model_name, n_tokens=len(view.tokens),
                n_blocks=view.n_blocks, n_heads=view.n_heads, panels=list(view.panels),
                head_classes=view.label_source, versions=found, wall_s=round(time.perf_counter() - started, 1))
    print(f"{view.model_name}: {view.n_blocks} blocks x {view.n_heads} heads, {len(view.tokens)} tokens -> "
          + ", ".join(map(str, written)))
    return {"view": view, "files": written}


def main(argv=None) -> dict:
    return run(figure_config(AttentionViewConfig, argv, __doc__))


if __name__ == "__main__":
    sys.exit(run_as_command(main, "fig_attention_view"))
