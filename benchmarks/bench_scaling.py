"""How cost grows: tokens/s, peak RSS and disk against token count and width, and a 10M-token projection.

    python benchmarks/bench_scaling.py                       # the full grid (hours at width 768: see below)
    python benchmarks/bench_scaling.py --work-dir /mnt/disk  # stores on that disk (default: $TMPDIR)
    python benchmarks/bench_scaling.py --quick               # tiny sizes: checks the script runs (numbers meaningless)
    python benchmarks/bench_scaling.py --figure-only         # redraw figures/scaling.png from results/scaling.json
    python benchmarks/bench_scaling.py --tokens 10000 100000 1000000 --large-tokens 1000000 --large-widths 768
                                                             # the 1M-token row: plain forward and storeless at 768 only

Grid: tokens (default 10k, 100k, 1M) x width (128, 384, 768; a random DSTG of 6 layers, d_ap 16 at 128 and 48
above, 4 / 6 / 12 heads, length 256) x these rivals, each cell in a fresh subprocess (so its peak RSS is
its own: VmHWM; the random-token sequences are generated on the fly, so the input holds no memory):
  plain_forward      our DSTG, un-hooked forward of every block (the reference of every ratio)
  hf_hidden_states   HF BertModel of matched size (hidden = width, same layers / heads, intermediate 4 x
                     hidden, random weights, built offline) with output_hidden_states=True: what a user writes
  extract            dstg_interp.extract: every layer 0..6 x (sem, ap, full), float16, into --work-dir
                     (the store's bytes on disk are reported; the store is removed after its cell)
  storeless          probes.positions.probe_sequences, the default route of dstg-probe: the segment probe of
                     every layer x subspace with the position-only baseline and a 1000-resample bootstrap,
                     statistics summed during the forward pass plus the held-out pass (1 + test_fraction
                     forwards); --controls adds the random-init control (one more forward)
  storeless_no_boot  the same with --n-boot 0: no bootstrap, so no held-out pass (one forward: the route's
                     ceiling without intervals)
  storeless_float32  storeless with --gram-precision float32 (the Gram products in float32); its results.csv is
                     compared column by column with storeless's at the same (width, tokens): the row's
                     "vs_float64" holds the largest |difference| per column
Each cell warms up on one batch, then times its whole call (for storeless: statistics, solves, held-out
pass, bootstrap). --repeats runs the grid that many times, rivals interleaved within a (width, tokens),
and keeps each cell's best time. Ratios are tokens/s over plain_forward's at the same (width, tokens).
The projection: per (rival, width), seconds = a + b x tokens fitted to the measured token counts, peak RSS
the largest measured (flat in tokens when it is; the slope is reported), disk bytes per token x 10M;
beside it the published GPU figures of ../shared/notes/anchors-turn4.md §4 (written into the JSON).
Roughly, on 2 cores: width 768 runs ~1.3k tokens/s forward, so the 1M-token row of 768 takes ~15 min
per rival and the whole default grid ~1.5 h; --tokens / --widths / --rivals choose a part.
Writes benchmarks/results/scaling.json and figures/scaling.png (--quick: $TMPDIR/scaling-quick.*, never
committed), with the machine's load (machine.py); an under-load run does not replace committed results.
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

import numpy as np
import torch

from bench_store import RandomSequences
from dstg_interp.cli.allocator import keep_freed_memory
from machine import LoadWatch, status_mb, write_result
from threaded_args import parse_threaded

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
FIGURE = HERE.parent / "figures" / "scaling.png"
RIVALS = ("plain_forward", "hf_hidden_states", "extract", "storeless", "storeless_no_boot", "storeless_float32")
WIDTHS = {128: dict(d_sem=112, d_ap=16, n_heads=4), 384: dict(d_sem=336, d_ap=48, n_heads=6),
          768: dict(d_sem=720, d_ap=48, n_heads=12)}
PROJECT_TOKENS = 10_000_000
# Published GPU figures for encoder-size models (../shared/notes/anchors-turn4.md §4.2-4.3), for the projection's side
ANCHORS = {
    "store_10M_tokens_768_wide_7_boundaries_fp16_GB": 107,
    "store_10M_tokens_ap_only_GB": 6.7,
    "nvme_write_GB_per_s": "2-5 (so 20-60 s for the 107 GB store)",
    "forward_GFLOP_per_token_768_wide_6_layers": 0.12,
    "ridge_gram_per_layer_on_gpu_s": "< 1 (n = 1e7, p = 768)",
    "bert_large_mlm_pretraining_tokens_per_s_per_A100": 88_800,
    "baseten_bei_bert_embeddings_per_s": "600-900 (request-level, not tokens/s)",
}


class LabelledSequences(RandomSequences):
    """bench_store's random sequences with the per-token labels a probe reads (``to_dataframe``), one document
    each: sentence index = position // 20, as bench_store's labels."""

    def to_dataframe(self):
        import pandas as pd

        columns = {}
        for i in range(len(self)):
            for name, values in self[i].items():
                columns.setdefault(name, []).append(values)
        table = pd.DataFrame({name: np.concatenate(parts) for name, parts in columns.items()})
        table.insert(0, "sequence", np.repeat(np.arange(len(self)), self.length))
        return table


def dstg_config(width: int, args):
    from dstg_interp import ModelConfig

    return ModelConfig(variant="dstg", vocab_size=args.vocab, max_positions=args.length, n_layers=args.layers,
                       seed=0, **WIDTHS[width])


def run_cell(args) -> None:
    """One (rival, width, tokens) in this fresh process: prints its seconds, peak RSS and disk bytes as JSON."""
    from transformers import BertConfig, BertModel

    from dstg_interp import build_model, extract
    from dstg_interp.encoders import open_encoder
    from probes.positions import PositionProbeConfig, probe_sequences

    rival, width, n_tokens = args.cell[0], int(args.cell[1]), int(args.cell[2])
    if args.allocator == "kept" and not keep_freed_memory():
        raise SystemExit("--allocator kept: glibc's mallopt is not available here (or DSTG_MALLOC / MALLOC_* say no)")
    torch.manual_seed(0)
    model = build_model(dstg_config(width, args)).eval()
    sequences = LabelledSequences(n_tokens, args.length, args.vocab)
    n_tokens = int(sequences.lengths.sum())
    disk = 0
    tables: list = []  # the storeless rivals' results, for the float32 rival's comparison
    if rival == "hf_hidden_states":
        shape = WIDTHS[width]
        bert = BertModel(BertConfig(vocab_size=args.vocab, hidden_size=width, num_hidden_layers=args.layers,
                                    num_attention_heads=shape["n_heads"], intermediate_size=4 * width,
                                    max_position_embeddings=args.length), add_pooling_layer=False).eval()

        def call():
            with torch.inference_mode():
                for tokens, mask in sequences.batches(args.batch_size):
                    bert(tokens, attention_mask=mask.long(), output_hidden_states=True)
    elif rival == "plain_forward":
        def call():
            with torch.inference_mode():
                for tokens, mask in sequences.batches(args.batch_size):
                    model(tokens, attention_mask=mask, stop_at_layer=args.layers)
    elif rival == "extract":
        out = Path(args.work_dir) / f"scaling-store-{width}-{n_tokens}"

        def call():
            extract(model, sequences, out, batch_size=args.batch_size, dtype="float16", progress=False)
    elif rival.startswith("storeless"):
        encoder = open_encoder(model)
        n_boot = 0 if rival == "storeless_no_boot" else PositionProbeConfig.n_boot
        config = PositionProbeConfig(task="segment", controls=args.controls, n_boot=n_boot,
                                     gram_precision="float32" if rival == "storeless_float32" else "float64")

        def call():
            tables.append(probe_sequences(encoder, sequences, config, model_name="scaling", controls=args.controls,
                                          batch_size=args.batch_size))
    else:
        raise SystemExit(f"unknown rival {rival!r}")
    with torch.inference_mode():  # warm-up: one batch, so one-time kernel set-up is not timed
        tokens, mask = next(sequences.batches(args.batch_size))
        model(tokens, attention_mask=mask)
    rss_before = status_mb("VmRSS")
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    peak = status_mb("VmHWM")
    if rival == "extract":
        disk = sum(path.stat().st_size for path in out.iterdir())
        shutil.rmtree(out)
    if tables:
        tables[0].to_csv(results_csv(args, rival, width, n_tokens), index=False)
    print(json.dumps({"rival": rival, "width": width, "n_tokens": n_tokens, "seconds": round(seconds, 3),
                      "tokens_per_s": round(n_tokens / seconds, 1), "rss_before_mb": round(rss_before, 1),
                      "peak_rss_mb": round(peak, 1), "disk_bytes": disk}))


def results_csv(args, rival: str, width: int, n_tokens: int) -> Path:
    """Where a storeless cell leaves its results.csv for ``compare_precisions``: named by the measuring process's
    pid (a cell's parent), so two runs sharing --work-dir never read each other's tables."""
    return Path(args.work_dir) / f"scaling-results-{os.getpid() if args.cell is None else os.getppid()}-{rival}-{width}-{n_tokens}.csv"


def compare_precisions(args, rows: list[dict]) -> None:
    """storeless_float32's results against storeless's at the same (width, tokens): the largest |difference| per
    numeric column (NaN where both are NaN counts as equal), into the float32 row; the tables are removed."""
    import pandas as pd

    for row in rows:
        if row["rival"] != "storeless_float32":
            continue
        paths = {rival: results_csv(args, rival, row["width"], row["n_tokens"]) for rival in ("storeless", "storeless_float32")}
        if all(path.exists() for path in paths.values()):
            exact, fast = (pd.read_csv(paths[rival]) for rival in ("storeless", "storeless_float32"))
            row["vs_float64"] = {column: float(np.nanmax(np.abs(exact[column].to_numpy(float) - fast[column].to_numpy(float)),
                                                         initial=0.0))
                                 for column in exact.columns if pd.api.types.is_numeric_dtype(exact[column])}
    for path in Path(args.work_dir).glob(f"scaling-results-{os.getpid()}-*.csv"):
        path.unlink()


def measure(args) -> list[dict]:
    """Every cell in a fresh subprocess, rivals interleaved per (width, tokens); each cell's best of --repeats."""
    best: dict[tuple, dict] = {}
    for _ in range(args.repeats):
        for width in args.widths:
            for n_tokens in args.tokens:
                for rival in args.rivals:
                    if n_tokens >= args.large_tokens and (rival not in args.large_rivals
                                                          or width not in (args.large_widths or args.widths)):
                        continue
                    command = [sys.executable, __file__, "--cell", rival, str(width), str(n_tokens),
                               "--threads", str(args.threads), "--work-dir", args.work_dir, "--layers",
                               str(args.layers), "--vocab", str(args.vocab), "--length", str(args.length),
                               "--batch-size", str(args.batch_size), "--allocator", args.allocator] + (
                        ["--controls"] if args.controls else [])
                    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                    row = json.loads(output.strip().splitlines()[-1])
                    key = (rival, width, n_tokens)
                    if key not in best or row["seconds"] < best[key]["seconds"]:
                        best[key] = row
                    print(f"{rival:17s} width {width:4d} {row['n_tokens']:>9,d} tokens: {row['tokens_per_s']:10,.0f} "
                          f"tok/s, peak RSS {row['peak_rss_mb']:8.1f} MiB, disk {row['disk_bytes'] / 2**20:9.1f} MiB",
                          flush=True)
    rows = list(best.values())
    compare_precisions(args, rows)
    for row in rows:
        reference = best.get(("plain_forward", row["width"], _requested(args, row)))
        row["ratio_vs_plain_forward"] = round(row["tokens_per_s"] / reference["tokens_per_s"], 3) if reference else None
    return rows


def _requested(args, row: dict) -> int:
    """The --tokens value a row was run for (a row holds whole sequences: n_tokens rounds down to the length)."""
    return min(args.tokens, key=lambda n: abs(max(1, n // args.length) * args.length - row["n_tokens"]))


def projection(rows: list[dict], n_tokens: int = PROJECT_TOKENS) -> list[dict]:
    """Per (rival, width): seconds = a + b x tokens (least squares over the measured counts), RSS and disk at n_tokens."""
    out = []
    for rival, width in sorted({(r["rival"], r["width"]) for r in rows}):
        cells = sorted((r for r in rows if r["rival"] == rival and r["width"] == width), key=lambda r: r["n_tokens"])
        tokens = np.array([r["n_tokens"] for r in cells], dtype=float)
        seconds = np.array([r["seconds"] for r in cells])
        rss = np.array([r["peak_rss_mb"] for r in cells])
        slope, intercept, rss_slope = seconds[-1] / tokens[-1], 0.0, float("nan")  # proportional to the largest run
        if len(cells) >= 2:
            fitted_slope, fitted_intercept = np.polyfit(tokens, seconds, 1)
            if fitted_slope > 0 and fitted_intercept >= 0:  # else noise: keep the proportional reading
                slope, intercept = fitted_slope, fitted_intercept
            rss_slope = float(np.polyfit(tokens, rss, 1)[0])
        disk_per_token = cells[-1]["disk_bytes"] / cells[-1]["n_tokens"]
        out.append({"rival": rival, "width": width, "n_tokens": n_tokens,
                    "seconds": round(float(intercept + slope * n_tokens), 1),
                    "tokens_per_s": round(float(n_tokens / (intercept + slope * n_tokens)), 1),
                    "peak_rss_mb": round(float(rss.max()), 1), "rss_mb_per_million_tokens": round(rss_slope * 1e6, 2),
                    "disk_gb": round(disk_per_token * n_tokens / 1e9, 2), "from_token_counts": tokens.astype(int).tolist()})
    return out


def figure(result: dict, path: Path) -> None:
    """tokens/s, peak RSS and disk against tokens, one line per rival, one colour shade per width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    widths = sorted({r["width"] for r in rows})
    rivals = [r for r in RIVALS if any(row["rival"] == r for row in rows)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    styles = dict(zip(widths, ("-", "--", ":")))
    colours = dict(zip(RIVALS, ("#444444", "#1f77b4", "#d62728", "#2ca02c", "#98df8a", "#9467bd")))
    for rival in rivals:
        for width in widths:
            cells = sorted((r for r in rows if r["rival"] == rival and r["width"] == width), key=lambda r: r["n_tokens"])
            if not cells:
                continue
            x = [c["n_tokens"] for c in cells]
            label = f"{rival}, d={width}"
            axes[0].plot(x, [c["tokens_per_s"] for c in cells], styles[width], color=colours[rival], marker="o", label=label)
            axes[1].plot(x, [c["peak_rss_mb"] for c in cells], styles[width], color=colours[rival], marker="o")
            if rival == "extract":
                axes[2].plot(x, [c["disk_bytes"] / 2**30 for c in cells], styles[width], color=colours[rival],
                             marker="o", label=f"store, d={width}")
    for axis, title in zip(axes, ("tokens / s", "peak RSS (MiB)", "store on disk (GiB; the others write nothing)")):
        axis.set_xscale("log")
        axis.set_xlabel("tokens")
        axis.set_title(title)
        axis.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=7, ncol=2)
    state = "quiet" if result.get("quiet") else "UNDER LOAD"
    fig.suptitle(f"How cost grows ({result['model']['n_layers']} layers, random DSTG; {result.get('threads')} threads; {state})"
                 + (" -- QUICK: sizes too small to mean anything" if result.get("quick") else ""))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the script, not the numbers")
    parser.add_argument("--tokens", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS), choices=list(WIDTHS))
    parser.add_argument("--rivals", nargs="+", default=list(RIVALS), choices=list(RIVALS))
    parser.add_argument("--controls", action="store_true", help="storeless: add the random-init control (a forward more)")
    parser.add_argument("--large-tokens", type=int, default=10**12,
                        help="from this token count on, run only --large-rivals (the 1M-token row is an hour a rival)")
    parser.add_argument("--large-rivals", nargs="+", default=["plain_forward", "storeless"], choices=list(RIVALS))
    parser.add_argument("--large-widths", type=int, nargs="+", default=None, choices=list(WIDTHS),
                        help="the widths of the --large-tokens row (default: every --widths)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--work-dir", default=tempfile.gettempdir(), help="where the extract rival writes (a real disk)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--allocator", choices=("system", "kept"), default="system",
                        help="every cell's C allocator: glibc's defaults, as a user's own script runs (the committed "
                             "scaling.json), or kept, as the dstg-* commands run it (dstg_interp/cli/allocator.py)")
    parser.add_argument("--result", default="scaling", help="results/<name>.json (the figure: only for scaling)")
    parser.add_argument("--figure-only", action="store_true", help="redraw the figure from the committed JSON")
    parser.add_argument("--cell", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parse_threaded(parser)
    if args.cell is not None:
        run_cell(args)
        return
    if args.figure_only:
        figure(json.loads((RESULTS / "scaling.json").read_text()), FIGURE)
        return
    if args.quick:
        args.tokens, args.widths, args.length, args.batch_size, args.layers = [512, 1_024], [128], 64, 8, 2
    watch = LoadWatch.start(args)
    rows = measure(args)
    result = {
        "benchmark": "how cost grows with tokens and width: plain forward, HF output_hidden_states, extraction, "
                     "storeless probes",
        "quick": args.quick, "threads": args.threads, "work_dir": args.work_dir, "controls": args.controls,
        "allocator": args.allocator,
        "large_tokens": args.large_tokens if args.large_tokens < 10**12 else None, "large_rivals": args.large_rivals,
        "large_widths": args.large_widths,
        "model": {"variant": "dstg", "n_layers": args.layers, "widths": {str(w): WIDTHS[w] for w in args.widths},
                  "vocab": args.vocab, "seq_len": args.length, "batch_size": args.batch_size},
        "rows": rows,
        "projection_10M_tokens": projection(rows),
        "anchors": ANCHORS,
        "date": time.strftime("%Y-%m-%d"),
    }
    stem = Path(tempfile.gettempdir()) / "scaling-quick" if args.quick else RESULTS / args.result
    path = write_result(stem.with_suffix(".json"), result, watch, args)
    if args.quick or args.result == "scaling":
        figure(json.loads(path.read_text()), stem.with_suffix(".png") if args.quick else FIGURE)


if __name__ == "__main__":
    main()
