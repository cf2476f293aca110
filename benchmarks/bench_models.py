"""Forward+backward training throughput of the four variants vs HF ``BertForMaskedLM`` of matched size.

    python benchmarks/bench_models.py                      # zoo size: 4 layers, d_model 128, 4 heads, T=128
    python benchmarks/bench_models.py --d-model 256 --seq-len 128

Every model sees the same random batch (no padding) with 20% of positions carrying labels, the loss over
those labels, and one backward pass; HF BERT uses its default SDPA attention, no dropout, and the same
SwiGLU-equivalent FFN FLOPs (BERT's GELU FFN gets intermediate = 1.5 x our SwiGLU hidden size, so both
spend 3 matmuls' worth). Two rows per variant: the plain call (full logits, like HF) and the training
call (``masked_logits_only``, what ``dstg-train`` uses). Steps of all models are interleaved round by
round and each model's median step time is reported, so background load hits every model alike.
Results go to benchmarks/results/models.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers

from dstg_interp import ModelConfig, build_model
from machine import LoadWatch, write_result
from threaded_args import parse_threaded


def interleaved_median_seconds(steps: dict, warmup: int, rounds: int) -> dict:
    """Median seconds per call of each step function, calling them in turn round after round."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--d-ap", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "models.json"))
    args = parse_threaded(parser)
    watch = LoadWatch.start(args)

    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, args.vocab, (args.batch, args.seq_len), generator=gen)
    labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))
    n_tokens = tokens.numel()

    def our_model(variant):
        widths = dict(d_sem=args.d_model - args.d_ap, d_ap=args.d_ap) if variant == "dstg" else dict(d_model=args.d_model)
        cfg = ModelConfig(variant=variant, vocab_size=args.vocab, max_positions=args.seq_len, n_layers=args.layers, n_heads=args.heads, **widths)
        return build_model(cfg).train()

    d_mlp = ModelConfig(variant="rope", d_model=args.d_model).d_mlp
    hf_config = transformers.BertConfig(
        vocab_size=args.vocab, hidden_size=args.d_model, num_hidden_layers=args.layers, num_attention_heads=args.heads,
        intermediate_size=int(1.5 * d_mlp), max_position_embeddings=args.seq_len, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, type_vocab_size=1,
    )
    hf = transformers.BertForMaskedLM(hf_config).train()

    def step_fn(model, **kwargs):
        def step():
            model.zero_grad(set_to_none=True)
            out = model(tokens, labels=labels, **kwargs)
            out.loss.backward()
        return step

    steps = {("hf-BertForMaskedLM", "full logits"): step_fn(hf)}
    params = {"hf-BertForMaskedLM": sum(p.numel() for p in hf.parameters())}
    for variant in ("dstg", "rope", "ap", "rp"):
        model = our_model(variant)
        params[f"{variant}-NeoBERT"] = model.n_params()
        steps[(f"{variant}-NeoBERT", "full logits")] = step_fn(model)
        steps[(f"{variant}-NeoBERT", "masked logits (training)")] = step_fn(model, masked_logits_only=True)
    seconds = interleaved_median_seconds(steps, warmup=2, rounds=args.rounds)
    hf_seconds = seconds[("hf-BertForMaskedLM", "full logits")]
    rows = [dict(model=name, call=call, seconds_per_step=value, params=params[name]) for (name, call), value in seconds.items()]
    for row in rows:
        row["tokens_per_s"] = n_tokens / row["seconds_per_step"]
        row["ratio_vs_hf"] = hf_seconds / row["seconds_per_step"]

    print(f"{'model':<22}{'call':<28}{'tokens/s':>10}{'x HF':>8}{'params':>10}")
    for row in rows:
        print(f"{row['model']:<22}{row['call']:<28}{row['tokens_per_s']:>10.0f}{row['ratio_vs_hf']:>8.2f}{row['params']:>10}")
    result = dict(
        benchmark="forward+backward MLM step, same batch, one process",
        shape=dict(batch=args.batch, seq_len=args.seq_len, d_model=args.d_model, d_ap=args.d_ap, layers=args.layers,
                   heads=args.heads, vocab=args.vocab, swiglu_hidden=d_mlp, bert_intermediate=int(1.5 * d_mlp)),
        threads=args.threads, torch=torch.__version__, transformers=transformers.__version__,
        cpu=platform.processor() or platform.machine(), date=time.strftime("%Y-%m-%d"), rows=rows,
    )
    write_result(args.out, result, watch, args)


if __name__ == "__main__":
    main()
