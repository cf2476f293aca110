"""What a store's checksums cost (dstg_interp.store.checksums): beside the extraction that writes them, and
what opening (sampled) and dstg-verify (full) take to check them.

    python benchmarks/bench_checksums.py            # 100k tokens of bench_store's model: every layer x sem/ap
    python benchmarks/bench_checksums.py --quick    # a few thousand tokens: checks the script runs

One store is extracted (bench_store's DSTG model and random sequences, every layer 0..6 x (sem, ap, full), float16:
bench_store's ``extract`` pass) --repeats times; each time the checksums of its files are computed once more
the way extraction computes them (``store_checksums``: one read of each file, still in the page cache), and
the checks are timed on the written store: ``store_damage`` with the sampled checksums (what opening a store
does) and with the full ones (dstg-verify).  Best of the repeats each.  ``checksum_share_of_extract`` is the
checksum time over the extraction without it (extract's own time minus the checksum time); the target is at
most 0.03.  Writes benchmarks/results/checksums.json (machine.py records the load; an under-load run does
not replace a committed result without --allow-load).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from typing import Literal
from pathlib import Path

import torch

from bench_store import RandomSequences, add_dstg_size_arguments, dstg_config
from machine import LoadWatch, add_load_arguments, write_result

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the script, not the numbers")
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_dstg_size_arguments(parser)
    add_load_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.repeats = 4096, 1
    torch.set_num_threads(args.threads)
    watch = LoadWatch.start(args)

    from dstg_interp import build_model, extract
    from dstg_interp.store.checksums import store_checksums
    from dstg_interp.store.reader import store_damage

    model = build_model(dstg_config(args)).eval()
    sequences = RandomSequences(args.tokens, args.length, args.vocab)
    work = Path(tempfile.mkdtemp(prefix="bench-checksums-"))
    best = {"extract": float("inf"), "checksums": float("inf"), "open_sampled": float("inf"),
            "verify_full": float("inf")}
    try:
        layers = tuple(range(args.layers + 1))
        extract(model, sequences, work / "warm", layers=(0,), dtype="float16", batch_size=args.batch_size,
                progress=False)
        for _ in range(args.repeats):
            out = work / "store"
            started = time.perf_counter()
            store = extract(model, sequences, out, layers=layers, dtype="float16", batch_size=args.batch_size,
                            progress=False)
            best["extract"] = min(best["extract"], time.perf_counter() - started)
            files = sorted(store.manifest["checksums"]["files"])
            checks: tuple[tuple[str, Literal["sample", "full"] | None], ...] = (
                ("checksums", None), ("open_sampled", "sample"), ("verify_full", "full"))
            for name, check in checks:
                started = time.perf_counter()
                found = store_checksums(out, files) if check is None else store_damage(out, store.manifest, check)
                best[name] = min(best[name], time.perf_counter() - started)
                assert check is None or found is None, found  # the store just written is intact
            store_bytes = sum((out / name).stat().st_size for name in files)
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    share = best["checksums"] / (best["extract"] - best["checksums"])
    result = {
        "benchmark": "store checksums (xxh3-128, full + sampled) beside the extraction that writes them",
        "quick": args.quick, "threads": args.threads, "n_tokens": int(sequences.lengths.sum()),
        "store_bytes": store_bytes, "n_files": len(files),
        "seconds": {name: round(value, 4) for name, value in best.items()},
        "checksum_share_of_extract": round(share, 4),
        "target_at_most_0.03": share <= 0.03,
        "checksum_gb_per_s": round(store_bytes / best["checksums"] / 1e9, 2),
    }
    print(f"extract {best['extract']:.2f} s (checksums included), checksums {best['checksums']:.3f} s "
          f"= {share:.1%} of extraction; open (sampled) {best['open_sampled'] * 1e3:.1f} ms, "
          f"dstg-verify (full) {best['verify_full']:.3f} s for {store_bytes / 2**20:.0f} MiB")
    write_result(Path(tempfile.gettempdir()) / "checksums-quick.json" if args.quick else RESULTS / "checksums.json",
                 result, watch, args)


if __name__ == "__main__":
    main()
