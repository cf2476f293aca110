"""Where a training step's time goes, by operator: the matmuls against everything else (the MFU question).

    python benchmarks/bench_step_profile.py                       # DSTG, eager and compiled, float32 and bf16, 1 thread: ~3 min
    python benchmarks/bench_step_profile.py --variants dstg rope --precisions float32 --allow-load

The zoo-size training step (32 x 128 random batch, masked logits, backward, clip, fused AdamW) under the
torch profiler (CPU, FLOPs counted by the profiler for the matmul operators), one thread, eager and
compiled (``compile_for_training``), in float32 and under bfloat16 autocast (``dstg-train --bf16``; its
batch is the float32 one). Reported per variant, mode and precision: the share of the step's self CPU time
spent in the matmul operators (mm, bmm, addmm, baddbmm), their achieved GFLOP/s against a 1024³ matmul of
that precision timed in the same process, and the largest other operators. Shares of one process's time are what
a loaded machine distorts least; the GFLOP/s are as noisy as the machine. MFU is at most the matmul share
times the matmuls' efficiency: which of the two stands between a variant and 50% is what this shows.
Results: benchmarks/results/step_profile.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from dstg_interp import ModelConfig
from dstg_interp.model.checkpoint import ZOO_WIDTHS  # the zoo's widths, named once in the library
from bench_training import training_step  # noqa: E402 (sibling script)
from machine import LoadWatch, add_load_arguments, write_result

MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")


def matmul_peak(dtype: torch.dtype = torch.float32) -> float:
    a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * 1024**3 / best


def profile_step(variant: str, compiled: bool, steps: int, bf16: bool = False) -> dict:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 8192, (32, 128), generator=gen)
    labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))
    cfg = ModelConfig(vocab_size=8192, max_positions=128, n_layers=4, n_heads=4, **ZOO_WIDTHS[variant])
    step = training_step(variant, cfg, tokens, labels, compiled, bf16)  # bench_training's: the step dstg-train runs
    for _ in range(3):  # compiles, when compiled
        step()
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for _ in range(steps):
            step()
    peak = matmul_peak(torch.bfloat16 if bf16 else torch.float32)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    mm = [e for e in events if e.key in MATMULS]
    mm_seconds = sum(e.self_cpu_time_total for e in mm) / 1e6
    mm_flops = sum(e.flops for e in mm)
    others = sorted((e for e in events if e.key not in MATMULS), key=lambda e: -e.self_cpu_time_total)[:8]
    return dict(step_seconds=total / steps, matmul_share=mm_seconds / total, matmul_gflops=mm_flops / mm_seconds / 1e9,
                peak_gflops=peak / 1e9, matmul_efficiency=mm_flops / mm_seconds / peak,
                mfu_bound=mm_seconds / total * mm_flops / mm_seconds / peak,
                largest_others={e.key[:60]: round(e.self_cpu_time_total / 1e6 / total, 4) for e in others})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", choices=list(ZOO_WIDTHS), default=["dstg"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--precisions", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "step_profile.json"))
    add_load_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    watch = LoadWatch.start(args)
    rows = []
    for variant in args.variants:
        for precision in args.precisions:
            for compiled in (False,) if args.no_compile else (False, True):
                row = dict(variant=variant, compiled=compiled, precision=precision,
                           **profile_step(variant, compiled, args.steps, bf16=precision == "bfloat16"))
                rows.append(row)
                print(f"{variant} {precision} {'compiled' if compiled else 'eager'}: matmuls {row['matmul_share']:.0%} of the step at "
                      f"{row['matmul_efficiency']:.0%} of the 1024³ peak ({row['peak_gflops']:.0f} GFLOP/s); "
                      f"others {row['largest_others']}", flush=True)
    write_result(args.out, dict(benchmark="training-step time by operator (torch profiler, 1 thread)", threads=1,
                                steps=args.steps, rows=rows), watch, args)


if __name__ == "__main__":
    main()
