"""Checkpoints: a directory with ``config.json``, ``model.safetensors`` and (optionally) ``tokenizer.json``.

    model.save("runs/dstg")                          # float32; dtype=torch.float16 halves the size
    model = load_model("runs/dstg")                   # or a zoo name: load_model("dstg")

No pickle anywhere: weights go through safetensors, the config through JSON.  Writes go to a temporary
sibling directory that is renamed into place, so a crash never leaves a half-written checkpoint.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..config import ModelConfig
from ..io import atomic_directory, commit_directory  # noqa: F401  (re-exported: the store and others import them here)

ZOO_DIR = Path(__file__).resolve().parent.parent / "zoo"
ZOO_NAMES = ("dstg", "rope", "ap", "rp")
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"


class CheckpointError(ValueError):
    """A checkpoint directory is missing, corrupt or does not match its config."""


class NonFiniteWeightsWarning(UserWarning):
    """A checkpoint holds NaN or inf weights: everything computed from it will be NaN."""


def build_model(config: ModelConfig):
    """A randomly initialised model of ``config.variant``, seeded by ``config.seed`` (global RNG untouched)."""
    from .baselines import NeoBERT
    from .dstg import DSTGNeoBERT

    cls = DSTGNeoBERT if config.variant == "dstg" else NeoBERT
    available = physical_memory()
    if available and config.memory_bytes() > available:
        raise CheckpointError(f"a {config.variant} model with these sizes needs about {config.memory_bytes() / 1e9:,.1f} GB "
                              f"but this machine has {available / 1e9:,.1f} GB (vocab_size={config.vocab_size}, "
                              f"max_positions={config.max_positions}); check the sizes")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        try:
            return cls(config)
        except RuntimeError as err:
            if "allocate" not in str(err):
                raise
            raise CheckpointError(f"not enough memory to build a {config.variant} model with vocab_size={config.vocab_size}, "
                                  f"max_positions={config.max_positions}, d_model={config.d_model}; check the sizes") from None


def physical_memory() -> int | None:
    """Bytes of RAM on this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """A zoo name (``dstg``, ``rope``, ``ap``, ``rp``, or another folder of the zoo such as ``dstg-offset``)
    or a path -> the checkpoint directory."""
    path = Path(name_or_path)
    shipped = ZOO_DIR / str(name_or_path)  # the reference four, or an extra model shipped beside them
    if not path.exists() and (str(name_or_path) in ZOO_NAMES or (shipped / CONFIG_FILE).is_file()):
        path = shipped
        if not (path / CONFIG_FILE).exists():
            raise CheckpointError(f"zoo model {name_or_path!r} is not shipped in {ZOO_DIR}; train it with experiments/pretrain_zoo.py")
    if not path.is_dir():
        shipped_names = sorted(p.name for p in ZOO_DIR.iterdir() if (p / CONFIG_FILE).is_file()) if ZOO_DIR.is_dir() else []
        names = list(ZOO_NAMES) + [n for n in shipped_names if n not in ZOO_NAMES]
        raise CheckpointError(f"checkpoint {str(name_or_path)!r} is not a directory (nor a zoo name: {', '.join(names)})")
    return path


def read_config(path: Path) -> ModelConfig:
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise CheckpointError(f"{path}: no {CONFIG_FILE}; not a dstg-interp checkpoint")
    try:
        data = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{config_path}: expected a JSON object")
    if "model_type" in data and "variant" not in data:
        raise CheckpointError(
            f"{path}: this is a Hugging Face model directory (model_type={data['model_type']!r}); load it with dstg_interp.load_hf_encoder"
        )
    try:
        return ModelConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{config_path}: {err}") from None


def load_model(name_or_path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """Load a checkpoint directory or zoo model; weights are cast to ``dtype`` (float32 by default)."""
    path = resolve_checkpoint(name_or_path)
    config = read_config(path)
    weights_path = path / WEIGHTS_FILE
    if not weights_path.is_file():
        raise CheckpointError(f"{path}: no {WEIGHTS_FILE}")
    try:
        state = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{weights_path}: corrupt safetensors file ({err})") from None
    model = build_model(config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        detail = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise CheckpointError(f"{weights_path}: weights do not match config.json (variant {config.variant!r}): {detail}")
    for key, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise CheckpointError(
                f"{weights_path}: {key} has shape {tuple(tensor.shape)} but config.json implies {tuple(expected[key].shape)}"
            )
        if not tensor.is_floating_point():  # an integer table cast to float is not a model anyone trained
            raise CheckpointError(f"{weights_path}: {key} has dtype {str(tensor.dtype).replace('torch.', '')}; "
                                  "weights must be floating point (float32, float16 or bfloat16)")
    bad = [key for key, tensor in state.items() if not bool(torch.isfinite(tensor).all())]
    if bad:
        warnings.warn(f"{weights_path}: {len(bad)} tensor(s) hold NaN or inf values ({', '.join(bad[:3])}); "
                      "every activation computed from this model will be NaN", NonFiniteWeightsWarning, stacklevel=2)
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    tokenizer_path = path / TOKENIZER_FILE
    if tokenizer_path.is_file():
        from tokenizers import Tokenizer

        try:
            model.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as err:  # tokenizers raises a bare Exception on bad JSON
            raise CheckpointError(f"{tokenizer_path}: cannot be read ({err})") from None
        if model.tokenizer.get_vocab_size() != config.vocab_size:
            raise CheckpointError(
                f"{tokenizer_path}: vocabulary of {model.tokenizer.get_vocab_size()} tokens does not match the model's vocab_size={config.vocab_size}"
            )
    model.checkpoint_path = path
    return model.to(device=device, dtype=dtype).eval()


def save_checkpoint(
    model,
    path: str | Path,
    dtype: torch.dtype | None = None,
    tokenizer=None,
    extra_files: dict | None = None,
    extra_tensors: dict[str, dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write config + weights (+ tokenizer, + extra JSON/text files, + extra safetensors files such as
    optimizer state) atomically into ``path``."""
    path = Path(path)
    tmp = atomic_directory(path)
    try:
        state = {k: v.detach().to("cpu", dtype=dtype or v.dtype).contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        model.config.to_json(tmp / CONFIG_FILE)
        if tokenizer is not None:
            tokenizer.save(str(tmp / TOKENIZER_FILE))
        for name, tensors in (extra_tensors or {}).items():
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / name))
        for name, content in (extra_files or {}).items():
            (tmp / name).write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
        commit_directory(tmp, path)
    except SafetensorError as err:  # safetensors reports a full disk as its own error type
        shutil.rmtree(tmp, ignore_errors=True)
        full = "No space left" in str(err) or "StorageFull" in str(err)
        raise OSError(errno.ENOSPC if full else errno.EIO, "No space left on device" if full else str(err), str(path)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
