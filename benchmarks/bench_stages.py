"""Where extraction's and the storeless probes' time goes, stage by stage, each against a plain forward over the
same batches in the same process.

    python benchmarks/bench_stages.py --wait-quiet 300                 # width 768, 100k tokens: ~5 min, quiet
    python benchmarks/bench_stages.py --tokens 20000 --allow-load      # a look, not for the README

One process, one random 720 + 48 DSTG (6 layers, 12 heads: the authors' width, as bench_scaling.py), one set of
length-256 sequences. Each route runs right after a plain forward over the same batches (`model(...,
stop_at_layer=6)`, what every ratio is against), so the machine's drift over the run cancels in each ratio:

  extract            extraction to a store on --work-dir (a real disk), as `dstg-extract` writes it: whole pages
                     past the page cache (O_DIRECT), checksums read back past it
  extract_buffered   the same with every write through the page cache and the checksums read through it
                     (the write path before session 20), to show what the direct path is worth
  storeless          the storeless position probes (`probe_sequences`, task segment, bootstrap on, no control)
  storeless_float32  the same with `--gram-precision float32` (the Gram products in float32)

The stages are timed by wrapping the library's own functions (nothing in it changes): for extraction the
batches (`_write_batch`: the capture, the float16 rows, the queueing), the capture alone (the forward with its
hooks), the float16 rows and the checksums; for the storeless probes the statistics pass, the capture, the
float16 rows, the sums (`PartStatistics.add`, its Gram products on the pool included), the Gram products
themselves (seconds summed over the pool's threads, so they can exceed their share of the wall), the solves
and the held-out predictions. Results: benchmarks/results/stages.json.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from bench_scaling import LabelledSequences, dstg_config
from machine import LoadWatch, add_load_arguments, write_result

HERE = Path(__file__).resolve().parent
ROUTES = ("extract", "extract_buffered", "storeless", "storeless_float32")


@contextmanager
def stage_timers(seconds: dict, targets: list[tuple[object, str, str]]):
    """Wrap ``owner.name`` so every call adds its wall time to ``seconds[label]``; unwrapped on leaving."""
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]
    lock = threading.Lock()

    def timed(function, label):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                with lock:  # the Gram products are timed on several threads
                    seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - start
        return call

    for (owner, name, label), (_, _, function) in zip(targets, originals):
        setattr(owner, name, timed(function, label))
    try:
        yield seconds
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)


@contextmanager
def buffered_writes():
    """The write path before session 20: NpyWriter without O_DIRECT, checksums read through the page cache."""
    npy_writer = importlib.import_module("dstg_interp.store.npy_writer")
    original_init, o_direct = npy_writer.NpyWriter.__init__, getattr(os, "O_DIRECT", None)

    def init(self, *args, **kwargs):
        original_init(self, *args, **{**kwargs, "direct": False})

    npy_writer.NpyWriter.__init__ = init
    if o_direct is not None:
        del os.O_DIRECT  # checksums.py reads with getattr(os, "O_DIRECT", 0)
    try:
        yield
    finally:
        npy_writer.NpyWriter.__init__ = original_init
        if o_direct is not None:
            os.O_DIRECT = o_direct  # type: ignore[misc]  # put back what the context removed


def plain_forward(model, sequences, batch_size: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for tokens, mask in sequences.batches(batch_size):
            model(tokens, attention_mask=mask, stop_at_layer=model.config.n_layers)
    return time.perf_counter() - start


def run_route(route: str, model, sequences, args) -> dict:
    from dstg_interp import extract
    from dstg_interp.encoders import open_encoder
    from dstg_interp.encoders.hooked import HookedEncoder
    from probes.positions import PositionProbeConfig, probe_sequences

    extraction = importlib.import_module("dstg_interp.store.extract")
    storeless = importlib.import_module("probes.storeless")
    statistics = importlib.import_module("probes.statistics")
    seconds: dict[str, float] = {}
    if route.startswith("extract"):
        out = Path(args.work_dir) / f"bench-stages-{os.getpid()}"
        targets = [(extraction, "_write_batch", "batches"), (HookedEncoder, "capture", "capture"),
                   (extraction, "_real_rows", "float16 rows"), (extraction, "store_checksums", "checksums")]
        with stage_timers(seconds, targets), (buffered_writes() if route == "extract_buffered" else _nothing()):
            start = time.perf_counter()
            extract(model, sequences, out, batch_size=args.batch_size, dtype="float16", progress=False)
            total = time.perf_counter() - start
        disk = sum(path.stat().st_size for path in out.iterdir())
        shutil.rmtree(out)
    else:
        encoder = open_encoder(model)
        config = PositionProbeConfig(task="segment", controls=False,
                                     gram_precision="float32" if route == "storeless_float32" else "float64")
        targets = [(storeless, "_statistics_pass", "statistics pass"), (HookedEncoder, "capture", "capture"),
                   (storeless, "_float16_rows", "float16 rows"), (statistics.PartStatistics, "add", "sums"),
                   (statistics, "rows_gram", "Gram products (thread-seconds)"),
                   (storeless, "_solve", "solves"), (storeless, "_predictions", "held-out predictions")]
        with stage_timers(seconds, targets):
            start = time.perf_counter()
            probe_sequences(encoder, sequences, config, model_name="stages", controls=False, batch_size=args.batch_size)
            total = time.perf_counter() - start
        disk = 0
    stages = {label: round(seconds[label], 3) for _, _, label in targets if label in seconds}  # in the order above
    return {"seconds": round(total, 3), "stages": stages, "disk_bytes": disk}


@contextmanager
def _nothing():
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--width", type=int, default=768, choices=(128, 384, 768))
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--work-dir", default=tempfile.gettempdir(), help="where extraction writes (a real disk)")
    parser.add_argument("--result", default="stages", help="results/<name>.json")
    add_load_arguments(parser)
    args = parser.parse_args()

    from dstg_interp import build_model
    from dstg_interp.cli.allocator import keep_freed_memory

    keep_freed_memory()  # as the dstg-* commands run
    watch = LoadWatch.start(args)
    torch.manual_seed(0)
    model = build_model(dstg_config(args.width, args)).eval()
    sequences = LabelledSequences(args.tokens, args.length, args.vocab)
    n_tokens = int(sequences.lengths.sum())
    plain_forward(model, LabelledSequences(args.batch_size * args.length, args.length, args.vocab), args.batch_size)  # warm-up
    rows = []
    for route in args.routes:
        print(f"{route}: the plain forward, then the route, over {n_tokens:,} tokens at width {args.width}", flush=True)
        plain = plain_forward(model, sequences, args.batch_size)
        measured = run_route(route, model, sequences, args)
        row = {"route": route, "width": args.width, "n_tokens": n_tokens, "plain_forward_s": round(plain, 3),
               **measured, "ratio_vs_plain_forward": round(plain / measured["seconds"], 3)}
        print(f"  plain {plain:.1f} s, {route} {measured['seconds']:.1f} s ({row['ratio_vs_plain_forward']:.2f}x); "
              + ", ".join(f"{k} {v:.1f} s" for k, v in measured["stages"].items()), flush=True)
        rows.append(row)
    write_result(HERE / "results" / f"{args.result}.json",
                 {"script": "bench_stages.py", "args": {k: v for k, v in vars(args).items() if k != "allow_load"},
                  "rows": rows}, watch, args)


if __name__ == "__main__":
    main()
