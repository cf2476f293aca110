"""How a model is named in tables, figures and messages: one rule for the API and every command.

    model_name("dstg")                                   # 'dstg' (a zoo name as is)
    model_name("~/models/all-MiniLM-L6-v2")              # 'all-MiniLM-L6-v2' (its model card's title)
    model_name(".../models--org--name/snapshots/3f2a")   # 'org/name' (a Hugging Face cache snapshot)
    model_name("runs/mine/checkpoint")                   # 'mine' (a run folder's checkpoint)

The rule, first match wins:
1. a name the caller gives (``open_encoder(..., name=)``, ``--name``) -- callers apply it before asking here;
2. a zoo name as given;
3. a Hugging Face cache snapshot (``models--ORG--NAME/snapshots/HASH``): the hub id ``ORG/NAME``;
4. the title of the folder's model card (``README.md`` with a YAML front matter, the first ``# `` heading),
   which sentence-transformers and the hub write -- all-MiniLM-L6-v2's folder is titled so, while its
   config's ``_name_or_path`` names the base checkpoint it was distilled from, which is why that field is
   never used;
5. the folder's own name; a generic one (``model``, ``checkpoint``, ...) with its parent's name first
   (``checkpoint`` inside a run folder: the run's name).
Tables print these short names; JSON outputs also record the path as given (``model_path``).
"""

from __future__ import annotations

import re
from pathlib import Path

GENERIC_FOLDER_NAMES = frozenset({"model", "models", "checkpoint", "checkpoints", "final", "best", "latest", "output",
                                  "outputs", "hf", "weights", "snapshot", "encoder"})
_SNAPSHOT = re.compile(r"^models--(?P<org>[^/]+?)--(?P<name>[^/]+)$")
_TITLE = re.compile(r"^#\s+(?P<title>\S[^\n]{0,78})$", re.MULTILINE)


def hub_id_of_snapshot(path: Path) -> str | None:
    """``ORG/NAME`` when ``path`` is a snapshot folder of the Hugging Face cache, else None."""
    parts = path.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots":
        match = _SNAPSHOT.match(parts[-3])
        if match:
            return f"{match['org']}/{match['name']}"
    return None


def model_card_title(folder: Path) -> str | None:
    """The first ``# `` heading of a model card (a README.md that opens with YAML front matter), or None."""
    try:
        with open(folder / "README.md", encoding="utf-8", errors="replace") as handle:
            text = handle.read(65536)  # a model card's title sits at its top: never read a whole large file
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    match = _TITLE.search(text, end + 4 if end >= 0 else 0)
    title = match["title"].strip().strip("`*") if match else ""
    return title if title and " " not in title else None  # a name, not a sentence


def folder_name(path: Path) -> str:
    """The folder's own name; a generic one qualified by its parent (``runs/mine/checkpoint`` -> ``mine``)."""
    path = Path(path).resolve()
    if path.name.lower() in GENERIC_FOLDER_NAMES and path.parent.name:
        return path.parent.name if path.name == "checkpoint" else f"{path.parent.name}/{path.name}"
    return path.name or str(path)


def model_name(spec: object) -> str:
    """The name of the model ``spec`` (zoo name, folder path, or anything with ``.name``) by the rule above."""
    if not isinstance(spec, (str, Path)):
        return getattr(spec, "name", None) or getattr(getattr(spec, "config", None), "variant", type(spec).__name__)
    path = Path(spec).expanduser()
    if not path.is_dir():
        return str(spec)  # a zoo name or a hub id, as given
    return hub_id_of_snapshot(path) or model_card_title(path) or folder_name(path)


def model_label(spec: object) -> str:
    """How a model is named in tables: ``model_name`` (zoo name, hub id, model-card title, else the folder's
    own name), the one rule of the API and every command."""
    return model_name(spec)


def table_names(specs: list, given: list[str] | None) -> list[str]:
    """The name of each model in the tables: ``--name`` (one per --model, none twice), else the naming rule,
    with the path as given for models whose names would collide (a run folder called ``dstg`` beside the zoo's)."""
    if given is not None:
        if len(given) != len(specs):
            raise ValueError(f"--name gives {len(given)} name(s) for {len(specs)} --model(s); give one per model, in order")
        twice = sorted({n for n in given if given.count(n) > 1})
        if twice:
            raise ValueError(f"--name gives {twice[0]!r} twice; each model of one table needs its own name")
        return list(given)
    names = [model_label(spec) for spec in specs]
    return [str(spec) if names.count(name) > 1 else name for spec, name in zip(specs, names)]
