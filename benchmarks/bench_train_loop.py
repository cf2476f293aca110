"""The training loop (``dstg-train``'s ``train()``) against the bare model step and a matched HF
``BertForMaskedLM`` training step, for every variant, eager and compiled.

    python benchmarks/bench_train_loop.py                      # zoo size on en-mix: ~8 min on 2 cores without the budget arm (--no-budget)
    python benchmarks/bench_train_loop.py --variants rope --steps 30 --no-compile --allow-load   # a smoke run

Rows, per variant:
- ``loop``: ``train()`` itself on the en-mix training split (length-bucketed batches, masking and collation
  in the prefetch thread, validation and checkpoints pushed past the run), real (non-pad) tokens per second
  of step time over steps ``--skip``..``--steps``;
- ``loop, compiled``: the same with ``compile=True``.  Its first step of each new graph compiles (20-60 s
  on 2 cores with a cold cache; three graphs in a run, see ``compile_for_training``) and may fall in the
  measured window, so the rate is given twice: over every measured step, and steady (without the steps
  that took over 5x the median step: compile steps, listed with their seconds);
- ``loop, token budget`` (eager and compiled, each beside its loop run): ``train()`` again with
  ``batch_tokens = 32 x 128`` (``--batch-tokens 4096``: every step about 4,096 token positions, a batch of
  short sequences holding more than 32 of them; ``budget`` in each JSON row, with its ratio to the bare step
  and to HF; ``--no-budget`` skips it): what length-bucketed batches of fewer real tokens cost the loop;
- ``model step`` / ``model step, compiled``: our model alone on one random full-length 32 x 128 batch
  (masked logits, AdamW), the number the loop aims at;
- ``dstg-train``: the command itself in a subprocess, as a user types it for a zoo-size run (the model's
  size, ``--max-length 128``, ``--steps``, ``--compile``/``--no-compile``; everything else its defaults,
  listed as ``cli_defaults`` in the JSON), its rate read from its own log.jsonl (windows of 10 steps after
  ``--skip``, a window holding a compile step left out) and end to end (tokens / wall seconds of the
  command: start-up, data, compile, validation and checkpoint included);
- ``hf step``: ``BertForMaskedLM`` of matched size (hidden 128, 4 layers, 4 heads, intermediate 1.5 x our
  SwiGLU hidden so the FFNs spend the same FLOPs, no dropout, SDPA) with the loop's optimizer (fused
  AdamW: the ratio compares models and loops, not optimizer kernels) on the same random batch,
  timed just before and just after each loop run (the mean is the ratio's reference).
Ratios: loop tokens/s (steady) / HF tokens/s; target >= 2.0 for every variant (issue: training speed).
Results: benchmarks/results/train_loop.json (with the machine's load; an under-load run is set aside).

``--bf16``: every row of ours under bfloat16 autocast (``dstg-train --bf16``: the loop, the bare steps, the
subprocess), each beside a float32 ``train()`` run of the same seed and batches, timed too, whose losses it
must match (``loss_vs_float32``: the float32 run's rate, mean loss over the last --skip steps of each, and
their largest per-step relative difference), and beside a bf16 run without the padding that bf16 turns on
(``--pad-to-multiple-of 1``: every new batch width and masked-token count a new oneDNN kernel; ``unpadded_bf16``);
HF is timed in float32 and in bfloat16 and the faster of the two is the reference (what a user would pick for
it). Results: benchmarks/results/train_loop_bf16.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from dstg_interp import ModelConfig, build_model
from dstg_interp.model.checkpoint import ZOO_NAMES, ZOO_WIDTHS, zoo_architecture
from dstg_interp.train import TrainConfig, compile_for_training, prepare_training_data, train
from machine import BENCH_DEPTH, LoadWatch, add_load_arguments, write_result



def median_step_seconds(step, warmup: int = 2, rounds: int = 6) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def training_step(model, tokens, labels, bf16: bool = False, **kwargs):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the loop's optimizer (make_optimizer)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(tokens, labels=labels, **kwargs).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return step


BATCH, LENGTH = 32, 128  # the loop's batch (the budget arm: BATCH x LENGTH token positions a step)


def loop_tokens_per_s(variant: str, args, compiled: bool, folder: Path, batch_tokens: int | None = None,
                      bf16: bool = False, pad_to_multiple_of: int | None = None) -> dict:
    """Run train() for --steps steps and read real tokens / step seconds after --skip steps from its log."""
    name = (f"{variant}-{'compiled' if compiled else 'eager'}" + (f"-budget{batch_tokens}" if batch_tokens else "")
            + ("-bf16" if bf16 else "") + (f"-pad{pad_to_multiple_of}" if pad_to_multiple_of else ""))
    cfg = TrainConfig(out_dir=str(folder / name), model=dict(zoo_architecture(variant), **BENCH_DEPTH), max_length=LENGTH, batch_size=BATCH,
                      batch_tokens=batch_tokens, bf16=bf16, pad_to_multiple_of=pad_to_multiple_of,
                      max_steps=args.steps, warmup_steps=1, eval_every=10 * args.steps, save_every=10 * args.steps,
                      log_every=1, progress=False, compile=compiled, threads=args.threads)
    train(cfg)
    records = [json.loads(line) for line in (Path(cfg.out_dir) / "log.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in records if "tokens_seen" in r}
    measured = range(args.skip + 1, args.steps + 1)
    tokens = {s: steps[s]["tokens_seen"] - steps[s - 1]["tokens_seen"] for s in measured}
    seconds = {s: steps[s]["train_seconds"] - steps[s - 1]["train_seconds"] for s in measured}
    slow = {s for s in measured if seconds[s] > 5 * statistics.median(seconds.values())}
    steady = [s for s in measured if s not in slow]
    return dict(tokens_per_s=sum(tokens.values()) / sum(seconds.values()),
                steady_tokens_per_s=sum(tokens[s] for s in steady) / sum(seconds[s] for s in steady),
                compile_steps={s: round(seconds[s], 1) for s in sorted(slow)},
                real_tokens_per_step=sum(tokens.values()) / len(measured), measured_steps=len(measured),
                losses=[steps[s]["loss"] for s in sorted(steps)], **step_seconds_by_batch(tokens, seconds, steady))


def step_seconds_by_batch(tokens: dict, seconds: dict, steady: list) -> dict:
    """Median step seconds of the full batches (>= 95% of BATCH x LENGTH real tokens) and of the shorter
    ones, with their counts: where a loop's time goes when its batches are not all full."""
    full = [s for s in steady if tokens[s] >= 0.95 * BATCH * LENGTH]
    short = [s for s in steady if s not in full]
    return dict(full_batch_steps=len(full), full_batch_median_s=statistics.median(seconds[s] for s in full) if full else None,
                short_batch_steps=len(short), short_batch_median_s=statistics.median(seconds[s] for s in short) if short else None,
                short_batch_mean_real_tokens=statistics.mean(tokens[s] for s in short) if short else None)


def loss_agreement(own: list[float], reference: list[float], last: int) -> dict:
    """How far a bfloat16 run's losses are from the float32 run's (same seed, same batches)."""
    return dict(mean_last=statistics.mean(own[-last:]), float32_mean_last=statistics.mean(reference[-last:]),
                last_steps=last, max_rel_diff=max(abs(a - b) / abs(b) for a, b in zip(own, reference)))


def cli_command(variant: str, args, compiled: bool, out: Path) -> list[str]:
    """``dstg-train`` as a user types it for a zoo-size run: the model's size, length and steps, the rest defaults."""
    widths = ZOO_WIDTHS[variant]
    d_model = widths.get("d_model") or widths["d_sem"] + widths["d_ap"]
    command = [str(Path(sys.executable).with_name("dstg-train")), "--variant", variant, "--d-model", str(d_model),
               "--n-layers", "4", "--n-heads", "4", "--max-length", "128", "--steps", str(args.steps),
               "--compile" if compiled else "--no-compile", "--out", str(out), "--quiet"]
    if args.bf16:
        command += ["--bf16"]
    if args.threads:
        command += ["--threads", str(args.threads)]
    return command


CLI_DEFAULTS = ("corpus en-mix, batch 32, vocab 8192, d_ap d_model/8 (DSTG), log every 10 steps, validation every 250 "
                "and at the end, checkpoint every 500 and at the end, bucketed batches, fp32")


def cli_tokens_per_s(variant: str, args, compiled: bool, folder: Path) -> dict:
    """Run dstg-train itself (a subprocess, as typed) and read its log: the rate over the logged windows after
    --skip steps (a window holding a compile step, over 5x the median window, left out) and end to end."""
    out = folder / f"cli-{variant}-{'compiled' if compiled else 'eager'}"
    command = cli_command(variant, args, compiled, out)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    steps = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "tokens_seen" in r]
    windows = [(b["tokens_seen"] - a["tokens_seen"], b["train_seconds"] - a["train_seconds"])
               for a, b in zip(steps, steps[1:]) if a["step"] >= args.skip]
    median = statistics.median(seconds for _, seconds in windows)
    steady = [(tokens, seconds) for tokens, seconds in windows if seconds <= 5 * median]
    return dict(command=" ".join(["dstg-train"] + command[1:]).replace(str(out), "OUT"),
                tokens_per_s=sum(t for t, _ in steady) / sum(s for _, s in steady),
                windows_left_out=len(windows) - len(steady), wall_seconds=round(wall, 1),
                tokens_per_wall_s=steps[-1]["tokens_seen"] / wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(ZOO_NAMES), choices=list(ZOO_WIDTHS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--skip", type=int, default=20, help="warm-up steps left out of the loop's rate")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled loop rows")
    parser.add_argument("--no-cli", action="store_true", help="skip the dstg-train subprocess beside each train() run")
    parser.add_argument("--no-budget", action="store_true", help="skip the token-budget train() run beside each train() run")
    parser.add_argument("--bf16", action="store_true", help="our rows under bfloat16 autocast, beside float32 "
                        "runs for the losses; HF at its faster precision (results/train_loop_bf16.json)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", default=None, help="default: results/train_loop.json (--bf16: train_loop_bf16.json)")
    add_load_arguments(parser)
    args = parser.parse_args()
    args.out = args.out or str(Path(__file__).parent / "results" / ("train_loop_bf16.json" if args.bf16 else "train_loop.json"))
    if not 0 < args.skip < args.steps:
        parser.error(f"--skip must be in (0, --steps={args.steps}), got {args.skip}")
    torch.set_num_threads(args.threads)
    watch = LoadWatch.start(args)
    prepare_training_data(TrainConfig(max_length=128))  # build the cache first: not part of any timing

    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 8192, (BATCH, LENGTH), generator=gen)
    labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))
    d_mlp = ModelConfig(**ZOO_WIDTHS["rope"]).d_mlp
    hf = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=8192, hidden_size=128, num_hidden_layers=BENCH_DEPTH["n_layers"], num_attention_heads=BENCH_DEPTH["n_heads"], intermediate_size=int(1.5 * d_mlp),
        max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=1)).train()
    hf_steps = {False: training_step(hf, tokens, labels)}
    if args.bf16:
        hf_steps[True] = training_step(hf, tokens, labels, bf16=True)

    def hf_seconds() -> dict:
        return {bf16: median_step_seconds(step) for bf16, step in hf_steps.items()}

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for variant in args.variants:
            model_tokens_per_s = {}
            for compiled in ([False] if args.no_compile else [False, True]):
                model = build_model(ModelConfig(vocab_size=8192, max_positions=128, **dict(zoo_architecture(variant), **BENCH_DEPTH))).train()
                if compiled:
                    compile_for_training(model)
                model_tokens_per_s[compiled] = tokens.numel() / median_step_seconds(
                    training_step(model, tokens, labels, bf16=args.bf16, masked_logits_only=True))
            for compiled in ([False] if args.no_compile else [False, True]):
                hf_before = hf_seconds()
                loop = loop_tokens_per_s(variant, args, compiled, Path(scratch), bf16=args.bf16)
                budget = (loop_tokens_per_s(variant, args, compiled, Path(scratch), batch_tokens=BATCH * LENGTH, bf16=args.bf16)
                          if not args.no_budget else None)
                cli = cli_tokens_per_s(variant, args, compiled, Path(scratch)) if not args.no_cli else None
                hf_after = hf_seconds()
                hf_rates = {bf16: tokens.numel() / statistics.mean([hf_before[bf16], hf_after[bf16]]) for bf16 in hf_steps}
                hf_tokens_per_s = max(hf_rates.values())  # HF at its faster precision (float32 only without --bf16)
                losses = unpadded = None
                if args.bf16:  # the same run in float32: its rate beside the bf16 one, and the losses bf16 must match
                    reference = loop_tokens_per_s(variant, args, compiled, Path(scratch))
                    # and in bf16 without the default padding (--pad-to-multiple-of 1): what padding buys
                    plain = loop_tokens_per_s(variant, args, compiled, Path(scratch), bf16=True, pad_to_multiple_of=1)
                    unpadded = dict({k: v for k, v in plain.items() if k != "losses"},
                                    padded_vs_unpadded=loop["steady_tokens_per_s"] / plain["steady_tokens_per_s"])
                    losses = dict(loss_agreement(loop["losses"], reference["losses"], args.skip),
                                  float32_loop_tokens_per_s=reference["steady_tokens_per_s"],
                                  float32_full_batch_median_s=reference["full_batch_median_s"],
                                  float32_short_batch_median_s=reference["short_batch_median_s"],
                                  vs_float32_loop=loop["steady_tokens_per_s"] / reference["steady_tokens_per_s"])
                rows.append(dict(variant=variant, compiled=compiled, loop_tokens_per_s=loop["steady_tokens_per_s"],
                                 loop_tokens_per_s_with_compile_steps=loop["tokens_per_s"], compile_steps=loop["compile_steps"],
                                 model_step_tokens_per_s=model_tokens_per_s[False], model_step_compiled_tokens_per_s=model_tokens_per_s.get(True),
                                 hf_step_tokens_per_s=hf_tokens_per_s, precision="bfloat16" if args.bf16 else "float32",
                                 hf_step_tokens_per_s_by_precision={"bfloat16" if bf16 else "float32": rate
                                                                    for bf16, rate in hf_rates.items()},
                                 loss_vs_float32=losses, pad_to_multiple_of=TrainConfig(bf16=args.bf16).padding_multiple(),
                                 unpadded_bf16=unpadded,
                                 loop_vs_hf=loop["steady_tokens_per_s"] / hf_tokens_per_s,
                                 loop_vs_hf_with_compile_steps=loop["tokens_per_s"] / hf_tokens_per_s,
                                 loop_vs_model_step=loop["steady_tokens_per_s"] / model_tokens_per_s[compiled],
                                 real_tokens_per_step=loop["real_tokens_per_step"], measured_steps=loop["measured_steps"],
                                 **{key: loop[key] for key in ("full_batch_steps", "full_batch_median_s", "short_batch_steps",
                                                               "short_batch_median_s", "short_batch_mean_real_tokens")},
                                 cli=cli, cli_vs_hf=cli["tokens_per_s"] / hf_tokens_per_s if cli else None,
                                 budget=dict({k: v for k, v in budget.items() if k != "losses"}, batch_tokens=BATCH * LENGTH,
                                             vs_hf=budget["steady_tokens_per_s"] / hf_tokens_per_s,
                                             vs_model_step=budget["steady_tokens_per_s"] / model_tokens_per_s[compiled])
                                 if budget else None))
                row = rows[-1]
                print(f"{variant:<5} {'compiled' if compiled else 'eager':<9} loop {row['loop_tokens_per_s']:>8.0f} tok/s "
                      f"({row['loop_tokens_per_s_with_compile_steps']:.0f} with compile steps {row['compile_steps']})  "
                      f"model step {model_tokens_per_s[compiled]:>8.0f}  HF {row['hf_step_tokens_per_s']:>8.0f}  "
                      f"loop/HF {row['loop_vs_hf']:.2f}  loop/model {row['loop_vs_model_step']:.2f}"
                      + (f"  dstg-train {cli['tokens_per_s']:.0f} ({row['cli_vs_hf']:.2f}x HF)" if cli else "")
                      + (f"  budget loop {budget['steady_tokens_per_s']:.0f} ({row['budget']['vs_model_step']:.2f}x model step, "
                         f"{budget['real_tokens_per_step']:.0f} real tokens a step)" if budget else "")
                      + (f"  unpadded bf16 loop {unpadded['steady_tokens_per_s']:.0f} (padded {unpadded['padded_vs_unpadded']:.2f}x)"
                         if unpadded else "")
                      + (f"  float32 loop {losses['float32_loop_tokens_per_s']:.0f} ({losses['vs_float32_loop']:.2f}x)"
                         f"  losses vs float32: max rel diff {losses['max_rel_diff']:.1e}, last {args.skip} steps "
                         f"{losses['mean_last']:.4f} vs {losses['float32_mean_last']:.4f}" if losses else ""), flush=True)
    met = {f"{r['variant']}{' compiled' if r['compiled'] else ''}": r["loop_vs_hf"] >= 2.0 for r in rows}
    result = dict(benchmark="dstg-train loop vs bare model step vs HF BertForMaskedLM training step (AdamW), zoo size",
                  rate="loop_tokens_per_s: real tokens per second of step time, compile steps (over 5x the median step) left out",
                  precision="bfloat16 autocast (ours); HF at its faster precision" if args.bf16 else "float32",
                  shape=dict(batch=BATCH, max_length=LENGTH, budget_batch_tokens=BATCH * LENGTH, d_model=128, layers=4,
                             heads=4, vocab=8192, swiglu_hidden=d_mlp, bert_intermediate=int(1.5 * d_mlp)),
                  cli_defaults=CLI_DEFAULTS,
                  steps=args.steps, skip=args.skip, threads=args.threads, torch=torch.__version__,
                  transformers=transformers.__version__, date=time.strftime("%Y-%m-%d"), rows=rows,
                  target_loop_at_least_2x_hf=met)
    write_result(args.out, result, watch, args)


if __name__ == "__main__":
    main()
