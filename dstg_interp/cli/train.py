"""dstg-train: MLM pretraining of any variant from the command line (the loop is dstg_interp/train.py).

    dstg-train --variant dstg --out runs/dstg --steps 3000               # one process
    torchrun --nproc_per_node 2 -m dstg_interp.cli.train --variant dstg --out runs/dstg   # DDP (gloo/nccl)
    dstg-train --out runs/dstg --resume                                   # continue exactly
    dstg-train --config runs/dstg/train_config.json --out runs/dstg2      # a saved recipe

Flags override ``--config`` (or, with ``--resume``, the train_config.json in ``--out``), which overrides
``TrainConfig``'s defaults.  Ctrl-C leaves the last complete checkpoint as it was and says which it is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from dstg_interp.io import check_output_location, folder_entries, output_lock
from dstg_interp.train import CHECKPOINT_DIR, COMPILE_MIN_STEPS, CONFIG_FILE, SCHEDULES, STATE_FILE, TrainConfig, train

from . import flags
from .flags import positive_int
from .shell import run_cli


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dstg-train", description="MLM pretraining of DSTG-NeoBERT or a baseline.")
    p.add_argument("--config", help="a train_config.json to start from (flags below override it)")
    flags.add_out(p, what="a folder for checkpoint/, log.jsonl, train_config.json", shown=f"--config's, else {TrainConfig.out_dir}")
    p.add_argument("--resume", action="store_true", help="continue the checkpoint in --out exactly")
    p.add_argument("--variant", choices=["dstg", "rope", "ap", "rp"])
    p.add_argument("--d-model", type=int, help="baseline width, or DSTG d_sem + d_ap")
    p.add_argument("--d-ap", type=int, help="DSTG AP stream width (default 1/8 of d_model)")
    p.add_argument("--n-layers", type=positive_int, help="number of blocks")
    p.add_argument("--n-heads", type=positive_int, help="attention heads per block")
    flags.add_renamed(p, "--layers", "--n-layers", "the model depth; --layers selects layers to read in the other commands")
    flags.add_renamed(p, "--heads", "--n-heads")
    flags.add_renamed(p, "--no-progress", "--quiet", takes_value=False)
    p.add_argument("--corpus", help="en-mix, a folder of .txt, a .jsonl, or hf:NAME[:CONFIG]:SPLIT")
    p.add_argument("--max-docs", type=positive_int)
    p.add_argument("--max-length", type=int)
    p.add_argument("--max-positions", type=int, help="position table size (default: --max-length)")
    p.add_argument("--random-offset", action="store_true", default=None,
                   help="shift each sequence's absolute positions randomly (dstg/ap; with --max-positions > --max-length)")
    p.add_argument("--vocab-size", type=int)
    p.add_argument("--tokenizer", help="reuse this tokenizer.json instead of training one")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--steps", type=positive_int, dest="max_steps")
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--schedule", choices=list(SCHEDULES))
    p.add_argument("--decay-fraction", type=float, help="constant schedule: the final share of steps that decays")
    p.add_argument("--mask-strategy", choices=["all", "80-10-10"])
    p.add_argument("--bf16", action="store_true", default=None)
    flags.add_seed(p, default=None, shown="--config's, else 0; model init, data order and masks")
    p.add_argument("--data-seed", type=flags.seed_int, help="train/validation split (keep fixed to compare seeds)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help=f"torch.compile the encoder (default: on for runs of at least {COMPILE_MIN_STEPS} steps)")
    p.add_argument("--eval-every", type=int)
    p.add_argument("--save-every", type=int)
    p.add_argument("--save-dtype", choices=["float32", "float16", "bfloat16"])
    flags.add_device(p, default=None, shown="--config's, else cpu")
    flags.add_threads(p)
    flags.add_quiet(p)
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    base = TrainConfig().to_dict()
    if args.config:
        base.update(_read_json_object(Path(args.config), "--config"))
    elif args.resume and args.out and (Path(args.out) / CONFIG_FILE).is_file():
        base.update(_read_json_object(Path(args.out) / CONFIG_FILE, "--resume"))
    model = dict(base["model"])
    if args.variant or args.d_model or args.d_ap:
        variant = args.variant or model["variant"]
        d_model = args.d_model or (model.get("d_model") or (model.get("d_sem", 0) + model.get("d_ap", 0)))
        if variant == "dstg":
            d_ap = args.d_ap or max(args.n_heads or model.get("n_heads", 4), d_model // 8)
            model = dict(model, variant=variant, d_sem=d_model - d_ap, d_ap=d_ap, d_model=None)
        else:
            model = dict(model, variant=variant, d_model=d_model, d_sem=None, d_ap=None)
    if args.n_layers:
        model["n_layers"] = args.n_layers
    if args.n_heads:
        model["n_heads"] = args.n_heads
    base["model"] = {k: v for k, v in model.items() if v is not None}
    if args.out:
        base["out_dir"] = args.out
    for name in ("corpus", "max_docs", "max_length", "max_positions", "random_offset", "vocab_size", "tokenizer", "batch_size", "max_steps", "lr", "warmup_steps",
                 "schedule", "decay_fraction", "mask_strategy", "bf16", "seed", "data_seed", "compile", "eval_every", "save_every", "save_dtype", "device", "threads"):
        value = getattr(args, name)
        if value is not None:
            base[name] = value
    if args.quiet:
        base["progress"] = False
    return TrainConfig.from_dict(base)


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


def _interrupted(out_dir: Path):
    def describe() -> str:
        try:
            step = json.loads((out_dir / CHECKPOINT_DIR / STATE_FILE).read_text())["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return "no checkpoint was saved yet"
        return f"the last complete checkpoint (step {step}) in {out_dir / CHECKPOINT_DIR} is untouched; continue with --resume"
    return describe


def _run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    _check_device(cfg)
    out_dir = Path(cfg.out_dir)
    is_main = int(os.environ.get("RANK", "0")) == 0
    if not is_main:  # rank 0 checks and holds the output folder for all ranks
        train(cfg, resume=args.resume)
        return 0
    check_output_location(out_dir)
    created = not out_dir.exists()
    try:
        with output_lock(out_dir, "dstg-train " + " ".join(sys.argv[1:])):
            result = train(cfg, resume=args.resume)
    finally:
        # A run that failed before writing anything leaves no empty folder behind.
        if created and out_dir.is_dir() and not folder_entries(out_dir):
            shutil.rmtree(out_dir, ignore_errors=True)
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out_dir = Path(args.out or TrainConfig().out_dir)
    try:
        return run_cli("dstg-train", lambda: _run(args), interrupted=_interrupted(out_dir))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
