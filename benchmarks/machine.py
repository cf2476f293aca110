"""The machine a benchmark ran on, and whether it was quiet: every script in benchmarks/ records this.

    from machine import LoadWatch, add_load_arguments, write_result   # benchmarks are scripts: sibling import
    add_load_arguments(parser)                     # --allow-load, --wait-quiet SECONDS
    watch = LoadWatch.start(args)                  # load averages before (optionally waits for a quiet machine)
    ...                                            # the benchmark
    write_result(path, result, watch, args)        # result["machine"] = load before/after, cores, threads, versions

A run is quiet when the 1-minute load average is at most QUIET_LOAD when it starts (on this shared
2-core box, anything above means another job competes for the cores and numbers come out depressed).
An under-load run never replaces results that are already there (the committed ones) unless
``--allow-load`` is given: it is written to the temporary folder instead, and the script exits with code 2.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The model size the training benchmarks measure: the zoo's widths at the former zoo's depth (4 layers, as every
# committed result and its HF twin), not the 6 layers of the zoo shipped since
BENCH_DEPTH = dict(n_layers=4, n_heads=4)
QUIET_LOAD = 0.5  # 1-minute load average at the start of a quiet run
PACKAGES = ("numpy", "scipy", "scikit-learn", "torch", "transformers", "transformer-lens")


def status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process from /proc (Linux), in MiB; NaN elsewhere."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load_averages() -> dict:
    one, five, fifteen = os.getloadavg()
    return {"1min": round(one, 2), "5min": round(five, 2), "15min": round(fifteen, 2)}


def versions() -> dict:
    """Installed versions of the libraries the benchmarks time (read from metadata: nothing is imported)."""
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def add_load_arguments(parser: argparse.ArgumentParser, rounds: int | None = None) -> None:
    """--allow-load and --wait-quiet; with ``rounds`` also --rounds (that default) and --work-dir, for a benchmark
    that times whole commands in fresh processes with caches of their own."""
    if rounds is not None:
        parser.add_argument("--rounds", type=int, default=rounds)
        parser.add_argument("--work-dir", default=tempfile.gettempdir(),
                            help="where the caches and outputs go (a real disk)")
    parser.add_argument("--allow-load", action="store_true",
                        help=f"write results over the committed ones even if the 1-min load was above {QUIET_LOAD}")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help=f"wait up to this long for the 1-min load to fall to {QUIET_LOAD} before starting")


@dataclass
class LoadWatch:
    load_before: dict
    started: float = field(default_factory=time.time)
    waited_s: float = 0.0

    @classmethod
    def start(cls, args: argparse.Namespace | None = None) -> "LoadWatch":
        waited, limit = 0.0, getattr(args, "wait_quiet", 0.0) or 0.0
        while os.getloadavg()[0] > QUIET_LOAD and waited < limit:
            time.sleep(10)
            waited += 10
        watch = cls(load_before=load_averages(), waited_s=waited)
        if not watch.quiet:
            print(f"note: 1-min load {watch.load_before['1min']} > {QUIET_LOAD} at the start: this run is under load",
                  flush=True)
        return watch

    @property
    def quiet(self) -> bool:
        return self.load_before["1min"] <= QUIET_LOAD

    def record(self) -> dict:
        """Everything about the machine and its load, for the result JSON."""
        torch = sys.modules.get("torch")  # intra-op threads, when the benchmark uses torch at all
        threads = torch.get_num_threads() if torch is not None else None
        return {
            "quiet": self.quiet,
            "quiet_rule": f"1-min load average <= {QUIET_LOAD} at the start",
            "load_before": self.load_before,
            "load_after": load_averages(),
            "waited_for_quiet_s": self.waited_s,
            "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "torch_threads": threads,
            "cpu": platform.processor() or platform.machine(),
            "versions": versions(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "wall_s": round(time.time() - self.started, 1),
        }


def write_result(path: str | Path, result: dict, watch: LoadWatch, args: argparse.Namespace | None = None) -> Path:
    """Write ``result`` (with ``result["machine"]`` and ``result["quiet"]``) to ``path`` atomically; an under-load
    run goes to the temporary folder instead when ``path`` already holds results, unless --allow-load."""
    path = Path(path)
    result = {**result, "quiet": watch.quiet, "machine": watch.record()}
    text = json.dumps(result, indent=1, default=str) + "\n"
    if not watch.quiet and path.exists() and not getattr(args, "allow_load", False):
        aside = Path(tempfile.gettempdir()) / f"{path.stem}.under-load.json"
        aside.write_text(text)
        print(f"machine under load (1-min load {watch.load_before['1min']} > {QUIET_LOAD} at the start): kept {path}, "
              f"wrote this run to {aside}; rerun when the machine is quiet (--wait-quiet SECONDS) or pass --allow-load",
              file=sys.stderr)
        raise SystemExit(2)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    print(f"wrote {path} ({'quiet' if watch.quiet else 'UNDER LOAD'})")
    return path


def json_child(argv: list[str], env: dict | None = None) -> dict:
    """Run a benchmark's child process (``argv``, e.g. ``[sys.executable, __file__, "--...-child", ...]``) that ends
    by printing one JSON line: that line's dict, with ``script_s``, the child's whole wall time (start-up included)."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "script_s": round(seconds, 2)}
