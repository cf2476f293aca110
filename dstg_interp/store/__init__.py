"""Activation store: hook-based extraction of per-layer AP / semantic / full token states to disk.

    from dstg_interp import load_model, extract, ActivationStore
    store = extract(load_model("dstg"), sequences, out="runs/store-dstg")   # or: dstg-cache --model dstg ...
    store = ActivationStore("runs/store-dstg")
    store.states(3, "ap"), store.labels, store.subsample(10_000, seed=0), store.attention

Files: extract.py (the loop), inputs.py (documents or sequences in, the model's own tokens: ``as_sequences``),
identity.py (what makes a store this store; reuse of a folder that holds it), targets.py (what to store, by
the encoders' hook table), npy_writer.py (bounded-memory writes), background.py (the writer thread: a batch is
written while the next runs), layout.py (which arrays are files, which are served as concatenations),
distributed.py (torchrun shards), attention.py (streaming head summaries), reader.py (reading, held
and checked on opening), manifest.py, checksums.py (each file's checksums, in the manifest),
config.py (ExtractionConfig), cache.py (the store cache: one key, one folder), export.py (a store as a
Hugging Face ``datasets`` folder). The command is dstg-cache (dstg_interp/cli/cache.py). Models run through
dstg_interp.encoders.
"""

from .attention import AttentionSummaries
from .config import ExtractionConfig
from .distributed import Ranks, torchrun_ranks
from .extract import extract
from .inputs import as_sequences
from .manifest import FORMAT_VERSION, StoreError, StoreInterrupted
from .reader import ActivationStore

__all__ = ["extract", "as_sequences", "ActivationStore", "ExtractionConfig", "AttentionSummaries", "StoreError", "StoreInterrupted",
           "FORMAT_VERSION", "Ranks", "torchrun_ranks"]
