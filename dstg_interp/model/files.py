"""Reading the files of a checkpoint folder safely: config JSON, weights, tokenizer, their hash.

    state, files = read_weights(folder)            # model.safetensors (or shards), else pytorch_model.bin
    tokenizer = read_tokenizer(folder / "tokenizer.json")

Every failure is one ``CheckpointError`` (a ValueError) naming the file and what to do.  Weights come from
safetensors, or, for other authors' folders only, from a PyTorch file read with
``torch.load(weights_only=True)``, which refuses anything but tensors and plain containers: nothing a
user hands us is ever unpickled into arbitrary objects.
"""

from __future__ import annotations

import hashlib
import pickle
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from dstg_interp.io import read_json_file

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"
SHARD_INDEX_FILE = "model.safetensors.index.json"
# PyTorch files of other authors: the HF name, then the training code's.  Read with weights_only=True.
TORCH_WEIGHT_FILES = ("pytorch_model.bin", "state_dict.pt")
# Training checkpoints often wrap the state dict (DeepSpeed: "module").
STATE_DICT_WRAPPERS = ("module", "model", "state_dict")


class CheckpointError(ValueError):
    """A checkpoint directory is missing, corrupt or does not match its config."""


def read_json(path: Path, optional: bool = False) -> dict:
    """A JSON object file: a missing, invalid or non-object file is one CheckpointError; ``optional`` (the
    side files of a Hugging Face folder, which may be absent or odd): {} instead, and no error."""
    path = Path(path)
    try:
        if not path.is_file():
            raise CheckpointError(f"{path.parent}: no {path.name}; not a checkpoint folder")
        data = read_json_file(path, CheckpointError)
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
    except (OSError, ValueError):
        if optional:
            return {}
        raise
    return data


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt safetensors file ({message}); the download or save was probably "
                              "interrupted: fetch it again") from None


def read_torch_weights(path: Path) -> dict[str, torch.Tensor]:
    """A PyTorch state dict, read with weights_only=True: tensors and plain containers only."""
    try:
        with warnings.catch_warnings():  # "Detected pickle protocol 4 ...": torch's aside, before our own verdict
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(f"{path}: holds pickled Python objects besides tensors, which are never unpickled "
                              "here (torch.load(weights_only=True) refused it); re-save its state_dict() with "
                              "safetensors.torch.save_file as model.safetensors") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: not a readable PyTorch weights file ({message})") from None
    for wrapper in STATE_DICT_WRAPPERS:
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
            break
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{path}: not a state dict (a mapping of parameter names to tensors)")
    return state


def weight_files(folder: Path, allow_torch: bool) -> list[Path]:
    """The files holding a folder's weights, in the order they are read (several for sharded safetensors)."""
    if (folder / WEIGHTS_FILE).is_file():
        return [folder / WEIGHTS_FILE]
    if (folder / SHARD_INDEX_FILE).is_file():
        weight_map = read_json(folder / SHARD_INDEX_FILE).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{folder / SHARD_INDEX_FILE}: no weight_map")
        shards = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [shard.name for shard in shards if not shard.is_file()]
        if missing:
            raise CheckpointError(f"{folder}: shard {missing[0]} listed in {SHARD_INDEX_FILE} is missing")
        return shards
    if allow_torch:
        for name in TORCH_WEIGHT_FILES:
            if (folder / name).is_file():
                return [folder / name]
        raise CheckpointError(f"{folder}: no weights ({WEIGHTS_FILE}, {SHARD_INDEX_FILE} or {' or '.join(TORCH_WEIGHT_FILES)})")
    raise CheckpointError(f"{folder}: no {WEIGHTS_FILE}")


def read_weights(folder: Path, allow_torch: bool = False) -> tuple[dict[str, torch.Tensor], list[Path]]:
    """All tensors of a folder and the files they came from."""
    files = weight_files(folder, allow_torch)
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(read_safetensors(file) if file.name.endswith(".safetensors") else read_torch_weights(file))
    return state, files


def files_sha256(files: list[Path]) -> str:
    """sha256 of the weight files' bytes, concatenated in order (one file: that file's usual sha256)."""
    digest = hashlib.sha256()
    for file in files:
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def find_tokenizer(folder: Path) -> Path | None:
    """tokenizer.json, else a WordPiece vocab.txt (BERT / NeoBERT), else None."""
    for name in (TOKENIZER_FILE, "vocab.txt"):
        if (folder / name).is_file():
            return folder / name
    return None


def read_tokenizer(path: str | Path) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from tokenizer.json, a WordPiece vocab.txt, or a folder holding either;
    padding and truncation off (some shipped tokenizer.json files pad every encoding)."""
    path = Path(path)
    if path.is_dir():
        found = find_tokenizer(path)
        if found is None:
            raise CheckpointError(f"{path}: no {TOKENIZER_FILE} or vocab.txt in this folder")
        path = found
    if not path.is_file():
        raise CheckpointError(f"{path}: tokenizer file not found")
    try:
        if path.suffix == ".txt":
            options = read_json(path.parent / "tokenizer_config.json") if (path.parent / "tokenizer_config.json").is_file() else {}
            wordpiece = BertWordPieceTokenizer(str(path), lowercase=bool(options.get("do_lower_case", True)))
            tokenizer = Tokenizer.from_str(wordpiece.to_str())
        else:
            tokenizer = Tokenizer.from_file(str(path))
    except CheckpointError:
        raise
    except Exception as err:  # tokenizers raises a bare Exception on bad JSON
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: cannot be read as a tokenizer ({message})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


# Published encoders often pad their embedding past the tokenizer (30,522 tokens, 30,528 rows; 50,265 / 50,272;
# 32,100 / 32,128): ids past the tokenizer are never produced.  A tokenizer covering less than this share of
# the rows (25 tokens for 100 rows) is most likely another model's: refused, unless the user says it is the
# model's own (``tokenizer_mismatch_allowed``; the commands' --allow-tokenizer-mismatch), then said in a warning.
MIN_TOKENIZER_SHARE = 0.9
ALLOW_MISMATCH_FLAG = "--allow-tokenizer-mismatch"
_TOKENIZER_RULE = {"allow_mismatch": False}


class TokenizerMismatchWarning(UserWarning):
    """A tokenizer much smaller than the embedding it is used with, read because the user allowed it."""


@contextmanager
def tokenizer_mismatch_allowed(allowed: bool = True):
    """Within it, a tokenizer covering less than MIN_TOKENIZER_SHARE of the model's embedding rows is read with
    a TokenizerMismatchWarning instead of refused (the model's own tokenizer on an embedding padded far past it).

        with tokenizer_mismatch_allowed():
            encoder = open_encoder("path/to/model")
    """
    saved = _TOKENIZER_RULE["allow_mismatch"]
    _TOKENIZER_RULE["allow_mismatch"] = bool(allowed)
    try:
        yield
    finally:
        _TOKENIZER_RULE["allow_mismatch"] = saved


def check_tokenizer_fits(n_tokens: int, vocab_size: int, where: str, error=ValueError) -> None:
    """The rule for a tokenizer beside an embedding of ``vocab_size`` rows: never more tokens than rows, and
    not under MIN_TOKENIZER_SHARE of them (``error`` is raised) unless ``tokenizer_mismatch_allowed``, where
    the second is a TokenizerMismatchWarning."""
    if n_tokens > vocab_size:
        raise error(f"{where}: the tokenizer has {n_tokens} tokens but the model's embedding only {vocab_size} rows, "
                    "so some token ids have no embedding; pass the tokenizer the model was trained with")
    if n_tokens < MIN_TOKENIZER_SHARE * vocab_size:
        said = (f"{where}: the tokenizer has {n_tokens} tokens for an embedding of {vocab_size} rows "
                f"({n_tokens / vocab_size:.0%}); a padded embedding keeps at least {MIN_TOKENIZER_SHARE:.0%} "
                "of its rows in use, so this looks like another model's tokenizer: its ids would mean other words")
        if not _TOKENIZER_RULE["allow_mismatch"]:
            raise error(f"{said}; pass the model's own tokenizer, or {ALLOW_MISMATCH_FLAG} if this is it (Python: "
                        "with dstg_interp.model.files.tokenizer_mismatch_allowed(): ...)")
        warnings.warn(said, TokenizerMismatchWarning, stacklevel=3)
