"""Training throughput (tokens/s) and model-FLOPs utilisation against this machine's measured matmul peaks.

    python benchmarks/bench_training.py                 # the zoo's size (4 layers, d 128, T 128, batch 32)
    python benchmarks/bench_training.py --no-compile    # eager arms only (no compile time)

Runs full training steps (masked-logits forward, backward, clip, AdamW) on random full-length sequences
with 20% of positions masked, for each variant, in four arms: float32 eager, float32 compiled
(``compile_for_training``, what ``dstg-train --compile`` runs), and the same two under bfloat16 autocast
(``dstg-train --bf16``); MFU = tokens/s x model FLOPs per token / peak FLOP/s, the peak being a 1024^3
matmul of the arm's precision (float32, or bfloat16, which CPUs with AMX or AVX512-BF16 run several times
faster) timed in the same process, thread count and interleaved rounds. Beside each bfloat16 arm: its
losses over the first steps from the float32 arm's initialisation and batch (largest relative
difference), since a bf16 speed counts only where the losses match.
Results go to benchmarks/results/training.json.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from dstg_interp import ModelConfig, build_model
from dstg_interp.model.checkpoint import ZOO_NAMES, ZOO_WIDTHS, zoo_architecture
from bench_models import interleaved_median_seconds  # noqa: E402 (sibling script)
from machine import BENCH_DEPTH, LoadWatch, write_result
from threaded_args import parse_threaded
from dstg_interp.flops import training_flops_per_token
from dstg_interp.train import TrainConfig, compile_for_training, make_optimizer

LOSS_STEPS = 3  # steps whose losses the bf16 arm compares with float32's


def training_step(variant: str, cfg: ModelConfig, tokens, labels, compiled: bool, bf16: bool):
    """A fresh model (seed of ``cfg``) and its optimizer; returns step() -> loss, the step dstg-train runs."""
    model = build_model(cfg).train()
    if compiled:
        compile_for_training(model)
    optimizer = make_optimizer(model, TrainConfig(model=ZOO_WIDTHS[variant]))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(tokens, labels=labels, masked_logits_only=True).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--no-compile", action="store_true", help="leave out the compiled arms")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "training.json"))
    args = parse_threaded(parser)
    watch = LoadWatch.start(args)
    gen = torch.Generator().manual_seed(0)
    size = 1024
    a, b = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
    a16, b16 = a.bfloat16(), b.bfloat16()
    steps = {"matmul float32": lambda: a @ b, "matmul bfloat16": lambda: a16 @ b16}
    arms = [(compiled, bf16) for compiled in ((False,) if args.no_compile else (False, True)) for bf16 in (False, True)]
    configs, losses = {}, {}
    for name in ZOO_NAMES:  # the reference four (the nope floor is the same block minus position: not measured)
        cfg = ModelConfig(vocab_size=8192, max_positions=args.seq_len, **dict(zoo_architecture(name), **BENCH_DEPTH))
        tokens = torch.randint(5, 8192, (args.batch, args.seq_len), generator=gen)
        labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))
        configs[name] = cfg
        for compiled, bf16 in arms:
            key = (name, compiled, bf16)
            step = training_step(name, cfg, tokens, labels, compiled, bf16)
            # the first steps (compiles, when compiled) from the same initialisation: the loss agreement
            losses[key] = [float(step()) for _ in range(LOSS_STEPS)]
            steps[key] = step
    # interleaved rounds: background load (this is a shared machine) hits the peaks and every model alike
    seconds = interleaved_median_seconds(steps, warmup=1, rounds=args.steps)
    peaks = {False: 2 * size**3 / seconds["matmul float32"], True: 2 * size**3 / seconds["matmul bfloat16"]}
    rows = []
    for name, compiled, bf16 in losses:  # every arm, in the order it was built
        cfg = configs[name]
        tokens_per_s = args.batch * args.seq_len / seconds[(name, compiled, bf16)]
        flops = training_flops_per_token(cfg, args.seq_len)
        fp32_tokens_per_s = args.batch * args.seq_len / seconds[(name, compiled, False)]
        reference, own = losses[(name, compiled, False)], losses[(name, compiled, bf16)]
        rows.append(dict(model=name, compiled=compiled, precision="bfloat16" if bf16 else "float32",
                         tokens_per_s=tokens_per_s, flops_per_token=flops, achieved_flops=tokens_per_s * flops,
                         peak_flops=peaks[bf16], mfu=tokens_per_s * flops / peaks[bf16],
                         mfu_vs_float32_peak=tokens_per_s * flops / peaks[False],
                         vs_float32=tokens_per_s / fp32_tokens_per_s, first_losses=own,
                         max_rel_loss_diff_vs_float32=max(abs(x - y) / abs(y) for x, y in zip(own, reference))))
    print(f"matmul peaks: float32 {peaks[False] / 1e9:.1f}, bfloat16 {peaks[True] / 1e9:.1f} GFLOP/s ({args.threads} threads)")
    print(f"{'model':<6}{'mode':>10}{'precision':>10}{'tokens/s':>10}{'GFLOP/s':>10}{'MFU':>8}{'x fp32':>8}{'loss diff':>11}")
    for row in rows:
        print(f"{row['model']:<6}{'compiled' if row['compiled'] else 'eager':>10}{row['precision']:>10}{row['tokens_per_s']:>10.0f}"
              f"{row['achieved_flops'] / 1e9:>10.1f}{row['mfu']:>8.1%}{row['vs_float32']:>8.2f}{row['max_rel_loss_diff_vs_float32']:>11.1e}")
    result = dict(peak_flops=peaks[False], peak_flops_bfloat16=peaks[True], threads=args.threads, seq_len=args.seq_len,
                  batch=args.batch, loss_steps=LOSS_STEPS, torch=torch.__version__,
                  cpu=platform.processor() or platform.machine(), date=time.strftime("%Y-%m-%d"), rows=rows)
    write_result(args.out, result, watch, args)


if __name__ == "__main__":
    main()
