"""What every figure shares: the output folder check, the PNG + PDF + JSON triple, and the colours."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..variants import VARIANTS  # noqa: E402

# One colour and one name per zoo model in every figure: its row of the variants table (``Variant.color``,
# Okabe-Ito, readable by colour-blind readers; ``Variant.display_name``).  Other models:
_OTHER_COLORS = ["#555555", "#D55E00", "#999933", "#882255", "#000000"]
_SPARE_COLORS = ["#56B4E9", "#F0E442", "#44AA99", "#AA4499"]  # only when two models of a figure share a colour
# one colour per head label (heads.LABELS)
LABEL_COLORS = {
    "structure-relative": "#D55E00",
    "structure-absolute": "#882255",
    "structure": "#D55E00",
    "semantic": "#56B4E9",
    "RP": "#F0E442",
    "mixed": "#BBBBBB",
    "positional": "#E69F00",
    "content": "#0072B2",
}


SUBSPACE_NAMES = {"ap": "AP stream", "sem": "semantic stream", "full": "full state"}
MAX_COLUMNS = 3  # multi-panel figures wrap after this many columns (a paper column holds three)


def display_name(model) -> str:
    """DSTG-NeoBERT, AP-NeoBERT, ...; a zoo variant keeps its suffix readable (``dstg-seed1`` -> "DSTG-NeoBERT
    seed 1", ``dstg-offset`` -> "DSTG-NeoBERT offset", ``ap (random init)`` -> "AP-NeoBERT (random init)");
    any other model (an HF name, a folder) as it is."""
    name = str(model)
    # what a reader sees instead of the internal keys: the model a figure draws, never a bare "ap" beside DSTG's "ap"
    for key, shown in ((key, row.display_name) for key, row in VARIANTS.items()):
        if name.lower() == key:
            return shown
        for joiner in ("-", "_", " "):
            rest = name[len(key) + 1:]
            if name.lower().startswith(key + joiner) and _ZOO_SUFFIX.match(rest):
                rest = f"seed {rest[4:]}" if rest.startswith("seed") and rest[4:].isdigit() else rest
                return f"{shown} {rest}"
    return name  # a model of the user's own ("ap-mine", "rope_large") is drawn under its own name


# what follows a zoo variant in the zoo's own member names: a training seed, the random_offset model, a control
_ZOO_SUFFIX = re.compile(r"^(seed\d+|offset\S*|\(random init\)|random[- ]init)$")


def subspace_name(subspace) -> str:
    """"AP stream", "semantic stream", "full state" (what DSTG's subspaces are, in words)."""
    return SUBSPACE_NAMES.get(str(subspace), str(subspace))


def entry_name(entry) -> str:
    """A Holmes entry ("model" or "model:subspace") in words: "DSTG-NeoBERT, AP stream"."""
    model, _, part = str(entry).partition(":")
    return display_name(model) + (f", {subspace_name(part)}" if part else "")


def caption(fig, text: str, y: float = -0.02) -> None:
    """A caption under the figure saying what its bands, bars and lines are (kept inside the saved bounds)."""
    fig.text(0.5, y, text, ha="center", va="top", fontsize=7, wrap=True)


def figure_title(fig, title: str | None) -> None:
    """A title over the whole figure, above its panels (e.g. what it reads: "seed 0 of the zoo: one training
    seed"); nothing for None."""
    if title:
        fig.suptitle(title, fontsize=9, y=1.0, va="bottom")


def model_color(model: str, others: list[str] | None = None) -> str:
    """The zoo colour of ``model`` ("dstg", or a name starting with it like "dstg-seed1"); other models
    (e.g. MiniLM) get greys/extra colours in the order of ``others``."""
    name = str(model).lower()
    for key, color in ((key, row.color) for key, row in VARIANTS.items()):
        if name == key or name.startswith(key + "-") or name.startswith(key + "_"):
            return color
    # crc32, not hash(): str hashes change between processes, colours must not
    index = others.index(model) if others and model in others else zlib.crc32(name.encode())
    return _OTHER_COLORS[index % len(_OTHER_COLORS)]


def model_palette(models) -> dict[str, str]:
    """model -> colour for one figure, in ``ordered_models`` order: the zoo colours, and for models that
    would share one (``dstg`` and ``dstg-offset``) the later ones get colours of their own."""
    models = ordered_models(models)
    palette, used = {}, set()
    spare = [c for c in _OTHER_COLORS + _SPARE_COLORS if c not in {row.color for row in VARIANTS.values()}]
    for model in models:
        color = model_color(model, models)
        if color in used:
            color = next(c for c in spare if c not in used)
        palette[model] = color
        used.add(color)
    return palette


def ordered_models(models) -> list[str]:
    """Zoo models first in the canonical order (dstg, rope, ap, rp, then the nope floor), then the rest alphabetically."""
    models = list(dict.fromkeys(models))
    zoo = [m for key in VARIANTS for m in models if str(m).lower() == key]
    return zoo + sorted((m for m in models if m not in zoo), key=str)


class FigureOutputError(OSError):
    """The output folder cannot be created or written."""


def prepare_folder(out_dir) -> Path:
    """Create ``out_dir`` if needed and check it is writable: one clear error otherwise."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FigureOutputError(
            f"cannot create the figure folder {folder} ({err.strerror or err}); pass a writable out_dir"
        ) from None
    try:  # os.access lies for root and on some network filesystems: really try to write
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as err:
        raise FigureOutputError(
            f"the figure folder {folder} is not writable ({err.strerror or err}); pass a writable out_dir"
        ) from None
    return folder


def save_figure(fig, out_dir, stem: str, numbers) -> dict[str, Path]:
    """Write ``stem``.png, .pdf and .json (the numbers behind the figure) into ``out_dir``; close ``fig``.

    Each file is written under a temporary name and renamed, so a crash never leaves half a figure.
    Returns {"png": path, "pdf": path, "json": path}.
    """
    folder = prepare_folder(out_dir)
    paths = {kind: folder / f"{stem}.{kind}" for kind in ("png", "pdf", "json")}
    try:
        for kind in ("png", "pdf"):
            temporary = folder / f".{stem}.tmp.{kind}"
            fig.savefig(temporary, dpi=150, bbox_inches="tight", format=kind)
            os.replace(temporary, paths[kind])
        temporary = folder / f".{stem}.tmp.json"
        temporary.write_text(json.dumps(jsonable(numbers), indent=1, allow_nan=False) + "\n")
        os.replace(temporary, paths["json"])
    except OSError as err:
        raise FigureOutputError(f"could not write figure {stem} into {folder} ({err.strerror or err})") from None
    finally:
        plt.close(fig)
    return paths


def shared_legend(fig, axes, max_columns: int | None = None, anchor: float = 1.02, top: float = 0.96) -> None:
    """One legend above all panels with each label once (panels may repeat lines), then tight_layout."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    columns = len(labels) if max_columns is None else min(len(labels), max_columns)
    fig.legend(handles, labels, loc="upper center", ncol=max(columns, 1), fontsize=8, bbox_to_anchor=(0.5, anchor))
    fig.tight_layout(rect=(0, 0, 1, top))


def jsonable(value):
    """Plain JSON types: DataFrames as lists of records, numpy scalars/arrays unwrapped, NaN/inf -> None."""
    if isinstance(value, pd.DataFrame):
        return jsonable(value.to_dict(orient="records"))
    if isinstance(value, pd.Series):
        return jsonable(value.to_dict())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def require_columns(frame: pd.DataFrame, columns, what: str) -> None:
    """A clear error when a tidy input table lacks a column the figure needs."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{what} must be a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks the column(s) {missing}; expected {list(columns)}")
    if frame.empty:
        raise ValueError(f"{what} is empty: nothing to plot")
