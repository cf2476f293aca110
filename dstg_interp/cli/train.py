"""dstg-train: MLM pretraining of any variant from the command line (the loop is dstg_interp/train.py).

    dstg-train --variant dstg --out runs/dstg --steps 3000               # one process
    dstg-launch --nproc-per-node 2 dstg-train --variant dstg --out runs/dstg   # DDP (gloo/nccl); or plain torchrun -m dstg_interp.cli.train
    dstg-train --out runs/dstg --resume                                   # continue exactly
    dstg-train --config runs/dstg/train_config.json --out runs/dstg2      # a saved recipe

Flags override ``--config`` (or, with ``--resume``, the train_config.json in ``--out``), which overrides
``TrainConfig``'s defaults.  Ctrl-C leaves the last complete checkpoint as it was and says which it is.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from dstg_interp.config import ConfigIO
from dstg_interp.variants import VARIANTS, variant_row
from dstg_interp.io import check_output_location, folder_entries, output_lock
from dstg_interp.torchrun_env import torchrun_environment
from dstg_interp.train import CHECKPOINT_DIR, CONFIG_FILE, STATE_FILE, TrainConfig, train

from . import flags
from .config_args import add_config_arguments, config_from_args, run_command


@dataclass
class TrainCommand(ConfigIO):
    """dstg-train's flags beside TrainConfig's own: where a run starts from, and the model's size (which
    becomes TrainConfig.model)."""

    config: str | None = field(default=None, metadata={"help": "a train_config.json to start from (flags override it)"})
    resume: bool = field(default=False, metadata={"help": "continue the checkpoint in --out exactly"})
    # choices: the variants table itself, read when a parser is built
    variant: str | None = field(default=None, metadata={"choices": VARIANTS, "help": "the model variant"})
    d_model: int | None = field(default=None, metadata={"help": "baseline width, or DSTG d_sem + d_ap"})
    d_ap: int | None = field(default=None, metadata={"help": "DSTG AP stream width", "shown": "1/8 of d_model"})
    n_layers: int | None = field(default=None, metadata={"min": 1, "help": "number of blocks"})
    n_heads: int | None = field(default=None, metadata={"min": 1, "help": "attention heads per block"})
    # TrainConfig's flags: given ones override --config (or, with --resume, the train_config.json in --out),
    # which overrides TrainConfig's defaults; made whole in __post_init__
    training: TrainConfig = field(default_factory=dict, metadata={"overrides": True})  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.training, TrainConfig):
            self.training = _train_config(self, dict(self.training))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dstg-train", description="MLM pretraining of DSTG-NeoBERT or a baseline.")
    add_config_arguments(p, TrainCommand)
    flags.add_renamed(p, "--layers", "--n-layers", "the model depth; --layers selects layers to read in the other commands")
    flags.add_renamed(p, "--heads", "--n-heads")
    flags.add_renamed(p, "--no-progress", "--quiet", takes_value=False)
    return p


def parse_args(argv=None) -> TrainCommand:
    return config_from_args(TrainCommand, build_parser().parse_args(argv))


def _train_config(command: TrainCommand, given: dict) -> TrainConfig:
    """TrainConfig's defaults, then --config (or, with --resume, the train_config.json in --out), then the
    flags ``given``."""
    base = TrainConfig().to_dict()
    base["warmup_steps"] = None  # unless a --config or --warmup-steps sets it: scaled to the final --steps
    out = given.get("out_dir")
    if command.config:
        base.update(_read_json_object(Path(command.config), "--config"))
    elif command.resume and out and (Path(out) / CONFIG_FILE).is_file():
        base.update(_read_json_object(Path(out) / CONFIG_FILE, "--resume"))
    base["model"] = _model_fields(dict(base["model"]), command)
    TrainConfig.from_dict(base)  # a --config with unknown fields is one clear error, before the flags
    return TrainConfig(**{**base, **given})


def _model_fields(model: dict, command: TrainCommand) -> dict:
    """TrainConfig.model with --variant / --d-model / --d-ap / --n-layers / --n-heads applied."""
    if command.variant or command.d_model or command.d_ap:
        variant = command.variant or model["variant"]
        d_model = command.d_model or (model.get("d_model") or (model.get("d_sem", 0) + model.get("d_ap", 0)))
        if variant_row(variant).ap_stream:
            d_ap = command.d_ap or max(command.n_heads or model.get("n_heads", 4), d_model // 8)
            model = dict(model, variant=variant, d_sem=d_model - d_ap, d_ap=d_ap, d_model=None)
        else:
            model = dict(model, variant=variant, d_model=d_model, d_sem=None, d_ap=None)
    if command.n_layers:
        model["n_layers"] = command.n_layers
    if command.n_heads:
        model["n_heads"] = command.n_heads
    return {k: v for k, v in model.items() if v is not None}


def _read_json_object(path: Path, flag: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{flag} {path}: cannot be read ({err.strerror if isinstance(err, OSError) else err})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag} {path}: not valid JSON ({err.msg} at line {err.lineno}); pass a train_config.json") from None
    if not isinstance(data, dict):
        raise ValueError(f"{flag} {path}: expected a JSON object (a train_config.json)")
    return data


def _check_device(cfg: TrainConfig) -> None:
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {cfg.device}: no CUDA device is available here; use --device cpu")


def _interrupted(command: TrainCommand | None) -> str:
    out_dir = Path(command.training.out_dir if command is not None else TrainConfig().out_dir)
    try:
        step = json.loads((out_dir / CHECKPOINT_DIR / STATE_FILE).read_text())["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return "no checkpoint was saved yet"
    return f"the last complete checkpoint (step {step}) in {out_dir / CHECKPOINT_DIR} is untouched; continue with --resume"


def _main(command: TrainCommand) -> int:
    cfg = command.training
    _check_device(cfg)
    out_dir = Path(cfg.out_dir)
    is_main = (torchrun_environment() or (0, 1))[0] == 0  # stale torchrun variables: one line (torchrun_env)
    if not is_main:  # rank 0 checks and holds the output folder for all ranks
        train(cfg, resume=command.resume)
        return 0
    check_output_location(out_dir)
    created = not out_dir.exists()
    try:
        with output_lock(out_dir, "dstg-train " + " ".join(sys.argv[1:])):
            result = train(cfg, resume=command.resume)
    finally:
        # A run that failed before writing anything leaves no empty folder behind.
        if created and out_dir.is_dir() and not folder_entries(out_dir):
            shutil.rmtree(out_dir, ignore_errors=True)
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run_command(build_parser(), TrainCommand, _main, argv, interrupted=_interrupted)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
