"""Shared fixtures: tiny random models (d ~ 32) of every variant; the unit / integration split.

Unit tests live in a folder per room of the code (tests/data/, tests/model/, tests/store/, tests/cli/,
tests/probes/holmes/, ...; tests/train/ for train.py and evaluation.py, tests/core/ for the other top-level
modules, tests/house/ for the layers and package faces): tiny models, fixtures written here, no network,
each a second or less.  A room's bad-input, output-safety, ... cases are its test_<room>_bad_input.py,
test_<room>_output_safety.py, ... (docs/RELIABILITY.md maps the cases to them); the bad-input ones run on
one torch thread with a private cache (``bad_input_room``).  This file and the helper modules beside it
(reliability_setup, gloo_ranks, synthetic_store, hf_writers, your_models, readme_examples) stay in
tests/, which pyproject.toml puts on the path, so any test imports them by name.  Integration tests --
whole scripts, the notebook, subprocesses, a model fetched from a registry -- live in tests/integration/
and are marked ``slow`` here, so ``pytest -m "not slow"`` runs the unit tests only and CI
(``python -m pytest tests``) runs both.
"""

import functools
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from dstg_interp import build_model
from dstg_interp.tiny_zoo import tiny_config as library_tiny_config
from dstg_interp.variants import VARIANTS as VARIANT_TABLE

INTEGRATION = Path(__file__).resolve().parent / "integration"

# A test run started in the background by a non-interactive shell (`.ci/run &`, nohup, cron) inherits SIGINT
# ignored, and so would every command the tests start: Python installs its KeyboardInterrupt handler only where
# SIGINT is not ignored, so the Ctrl-C tests (tests/cli/test_interrupts.py) would signal commands that cannot
# hear it. A handler here is reset to the default in each child at exec, so the commands start as from a
# terminal. (The commands themselves keep honouring an ignored SIGINT, as a background job asks.)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)

VARIANTS = tuple(VARIANT_TABLE)  # every row of the variants table, the NoPE floor among them


# The library's tiny model (``dstg_interp.tiny_zoo.tiny_config``, defined once) at the unit tests' sizes;
# any keyword, these two included, is the caller's to override.
tiny_config = functools.partial(library_tiny_config, vocab_size=97, max_positions=40)


def tiny_model(variant: str, **overrides):
    return build_model(tiny_config(variant, **overrides))


@pytest.fixture(params=VARIANTS)
def variant(request):
    return request.param


@pytest.fixture
def padded_batch():
    """Two sequences, the second right-padded after 11 tokens."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 97, (2, 16), generator=generator)
    attention_mask = torch.ones(2, 16, dtype=torch.bool)
    attention_mask[1, 11:] = False
    tokens[1, 11:] = 0
    return tokens, attention_mask


# --- a synthetic corpus written by us: a tiny grammar, so MLM has something to learn --------------
SUBJECTS = ["the farmer", "a teacher", "the old sailor", "my neighbour", "the young doctor", "a small child"]
VERBS = ["carried", "painted", "found", "sold", "repaired", "watched"]
OBJECTS = ["a red boat", "the wooden gate", "an empty basket", "the blue kettle", "a broken clock", "the tall ladder"]
PLACES = ["near the river", "in the village", "behind the mill", "at the market", "on the hill", "by the harbour"]


def synthetic_document(rng, n_paragraphs: int) -> str:
    paragraphs = []
    for _ in range(n_paragraphs):
        sentences = []
        for _ in range(int(rng.integers(2, 5))):
            s, v, o, p = (x[int(rng.integers(len(x)))] for x in (SUBJECTS, VERBS, OBJECTS, PLACES))
            sentences.append(f"{s.capitalize()} {v} {o} {p}.")
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def write_synthetic_corpus(folder, n_docs: int = 60, seed: int = 0):
    """A folder of *.txt documents (blank line = paragraph) generated from the grammar above."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        (folder / f"doc{i:03d}.txt").write_text(synthetic_document(rng, int(rng.integers(1, 4))))
    return folder


def sword_blocks(blocks: list[str]) -> tuple[bytes, bytes]:
    """(index, blob) of a SWORD zText module holding ``blocks``: each block zlib-compressed into the blob, with
    its (offset, compressed size, size) entry in the index, as the en-mix extractors read them."""
    import struct
    import zlib

    index, blob = b"", b""
    for block in blocks:
        compressed = zlib.compress(block.encode())
        index += struct.pack("<III", len(blob), len(compressed), len(block))
        blob += compressed
    return index, blob


class RandomSequences:
    """Structured sequences of random token ids (5..96), [CLS] = 2 / [SEP] = 3 at the ends, sentences of
    ``sentence`` tokens and paragraphs of ``paragraph``: what ``extract`` reads, without a tokenizer."""

    def __init__(self, lengths, sentence: int, paragraph: int):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.sentence, self.paragraph = sentence, paragraph
        self.meta = {"documents": [{"doc_id": f"doc-{i}"} for i in range(len(self.lengths))]}

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        n = int(self.lengths[i])
        ids = np.random.default_rng(i).integers(5, 97, n).astype(np.int32)
        ids[0], ids[-1] = 2, 3
        position = np.arange(n, dtype=np.int32)
        special = np.zeros(n, bool)
        special[[0, -1]] = True
        return {"input_ids": ids, "token_position": position, "sentence_index": position // self.sentence,
                "paragraph_index": position // self.paragraph, "intra_sentence_position": position % self.sentence,
                "intra_paragraph_position": position % self.paragraph, "doc_index": np.full(n, i, np.int32),
                "is_special": special}


def interrupt_when_ready(process, ready: Path, fault: str = "int", ready_timeout: float = 600,
                         timeout: float = 900) -> tuple[str, str]:
    """Ctrl-C (SIGINT to the process group of ``process``, started with ``start_new_session``) once ``ready``
    exists, waiting on that signal however loaded the machine (``fault`` other than "int": no signal), then
    its (stdout, stderr); the group is killed if it outlives the wait."""
    import os
    import time

    try:
        if fault == "int":
            deadline = time.monotonic() + ready_timeout
            while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ready.exists(), process.communicate(timeout=60)
            os.killpg(process.pid, signal.SIGINT)
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny checkpoint and corpus written by the tests (reliability_setup.make_tiny_setup), once per module."""
    from reliability_setup import make_tiny_setup

    return make_tiny_setup(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """DSTG_CACHE in the test's own folder: nothing is read from or written to the user's cache (a module
    opts in with ``pytestmark = pytest.mark.usefixtures("private_cache")``; the bad-input rooms always do,
    through ``bad_input_room``)."""
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def bad_input_room(request):
    """A room's hostile-input cases (its test_<room>_bad_input.py) run on one torch thread with a private cache."""
    if request.path.name.endswith("_bad_input.py"):
        torch.set_num_threads(1)
        request.getfixturevalue("private_cache")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two tiny models saved as run folders (runs/a, runs/b) and a small text folder."""
    from dstg_interp.tiny_zoo import tiny_zoo

    root = tmp_path_factory.mktemp("names")
    models, documents = tiny_zoo(["dstg", "rope"], n_docs=8, seed=0)
    corpus = root / "corpus"
    corpus.mkdir()
    for i, document in enumerate(documents):
        (corpus / f"{i:02d}.txt").write_text(document.text)
    for folder, model in (("a", models["dstg"]), ("b", models["rope"])):
        model.save(root / "runs" / folder / "checkpoint", tokenizer=model.tokenizer)
    return root
