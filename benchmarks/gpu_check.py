"""The GPU check: everything of the GPU path in one run of a few minutes on one GPU, written to one JSON.

    python benchmarks/gpu_check.py --out $OUT/gpu_check.json      # one GPU: within 8 minutes (--budget 480)
    python benchmarks/gpu_check.py --dry-run                      # CPU, tiny sizes: checks the script (CI)

Sections, in this order (each timed on the device with synchronisation; each one's failure is recorded in the
JSON as its ``error`` and the next one runs; the JSON is rewritten after every section, so a run cut short
still leaves what it measured; a section that would start past ``--budget`` seconds is recorded as skipped):
  peak          the GPU's own bf16 matmul peak (8192³, mean of 10 after 3 warm-ups) and fp32 without TF32
  loss          bf16 autocast vs fp32 over --loss-steps steps from the same initialisation and batches,
                per variant, eager: both loss curves and their largest absolute / relative difference
  extraction    extract() of a random zoo-size DSTG (6 layers, d_sem 112 + d_ap 16) over random sequences
                of 256 (every layer x sem/ap/full, float16, to disk) against the plain forward of the same
                batches: tokens/s of each
  probes        the whole grid on that store (21 feature sets x 3 position targets, grouped 5-fold CV, 17
                alphas): fit_ridge_grid with numpy sums vs device="cuda"; seconds and the largest difference
  storeless     dstg-probe's default route (probes.storeless: statistics summed on the device during the
                forward pass, then the held-out pass) on that model and those sequences (segment probe, no
                controls, 200 resamples): tokens/s against the plain forward, and the largest difference of
                any results column from the store route on that store; the same with --gram-precision
                float32 (the Gram products in float32) and its largest difference; then, with 4 minutes left,
                plain forward vs storeless at the paper's width (6 layers, 720 + 48, 12 heads, 200k tokens)
  training      per variant (dstg, rope, ap, rp) at zoo size (4 layers, d 128, 4 heads, vocab 8192, T 128),
                batch --batch: the training step dstg-train runs (masked logits, backward, clip, fused
                AdamW), bf16 autocast, compiled (compile_for_training) and eager: tokens/s and MFU against
                the bf16 peak (FLOPs: dstg_interp.flops.training_flops_per_token); beside it a matched HF
                BertForMaskedLM step (as bench_train_loop.py: hidden 128, intermediate 1.5 x our SwiGLU
                width, no dropout, SDPA), bf16, eager and torch.compile'd
  torchrun      ``torchrun --standalone --nproc_per_node 1``: dstg-train (bf16; compiled when 4 minutes
                of the budget are left) on a synthetic
                text corpus, tokens/s from its log; then dstg-cache from its checkpoint (one rank: torchrun's
                environment and launcher, no process group; nccl itself needs two GPUs)
The dry run takes the same paths on the CPU (gloo, bf16 autocast on the CPU, tiny sizes, no compile
unless --compile) so that CI catches a broken script before a GPU minute is spent on it.

On the lent H200 (tools/device: Python 3.12 with torch, transformers, scikit-learn; no transformer-lens):
carry transformer-lens and what it needs as wheels (.whl, see the device README), then
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:. &&
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import cast

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling scripts, also when run from elsewhere

from bench_scaling import LabelledSequences  # noqa: E402
from bench_store import RandomSequences  # noqa: E402
from machine import LoadWatch  # noqa: E402

from dstg_interp.data import StructuredSequences  # noqa: E402
from dstg_interp import ActivationStore, ModelConfig, build_model, extract  # noqa: E402
from dstg_interp.flops import training_flops_per_token  # noqa: E402
from dstg_interp.model.checkpoint import ZOO_WIDTHS  # noqa: E402 (the zoo's widths, named once)
from dstg_interp.tiny_zoo import TINY_WIDTHS  # noqa: E402 (the dry run's: the tiny zoo's)
from dstg_interp.train import TrainConfig, compile_for_training, make_optimizer  # noqa: E402
from probes import fit_ridge_grid, grouped_train_test_split  # noqa: E402
from probes.grid import store_feature_sets  # noqa: E402
from probes.positions import PositionProbeConfig, probe_sequences, probe_store  # noqa: E402
from dstg_interp.encoders import open_encoder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULT_PATH = Path(__file__).parent / "results" / "gpu_check.json"
TARGETS = ("token_position", "sentence_index", "intra_sentence_position")


class Sizes:
    """Every size the check uses: the GPU's, or the dry run's tiny ones."""

    def __init__(self, dry: bool, args):
        self.dry = dry
        self.matmul = 256 if dry else 8192
        self.widths = TINY_WIDTHS if dry else ZOO_WIDTHS
        self.variants = [v for v in self.widths if v in args.variants]
        self.layers, self.heads = (2, 2) if dry else (4, 4)
        self.vocab = 512 if dry else 8192
        self.length = 32 if dry else 128
        self.batch = 4 if dry else args.batch
        self.warmup, self.steps = (1, 2) if dry else (3, args.steps)
        self.loss_steps = 3 if dry else args.loss_steps
        self.extract_tokens = 2048 if dry else args.extract_tokens
        self.extract = dict(n_layers=2, d_sem=24, d_ap=8, d_head=16, heads=2) if dry else dict(
            n_layers=6, d_sem=112, d_ap=16, d_head=32, heads=4)
        self.extract_length = 64 if dry else 256
        self.torchrun_steps = 4 if dry else 60
        self.corpus_docs = 80 if dry else 3000


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup: int, rounds: int) -> float:
    """Median seconds of ``fn`` after ``warmup`` calls, synchronising the device around each call."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --- sections -------------------------------------------------------------------------------------
def peak(ctx) -> dict:
    device, n = ctx.device, ctx.sizes.matmul
    out = {"size": n}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = timed(lambda a=a, b=b: a @ b, device, warmup=3, rounds=10 if name == "bf16" else 3)
        out[f"{name}_flops"] = 2 * n**3 / seconds
        del a, b
    ctx.peak_flops = out["bf16_flops"]
    print(f"peak: bf16 {out['bf16_flops'] / 1e12:.1f} TFLOP/s, fp32 {out['fp32_flops'] / 1e12:.1f}", flush=True)
    return out


def random_batch(sizes, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, sizes.vocab, (sizes.batch, sizes.length), generator=gen)
    labels = torch.where(torch.rand(tokens.shape, generator=gen) < 0.2, tokens, torch.full_like(tokens, -100))
    return tokens.to(device), labels.to(device)


def model_config(sizes, variant: str) -> ModelConfig:
    return ModelConfig(vocab_size=sizes.vocab, max_positions=sizes.length, n_layers=sizes.layers, n_heads=sizes.heads,
                       seed=0, **sizes.widths[variant])


def our_step(model, optimizer, tokens, labels, device, bf16: bool):
    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(tokens, labels=labels, masked_logits_only=True).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss
    return step


def hf_model(sizes):
    import transformers

    d_mlp = ModelConfig(variant="rope", d_model=sizes.widths["rope"]["d_model"]).d_mlp
    config = transformers.BertConfig(
        vocab_size=sizes.vocab, hidden_size=sizes.widths["rope"]["d_model"], num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads, intermediate_size=int(1.5 * d_mlp), max_position_embeddings=sizes.length,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=1)
    torch.manual_seed(0)
    return transformers.BertForMaskedLM(config).train()


def attempt(row: dict, key: str, measure) -> None:
    """row[key] = measure(), or row[key + "_error"]: one failing mode (a compile, say) costs no other number."""
    try:
        row[key] = measure()
    except Exception as err:
        row[f"{key}_error"] = f"{type(err).__name__}: {err}"
        print(f"  {key}: FAILED {type(err).__name__}: {err}", file=sys.stderr, flush=True)


def training(ctx) -> dict:
    sizes, device = ctx.sizes, ctx.device
    tokens, labels = random_batch(sizes, device)
    n_tokens = tokens.numel()
    modes = ("eager", "compiled") if ctx.compile else ("eager",)
    out: dict = {"batch": sizes.batch, "length": sizes.length, "layers": sizes.layers, "bf16_autocast": True,
                 "peak_flops_bf16": ctx.peak_flops, "hf_bert_for_masked_lm": {}, "variants": {}}
    hf = out["hf_bert_for_masked_lm"]
    for mode in modes:  # the reference first: every variant's ratio needs it

        def hf_rate(mode=mode):
            model = hf_model(sizes).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda" or None)
            forward = torch.compile(model) if mode == "compiled" else model

            def step():
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = forward(input_ids=tokens, labels=labels).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            return n_tokens / timed(step, device, sizes.warmup + 1, sizes.steps)
        attempt(hf, f"{mode}_tokens_per_s", hf_rate)
    print(f"training hf: {hf}", flush=True)
    for variant in sizes.variants:
        cfg = model_config(sizes, variant)
        row = out["variants"][variant] = {"flops_per_token": training_flops_per_token(cfg, sizes.length)}
        for mode in modes:
            if ctx.remaining() < 60 and not sizes.dry:
                row[f"{mode}_skipped"] = "under a minute of the budget left"
                continue

            def rate(mode=mode, cfg=cfg, variant=variant, row=row):
                model = build_model(cfg).to(device).train()
                if mode == "compiled":
                    compile_for_training(model)
                optimizer = make_optimizer(model, TrainConfig(model=sizes.widths[variant], device=device.type))
                step = our_step(model, optimizer, tokens, labels, device, bf16=True)
                start = time.perf_counter()
                step()
                synchronize(device)
                row[f"{mode}_first_step_s"] = round(time.perf_counter() - start, 2)  # compiles, when compiled
                return n_tokens / timed(step, device, sizes.warmup, sizes.steps)
            attempt(row, f"{mode}_tokens_per_s", rate)
            if f"{mode}_tokens_per_s" in row and ctx.peak_flops:
                row[f"{mode}_mfu_bf16"] = row[f"{mode}_tokens_per_s"] * row["flops_per_token"] / ctx.peak_flops
            if f"{mode}_tokens_per_s" in row:
                if f"{mode}_tokens_per_s" in hf:
                    row[f"{mode}_vs_hf"] = row[f"{mode}_tokens_per_s"] / hf[f"{mode}_tokens_per_s"]
            ctx.save_partial("training", out)  # a run cut short keeps the variants it measured
        print(f"training {variant}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                  for k, v in row.items()), flush=True)
    failed = [f"{v}/{k}" for v, row in out["variants"].items() for k in row if k.endswith("_error")]
    failed += [f"hf/{k}" for k in hf if k.endswith("_error")]
    if failed:
        out["failed"] = failed
    return out


def loss_agreement(ctx) -> dict:
    sizes, device = ctx.sizes, ctx.device
    out = {}
    for variant in sizes.variants:
        curves = {}
        for precision in ("fp32", "bf16"):
            model = build_model(model_config(sizes, variant)).to(device).train()
            optimizer = make_optimizer(model, TrainConfig(model=sizes.widths[variant], device=device.type))
            losses = []
            for s in range(sizes.loss_steps):
                tokens, labels = random_batch(sizes, device, seed=s)
                losses.append(float(our_step(model, optimizer, tokens, labels, device, precision == "bf16")().detach()))
            curves[precision] = losses
        diff = np.abs(np.subtract(curves["bf16"], curves["fp32"]))
        out[variant] = {**curves, "max_abs_diff": float(diff.max()),
                        "max_rel_diff": float((diff / np.abs(curves["fp32"])).max())}
        print(f"loss {variant}: max rel diff bf16 vs fp32 {out[variant]['max_rel_diff']:.2e}", flush=True)
    return {"steps": sizes.loss_steps, "variants": out}


def extraction(ctx) -> dict:
    sizes, device = ctx.sizes, ctx.device
    e = sizes.extract
    config = ModelConfig(variant="dstg", vocab_size=8192, max_positions=sizes.extract_length, n_layers=e["n_layers"],
                         n_heads=e["heads"], d_head=e["d_head"], d_sem=e["d_sem"], d_ap=e["d_ap"], seed=0)
    model = build_model(config).to(device).eval()
    sequences = RandomSequences(sizes.extract_tokens, sizes.extract_length, 8192)
    n_tokens = int(sequences.lengths.sum())
    batch_size = 32 if sizes.dry else 256

    def forward():
        with torch.inference_mode():
            for tokens, mask in sequences.batches(batch_size):
                model(tokens.to(device), attention_mask=mask.to(device), stop_at_layer=e["n_layers"])

    plain = timed(forward, device, warmup=1, rounds=1 if sizes.dry else 2)
    ctx.extract_model, ctx.plain_tokens_per_s = model, n_tokens / plain  # the storeless section reuses both
    ctx.store = ctx.work / "store"
    start = time.perf_counter()
    extract(model, sequences, ctx.store, batch_size=batch_size, dtype="float16", progress=False)
    synchronize(device)
    seconds = time.perf_counter() - start
    out = {"n_tokens": n_tokens, "batch_size": batch_size, "plain_forward_tokens_per_s": n_tokens / plain,
           "extract_tokens_per_s": n_tokens / seconds, "extract_vs_plain": plain / seconds,
           "store_bytes": sum(f.stat().st_size for f in ctx.store.iterdir())}
    print(f"extraction: {out}", flush=True)
    return out


def probes(ctx) -> dict:
    store = ActivationStore(ctx.store)
    labels = store.labels
    rows = np.flatnonzero(~labels["is_special"].to_numpy())
    groups = labels["doc_index"].to_numpy()
    targets = {name: labels[name].to_numpy().astype(np.float64) for name in TARGETS}
    train, test = grouped_train_test_split(groups[rows], test_fraction=0.2, seed=0)
    out, tables = {"n_tokens": int(len(rows))}, {}
    for name, device in (("numpy", None), (f"torch_{ctx.device.type}", ctx.device.type)):
        start = time.perf_counter()
        tables[name] = fit_ridge_grid(store_feature_sets(store), targets, groups, rows[train], rows[test],
                                      keep_predictions=False, device=device)
        out[f"{name}_seconds"] = time.perf_counter() - start
    a, b = tables.values()
    out["max_abs_delta_test_r2"] = float(np.nanmax(np.abs(a.test_r2.to_numpy() - b.test_r2.to_numpy())))
    out["same_alphas"] = bool((a.alpha.to_numpy() == b.alpha.to_numpy()).all())
    print(f"probes: {out}", flush=True)
    return out


def storeless(ctx) -> dict:
    """dstg-probe's default route (probes.storeless) on the extraction section's model and sequences, against the
    plain forward and against the store route (probe_store on that section's store): tokens/s and the largest
    difference of any results column; then, when the budget allows, the same at the paper's width (768)."""
    sizes, device = ctx.sizes, ctx.device
    e = sizes.extract
    batch_size = 32 if sizes.dry else 256
    config = PositionProbeConfig(task="segment", controls=False, n_boot=200)
    # random labelled sequences with StructuredSequences' interface (len, [i], to_dataframe)
    sequences = cast(StructuredSequences, LabelledSequences(sizes.extract_tokens, sizes.extract_length, 8192))
    n_tokens = int(sequences.lengths.sum())
    encoder = open_encoder(ctx.extract_model)
    start = time.perf_counter()
    table = probe_sequences(encoder, sequences, config, model_name="gpu-check", controls=False, batch_size=batch_size)
    synchronize(device)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    stored = probe_store(ActivationStore(ctx.store), config, model_name="gpu-check", device=device.type)
    store_seconds = time.perf_counter() - start
    numeric = table.select_dtypes("number").columns
    delta = np.abs(table[numeric].to_numpy(dtype=float) - stored[numeric].to_numpy(dtype=float))
    out = {"n_tokens": n_tokens, "n_layers": e["n_layers"], "width": e["d_sem"] + e["d_ap"],
           "storeless_seconds": seconds, "storeless_tokens_per_s": n_tokens / seconds,
           "storeless_vs_plain": n_tokens / seconds / ctx.plain_tokens_per_s, "store_probe_seconds": store_seconds,
           "max_abs_delta_vs_store_route": float(np.nanmax(delta)),
           "same_nan_cells": bool((np.isnan(table[numeric].to_numpy(dtype=float))
                                   == np.isnan(stored[numeric].to_numpy(dtype=float))).all())}
    start = time.perf_counter()
    fast = probe_sequences(encoder, sequences, dataclasses.replace(config, gram_precision="float32"),
                           model_name="gpu-check", controls=False, batch_size=batch_size)
    synchronize(device)
    fast_seconds = time.perf_counter() - start
    out["float32_grams"] = {"storeless_seconds": fast_seconds, "storeless_vs_plain": n_tokens / fast_seconds / ctx.plain_tokens_per_s,
                            "max_abs_delta_vs_float64": float(np.nanmax(np.abs(fast[numeric].to_numpy(dtype=float)
                                                                               - table[numeric].to_numpy(dtype=float))))}
    ctx.save_partial("storeless", out)
    if not sizes.dry and ctx.remaining() > 240:  # the paper's width: 6 layers, 720 + 48, 12 heads
        wide = build_model(ModelConfig(variant="dstg", vocab_size=8192, max_positions=256, n_layers=6, n_heads=12,
                                       d_sem=720, d_ap=48, seed=0)).to(device).eval()
        wide_sequences = cast(StructuredSequences, LabelledSequences(200_000, 256, 8192))
        wide_tokens = int(wide_sequences.lengths.sum())

        def wide_forward():
            with torch.inference_mode():
                for tokens, mask in wide_sequences.batches(batch_size):
                    wide(tokens.to(device), attention_mask=mask.to(device), stop_at_layer=6)

        plain = timed(wide_forward, device, warmup=1, rounds=1)
        start = time.perf_counter()
        probe_sequences(open_encoder(wide), wide_sequences, config, model_name="gpu-check-768", controls=False,
                        batch_size=batch_size)
        synchronize(device)
        wide_seconds = time.perf_counter() - start
        out["width_768"] = {"n_tokens": wide_tokens, "plain_forward_tokens_per_s": wide_tokens / plain,
                            "storeless_tokens_per_s": wide_tokens / wide_seconds, "storeless_vs_plain": plain / wide_seconds}
    print(f"storeless: {out}", flush=True)
    return out


SUBJECTS = ["the farmer", "a teacher", "the old sailor", "my neighbour", "the young doctor", "a small child"]
VERBS = ["carried", "painted", "found", "sold", "repaired", "watched"]
OBJECTS = ["a red boat", "the wooden gate", "an empty basket", "the blue kettle", "a broken clock", "the tall ladder"]
PLACES = ["near the river", "in the village", "behind the mill", "at the market", "on the hill", "by the harbour"]


def synthetic_corpus(folder: Path, n_docs: int) -> Path:
    """Documents of simple sentences in paragraphs (no network on a GPU machine: no en-mix to fetch)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        paragraphs = []
        for _ in range(int(rng.integers(1, 5))):
            words = [" ".join(x[int(rng.integers(len(x)))] for x in (SUBJECTS, VERBS, OBJECTS, PLACES))
                     for _ in range(int(rng.integers(2, 6)))]
            paragraphs.append(" ".join(w.capitalize() + "." for w in words))
        (folder / f"doc{i:05d}.txt").write_text("\n\n".join(paragraphs))
    return folder


def run_stage(ctx, out: dict, stage: str, command: list[str], env: dict) -> bool:
    """Run one stage of the torchrun section within the budget left; its wall time (startup included), return code
    and, when it failed, the tail of its stderr go into ``out`` as ``<stage>_...``.  True when it succeeded."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=ctx.remaining())
    out[f"{stage}_seconds_with_startup"] = round(time.perf_counter() - start, 1)
    out[f"{stage}_returncode"] = done.returncode
    if done.returncode:
        out[f"{stage}_stderr_tail"] = done.stderr[-3000:]
    return not done.returncode


def torchrun(ctx) -> dict:
    sizes, device = ctx.sizes, ctx.device
    corpus = synthetic_corpus(ctx.work / "corpus", sizes.corpus_docs)
    run_dir, store_dir = ctx.work / "torchrun-train", ctx.work / "torchrun-store"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    env = {**os.environ, "DSTG_CACHE": str(ctx.work / "cache"), "PYTHONPATH": os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    compile_run = ctx.compile and (sizes.dry or ctx.remaining() > 240)  # a cold compile needs minutes
    train_command = launcher + [
        "-m", "dstg_interp.cli.train", "--variant", "dstg", "--d-model", str(sum(sizes.widths["dstg"][k] for k in ("d_sem", "d_ap"))),
        "--d-ap", str(sizes.widths["dstg"]["d_ap"]), "--n-layers", str(sizes.layers), "--n-heads", str(sizes.heads),
        "--corpus", str(corpus), "--max-length", str(sizes.length), "--batch-size", str(sizes.batch),
        "--steps", str(sizes.torchrun_steps), "--eval-every", str(sizes.torchrun_steps), "--save-every",
        str(sizes.torchrun_steps), "--log-every", "1", "--device", device.type, "--bf16", "--out", str(run_dir),
        "--quiet", "--compile" if compile_run else "--no-compile", "--vocab-size", "1000"]
    out: dict = {"train_command": " ".join(train_command[2:]), "compiled": compile_run}
    if not run_stage(ctx, out, "train", train_command, env):
        return out
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "tokens_seen" in r]
    seconds = np.diff([0.0] + [r["train_seconds"] for r in steps])
    tokens = np.diff([0] + [r["tokens_seen"] for r in steps])
    steady = seconds <= 5 * np.median(seconds)  # compile steps left out, as bench_train_loop does
    out.update(train_tokens_per_s_steady=float(tokens[steady].sum() / seconds[steady].sum()),
               train_compile_steps=int((~steady).sum()), final_loss=steps[-1]["loss"],
               val_loss=next((r["val_loss"] for r in reversed(records) if "val_loss" in r), None))
    cache_command = launcher + ["-m", "dstg_interp.cli.cache", "--model", str(run_dir), "--corpus", str(corpus),
                                "--out", str(store_dir), "--device", device.type, "--quiet",
                                "--max-length", str(sizes.length)]
    out["cache_command"] = " ".join(cache_command[2:])
    if not run_stage(ctx, out, "cache", cache_command, env):
        return out
    store = ActivationStore(store_dir)
    out.update(cache_n_tokens=store.n_tokens, cache_layers=list(store.layers), cache_subspaces=list(store.subspaces))
    print(f"torchrun: {out}", flush=True)
    return out


# The quick sections first: a cold compile of every variant (training) is the one that may run long.
SECTIONS = {"peak": peak, "loss": loss_agreement, "extraction": extraction, "probes": probes, "storeless": storeless,
            "training": training, "torchrun": torchrun}


class Context:
    def __init__(self, args, device, work):
        self.sizes = Sizes(args.dry_run, args)
        self.device, self.work, self.started, self.budget = device, work, time.perf_counter(), args.budget
        self.compile = args.compile if args.compile is not None else not args.dry_run
        self.peak_flops: float | None = None  # set by the peak section
        self.store = None
        self.result: dict = {}
        self.out_path: Path | None = None

    def save_partial(self, name: str, section: dict) -> None:
        """Write the JSON with ``section`` as it stands (marked partial) before the section ends."""
        if self.out_path is not None:
            write_json(self.out_path, {**self.result, "sections": {**self.result.get("sections", {}),
                                                                   name: {**section, "partial": True}}})

    def remaining(self) -> float:
        return max(1.0, self.budget - (time.perf_counter() - self.started))


def environment(device) -> dict:
    env: dict[str, object] = {"torch": torch.__version__, "device": str(device), "python": sys.version.split()[0]}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(name=props.name, capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory / 2**30, 1),
                   multiprocessors=props.multi_processor_count, cuda=torch.version.cuda)
    return env


def write_json(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: check every section's code path")
    parser.add_argument("--out", default=None, help=f"the JSON (default {RESULT_PATH}; dry run: $TMPDIR)")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds: sections that would start later are skipped")
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--batch", type=int, default=256, help="training batch (sequences of 128)")
    parser.add_argument("--variants", nargs="+", choices=list(ZOO_WIDTHS), default=list(ZOO_WIDTHS),
                        help="the variants of the training and loss sections")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per variant and mode")
    parser.add_argument("--loss-steps", type=int, default=10, help="steps of the bf16 vs fp32 loss comparison")
    parser.add_argument("--extract-tokens", type=int, default=500_000)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the training steps (default: on, off in a dry run)")
    args = parser.parse_args(argv)
    if args.dry_run:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible; run it on a GPU machine, or --dry-run here", file=sys.stderr)
        return 2
    else:
        device = torch.device("cuda")
    out_path = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "gpu_check-dry-run.json" if args.dry_run
                                                 else RESULT_PATH)
    watch = LoadWatch.start()
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    ctx = Context(args, device, work)
    result: dict = {"check": "the GPU path: peak, training, bf16 loss, extraction, probes, storeless probes, torchrun",
                    "dry_run": args.dry_run, "compile": ctx.compile, "budget_s": args.budget,
                    "environment": environment(device), "load_before": os.getloadavg(), "sections": {}}
    ctx.result, ctx.out_path = result, out_path
    try:
        for name in args.sections:
            elapsed = time.perf_counter() - ctx.started
            if elapsed > args.budget:
                result["sections"][name] = {"skipped": f"budget of {args.budget:.0f} s spent ({elapsed:.0f} s)"}
                write_json(out_path, result)
                continue
            start = time.perf_counter()
            try:
                section = SECTIONS[name](ctx)
            except Exception as err:  # one broken section must not cost the others their GPU minutes
                section = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}
                print(f"{name}: FAILED {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            section["section_seconds"] = round(time.perf_counter() - start, 1)
            result["sections"][name] = section
            result["machine"] = watch.record()
            result["load_after"] = os.getloadavg()
            write_json(out_path, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = [name for name, section in result["sections"].items() if "error" in section or "failed" in section]
    print(f"wrote {out_path}" + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
