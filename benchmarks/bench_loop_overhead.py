"""What the training loop costs beyond its steps, in CPU seconds per real token: train() vs the bare step.

    python benchmarks/bench_loop_overhead.py                     # rope, eager, 1 thread: ~2 min
    python benchmarks/bench_loop_overhead.py --variant dstg --allow-load

Wall time on a shared machine measures the other jobs as much as ours; CPU time of a one-thread process
does not (much). So: the bare training step (random full 32 x 128 batch, masked logits, fused AdamW,
clipping) timed in CPU seconds per token, and ``train()`` itself (en-mix, zoo size, bucketed batches,
prefetch thread, logging every step) run twice, for --short and --long steps, in CPU seconds; the
difference over the difference in real tokens is the loop's CPU per real token without its set-up
(data, tokenizer, model build: the same in both runs). Their ratio says how much work the loop adds to
the step per token it trains on, padding included (a bucketed batch is narrower than 128 but carries
padding), apart from the wall-clock effects (fewer real tokens per step, threads competing).
Results: benchmarks/results/loop_overhead_<variant>.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from dstg_interp import ModelConfig, build_model
from dstg_interp.model.checkpoint import ZOO_WIDTHS  # the zoo's widths, named once in the library
from dstg_interp.train import TrainConfig, make_optimizer, prepare_training_data, train
from machine import LoadWatch, add_load_arguments, write_result



def bare_cpu_per_token(variant: str, steps: int) -> float:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 8192, (32, 128), generator=gen)
    labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))
    model = build_model(ModelConfig(vocab_size=8192, max_positions=128, n_layers=4, n_heads=4, **ZOO_WIDTHS[variant])).train()
    optimizer = make_optimizer(model, TrainConfig(model=dict(ZOO_WIDTHS[variant])))

    def step():
        loss = model(tokens, labels=labels, masked_logits_only=True).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    for _ in range(3):
        step()
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps / tokens.numel()


def loop_cpu(variant: str, steps: int, folder: Path) -> tuple[float, int]:
    """(CPU seconds of the whole train() call, real tokens trained on)."""
    cfg = TrainConfig(out_dir=str(folder / f"run-{steps}"), model=dict(ZOO_WIDTHS[variant], n_layers=4, n_heads=4),
                      max_length=128, batch_size=32, max_steps=steps, warmup_steps=1, eval_every=10 * steps,
                      save_every=10 * steps, log_every=1, progress=False, compile=False, threads=1)
    start = time.process_time()
    train(cfg)
    seconds = time.process_time() - start
    records = [json.loads(line) for line in (Path(cfg.out_dir) / "log.jsonl").read_text().splitlines()]
    return seconds, [r for r in records if "tokens_seen" in r][-1]["tokens_seen"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=list(ZOO_WIDTHS), default="rope")
    parser.add_argument("--short", type=int, default=20)
    parser.add_argument("--long", type=int, default=60)
    parser.add_argument("--bare-steps", type=int, default=20)
    parser.add_argument("--out", default=None, help="default: results/loop_overhead_<variant>.json")
    add_load_arguments(parser)
    args = parser.parse_args()
    args.out = args.out or str(Path(__file__).parent / "results" / f"loop_overhead_{args.variant}.json")
    torch.set_num_threads(1)
    watch = LoadWatch.start(args)
    prepare_training_data(TrainConfig(max_length=128))  # the cached data first: the same in both runs anyway
    bare = bare_cpu_per_token(args.variant, args.bare_steps)
    with tempfile.TemporaryDirectory() as scratch:
        short_cpu, short_tokens = loop_cpu(args.variant, args.short, Path(scratch))
        long_cpu, long_tokens = loop_cpu(args.variant, args.long, Path(scratch))
    loop = (long_cpu - short_cpu) / (long_tokens - short_tokens)
    real_per_step = (long_tokens - short_tokens) / (args.long - args.short)
    print(f"{args.variant}: bare step {bare * 1e6:.1f} us CPU/token, loop {loop * 1e6:.1f} us CPU/real token "
          f"(loop / bare {loop / bare:.3f}); {real_per_step:.0f} real tokens per step of 4096")
    result = dict(benchmark="train() CPU seconds per real token (steps long - short) vs the bare step's per token, 1 thread",
                  variant=args.variant, steps=dict(short=args.short, long=args.long, bare=args.bare_steps),
                  bare_cpu_s_per_token=bare, loop_cpu_s_per_real_token=loop, loop_over_bare=loop / bare,
                  real_tokens_per_step=real_per_step, batch_positions=32 * 128,
                  runs=dict(short=dict(cpu_s=short_cpu, real_tokens=short_tokens),
                            long=dict(cpu_s=long_cpu, real_tokens=long_tokens)))
    write_result(args.out, result, watch, args)


if __name__ == "__main__":
    main()
