"""A researcher's own models, laid out as docs/your-models.md shows them: what the figure scripts' ``--model``
tests and that page's examples read.

    folders = write_your_models(root)   # name -> folder: "tiny-dstg", the authors' formats, "tiny-bert"

- ``tiny-dstg``: a tiny random DSTG of the tiny zoo's shape, saved as a checkpoint folder (what ``dstg-train``
  writes), with the tiny zoo's tokenizer;
- the authors' formats, as the fixtures lay them out (``tests/fixtures/authors-format``: ``posneobert-dstg``, the
  baselines ``posneobert-baseline-ap`` / ``-rp``, ``neobert-hf`` the RoPE NeoBERT, ``posneobert-dstg-encoder``
  saved without its decoder), each with a ``tokenizer.json`` beside the weights as the loader asks;
- ``tiny-bert``: a tiny random BERT in the Hub's layout (``hf_writers.write_tiny_bert``), no MLM head.
Every model reads 32 positions (the fixtures' length), so every study can take them in one list.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dstg_interp.data.tokenizer import build_tokenizer
from dstg_interp.model import build_model
from dstg_interp.model.saving import save_checkpoint
from dstg_interp.tiny_zoo import tiny_config, tiny_documents, tiny_zoo
from hf_writers import write_tiny_bert

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "authors-format"
AUTHORS = ("posneobert-dstg", "posneobert-baseline-ap", "posneobert-baseline-rp", "neobert-hf", "posneobert-dstg-encoder")
POSITIONS = 32  # the authors' fixtures' max_length
FIXTURE_VOCAB = 100  # the fixtures' embedding rows


def padded_tokenizer(words):
    """A tokenizer of ``words`` padded with spare words to just under the fixtures' 100 embedding rows (one much
    smaller than the embedding is refused as another model's: ``check_tokenizer_fits``)."""
    words = sorted(words) + list(".,")
    spare = FIXTURE_VOCAB - build_tokenizer(words).get_vocab_size() - 2
    return build_tokenizer(words + [f"spare{i}" for i in range(max(spare, 0))])


def authors_tokenizer(documents):
    """``padded_tokenizer`` over the synthetic documents' words."""
    return padded_tokenizer({word.strip(".,").lower() for document in documents for word in document.text.split()})


def write_your_models(root: Path) -> dict[str, Path]:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    folders = {}
    zoo, documents = tiny_zoo(["dstg"])
    tokenizer = zoo["dstg"].tokenizer
    model = build_model(tiny_config("dstg", tokenizer.get_vocab_size(), max_positions=POSITIONS)).eval()
    folders["tiny-dstg"] = root / "tiny-dstg"
    save_checkpoint(model, folders["tiny-dstg"], tokenizer=tokenizer)
    words = authors_tokenizer(tiny_documents(40))
    for name in AUTHORS:
        folders[name] = root / name
        shutil.copytree(FIXTURES / name, folders[name], ignore=shutil.ignore_patterns("outputs"))
        words.save(str(folders[name] / "tokenizer.json"))
    folders["tiny-bert"] = root / "tiny-bert"
    write_tiny_bert(folders["tiny-bert"], documents[:20], max_positions=POSITIONS)
    return folders
