"""Training throughput (tokens/s) and model-FLOPs utilisation against this machine's measured matmul peak.

    python benchmarks/bench_training.py                 # the zoo's size (4 layers, d 128, T 128, batch 32)

Runs full training steps (masked-logits forward, backward, clip, AdamW) on random full-length sequences
with 20% of positions masked, for each variant; MFU = tokens/s x model FLOPs per token / peak FLOP/s,
the peak being a float32 1024^3 matmul timed in the same process, thread count and interleaved rounds.
Results go to benchmarks/results/training.json.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from dstg_interp import ModelConfig, build_model
from dstg_interp.model.checkpoint import ZOO_WIDTHS, zoo_architecture
from bench_models import interleaved_median_seconds  # noqa: E402 (sibling script)
from machine import BENCH_DEPTH, LoadWatch, add_load_arguments, write_result
from dstg_interp.flops import training_flops_per_token
from dstg_interp.train import TrainConfig, make_optimizer



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "training.json"))
    add_load_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    watch = LoadWatch.start(args)
    gen = torch.Generator().manual_seed(0)
    size = 1024
    a, b = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
    steps, configs = {"matmul": lambda: a @ b}, {}
    for name, widths in ZOO_WIDTHS.items():
        cfg = ModelConfig(vocab_size=8192, max_positions=args.seq_len, **dict(zoo_architecture(name), **BENCH_DEPTH))
        model = build_model(cfg).train()
        optimizer = make_optimizer(model, TrainConfig(model=widths))
        tokens = torch.randint(5, 8192, (args.batch, args.seq_len), generator=gen)
        labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))

        def step(model=model, optimizer=optimizer, tokens=tokens, labels=labels):
            loss = model(tokens, labels=labels, masked_logits_only=True).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        steps[name], configs[name] = step, cfg
    # interleaved rounds: background load (this is a shared machine) hits the peak and every model alike
    seconds = interleaved_median_seconds(steps, warmup=1, rounds=args.steps)
    peak = 2 * size**3 / seconds["matmul"]
    rows = []
    for name, cfg in configs.items():
        tokens_per_s = args.batch * args.seq_len / seconds[name]
        flops = training_flops_per_token(cfg, args.seq_len)
        rows.append(dict(model=name, tokens_per_s=tokens_per_s, flops_per_token=flops, achieved_flops=tokens_per_s * flops,
                         mfu=tokens_per_s * flops / peak))
    print(f"matmul peak: {peak / 1e9:.1f} GFLOP/s ({args.threads} threads)")
    print(f"{'model':<8}{'tokens/s':>10}{'GFLOP/s':>10}{'MFU':>8}")
    for row in rows:
        print(f"{row['model']:<8}{row['tokens_per_s']:>10.0f}{row['achieved_flops'] / 1e9:>10.1f}{row['mfu']:>8.1%}")
    result = dict(peak_flops=peak, threads=args.threads, seq_len=args.seq_len, batch=args.batch, torch=torch.__version__,
                  cpu=platform.processor() or platform.machine(), date=time.strftime("%Y-%m-%d"), rows=rows)
    write_result(args.out, result, watch, args)


if __name__ == "__main__":
    main()
