"""dstg-eval: masked-token accuracy of one or more models on held-out documents, against the no-context baseline.

    dstg-eval --model dstg rope ap rp --corpus en-mix pydocs --n-docs 200
    dstg-eval --model runs/dstg/checkpoint --corpus docs.jsonl --out results/mlm.csv
    dstg-eval --model dstg path/to/bert-folder bert-base-uncased --name dstg my-bert bert --max-length 128

--model: zoo names, our checkpoints, and Hugging Face masked-LMs (a folder or a hub id, loaded with their
head through ``AutoModelForMaskedLM``; one saved without the head is refused).  Every model of one run is
scored on the same documents, windows, masking rule and seed at one length (--max-length, default the
shortest of the models' own lengths); models that share a tokenizer get identical masks, and the last line
says which rows share them.  An HF model has no training record, so its unigram baseline columns are empty.

The measurement and its baseline are ``dstg_interp.evaluation.mlm_accuracy`` (see its module docstring).
Bad input: one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from dstg_interp.data import load_corpus
from dstg_interp.evaluation import RESULT_COLUMNS, mlm_accuracy, results_table, training_config, training_unigram
from dstg_interp.io import OutputError, check_output_location, created_folder
from dstg_interp.config import ConfigIO, model_field, model_name_field, tokenizer_mismatch_field, out_field, quiet_field, seed_field, threads_field
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.naming import table_names

from .config_args import add_config_arguments, flag_values, run_command


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


@dataclass
class EvalCommand(ConfigIO):
    """dstg-eval's flags: which models on which corpora, how many documents, where the table goes."""

    model: list = model_field(required=True)

    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    name: list[str] | None = model_name_field("how the table names each --model, in order")
    corpus: list[str] = field(default_factory=lambda: ["en-mix"], metadata={
        "repeatable": True, "help": "en-mix (held-out split), pydocs, a folder of *.txt, a .jsonl, hf:NAME:SPLIT; "
                                    "several as --model"})
    n_docs: int = field(default=200, metadata={"min": 1, "help": "held-out documents per corpus"})
    max_length: int | None = field(default=None, metadata={"min": 1, "help": "tokens per sequence, one for every model",
                                                           "shown": "the shortest training length (else max_positions) of the models"})
    seed: int = seed_field()
    batch_size: int = field(default=32, metadata={"min": 1, "help": "sequences per forward"})
    threads: int | None = threads_field()
    progress: bool = quiet_field()
    out: str | None = out_field(help="a .csv or .json file for the table", shown="printed only")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-eval", description="Masked-token evaluation on held-out documents of any corpus, against the no-context baseline.")
    add_config_arguments(parser, EvalCommand)
    return parser


def check_arguments(command: EvalCommand) -> None:
    if command.out is None:
        return
    out = Path(command.out)
    if out.suffix not in (".csv", ".json"):
        raise ValueError(f"--out {command.out}: name a .csv or .json file")
    if out.is_dir() or out.is_symlink():
        raise OutputError(f"--out {command.out} is a folder or a link, not a table; it is never replaced: choose another --out")
    check_output_location(out.parent)  # an unwritable place is found before any work
    if out.exists() and not is_eval_table(out):
        raise OutputError(f"--out {command.out} exists and is not a table dstg-eval wrote; it is never replaced: "
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


def _evaluate(command: EvalCommand) -> int:
    check_arguments(command)
    if command.threads:
        torch.set_num_threads(command.threads)
    corpora_names = list(dict.fromkeys(command.corpus))
    specs = list(dict.fromkeys(command.model))
    names = table_names(specs, command.name)  # a --name list that does not fit fails before any work
    # unknown names, folders without an MLM head: fail before any work
    models = {name: evaluated_model(spec) for name, spec in zip(names, specs)}
    max_length = command.max_length or min(default_length(model) for model in models.values())
    corpora = {corpus: load_corpus(corpus) for corpus in corpora_names}  # a first use fetches (stderr says so)
    rows, masks = [], {}
    for name, model in models.items():
        unigram = None  # computed once per model, reused for every corpus
        cfg = training_config(model)
        if cfg is not None:
            unigram = training_unigram(model, cfg)
        for corpus, documents in corpora.items():
            if command.progress:
                print(f"[{name}] {corpus}: scoring masked tokens of up to {command.n_docs} documents in "
                      f"{max_length}-token windows", file=sys.stderr, flush=True)
            metrics = mlm_accuracy(model, corpus, command.n_docs, max_length, command.seed,
                                   batch_size=command.batch_size, unigram=unigram, documents=documents)
            masks.setdefault(corpus, {})[name] = metrics.pop("masks")
            rows.append(dict(model=name, corpus=corpus, **metrics))
    table = results_table(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    print(LEGEND)
    print(masks_line(masks, max_length))
    if command.out:
        write_results(table, Path(command.out), dict(flag_values(command), corpus=corpora_names, max_length=max_length,
                                                     models=dict(zip(names, specs)), masks=masks))
        print(f"wrote {command.out}")
    return 0


LEGEND = ("loss: mean cross-entropy (nats) over the masked tokens; unigram_loss, most_frequent_accuracy: the "
          "no-context baseline on the same tokens, from the model's training split (NaN: no training record, as for "
          "a Hugging Face model); accuracy_gain = accuracy - most_frequent_accuracy")


def evaluated_model(spec):
    """Ours as load_model reads it (its own forward, its training record); a Hugging Face folder or hub id
    as an encoder with its masked-LM head."""
    encoder = open_encoder(spec, mlm_head=True)
    return encoder if encoder.kind == "hf" else encoder.model


def default_length(model) -> int:
    cfg = training_config(model)
    return cfg.max_length if cfg is not None else model.config.max_positions


def masks_line(masks: dict, max_length: int) -> str:
    """Which rows were scored on identical masked positions (the same mask fingerprint)."""
    parts = []
    for corpus, by_model in masks.items():
        groups: dict[str, list[str]] = {}
        for name, fingerprint in by_model.items():
            groups.setdefault(fingerprint, []).append(name)
        if len(groups) == 1:
            parts.append(f"{corpus}: identical for all {len(by_model)} model(s)")
        else:
            parts.append(f"{corpus}: " + "; ".join(", ".join(group) for group in groups.values())
                         + " (each group its own tokenizer, so its own tokens to mask)")
    return (f"masks ({max_length}-token windows, the same documents, rule and seed for every model): "
            + " | ".join(parts))


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), EvalCommand, _evaluate, argv, interrupted=lambda _: "nothing was written")


if __name__ == "__main__":
    sys.exit(main())
