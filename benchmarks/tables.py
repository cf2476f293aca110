"""The tables of benchmarks/README.md (and docs/performance.md's), rebuilt from the committed result files: no number typed by hand.

    python benchmarks/tables.py            # print every table
    python benchmarks/tables.py --write    # rewrite the documents' table blocks from results/*.json
    python benchmarks/tables.py --check    # exit 1 if a block differs from its results (tests/benchmarks/test_benchmark_tables.py)

A block in the README is ``<!-- table: NAME -->`` ... ``<!-- /table -->``; NAME is a renderer below, which
reads ``results/<file>.json``. Each table ends with the line saying which file, when, and under what load
(the ``machine`` record every result carries), so a table can never outlive or hide its run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
PERFORMANCE = HERE.parent / "docs" / "performance.md"  # its expectations table comes from the same results
DOCUMENTS = (README, PERFORMANCE, HERE.parent / "README.md")  # the project README: the main job's times
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def grid(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def source(name: str, result: dict) -> str:
    machine = result.get("machine")
    if machine is None:
        return (f"*From `results/{name}.json` ({result.get('date', 'undated')}): no load record (the run predates "
                "benchmarks/machine.py); rerun to have one.*")
    load_1 = machine.get("load_before", {}).get("1min", "?")
    state = "quiet" if result.get("quiet") else "**under load**"
    return (f"*From `results/{name}.json`: run {machine.get('started', result.get('date', '?'))}, {state} "
            f"(1-min load {load_1} at the start), {machine.get('torch_threads', result.get('threads', '?'))} thread(s).*")


def n(value, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def models() -> str:
    result = load("models")
    rows = [[r["model"], r["call"], n(r["tokens_per_s"]), n(r["ratio_vs_hf"], 2)] for r in result["rows"]]
    return grid(["model", "call", "tokens/s", "× HF"], rows) + "\n\n" + source("models", result)


def train_loop(name: str = "train_loop") -> str:
    """bench_train_loop.py (float32): the loop, the bare step, HF and dstg-train as typed, per variant and mode."""
    result = load(name)
    by = {(r["variant"], r["compiled"]): r for r in result["rows"]}
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in result["rows"]):
        eager, compiled = by.get((variant, False)), by.get((variant, True))
        any_row = eager or compiled
        cells = [variant, n(eager and eager["loop_tokens_per_s"]), n(compiled and compiled["loop_tokens_per_s"]),
                 f"{n(any_row['model_step_tokens_per_s'])} / {n(any_row.get('model_step_compiled_tokens_per_s'))}",
                 f"{n(eager and eager['hf_step_tokens_per_s'])}; {n(compiled and compiled['hf_step_tokens_per_s'])}",
                 n(eager and eager["loop_vs_hf"], 2), n(compiled and compiled["loop_vs_hf"], 2)]
        cli = [row.get("cli") for row in (eager, compiled)]
        cells += [f"{n(cli[0] and cli[0]['tokens_per_s'])} / {n(cli[1] and cli[1]['tokens_per_s'])}"]
        # the token-budget arm: absent from runs before it existed ('–')
        budget = [row.get("budget") if row else None for row in (eager, compiled)]
        cells += [f"{n(budget[0] and budget[0]['steady_tokens_per_s'])} / {n(budget[1] and budget[1]['steady_tokens_per_s'])}",
                  f"{n(compiled and compiled['loop_vs_model_step'], 2)} / {n(budget[1] and budget[1]['vs_model_step'], 2)}"]
        rows.append(cells)
    header = ["variant", "loop, eager", "loop, compiled", "bare step, eager / compiled", "HF step (eager; compiled run)",
              "loop / HF, eager", "loop / HF, compiled", "dstg-train, eager / compiled", "budget batches, eager / compiled",
              "loop / bare step, compiled: fixed / budget"]
    return grid(header, rows) + "\n\n" + source(name, result)


def train_loop_bf16(name: str = "train_loop_bf16") -> str:
    """A --bf16 run: our loop, bare step and dstg-train under bfloat16 autocast, HF at its faster precision."""
    result = load(name)
    rows = []
    for r in result["rows"]:
        hf = r["hf_step_tokens_per_s_by_precision"]
        losses = r["loss_vs_float32"]
        unpadded = r.get("unpadded_bf16")  # runs before 2026-12-02 had no padding and no such arm
        rows.append([r["variant"], "compiled" if r["compiled"] else "eager", n(r["loop_tokens_per_s"]),
                     f"{n(unpadded['steady_tokens_per_s'])} ({n(unpadded['padded_vs_unpadded'], 2)}×)" if unpadded else "",
                     f"{n(losses.get('float32_loop_tokens_per_s'))} ({n(losses.get('vs_float32_loop'), 2)}×)",
                     f"{n(r['budget'] and r['budget']['steady_tokens_per_s'])} ({n(r['budget'] and r['budget']['vs_hf'], 2)}× HF)",
                     n(r["model_step_compiled_tokens_per_s"] if r["compiled"] else r["model_step_tokens_per_s"]),
                     f"{n(hf.get('float32'))} / {n(hf.get('bfloat16'))}", n(r["loop_vs_hf"], 2),
                     n(r["cli"] and r["cli"]["tokens_per_s"]), n(r["cli_vs_hf"], 2),
                     f"{losses['mean_last']:.4f} vs {losses['float32_mean_last']:.4f} ({losses['max_rel_diff']:.1e})"])
    header = ["variant", "mode", "loop", "unpadded (padded ×)", "float32 loop (bf16 ×)", "budget batches (× HF)",
              "bare step", "HF f32 / bf16", "loop / HF", "dstg-train", "dstg-train / HF",
              "loss: bf16 vs f32 (max rel. diff.)"]
    return grid(header, rows) + "\n\n" + source(name, result)


def training() -> str:
    result = load("training")
    rows = []
    for r in result["rows"]:  # runs before the compiled and bfloat16 arms have float32 eager rows only
        bf16 = r.get("precision", "float32") == "bfloat16"
        diff = r.get("max_rel_loss_diff_vs_float32")
        rows.append([r["model"], "compiled" if r.get("compiled") else "eager", r.get("precision", "float32"),
                     n(r["tokens_per_s"]), n(r["achieved_flops"] / 1e9, 1), f"{r['mfu']:.1%}",
                     f"{r['mfu_vs_float32_peak']:.1%}" if bf16 and "mfu_vs_float32_peak" in r else "",
                     n(r.get("vs_float32"), 2), f"{diff:.1e}" if bf16 and diff is not None else ""])
    peaks = f"float32 {result['peak_flops'] / 1e9:.1f} GFLOP/s"
    if result.get("peak_flops_bfloat16"):
        peaks += f", bfloat16 {result['peak_flops_bfloat16'] / 1e9:.1f} GFLOP/s"
    header = ["model", "mode", "precision", "tokens/s", "GFLOP/s", "MFU (own precision's peak)",
              "MFU against the float32 peak", "× float32, same mode", "largest relative loss difference vs float32"]
    return (grid(header, rows) + f"\n\nPeaks (1024³ matmul, same run): {peaks}.\n\n" + source("training", result))


def ridge() -> str:
    result = load("ridge")
    sets = ", ".join(f"{n(v)} s for {k}" for k, v in result["sklearn_seconds_per_timed_set"].items())
    rows = [[f"`fit_ridge_grid`, all {result['feature_sets']} feature sets × {len(result['targets'])} targets",
             n(result["ours_seconds"], 1)],
            [f"GridSearchCV, layer 0 only ({sets})", n(result["sklearn_seconds_timed"])],
            ["GridSearchCV, full grid" + (", extrapolated linearly per width" if result["sklearn_full_grid_extrapolated"]
                                          else ""), n(result["sklearn_seconds_full_grid"])]]
    return (grid(["", "seconds"], rows) + f"\n\nSpeed-up {result['speedup']}×; same alpha on {result['same_alpha_rows']} "
            f"of {result['compared_rows']} compared rows, max |ΔR²| {result['max_abs_delta_cv_r2']:.1e} (CV), "
            f"{result['max_abs_delta_test_r2']:.1e} (held-out).\n\n" + source("ridge", result))


STORE_NAMES = {"plain_encoder": "plain forward, all blocks (no hooks)", "plain_with_head": "plain forward + MLM head",
               "extract": "`extract`, every layer × sem/ap/full, float16 to disk", "extract_full_only": "`extract`, `full` only",
               "hf_hidden_states": "HF `BertModel(output_hidden_states=True)`",
               "bridge_filtered": "TransformerBridge `run_with_cache`, residual filter",
               "bridge_unfiltered": "TransformerBridge `run_with_cache`, no filter",
               "capture": "where `extract`'s time goes, 1: the hooked forward keeping every layer × sem/ap",
               "capture_rows": "2: + the float16 rows it writes (no disk)",
               "extract_tmpfs": "3: `extract` whole, into memory (/dev/shm)"}


def store() -> str:
    result = load("store")
    rivals = result["throughput"]["rivals"]
    plain = rivals["plain_encoder"]["tokens_per_s"]
    rows = [[STORE_NAMES.get(k, k), n(v["tokens_per_s"]), n(v["tokens_per_s"] / plain, 2)] for k, v in rivals.items()]
    return grid(["rival", "tokens/s", "× plain forward"], rows) + "\n\n" + source("store", result)


def probe_store() -> str:
    """bench_probe_store.py: the whole grid over a 1M-token store, now against the per-set route before it."""
    name = "probe_store"
    result = load(name)
    labels = {"before": "every token, per-set route (before)", "all": "every token, one pass per layer (now)",
              "subsample": "the former 100k subsample"}
    if "before" not in result["runs"]:  # a run from before the shared pass: its "all" is the per-set route
        labels["all"] = "every token, per-set route (that commit's)"
    rows = []
    for mode, run in result["runs"].items():
        rows.append([labels.get(mode, f"every token, one pass per layer, sums on {run.get('device')}"),
                     n(run["n_tokens_probed"]), n(run["seconds"], 1), n(run.get("cpu_seconds"), 1),
                     f"{n(run['peak_rss_mb'])} MB ({n(run['rss_before_grid_mb'])} MB)", n(run.get("loadavg_before", [None])[0], 2)])
    text = grid(["probes over", "tokens", "seconds", "CPU seconds", "peak RSS (before the grid)", "1-min load"], rows)
    same = result.get("same_process")
    if same:
        def joined(values):
            return " / ".join(f"{v:.1f}" for v in values)
        text += (f"\n\nIn one process, alternately ({same['rounds']} round(s)): before {joined(same['seconds']['before'])} s, "
                 f"now {joined(same['seconds']['all'])} s: **{same['speedup_before_over_all']}×** (medians)"
                 + (f"; CPU seconds {joined(same['cpu_seconds']['before'])} vs {joined(same['cpu_seconds']['all'])}: "
                    f"{same['cpu_speedup_before_over_all']}×" if "cpu_seconds" in same else "")
                 + f"; largest |Δ test R²| before vs now {result['max_abs_delta_before_vs_all']['test_r2']:.1e}, "
                 f"|Δ CV R²| {result['max_abs_delta_before_vs_all']['cv_r2']:.1e}.")
    return text + "\n\n" + source(name, result)


def holmes() -> str:
    result = load("holmes")
    rows = [[r["dataset"].removeprefix("offline-"), r["task_type"], n(r["ours_s"], 2), n(r["sklearn_s_x10_extrapolated"], 2),
             n(r["ours_score"], 3), n(r["sklearn_score"], 3)] for r in result["rows"]]
    rows.append(["**total**", "", f"**{n(result['total_ours_s'], 1)}**", f"**{n(result['total_sklearn_s_x10_extrapolated'], 1)}**",
                 f"mean abs diff {result['mean_abs_score_diff']:.3f}", f"Spearman {result['spearman_scores']:.2f}"])
    return grid(["dataset", "task type", "ours, 10 probes (s)", "sklearn ×10 (s)", "ours score", "sklearn score"],
                rows) + "\n\n" + source("holmes", result)


def loop_overhead() -> str:
    rows, sources = [], []
    for path in sorted(RESULTS.glob("loop_overhead_*.json")):
        result = json.loads(path.read_text())
        rows.append([result["variant"], n(result["bare_cpu_s_per_token"] * 1e6, 1),
                     n(result["loop_cpu_s_per_real_token"] * 1e6, 1), n(result["loop_over_bare"], 3),
                     f"{n(result['real_tokens_per_step'])} of {result['batch_positions']:,}"])
        sources.append(source(path.stem, result))
    return grid(["variant", "bare step, µs CPU / token", "train(), µs CPU / real token", "loop / bare",
                 "real tokens per step"], rows) + "\n\n" + "\n".join(sources)


def step_profile() -> str:
    result = load("step_profile")
    rows = []
    for r in result["rows"]:
        def short(key: str) -> str:
            return "an inductor graph" if key.startswith("## Call CompiledFxGraph") else key.replace("aten::", "")
        others = ", ".join(f"{short(k)} {v:.1%}" for k, v in list(r["largest_others"].items())[:4])
        rows.append([r["variant"], "compiled" if r["compiled"] else "eager", r.get("precision", "float32"),
                     f"{r['matmul_share']:.0%}", n(r["matmul_gflops"], 1), n(r["peak_gflops"], 1),
                     f"{r['matmul_efficiency']:.0%}", f"{r['mfu_bound']:.0%}", others])
    return grid(["variant", "mode", "precision", "matmul share of the step", "matmul GFLOP/s", "1024³ peak GFLOP/s (same precision)",
                 "matmul efficiency", "share × efficiency", "largest others (share)"], rows) + "\n\n" + source(
        "step_profile", result)


def scaling(name: str = "scaling") -> str:
    """bench_scaling.py: every (rival, width, tokens) cell (until a run is committed, one line saying so); the
    10M-token projection is in the result's JSON and figures/scaling.png."""
    if not (RESULTS / f"{name}.json").exists():
        return (f"*No committed `results/{name}.json` of `bench_scaling.py` yet: run it on a quiet machine, then "
                "`python benchmarks/tables.py --write`.*")
    result = load(name)
    rows = [[r["rival"], r["width"], n(r["n_tokens"]), n(r["tokens_per_s"]), n(r.get("ratio_vs_plain_forward"), 2),
             n(r["peak_rss_mb"]), n(r["disk_bytes"] / 2**20, 1)]
            for r in sorted(result["rows"], key=lambda r: (r["width"], r["n_tokens"], r["rival"]))]
    text = grid(["rival", "width", "tokens", "tokens/s", "× plain forward", "peak RSS (MiB)", "disk (MiB)"], rows)
    if result.get("allocator"):
        text += f"\n\nEvery cell under the `{result['allocator']}` allocator (`--allocator`)."
    for r in result["rows"]:
        if "vs_float64" in r:
            differences = r["vs_float64"]
            text += (f"\n\n`storeless_float32` against `storeless` (float64 Grams) at width {r['width']}, "
                     f"{n(r['n_tokens'])} tokens, largest |difference|: R² {differences['r2']:.1e}, CV R² "
                     f"{differences['cv_r2']:.1e}, over every numeric column {max(differences.values()):.1e} "
                     f"({max(differences, key=differences.get)}).")
    return text + "\n\n" + source(name, result)


def probe_cli() -> str:
    """bench_probe_cli.py: command 1 as typed, storeless (the default) against --store, every round and the best."""
    result = load("probe_cli")
    rows = [[route, number + 1, n(row["seconds"], 1), n(row["peak_rss_mb"]), n(row["store_bytes"] / 2**20, 1)]
            for route, runs in result["rounds"].items() for number, row in enumerate(runs)]
    text = f"`{result['command']}`, each run a fresh process with a cache holding the corpus and no store:\n\n"
    text += grid(["route", "round", "seconds", "peak RSS (MiB)", "left in the cache (MiB)"], rows)
    text += (f"\n\nBest of each: the store route takes {result['store_over_storeless_seconds']:.2f}x the storeless "
             "route's seconds (above 1: storeless faster)")
    if "system_allocator_over_storeless_seconds" in result:
        text += (f"; under glibc's default allocator settings (`DSTG_MALLOC=system`, the commands before they kept "
                 f"freed memory) the storeless route takes {result['system_allocator_over_storeless_seconds']:.2f}x "
                 "its seconds")
    if "first_run_over_rerun_seconds" in result:
        text += (f"; a first run takes {result['first_run_over_rerun_seconds']:.2f}x a rerun's seconds, which reads "
                 "the random-init control's R² from the cache (`probes/control_cache.py`) instead of forwarding "
                 "the twin")
    text += "."
    if "plain_forward_s" in result:
        text += (f"\n\nAgainst one plain forward of the model over the same {n(result['tokens'])} tokens "
                 f"({result['plain_forward_s']:.1f} s; {result['plain_forward_script_s']:.1f} s as a script of its own "
                 f"with start-up, corpus and tokenising): a first run reads **{result['first_run_vs_plain_forward']:.2f}x** "
                 f"the forward ({result['first_run_vs_plain_script']:.2f}x the script), a rerun "
                 f"**{result['rerun_vs_plain_forward']:.2f}x** ({result['rerun_vs_plain_script']:.2f}x).")
    if "help_seconds" in result:
        text += f" `dstg-probe --help`: {min(result['help_seconds']):.2f} s (best of {len(result['help_seconds'])})."
    return text + "\n\n" + source("probe_cli", result)


def main_job_times() -> str:
    """The project README's sentence on how long command 1 takes (bench_probe_cli.py's best rounds)."""
    result = load("probe_cli")
    first, rerun = result["best"]["storeless"]["seconds"], result["best"]["storeless, rerun (control reused)"]["seconds"]
    return (f"`dstg-probe --task segment` took {first:.1f} s on 2 cores ({rerun:.1f} s on a rerun, reusing the "
            f"control's R²; {result['machine']['started'][:10]}, [benchmarks](benchmarks/README.md)).")


def figures() -> str:
    """bench_figures.py: a figure script as typed, under a pseudo-terminal, against the plain forward."""
    if not (RESULTS / "figures.json").exists():
        return "*No committed `results/figures.json` yet: run `bench_figures.py` on a quiet machine.*"
    result = load("figures")
    rows = [[number + 1, n(r["seconds"], 1), n(r["plain_forward_s"], 1), n(r["script_s"], 1), n(r["tokens"]),
             n(r["ratio_vs_plain_forward"], 2), f"{r['longest_silence_s']:.1f} s (at {r['longest_silence_starts_at_s']:.0f} s)",
             n(r["store_bytes"] / 2**20, 1)] for number, r in enumerate(result["rounds"])]
    return (f"`{result['command']}`:\n\n"
            + grid(["round", "figure (s)", "plain forward (s)", "as a script (s)", "tokens", "× plain forward",
                    "longest silence", "stores written (MiB)"], rows) + "\n\n" + source("figures", result))


def fitted_seconds(rows: list[dict], rival: str, width: int, tokens: int) -> tuple[float, bool] | None:
    """seconds = a + b × tokens through the measured cells of (rival, width) (least squares; one cell: b alone),
    and whether ``tokens`` was measured (within 1%); None without a cell."""
    cells = [(r["n_tokens"], r["seconds"]) for r in rows if r["rival"] == rival and r["width"] == width]
    if not cells:
        return None
    measured = next((s for t, s in cells if abs(t - tokens) <= 0.01 * tokens), None)
    if measured is not None:
        return measured, True
    if len(cells) == 1:
        return cells[0][1] * tokens / cells[0][0], False
    mean_t = sum(t for t, _ in cells) / len(cells)
    mean_s = sum(s for _, s in cells) / len(cells)
    slope = (sum((t - mean_t) * (s - mean_s) for t, s in cells) / sum((t - mean_t) ** 2 for t, _ in cells))
    return mean_s + slope * (tokens - mean_t), False


def expectations() -> str:
    """docs/performance.md: what a 20k / 100k / 1M-token run costs at widths 128 and 768 (bench_scaling.py's
    cells, each rival in a process of its own, start-up excluded), measured where a cell was run, else fitted;
    from ``scaling_round5`` (the run at exactly these sizes) where it is committed, else the full grid."""
    name = "scaling_round5" if (RESULTS / "scaling_round5.json").exists() else "scaling"
    result = load(name)
    rivals = {"plain_forward": "plain forward", "storeless": "probes (storeless, the default)",
              "extract": "extraction to a store"}
    sizes = (20_000, 100_000, 1_000_000)
    rows = []
    for width in (128, 768):
        forward = [fitted_seconds(result["rows"], "plain_forward", width, tokens) for tokens in sizes]
        for rival, label in rivals.items():
            cells = [fitted_seconds(result["rows"], rival, width, tokens) for tokens in sizes]
            rows.append([width, label] + [("–" if c is None else f"{c[0]:,.0f} s" + ("" if c[1] else "*")
                                           + ("" if rival == "plain_forward" or f is None else f" ({f[0] / c[0]:.2f}x)"))
                                          for c, f in zip(cells, forward)])
    return (grid(["width", "run", "20k tokens", "100k tokens", "1M tokens"], rows)
            + "\n\n\\* fitted (seconds = a + b × tokens through the measured cells), not measured; (x): × the plain "
            "forward.\n\n" + source(name, result))


def stages(name: str = "stages") -> str:
    """bench_stages.py: each route against the plain forward just before it, in one process, and its stages."""
    result = load(name)
    rows = [[r["route"], r["width"], n(r["n_tokens"]), n(r["plain_forward_s"], 1), n(r["seconds"], 1),
             n(r["ratio_vs_plain_forward"], 2), "; ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())]
            for r in result["rows"]]
    return grid(["route", "width", "tokens", "plain forward (s)", "route (s)", "× plain forward", "stages (s)"],
                rows) + "\n\n" + source(name, result)


RENDERERS = {"models": models, "train_loop": train_loop, "train_loop_round5": lambda: train_loop("train_loop_round5"), "train_loop_bf16": train_loop_bf16,
             "train_loop_bf16_baselines": lambda: train_loop_bf16("train_loop_bf16_baselines"), "training": training, "ridge": ridge, "store": store,
             "probe_store": probe_store, "holmes": holmes,
             "loop_overhead": loop_overhead, "step_profile": step_profile, "scaling": scaling,
             "scaling_kept": lambda: scaling("scaling_kept"), "scaling_extract": lambda: scaling("scaling_extract"),
             "probe_cli": probe_cli, "expectations": expectations, "figures": figures,
             "main_job_times": main_job_times, "stages": stages, "stages_20k": lambda: stages("stages_20k")}


def rebuilt(text: str) -> str:
    def fill(match: re.Match) -> str:
        name = match.group("name")
        if name not in RENDERERS:
            raise SystemExit(f"table block {name!r} has no renderer in benchmarks/tables.py")
        return match.group(1) + RENDERERS[name]() + "\n" + match.group(4)
    return BLOCK.sub(fill, text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the documents' table blocks")
    parser.add_argument("--check", action="store_true", help="exit 1 when a table block is not what its results give")
    args = parser.parse_args(argv)
    changed = [(document, rebuilt(document.read_text())) for document in DOCUMENTS]
    changed = [(document, text) for document, text in changed if text != document.read_text()]
    if args.check:
        for document, _ in changed:
            print(f"{document.relative_to(HERE.parent)}: tables differ from results/*.json: run python "
                  "benchmarks/tables.py --write", file=sys.stderr)
        return 1 if changed else 0
    if args.write:
        for document, text in changed:
            document.write_text(text)
        print(f"rewrote {len(changed)} document(s): {', '.join(str(d.relative_to(HERE.parent)) for d, _ in changed)}")
        return 0
    for name, render in RENDERERS.items():
        print(f"## {name}\n\n{render()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
