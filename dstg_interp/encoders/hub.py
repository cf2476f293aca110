"""Hugging Face hub ids (``org/name``) through the Hugging Face cache, with the rules of local folders.

    folder = resolve_hub_id("sentence-transformers/all-MiniLM-L6-v2")   # .../models--org--name/snapshots/HASH
    encoder = open_encoder("sentence-transformers/all-MiniLM-L6-v2")    # the same, through open_encoder / --model

The cache is the one every ``transformers`` user has (``HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``):
a model already there is used without touching the network; with ``HF_HUB_OFFLINE=1`` nothing else is tried;
otherwise the files an encoder needs (config, safetensors weights, tokenizer, model card) are downloaded
into it by ``huggingface_hub``.  Safety as for a local folder: weights only as safetensors (never a pickle),
no code from the repository (a config whose ``auto_map`` names a class transformers does not ship is
refused), gated or missing repositories refused in one line.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

from .base import EncoderError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# What an encoder needs, and nothing that could be unpickled or executed.
ENCODER_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt", "README.md", "modules.json", "config_sentence_transformers.json"]


def looks_like_hub_id(spec: object) -> bool:
    """``org/name`` that is not an existing path (a relative path that does not exist also looks so)."""
    return isinstance(spec, str) and bool(HUB_ID.match(spec)) and not Path(spec).exists()


def resolve_hub_id(repo_id: str) -> Path:
    """The snapshot folder of ``repo_id`` in the Hugging Face cache, downloaded first unless offline.

    Raises EncoderError with one line: not cached and offline (or no network), gated, not on the hub,
    no safetensors weights."""
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=ENCODER_FILES, local_files_only=True))
    except LocalEntryNotFoundError:
        folder = None
    except (OSError, ValueError) as err:
        raise EncoderError(f"{repo_id}: cannot read it from the Hugging Face cache ({_first_line(err)})") from None
    if folder is None or not (folder / "config.json").is_file():
        _check_not_a_mistyped_path(repo_id)
        folder = _download(repo_id)
    if not any(folder.glob("*.safetensors")):
        raise EncoderError(f"{repo_id}: the hub repository has no safetensors weights; this toolkit never unpickles "
                           "a downloaded file: convert it to safetensors or use a repository that ships them")
    return folder


def _check_not_a_mistyped_path(spec: str) -> None:
    """``runs/nope`` where ``runs/`` is a local folder is a path with a typo, not a hub id: say so, offline."""
    parent = Path(spec).parent
    if parent.is_dir():
        names = sorted(child.name for child in parent.iterdir() if child.is_dir() and not child.name.startswith("."))
        close = difflib.get_close_matches(Path(spec).name, names, n=3)
        hint = f"; did you mean {' or '.join(str(parent / name) for name in close)}?" if close else \
            (f"; it holds {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}" if names else "; it is empty")
        raise EncoderError(f"{spec}: no such folder: {parent}/ exists but has no {Path(spec).name!r}{hint} (not tried "
                           f"as a Hugging Face hub id: {parent}/ is a local folder)")


def _download(repo_id: str) -> Path:
    cache = constants.HF_HUB_CACHE
    if constants.HF_HUB_OFFLINE:
        raise EncoderError(f"{repo_id}: not a local folder and not in the Hugging Face cache ({cache}), and "
                           "HF_HUB_OFFLINE is set: download it once where there is a network (hf download "
                           f"{repo_id}), or pass a local folder")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=ENCODER_FILES))
    except GatedRepoError:
        raise EncoderError(f"{repo_id}: a gated repository; accept its terms on the hub and log in (hf auth login), "
                           "then rerun") from None
    except RepositoryNotFoundError:
        raise EncoderError(f"{repo_id}: no such model on the Hugging Face hub (nor a local folder of that name)") from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as err:
        raise EncoderError(f"{repo_id}: no such local folder (check the path), and as a hub id it is not in the Hugging "
                           f"Face cache ({cache}) and the hub cannot be reached ({_first_line(err)}): download it where "
                           "there is a network, or pass a local folder") from None


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
