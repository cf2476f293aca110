"""dstg-erase: erase position inside the forward pass and measure what the model loses (a dstg-probe sibling).

    dstg-erase --model dstg --out results/erasure-dstg                      # every layer x subspace, token position
    dstg-erase --model ap --layers 2,4 --methods leace,random --target sentence_index --out results/erase-ap
    dstg-erase --model dstg --store runs/store-dstg --layers 3 --subspaces ap --save-erasers --out results/e3
    dstg-erase --model path/to/all-MiniLM-L6-v2 --corpus en-mix --out results/erasure-minilm

For each layer x subspace: LEACE, INLP and a same-rank random eraser of the position target are fitted on a
store of the model (``probes.erasure``); the position probe is scored before and after erasure on held-out
store documents; each eraser then runs inside the forward pass while masked-token loss / accuracy, the
output change and the attention patterns are measured on documents the store does not hold
(``probes.erasure_effects``).  Writes ``results.csv`` (one row per layer x subspace x method), ``heads.csv``
(attention change per block x head) and ``results.json`` (config, versions, rows) into --out, and with
--save-erasers one folder per eraser under ``erasers/``.  Bad input -- a --store of another model, a layer or
subspace the store lacks, an --out that holds anything but an earlier dstg-erase result -- is one line on
stderr, exit code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from dstg_interp.encoders.selection import check_device
from dstg_interp.io import OutputError, check_output_location, folder_entries, output_lock, written_atomically
from dstg_interp.store import ActivationStore
from dstg_interp.store.manifest import versions
from probes.erasure import ENCODINGS, METHODS, TARGETS
from probes.erasure_effects import ErasureConfig, erase_positions
from dstg_interp.encoders.naming import model_label

from . import flags
from .flags import positive_int
from .shell import run_cli

RESULT_FILES = ("results.csv", "heads.csv", "results.json", "erasers")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-erase", description=__doc__.split("\n\n")[0])
    flags.add_model(parser, required=True)
    parser.add_argument("--name", default=None, help="how the table and results.json name the model (default: the "
                        "zoo name, hub id, model-card title or folder name, dstg_interp.encoders.naming)")
    parser.add_argument("--store", default=None, help="an activation store of --model to fit the erasers on "
                        "(default: one extracted from the corpus's probing documents, cached)")
    parser.add_argument("--corpus", default="en-mix", help="corpus of the probing documents (en-mix: held-out ones; default: %(default)s)")
    flags.add_layers(parser, default="all the store has")
    flags.add_subspaces(parser)
    parser.add_argument("--target", default="token_position", choices=TARGETS, help="the position label to erase (default: %(default)s)")
    parser.add_argument("--encoding", default="dct", choices=ENCODINGS,
                        help="linear: the value; dct: the value and its first DCT cosines (default: dct)")
    parser.add_argument("--n-features", type=positive_int, default=8, help="concept features with --encoding dct (default: %(default)s)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)} (default: %(default)s)")
    parser.add_argument("--n-docs", type=positive_int, default=100, help="evaluation documents for the MLM loss (default: %(default)s)")
    parser.add_argument("--max-tokens", type=positive_int, default=20_000, help="store tokens for fitting and probing (default: %(default)s)")
    parser.add_argument("--save-erasers", action="store_true", help="also write every eraser under --out/erasers/")
    flags.add_out(parser, required=True, what="a folder for results.csv, heads.csv and results.json")
    flags.add_device(parser)
    flags.add_seed(parser)
    flags.add_threads(parser)
    flags.add_quiet(parser)
    return parser


def check_out(out: Path) -> None:
    """Before any work: --out is new, empty, or an earlier dstg-erase result (replaced)."""
    check_output_location(out)
    if not out.exists() or not folder_entries(out):
        return
    try:
        ours = json.loads((out / "results.json").read_text()).get("command") == "dstg-erase"
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours or set(folder_entries(out)) - set(RESULT_FILES):
        raise OutputError(f"--out {out} is not empty and not an earlier dstg-erase result; it is never replaced: "
                          "choose another --out")


def _main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    check_out(out)
    check_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = flags.one_model(args, "dstg-erase")
    store = ActivationStore(args.store) if args.store else None
    layers = None if args.layers is None else [args.layers] if isinstance(args.layers, str) else list(args.layers)
    config = ErasureConfig(layers=layers, subspaces=args.subspaces,
                           target=args.target, encoding=args.encoding, n_features=args.n_features,
                           methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()), corpus=args.corpus,
                           n_docs=args.n_docs, max_tokens=args.max_tokens, seed=args.seed)
    started = time.time()
    with output_lock(out, "dstg-erase " + " ".join(sys.argv[1:])):
        name = args.name or model_label(model)
        result = erase_positions(model, config, store=store, model_name=name, device=args.device,
                                 progress=not args.quiet)
        record = dict(command="dstg-erase", config=config.to_dict(), model=model, model_name=name, store=args.store,
                      versions=versions(),
                      seconds=round(time.time() - started, 1), results=result.table.to_dict(orient="records"))
        with written_atomically(out) as tmp:
            result.table.to_csv(tmp / "results.csv", index=False)
            result.heads.to_csv(tmp / "heads.csv", index=False)
            (tmp / "results.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
            if args.save_erasers:
                for (layer, subspace, method), eraser in result.erasers.items():
                    eraser.save(tmp / "erasers" / f"layer{layer}-{subspace}-{method}")
    shown = result.table[["layer", "subspace", "method", "rank", "r2_before", "r2_after", "loss_increase",
                          "accuracy_drop", "output_change", "attention_js"]]
    print(f"{name}: erasing {args.target} ({args.encoding})")
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    print(f"wrote {out / 'results.csv'}, {out / 'heads.csv'} and {out / 'results.json'}")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("dstg-erase", lambda: _main(args), interrupted=lambda: "no results were written")


if __name__ == "__main__":
    sys.exit(main())
