"""Command 1 as a user types it: ``dstg-probe --model dstg --task segment``, the storeless default on a first run and
on a rerun (the random-init control read from the cache) against ``--store``.

    python benchmarks/bench_probe_cli.py --wait-quiet 600      # two rounds of each, interleaved; results/probe_cli.json
    python benchmarks/bench_probe_cli.py --rounds 1 --model dstg rope

Each run is the console command in a fresh process, end to end (start-up, the corpus read from the cache,
tokenising, the model and its random-init control, the probes, the tables written), timed from outside, with
its peak RSS (the child's ``ru_maxrss``) and the bytes it left in the cache's ``stores/`` folder. Every run gets a
cache of its own that already holds the corpus (copied from a warm-up run's cache, untimed), so both routes
start from what a user has after their first run of anything: the corpus fetched, no store extracted. The two
routes alternate within a round, so background load hits both alike; each reports its best round, and the
ratio is the store route's best seconds over the storeless route's. The store route is the route every
``dstg-probe`` took before issue #39 (extract the model's and the control's stores, then probe them).

The reference is one plain forward of the same model over the same sequences in the same batches (length-sorted,
``ExtractionConfig.batch_size``), run in a fresh process of its own with the same cache: the forward's seconds
alone (``plain_forward_s``: what every ``× plain forward`` ratio divides) and the whole script's (start-up, the
corpus, tokenising, the forward), which is what the shortest script a user could write instead costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import LoadWatch, add_load_arguments, json_child, write_result

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# route -> (flags, environment, whether the cache holds the random-init control's entry): the default on a first
# run; the same on a rerun, its control read from the cache (probes/control_cache.py); the default under glibc's
# default allocator settings (the commands before they kept freed memory, dstg_interp/cli/allocator.py); the store
# route of every dstg-probe before #39
ROUTES = {"storeless": ([], {}, False), "storeless, rerun (control reused)": ([], {}, True),
          "storeless, system allocator": ([], {"DSTG_MALLOC": "system"}, False), "store": (["--store"], {}, False)}


def dstg_probe() -> str:
    """The console script beside this interpreter (what ``pip install`` put on the PATH)."""
    script = Path(sys.executable).with_name("dstg-probe")
    if not script.exists():
        raise SystemExit(f"{script} not found: install the project (pip install -e .) into this environment")
    return str(script)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def run_once(argv: list[str], cache: Path, out: Path, environment: dict | None = None) -> dict:
    """One command in a fresh process: wall seconds, its peak RSS (wait4's rusage), the store bytes it left."""
    inherited = {k: v for k, v in os.environ.items() if k != "DSTG_MALLOC" and not k.startswith("MALLOC_")}
    env = {**inherited, "DSTG_CACHE": str(cache), **(environment or {})}
    with tempfile.TemporaryFile("w+") as log:
        start = time.perf_counter()
        child = subprocess.Popen(argv + ["--out", str(out)], env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            log.seek(0)
            raise SystemExit(f"{' '.join(argv)} exited {child.returncode}:\n{log.read()[-3000:]}")
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
            "store_bytes": folder_bytes(cache / "stores")}


def plain_forward_child(model: str, task: str) -> None:
    """In its own process: the model's plain forward over the sequences ``dstg-probe --task TASK`` reads (no hooks,
    no probes); prints one JSON line with the forward's seconds and the token count."""
    from dstg_interp.encoders import open_encoder
    from dstg_interp.store.config import ExtractionConfig
    from forward_reference import timed_plain_forward
    from probes.positions import (DEFAULT_CORPUS, PositionProbeConfig, probing_documents, probing_sequences,
                                  reads_paragraph_windows)

    config = PositionProbeConfig(task=task)
    encoder = open_encoder(model)
    sequences = probing_sequences(encoder, probing_documents(DEFAULT_CORPUS, None, progress=False),
                                  reads_paragraph_windows(config.task, config.segment))
    seconds, tokens = timed_plain_forward(encoder, sequences, ExtractionConfig.batch_size)
    print(json.dumps({"plain_forward_s": seconds, "tokens": tokens}))


def plain_forward(model: str, task: str, cache: Path) -> dict:
    """``plain_forward_child`` in a fresh process with ``cache``: the forward's seconds, the script's, the tokens."""
    return json_child([sys.executable, __file__, "--plain-forward-child", "--model", model, "--task", task],
                      {**os.environ, "DSTG_CACHE": str(cache)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", default=["dstg"], help="what --model gets (default: the shipped DSTG)")
    parser.add_argument("--task", default="segment")
    parser.add_argument("--plain-forward-child", action="store_true", help=argparse.SUPPRESS)
    add_load_arguments(parser, rounds=2)
    args = parser.parse_args()
    if args.plain_forward_child:
        plain_forward_child(args.model[0], args.task)
        return
    command = [dstg_probe(), "--model", *args.model, "--task", args.task]
    work = Path(tempfile.mkdtemp(prefix="bench-probe-cli-", dir=args.work_dir))
    try:
        corpus_cache = work / "corpus-cache"  # warm-up, untimed: fetches and prepares the corpus once
        print("warm-up: the corpus into a cache of its own (untimed)", flush=True)
        run_once(command + ["--n-boot", "0"], corpus_cache, work / "warm-up")  # its control entry: the rerun's
        shutil.rmtree(corpus_cache / "stores", ignore_errors=True)
        controls = work / "controls"
        shutil.move(corpus_cache / "controls", controls)
        watch = LoadWatch.start(args)
        helps = []
        for _ in range(3):  # the stored --help (dstg_interp/cli/help_text.py): no torch imported
            start = time.perf_counter()
            subprocess.run([dstg_probe(), "--help"], check=True, capture_output=True)
            helps.append(round(time.perf_counter() - start, 3))
        rounds: dict[str, list[dict]] = {route: [] for route in ROUTES}
        forwards: list[dict] = []
        for number in range(args.rounds):
            if len(args.model) == 1:  # the reference: one model's plain forward (several models: their sum is not one)
                forwards.append(plain_forward(args.model[0], args.task, corpus_cache))
                print(f"round {number + 1} {'plain forward':34s}: {forwards[-1]['plain_forward_s']:7.1f} s "
                      f"({forwards[-1]['script_s']:.1f} s as a script, {forwards[-1]['tokens']} tokens)", flush=True)
            for route, (flags, environment, rerun) in ROUTES.items():
                cache = work / f"cache-{''.join(c if c.isalnum() else '-' for c in route)}-{number}"
                shutil.copytree(corpus_cache, cache)
                if rerun:
                    shutil.copytree(controls, cache / "controls")
                row = run_once(command + flags, cache, work / f"out-{cache.name}", environment)
                rounds[route].append(row)
                print(f"round {number + 1} {route:34s}: {row['seconds']:7.1f} s, peak RSS {row['peak_rss_mb']} MiB, "
                      f"store bytes {row['store_bytes'] / 2**20:.1f} MiB", flush=True)
                shutil.rmtree(cache)
        best = {route: min(rows, key=lambda r: r["seconds"]) for route, rows in rounds.items()}
        result = {"benchmark": "dstg-probe as typed: the storeless default vs --store (the route before issue #39)",
                  "command": " ".join(["dstg-probe", "--model", *args.model, "--task", args.task]),
                  "threads": "dstg-probe's default (every core)", "rounds": rounds, "best": best,
                  "store_over_storeless_seconds": round(best["store"]["seconds"] / best["storeless"]["seconds"], 3),
                  "first_run_over_rerun_seconds": round(
                      best["storeless"]["seconds"] / best["storeless, rerun (control reused)"]["seconds"], 3),
                  "system_allocator_over_storeless_seconds": round(
                      best["storeless, system allocator"]["seconds"] / best["storeless"]["seconds"], 3),
                  "help_seconds": helps, "date": time.strftime("%Y-%m-%d")}
        if forwards:
            forward = min(forwards, key=lambda r: r["plain_forward_s"])
            script = min(r["script_s"] for r in forwards)
            result.update(plain_forward=forwards, plain_forward_s=round(forward["plain_forward_s"], 3),
                          plain_forward_script_s=script, tokens=forward["tokens"],
                          first_run_vs_plain_forward=round(forward["plain_forward_s"] / best["storeless"]["seconds"], 3),
                          rerun_vs_plain_forward=round(forward["plain_forward_s"]
                                                       / best["storeless, rerun (control reused)"]["seconds"], 3),
                          first_run_vs_plain_script=round(script / best["storeless"]["seconds"], 3),
                          rerun_vs_plain_script=round(script / best["storeless, rerun (control reused)"]["seconds"], 3))
        write_result(RESULTS / "probe_cli.json", result, watch, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
