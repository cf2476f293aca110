"""dstg-cache: extract an activation store from the command line.

    dstg-cache --model dstg --corpus en-mix --out runs/store-dstg --layers 0,3,last,final --dtype float16
    dstg-cache --model path/to/all-MiniLM-L6-v2 --corpus docs.jsonl --out runs/store-minilm --max-length 128
    dstg-cache --model runs/dstg --sequences runs/seq/validation --out runs/store --attention-summaries
    torchrun --nproc_per_node 2 -m dstg_interp.cli.cache --model dstg --corpus en-mix --out runs/store-dstg

--model is a zoo name, a dstg-interp checkpoint or a Hugging Face encoder folder. The corpus is
tokenized with the model's own tokenizer; --sequences takes saved StructuredSequences instead.
Bad input exits with code 2 and one line on stderr; nothing half-written is left behind. --overwrite
replaces only a store (a folder with its manifest); a second run on the same --out waits for nobody:
it stops at once and names the run that holds the folder.
Under torchrun the ranks share the batches and write one store, the same as one process writes
(gloo on --device cpu, nccl on --device cuda, one GPU per rank; see store/distributed.py).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from dstg_interp.data import StructuredSequences, load_corpus
from dstg_interp.encoders import open_encoder
from dstg_interp.encoders.selection import resolve_layers
from dstg_interp.io import check_output_location, output_lock
from dstg_interp.store.distributed import OtherRankFailed, Ranks, torchrun_ranks
from dstg_interp.store.extract import extract

from . import flags
from .flags import positive_int
from .shell import run_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-cache", description=__doc__.split("\n\n")[0])
    flags.add_model(parser, required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", help="corpus spec for load_corpus: en-mix, a folder of *.txt, a .jsonl, hf:...")
    source.add_argument("--sequences", help="a folder of saved StructuredSequences (in the model's token ids)")
    flags.add_out(parser, required=True, what="the store folder to create")
    flags.add_layers(parser, default="all")
    flags.add_subspaces(parser)
    parser.add_argument("--names", default="", help="comma-separated extra token-level hook names")
    parser.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--max-length", type=positive_int, default=256, help="sequence length when tokenizing --corpus")
    parser.add_argument("--no-windows", action="store_true", help="truncate long documents instead of windowing")
    parser.add_argument("--max-docs", type=positive_int, default=None)
    parser.add_argument("--attention-summaries", action="store_true")
    parser.add_argument("--max-offset", type=positive_int, default=32)
    parser.add_argument("--overwrite", action="store_true", help="replace a different store already in --out")
    flags.add_device(parser, what="under torchrun, cuda = one GPU per rank (LOCAL_RANK)")
    flags.add_quiet(parser)
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _split(text: str | None):
    return None if text is None else tuple(x.strip() for x in text.split(",") if x.strip())


def run(args: argparse.Namespace, ranks=None):
    ranks = ranks or Ranks()  # _main passes the ranks of --device (and of torchrun)
    model = flags.one_model(args, "dstg-cache")
    check_output_location(args.out)  # a file or an unwritable place is found before the model loads
    with ExitStack() as held:
        # rank 0 holds the folder's lock; every rank stops if it cannot be had
        ranks.together(lambda: held.enter_context(output_lock(args.out, "dstg-cache " + " ".join(sys.argv[1:])))
                       if ranks.first else None)
        encoder = open_encoder(model, device=ranks.device)
        if args.sequences:
            sequences = StructuredSequences.load(args.sequences)
        else:
            sequences = load_corpus(args.corpus, progress=not args.quiet, max_docs=args.max_docs)
        max_length = min(args.max_length, encoder.max_positions)
        layers = None if args.layers is None else resolve_layers(args.layers, encoder.n_layers)
        return extract(encoder, sequences, args.out, layers=layers, subspaces=args.subspaces,
                       names=_split(args.names) or (), dtype=args.dtype, batch_size=args.batch_size,
                       attention_summaries=args.attention_summaries, max_offset=args.max_offset,
                       progress=not args.quiet, overwrite=args.overwrite, max_length=max_length,
                       windows=not args.no_windows, ranks=ranks)


def _main(args: argparse.Namespace) -> int:
    try:
        with torchrun_ranks(args.device) as ranks:
            store = run(args, ranks)
    except OtherRankFailed:  # the failing rank prints its own error
        return 2
    if ranks.first:
        print(f"{store.directory}: {store.n_tokens} tokens, layers {list(store.layers)}, subspaces {list(store.subspaces)}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_cli("dstg-cache", lambda: _main(args), interrupted=lambda: "no store was written")


if __name__ == "__main__":
    sys.exit(main())
