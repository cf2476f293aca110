"""dstg-cache: extract an activation store from the command line.

    dstg-cache --model dstg --corpus en-mix --out runs/store-dstg --layers 0,3,last,final --dtype float16
    dstg-cache --model path/to/all-MiniLM-L6-v2 --corpus docs.jsonl --out runs/store-minilm --max-length 128
    dstg-cache --model runs/dstg --sequences runs/seq/validation --out runs/store --attention-summaries
    dstg-launch --nproc-per-node 2 dstg-cache --model dstg --corpus en-mix --out runs/store-dstg
    torchrun --nproc_per_node 2 -m dstg_interp.cli.cache ...     # the same; torchrun's own end is a traceback on Ctrl-C

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
import dataclasses
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field

from dstg_interp.data import StructuredSequences, load_corpus
from dstg_interp.data.structure import DEFAULT_MAX_LENGTH
from dstg_interp.encoders import open_encoder
from dstg_interp.config import ConfigIO, device_field, layers_field, model_field, model_name_field, tokenizer_mismatch_field, out_field, quiet_field
from dstg_interp.encoders.selection import LayerSelection
from dstg_interp.io import check_output_location, output_lock
from dstg_interp.store.distributed import OtherRankFailed, Ranks, torchrun_ranks
from dstg_interp.store.config import ExtractionConfig
from dstg_interp.store.extract import extract

from .config_args import add_config_arguments, config_from_args, run_command
from .shell import EXIT_ERROR
from .flags import one_model


@dataclass
class CacheCommand(ConfigIO):
    """dstg-cache's flags beside the ExtractionConfig's: which model, which text, where, and how."""

    model: list = model_field(required=True)

    allow_tokenizer_mismatch: bool = tokenizer_mismatch_field()
    name: str | None = model_name_field("how the store names the model (its manifest's model_name)")
    corpus: str | None = field(default=None, metadata={
        "exclusive": ("source", True), "help": "corpus spec for load_corpus: en-mix, a folder of *.txt, a .jsonl, hf:..."})
    sequences: str | None = field(default=None, metadata={
        "exclusive": ("source", True), "help": "a folder of saved StructuredSequences (in the model's token ids)"})
    out: str | None = out_field(required=True, help="the store folder to create")
    layers: LayerSelection = layers_field(shown="all")
    max_length: int = field(default=DEFAULT_MAX_LENGTH, metadata={"min": 1, "help": "sequence length when tokenizing --corpus"})
    windows: bool = field(default=True, metadata={
        "flag": "--no-windows", "invert": True, "help": "truncate long documents instead of windowing"})
    max_docs: int | None = field(default=None, metadata={"min": 1, "help": "the first N documents only"})
    overwrite: bool = field(default=False, metadata={"help": "replace a different store already in --out"})
    device: str = device_field(help="under torchrun, cuda = one GPU per rank (LOCAL_RANK)")
    progress: bool = quiet_field()
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dstg-cache", description=__doc__.split("\n\n")[0])
    add_config_arguments(parser, CacheCommand)
    return parser


def parse_args(argv=None) -> CacheCommand:
    args = build_parser().parse_args(argv)
    return config_from_args(CacheCommand, args)


def run(command: CacheCommand, ranks=None):
    ranks = ranks or Ranks()  # _main passes the ranks of --device (and of torchrun)
    model = one_model(command.model, "dstg-cache")
    check_output_location(command.out)  # a file or an unwritable place is found before the model loads
    with ExitStack() as held:
        # rank 0 holds the folder's lock; every rank stops if it cannot be had
        ranks.together(lambda: held.enter_context(output_lock(command.out, "dstg-cache " + " ".join(sys.argv[1:])))
                       if ranks.first else None)
        encoder = open_encoder(model, device=ranks.device, name=command.name)
        if command.sequences:
            sequences = StructuredSequences.load(command.sequences)
        else:
            sequences = load_corpus(command.corpus, progress=command.progress, max_docs=command.max_docs)
        layers, _ = encoder.resolve(command.layers, command.extraction.subspaces)  # the door: grammar, names, range
        extraction = dataclasses.replace(command.extraction, layers=None if command.layers is None else tuple(layers))
        return extract(encoder, sequences, command.out, extraction, progress=command.progress,  # clamped to the
                       overwrite=command.overwrite, max_length=command.max_length,  # model's table by the encoder
                       windows=command.windows, ranks=ranks)


def _main(command: CacheCommand) -> int:
    try:
        with torchrun_ranks(command.device) as ranks:
            store = run(command, ranks)
    except OtherRankFailed:  # the failing rank prints its own error
        return EXIT_ERROR
    if ranks.first:
        print(f"{store.directory}: {store.model_name}, {store.n_tokens} tokens, layers {list(store.layers)}, "
              f"subspaces {list(store.subspaces)}")
    return 0


def main(argv=None) -> int:
    return run_command(build_parser(), CacheCommand, _main, argv, interrupted=lambda _: "no store was written")


if __name__ == "__main__":
    sys.exit(main())
