"""Checkpoints: a directory with ``config.json``, ``model.safetensors`` and (optionally) ``tokenizer.json``.

    model.save("runs/dstg")                          # float32; dtype=torch.float16 halves the size
    model = load_model("runs/dstg")                   # or a zoo name: load_model("dstg")
    model = load_model("path/to/NeoBERT", tokenizer="path/to/tokenizer.json")   # other authors' formats

``load_model`` also reads the authors' PosNeoBERT / NeoBERT folders (``formats.py``) and maps them onto
our models; ``dstg-convert`` writes them once in this format, which stays the canonical one.

No pickle anywhere: weights go through safetensors, the config through JSON.  Writes go to a temporary
sibling directory that is renamed into place, so a crash never leaves a half-written checkpoint.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import torch

from ..config import ModelConfig
from ..variants import VARIANTS, variant_row, variants_where
from .baselines import NeoBERT
from .dstg import DSTGNeoBERT
from .files import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    check_tokenizer_fits,
    find_tokenizer,
    read_json,
    read_safetensors,
    read_tokenizer,
)
from .formats import is_neobert_family, read_foreign_checkpoint
from .saving import save_checkpoint  # noqa: F401  (re-exported)

ZOO_DIR = Path(__file__).resolve().parent.parent / "zoo"
ZOO_NAMES = variants_where(role="proposed") + variants_where(role="baseline")  # the reference four
ZOO_SEEDS = (0, 1, 2)  # the training seeds the zoo ships (experiments/pretrain_zoo.py --seeds 0 1 2)
# The floor: NoPE-NeoBERT, no positional input at all, trained with the reference four's recipe (one seed so
# far).  It is not one of the four (no paper claim is about it); the probe tables and claims read it, where
# the zoo holds it, as what an MLM encoder recovers of position from content alone.
(ZOO_FLOOR,) = variants_where(role="floor")
ZOO_FLOOR_SEEDS = (0,)
# How to train it into the shipped zoo (a rerun of the same command continues from its last checkpoint).
ZOO_TRAIN_COMMAND = "python -m experiments.pretrain_zoo --precision float32"  # the shipped zoo's recipe and precision
FLOOR_TRAIN_COMMAND = f"{ZOO_TRAIN_COMMAND} --variants {ZOO_FLOOR} --seeds 0 --out dstg_interp/zoo --threads 1"
# The zoo's architecture (pretrain_zoo, recipe_study, the benchmarks and TrainConfig's default read it): each
# variant's widths from its row of the variants table (d_model 128; DSTG 112 + 16), the depth here.
ZOO_WIDTHS = {name: row.widths() for name, row in VARIANTS.items()}
ZOO_DEPTH = dict(n_layers=6, n_heads=4)  # the shipped zoo (recipe authors, as 6x128 before it; the 4x128 zoo had 4 layers)


def zoo_architecture(variant: str) -> dict:
    """The ModelConfig fields of a zoo model of ``variant`` (a copy): its widths and the zoo's depth."""
    return dict(variant_row(variant).widths(), **ZOO_DEPTH)


# The one tokenizer of the shipped zoo (every member holds a copy): the zoo recipe trains new members with
# it, so a member trained later shares the shipped members' token ids.
ZOO_TOKENIZER = ZOO_DIR / "dstg" / "tokenizer.json"


def zoo_member(variant: str, seed: int = 0) -> str:
    """Folder name of one zoo run: seed 0 is the plain variant name (what ``load_model("dstg")`` finds),
    seed k > 0 is ``<variant>-seed<k>``."""
    return variant if seed == 0 else f"{variant}-seed{seed}"


def missing_zoo_members(zoo_dir: Path, variants, seeds) -> list[str]:
    """The (variant, seed) members a zoo folder lacks, as folder names (a member is its model.safetensors)."""
    return [zoo_member(v, s) for s in seeds for v in variants
            if not (Path(zoo_dir) / zoo_member(v, s) / "model.safetensors").is_file()]


class NonFiniteWeightsWarning(UserWarning):
    """A checkpoint holds NaN or inf weights: everything computed from it will be NaN."""


# the variants table names each variant's class (Variant.model_class)
MODEL_CLASSES = {cls.__name__: cls for cls in (DSTGNeoBERT, NeoBERT)}


def build_model(config: ModelConfig):
    """A randomly initialised model of ``config.variant``, seeded by ``config.seed`` (global RNG untouched)."""
    cls = MODEL_CLASSES[config.spec.model_class]
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


# The folder of a dstg-train run (``--out``) that holds its latest checkpoint (dstg_interp.train.CHECKPOINT_DIR).
RUN_CHECKPOINT = "checkpoint"


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """A zoo name (``dstg``, ``rope``, ``ap``, ``rp``, ``nope`` once trained, or another folder of the zoo such as
    ``dstg-offset``) or a path -> the checkpoint directory (a dstg-train run folder -> its ``checkpoint/``)."""
    path = Path(name_or_path)
    shipped = ZOO_DIR / str(name_or_path)  # the reference four, or an extra model shipped beside them
    known = (*ZOO_NAMES, ZOO_FLOOR)
    if not path.exists() and (str(name_or_path) in known or (shipped / CONFIG_FILE).is_file()):
        path = shipped
        if not (path / CONFIG_FILE).exists():
            command = FLOOR_TRAIN_COMMAND if str(name_or_path) == ZOO_FLOOR else ZOO_TRAIN_COMMAND
            raise CheckpointError(f"zoo model {name_or_path!r} is not shipped in {ZOO_DIR}; train it with {command}")
    if not path.is_dir():
        shipped_names = sorted(p.name for p in ZOO_DIR.iterdir() if (p / CONFIG_FILE).is_file()) if ZOO_DIR.is_dir() else []
        names = list(ZOO_NAMES) + [n for n in shipped_names if n not in ZOO_NAMES]
        raise CheckpointError(f"checkpoint {str(name_or_path)!r} is not a directory (nor a zoo name: {', '.join(names)}; "
                              "nor a Hugging Face folder or org/name hub id)")
    if not (path / CONFIG_FILE).is_file() and (path / RUN_CHECKPOINT / CONFIG_FILE).is_file():
        return path / RUN_CHECKPOINT  # a dstg-train run folder: its latest checkpoint
    return path


def is_own_config(data: dict) -> bool:
    return "variant" in data or "model_type" not in data and not is_neobert_family(data)


def read_config(path: Path, data: dict | None = None) -> ModelConfig:
    """Our config.json -> ModelConfig (``data``: its already parsed content)."""
    if data is None:
        if not (path / CONFIG_FILE).is_file():
            raise CheckpointError(f"{path}: no {CONFIG_FILE}; not a dstg-interp checkpoint")
        data = read_json(path / CONFIG_FILE)
    try:
        return ModelConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path / CONFIG_FILE}: {err}") from None


def unknown_architecture(path: Path, data: dict) -> CheckpointError:
    return CheckpointError(
        f"{path}: unknown architecture (model_type={data.get('model_type')!r}, architectures={data.get('architectures')}); "
        "load_model reads dstg-interp checkpoints, the authors' PosNeoBERT and NeoBERT folders; "
        "load other Hugging Face encoders with dstg_interp.load_hf_encoder")


def recognised_checkpoint(path: str | Path) -> bool:
    """True when ``load_model`` reads this folder (ours, the authors' or NeoBERT) rather than refusing it."""
    try:
        data = json.loads((Path(path) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and (is_own_config(data) or is_neobert_family(data))


def missing_tokenizer_message(path: Path) -> str:
    return (f"{path}: no tokenizer ({TOKENIZER_FILE} or vocab.txt) beside the weights, and probing needs the one the "
            f"model was trained with: put it there as {TOKENIZER_FILE} (or vocab.txt), or pass it explicitly "
            "(dstg-convert SRC OUT --tokenizer FILE; load_model(path, tokenizer=FILE))")


def load_model(name_or_path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
               tokenizer: str | Path | None = None):
    """Load a checkpoint directory or zoo model; weights are cast to ``dtype`` (float32 by default).

    The folder may also hold another author's format (formats.py: the authors' PosNeoBERT and NeoBERT
    baselines, chandar-lab NeoBERT); ``model.config.source`` then names it.  ``tokenizer``: a
    tokenizer.json, vocab.txt or folder with one, used instead of the checkpoint's own.
    """
    path = resolve_checkpoint(name_or_path)
    if not (path / CONFIG_FILE).is_file():
        raise CheckpointError(f"{path}: no {CONFIG_FILE}; not a dstg-interp checkpoint")
    data = read_json(path / CONFIG_FILE)
    if is_own_config(data):
        config = read_config(path, data)
        if not (path / WEIGHTS_FILE).is_file():
            raise CheckpointError(f"{path}: no {WEIGHTS_FILE}")
        state, weights_path = read_safetensors(path / WEIGHTS_FILE), path / WEIGHTS_FILE
        tokenizer_path = path / TOKENIZER_FILE if (path / TOKENIZER_FILE).is_file() else None
    elif is_neobert_family(data):
        foreign = read_foreign_checkpoint(path, data)
        config, state, weights_path = foreign.config, foreign.state, path / foreign.config.source["files"][0]
        tokenizer_path = find_tokenizer(path)
    else:
        raise unknown_architecture(path, data)
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
    if tokenizer is not None:
        tokenizer_path = Path(tokenizer)
    if tokenizer_path is not None:
        model.tokenizer = read_tokenizer(tokenizer_path)
        size = model.tokenizer.get_vocab_size()
        if config.source is None and size != config.vocab_size:  # our own checkpoints hold their exact tokenizer
            raise CheckpointError(
                f"{tokenizer_path}: vocabulary of {size} tokens does not match the model's vocab_size={config.vocab_size}"
            )
        # a converted model's embedding may be padded past its tokenizer (check_tokenizer_fits), never short of it
        check_tokenizer_fits(size, config.vocab_size, str(tokenizer_path), error=CheckpointError)
    model.checkpoint_path = path
    return model.to(device=device, dtype=dtype).eval()
