"""dstg-eval: masked-token accuracy of one or more models on held-out documents, against the no-context baseline.

    dstg-eval --model dstg rope ap rp --corpus en-mix pydocs --n-docs 200
    dstg-eval --model runs/dstg/checkpoint --corpus docs.jsonl --out results/mlm.csv

The measurement and its baseline are ``dstg_interp.evaluation.mlm_accuracy`` (see its module docstring).
Bad input: one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from dstg_interp.data import load_corpus
from dstg_interp.evaluation import RESULT_COLUMNS, mlm_accuracy, results_table, training_config, training_unigram
from dstg_interp.io import OutputError, check_output_location, created_folder
from dstg_interp.model import load_model

from . import flags
from .flags import positive_int
from .shell import run_cli


def write_results(table: pd.DataFrame, path: Path, arguments: dict) -> None:
    """CSV (the table) or JSON (arguments + rows), written to a temporary name and renamed."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with created_folder(path.parent):  # a failure (a full disk) leaves neither a temporary nor an empty folder (N72)
        try:
            if path.suffix == ".csv":
                table.to_csv(temporary, index=False)
            else:
                temporary.write_text(json.dumps(dict(arguments=arguments, results=table.to_dict(orient="records")),
                                                indent=2) + "\n")
            temporary.replace(path)
        finally:
            temporary.unlink(missing_ok=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-eval", description="Masked-token evaluation on held-out documents of any corpus, against the no-context baseline.")
    flags.add_model(parser, required=True)
    parser.add_argument("--corpus", nargs="+", action="extend", default=None,
                        help="en-mix (held-out split), pydocs, a folder of *.txt, a .jsonl, hf:NAME:SPLIT; several "
                             "as --model (default: en-mix)")
    parser.add_argument("--n-docs", type=positive_int, default=200)
    parser.add_argument("--max-length", type=positive_int, default=None, help="default: the model's training length")
    flags.add_seed(parser)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    flags.add_threads(parser)
    flags.add_out(parser, what="a .csv or .json file for the table", shown="printed only")
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    if args.out is None:
        return
    out = Path(args.out)
    if out.suffix not in (".csv", ".json"):
        raise ValueError(f"--out {args.out}: name a .csv or .json file")
    if out.is_dir() or out.is_symlink():
        raise OutputError(f"--out {args.out} is a folder or a link, not a table; it is never replaced: choose another --out")
    check_output_location(out.parent)  # an unwritable place is found before any work
    if out.exists() and not is_eval_table(out):
        raise OutputError(f"--out {args.out} exists and is not a table dstg-eval wrote; it is never replaced: "
                          f"choose another --out, such as {out.with_name(out.stem + '-eval' + out.suffix)}")


def is_eval_table(path: Path) -> bool:
    """A file an earlier dstg-eval wrote: the CSV with its header, or the JSON with arguments and results."""
    try:
        if path.suffix == ".csv":
            with open(path, encoding="utf-8") as handle:
                return handle.readline().strip().split(",") == RESULT_COLUMNS
        record = json.loads(path.read_text(encoding="utf-8"))
        return isinstance(record, dict) and set(record) == {"arguments", "results"}
    except (OSError, ValueError):
        return False


def _evaluate(args: argparse.Namespace) -> int:
    check_arguments(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.model, args.corpus = flags.models(args), list(dict.fromkeys(args.corpus or ["en-mix"]))
    models = {name: load_model(name) for name in args.model}  # unknown names fail before any work
    corpora = {corpus: load_corpus(corpus) for corpus in args.corpus}  # a first use fetches (stderr says so)
    rows = []
    for name, model in models.items():
        unigram = None  # computed once per model, reused for every corpus
        cfg = training_config(model)
        if cfg is not None:
            unigram = training_unigram(model, cfg)
        for corpus, documents in corpora.items():
            metrics = mlm_accuracy(model, corpus, args.n_docs, args.max_length, args.seed, batch_size=args.batch_size,
                                   unigram=unigram, documents=documents)
            rows.append(dict(model=name, corpus=corpus, **metrics))
    table = results_table(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    if args.out:
        write_results(table, Path(args.out), vars(args))
        print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("dstg-eval", lambda: _evaluate(args), interrupted=lambda: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
