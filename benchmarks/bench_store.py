"""Activation-store benchmark: extraction throughput (disk writes included), peak RSS vs token count, torchrun.

    python benchmarks/bench_store.py            # full: ~100k tokens per rival, RSS at 100k and 1M tokens, 2 ranks
    python benchmarks/bench_store.py --quick    # a few thousand tokens: checks the script runs (numbers meaningless)

One process, the same random-token sequences (length 256) and thread count for every rival:
  plain_encoder      our DSTG model, un-hooked forward of all blocks (stop_at_layer=n_layers, no MLM head)
  plain_with_head    the same plus the MLM head (what ``model(tokens)`` costs)
  extract            dstg_interp.extract: every layer 0..6 x (sem, ap, full), float16, written to disk
                     (format 2: sem and ap written once each, full served as [sem | ap] on read)
  extract_full_only  the same with subspace "full" only (the bytes a baseline model would write)
  capture            where extract's time goes, step 1: the hooked forward that keeps every layer x
                     sem/ap state of a batch (Encoder.capture with extract's hooks), nothing copied
  capture_rows       step 2: the same plus the float16 rows extract writes (store.extract._real_rows)
  extract_tmpfs      step 3: extract into a folder on /dev/shm (memory): the whole of extract but the disk
                     (left out where the machine has no /dev/shm)
  hf_hidden_states   HF BertModel of matched size, output_hidden_states=True (what a user writes by hand)
  bridge_filtered    TransformerLens TransformerBridge.boot_transformers(path, hf_model=BertForMaskedLM)
                     .run_with_cache with names_filter = the residual stream of every layer
  bridge_unfiltered  the same with no filter (every hook)
The BERT has hidden = d_sem + d_ap, the same layers/heads, intermediate = 4 x hidden, random weights,
built from a config offline. Each rival: one warm-up batch, then --repeats rounds in which every rival
runs once in turn (background load hits all alike); each reports its best round. Each extraction pass
writes a fresh store, removed after its timing (a user's extraction keeps its store).
Peak RSS: ``extract`` run in a fresh subprocess per token count (sequences generated on the fly, so
the input corpus does not count), reporting VmHWM (peak RSS) and the RSS just before extraction started.
Scale-out: the same ``extract`` (every layer x subspace) under ``torchrun --standalone --nproc_per_node N``
(gloo) for N = 1 and 2, each rank with threads / N torch threads so both use the same cores; seconds
of rank 0 around the extraction (start-up excluded, reported apart) and whether the two stores are
byte-identical (they must be: the same batches on the same kernels).
Writes benchmarks/results/store.json (--quick writes $TMPDIR/store-quick.json, never committed) with the
machine's load (machine.py); an under-load run does not replace the committed results (--allow-load).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from machine import LoadWatch, status_mb, write_result
from threaded_args import parse_threaded

RESULTS = Path(__file__).resolve().parent / "results"


class RandomSequences:
    """``n_sequences`` sequences of ``length`` random ids, generated on access (no corpus held in memory)."""

    def __init__(self, n_tokens: int, length: int, vocab_size: int, seed: int = 0):
        self.length, self.vocab_size, self.seed = length, vocab_size, seed
        self.n = max(1, n_tokens // length)
        self.lengths = np.full(self.n, length, dtype=np.int64)
        self.meta = {"documents": [{"doc_id": f"random-{i}", "source": "random"} for i in range(self.n)]}

    def __len__(self):
        return self.n

    def __getitem__(self, index: int) -> dict:
        rng = np.random.default_rng((self.seed, index))
        ids = rng.integers(5, self.vocab_size, size=self.length).astype(np.int32)
        ids[0], ids[-1] = 2, 3  # [CLS] ... [SEP]
        positions = np.arange(self.length, dtype=np.int32)
        special = np.zeros(self.length, dtype=bool)
        special[[0, -1]] = True
        return {"input_ids": ids, "token_position": positions, "sentence_index": positions // 20,
                "paragraph_index": positions // 80, "intra_sentence_position": positions % 20,
                "intra_paragraph_position": positions % 80, "doc_index": np.full(self.length, index, dtype=np.int32),
                "is_special": special}

    def batches(self, batch_size: int):
        for start in range(0, self.n, batch_size):
            ids = np.stack([self[i]["input_ids"] for i in range(start, min(start + batch_size, self.n))])
            tokens = torch.from_numpy(ids).long()
            yield tokens, torch.ones_like(tokens, dtype=torch.bool)


def add_dstg_size_arguments(parser) -> None:
    """The DSTG the store benchmarks extract from (the zoo's widths at 6 layers, 256 positions); ``dstg_config``
    builds it.  Shared by bench_store and bench_checksums, so both time the same model."""
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-head", type=int, default=32)
    parser.add_argument("--d-sem", type=int, default=112)
    parser.add_argument("--d-ap", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)


def dstg_config(args):
    from dstg_interp import ModelConfig

    return ModelConfig(variant="dstg", vocab_size=args.vocab, max_positions=args.length, n_layers=args.layers,
                       n_heads=args.heads, d_head=args.d_head, d_sem=args.d_sem, d_ap=args.d_ap, seed=0)


def interleaved_best_seconds(passes: dict, repeats: int, after: dict | None = None) -> dict:
    """Best wall time of each pass over ``repeats`` rounds, every pass once per round (warm-ups: the caller);
    ``after[name]``, when given, runs untimed after each of that pass's runs (removing what it wrote)."""
    best = {name: float("inf") for name in passes}
    for _ in range(repeats):
        for name, run_pass in passes.items():
            start = time.perf_counter()
            run_pass()
            best[name] = min(best[name], time.perf_counter() - start)
            (after or {}).get(name, lambda: None)()
    return best


def throughput(args) -> dict:
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import BertConfig, BertForMaskedLM

    from dstg_interp import build_model, extract
    from dstg_interp.encoders import open_encoder
    from dstg_interp.store.config import ExtractionConfig
    from dstg_interp.store.extract import _real_rows
    from dstg_interp.store.layout import derived_parts
    from dstg_interp.store.targets import plan_targets

    model = build_model(dstg_config(args)).eval()
    sequences = RandomSequences(args.tokens, args.length, args.vocab)
    n_tokens = int(sequences.lengths.sum())
    hidden = args.d_sem + args.d_ap
    bert_config = BertConfig(vocab_size=args.vocab, hidden_size=hidden, num_hidden_layers=args.layers,
                             num_attention_heads=args.heads, intermediate_size=4 * hidden,
                             max_position_embeddings=args.length)
    torch.manual_seed(0)
    bert = BertForMaskedLM(bert_config).eval()
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    bert_dir = work / "bert"
    bert.save_pretrained(bert_dir)
    bridge = TransformerBridge.boot_transformers(str(bert_dir), hf_model=bert)
    resid_names = ["embed_ln.hook_out"] + [f"blocks.{i}.hook_out" for i in range(args.layers)]
    missing = [name for name in resid_names if name not in bridge.hook_dict]
    if missing:
        raise SystemExit(f"bridge has no hooks {missing}; TransformerLens changed its BERT names")

    def forward_all(call):
        with torch.inference_mode():
            for tokens, mask in sequences.batches(args.batch_size):
                call(tokens, mask)

    counter = {"n": 0}
    memory = Path("/dev/shm")
    memory_work = Path(tempfile.mkdtemp(prefix="bench-store-", dir=memory)) if memory.is_dir() else None

    def extraction(folder: Path = work, **kwargs):
        counter["n"] += 1  # a fresh folder per pass: a rerun into the same folder would reuse the store
        counter["last"] = folder / f"store-{counter['n']}"
        extract(model, sequences, counter["last"], batch_size=args.batch_size, dtype="float16", progress=False, **kwargs)

    def remove_store():  # untimed: a user's extraction keeps its store; deleting it is not part of the pass
        shutil.rmtree(counter["last"])

    encoder = open_encoder(model)
    extraction_config = ExtractionConfig().resolve(encoder.n_layers, tuple(encoder.subspaces), encoder.variant)
    targets = plan_targets(encoder, extraction_config)
    stored = [target for target in targets if target.key not in derived_parts(targets)]
    hooks = sorted({hook for target in targets for hook in target.hooks})

    rivals = {
        "plain_encoder": lambda: forward_all(lambda t, m: model(t, attention_mask=m, stop_at_layer=args.layers)),
        "plain_with_head": lambda: forward_all(lambda t, m: model(t, attention_mask=m)),
        "extract": lambda: extraction(),
        "extract_full_only": lambda: extraction(subspaces=("full",)),
        "capture": lambda: forward_all(lambda t, m: encoder.capture(t, m, hooks)),
        "capture_rows": lambda: forward_all(lambda t, m: _real_rows(encoder.capture(t, m, hooks), stored, m, torch.float16)),
        **({"extract_tmpfs": lambda: extraction(memory_work)} if memory_work is not None else {}),
        "hf_hidden_states": lambda: forward_all(lambda t, m: bert.bert(t, attention_mask=m.long(), output_hidden_states=True)),
        "bridge_filtered": lambda: forward_all(lambda t, m: bridge.run_with_cache(t, attention_mask=m.long(), names_filter=resid_names)),
        "bridge_unfiltered": lambda: forward_all(lambda t, m: bridge.run_with_cache(t, attention_mask=m.long())),
    }
    warm_tokens, warm_mask = next(sequences.batches(args.batch_size))
    with torch.inference_mode():  # warm-up: one batch through each kind of call
        bridge.run_with_cache(warm_tokens, attention_mask=warm_mask.long(), names_filter=resid_names)
        bert.bert(warm_tokens, attention_mask=warm_mask.long(), output_hidden_states=True)
        model(warm_tokens, attention_mask=warm_mask)
    results = {}
    removals = {name: remove_store for name in rivals if name.startswith("extract")}
    for name, seconds in interleaved_best_seconds(rivals, args.repeats, removals).items():
        results[name] = {"seconds": round(seconds, 3), "tokens_per_s": round(n_tokens / seconds, 1)}
        print(f"{name:18s} {n_tokens / seconds:10.0f} tok/s  ({seconds:.2f} s)", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    if memory_work is not None:
        shutil.rmtree(memory_work, ignore_errors=True)
    extract_speed = results["extract"]["tokens_per_s"]
    ratios = {
        "extract_vs_plain_encoder": extract_speed / results["plain_encoder"]["tokens_per_s"],
        "extract_vs_plain_with_head": extract_speed / results["plain_with_head"]["tokens_per_s"],
        "extract_vs_bridge_filtered": extract_speed / results["bridge_filtered"]["tokens_per_s"],
        "extract_vs_bridge_unfiltered": extract_speed / results["bridge_unfiltered"]["tokens_per_s"],
        "extract_full_only_vs_plain_encoder": results["extract_full_only"]["tokens_per_s"] / results["plain_encoder"]["tokens_per_s"],
        **{f"{name}_vs_plain_encoder": results[name]["tokens_per_s"] / results["plain_encoder"]["tokens_per_s"]
           for name in ("capture", "capture_rows", "extract_tmpfs") if name in results},
    }
    return {"n_tokens": n_tokens, "rivals": results, "ratios": {k: round(v, 3) for k, v in ratios.items()},
            "target_extract_at_least_0.85x_plain_encoder": bool(ratios["extract_vs_plain_encoder"] >= 0.85),
            "target_extract_at_least_0.95x_plain_encoder": bool(ratios["extract_vs_plain_encoder"] >= 0.95),
            "dstg_params": sum(p.numel() for p in model.parameters()), "bert_params": sum(p.numel() for p in bert.parameters())}


def rss_child(args) -> None:
    """Run one extraction in this (fresh) process and print its memory as JSON."""
    from dstg_interp import build_model, extract

    model = build_model(dstg_config(args)).eval()
    sequences = RandomSequences(args.rss_child, args.length, args.vocab)
    rss_before = status_mb("VmRSS")
    start = time.perf_counter()
    out = Path(args.rss_out)
    store = extract(model, sequences, out, batch_size=args.batch_size, dtype="float16", progress=False)
    seconds = time.perf_counter() - start
    peak = status_mb("VmHWM")  # not ru_maxrss: Linux carries that over from the parent across fork + exec
    disk = sum(f.stat().st_size for f in out.iterdir())
    print(json.dumps({"n_tokens": store.n_tokens, "rss_before_extract_mb": round(rss_before, 1),
                      "peak_rss_mb": round(peak, 1), "seconds": round(seconds, 2), "store_bytes": disk}))


def peak_rss(args) -> dict:
    rows = {}
    for n_tokens in args.rss_tokens:
        work = Path(tempfile.mkdtemp(prefix="bench-store-rss-"))
        command = [sys.executable, __file__, "--rss-child", str(n_tokens), "--rss-out", str(work / "store"),
                   "--threads", str(args.threads)] + _model_flags(args)
        try:
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows[str(n_tokens)] = json.loads(output.strip().splitlines()[-1])
        print(f"rss {n_tokens:>9} tokens: {rows[str(n_tokens)]}", flush=True)
    peaks = [row["peak_rss_mb"] for row in rows.values()]
    return {"runs": rows, "peak_ratio_largest_vs_smallest": round(peaks[-1] / peaks[0], 3)}


def ranks_child(args) -> None:
    """One torchrun rank: extract the random sequences into --rss-out together with the other ranks."""
    from dstg_interp import build_model, extract
    from dstg_interp.store.distributed import torchrun_ranks

    model = build_model(dstg_config(args)).eval()
    sequences = RandomSequences(args.ranks_child, args.length, args.vocab)
    with torch.inference_mode():  # warm-up, as for the in-process rivals: one-time kernel set-up is not timed
        tokens, mask = next(sequences.batches(args.batch_size))
        model(tokens, attention_mask=mask)
    with torchrun_ranks("cpu") as ranks:
        start = time.perf_counter()
        store = extract(model, sequences, args.rss_out, batch_size=args.batch_size, dtype="float16", progress=False,
                        ranks=ranks)
        seconds = time.perf_counter() - start
        if ranks.first:
            print(json.dumps({"n_tokens": store.n_tokens, "ranks": ranks.world_size, "seconds": round(seconds, 2)}))


def scale_out(args) -> dict:
    """torchrun with 1 and 2 gloo ranks on the same cores: extraction seconds and whether the stores are identical."""
    rows, digests = {}, {}
    work = Path(tempfile.mkdtemp(prefix="bench-store-ranks-"))
    try:
        for n_ranks in (1, 2):
            out = work / f"store-{n_ranks}"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n_ranks),
                       __file__, "--ranks-child", str(args.tokens), "--rss-out", str(out),
                       "--threads", str(max(1, args.threads // n_ranks))] + _model_flags(args)
            start = time.perf_counter()
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            row = json.loads(output.strip().splitlines()[-1])
            row["command_seconds_with_startup"] = round(time.perf_counter() - start, 2)
            row["tokens_per_s"] = round(row["n_tokens"] / row["seconds"], 1)
            rows[str(n_ranks)] = row
            digests[n_ranks] = _folder_digest(out)
            shutil.rmtree(out)
            print(f"torchrun {n_ranks} rank(s): {row['tokens_per_s']:10.0f} tok/s  ({row['seconds']:.2f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"runs": rows, "speedup_2_vs_1": round(rows["1"]["seconds"] / rows["2"]["seconds"], 3),
            "stores_identical": digests[1] == digests[2]}


def _folder_digest(folder: Path) -> str:
    """sha256 over every array file of a store (the manifest holds a timestamp, so it is left out)."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.name != "manifest.json":
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _model_flags(args) -> list[str]:
    return ["--layers", str(args.layers), "--heads", str(args.heads), "--d-head", str(args.d_head), "--d-sem",
            str(args.d_sem), "--d-ap", str(args.d_ap), "--vocab", str(args.vocab), "--length", str(args.length),
            "--batch-size", str(args.batch_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the script, not the numbers")
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--rss-tokens", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_dstg_size_arguments(parser)
    parser.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rss-out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ranks-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parse_threaded(parser)
    if args.rss_child is not None:
        rss_child(args)
        return
    if args.ranks_child is not None:
        ranks_child(args)
        return
    if args.quick:
        args.tokens, args.rss_tokens, args.repeats = 4_096, [4_096, 40_960], 1
    watch = LoadWatch.start(args)
    result = {
        "benchmark": "activation store extraction vs plain forward and TransformerLens TransformerBridge",
        "quick": args.quick,
        "threads": args.threads,
        "model": {"variant": "dstg", "n_layers": args.layers, "n_heads": args.heads, "d_head": args.d_head,
                  "d_sem": args.d_sem, "d_ap": args.d_ap, "vocab": args.vocab, "seq_len": args.length,
                  "batch_size": args.batch_size},
        "throughput": throughput(args),
        "peak_rss": peak_rss(args),
        "scale_out": scale_out(args),
        "date": time.strftime("%Y-%m-%d"),
    }
    path = Path(tempfile.gettempdir()) / "store-quick.json" if args.quick else RESULTS / "store.json"
    write_result(path, result, watch, args)


if __name__ == "__main__":
    main()
