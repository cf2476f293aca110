"""The activation store fails fast, in one line: a damaged store, input that is not documents, a full or too
small cache disk (named as the cache, not --out), a layer an HF encoder does not have.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import pytest

from dstg_interp import StoreError, extract, load_model
from dstg_interp.data import load_corpus
from dstg_interp.store import ActivationStore
from dstg_interp.store.config import ExtractionConfig


# --- bad content ----------------------------------------------------------------------------------
def test_damaged_store_is_named_and_rebuilt(tiny, tmp_path):
    """#78, #96: a truncated .npy was reused as complete; reading it gave 'mmap length is greater than file size'."""
    checkpoint, corpus = tiny
    model = load_model(checkpoint)
    documents = load_corpus(str(corpus), progress=False)
    store = extract(model, documents, tmp_path / "s", layers=(0,), progress=False)
    path = store.directory / "layer00_ap.npy"
    intact = path.read_bytes()
    path.write_bytes(intact[: len(intact) // 2])
    with pytest.raises(StoreError, match="layer00_ap.npy is cut short .*damaged: delete"):  # found on opening now
        ActivationStore(tmp_path / "s").states(0, "ap")
    extract(model, documents, tmp_path / "s", layers=(0,), progress=False)  # same identity: rebuilt, not reused
    assert path.read_bytes() == intact


def test_extract_of_plain_strings_is_one_clear_error(tiny):
    model = load_model(tiny[0])
    for bad in (["plain string"], None, "plain string"):
        with pytest.raises(StoreError, match="StructuredSequences or a list of Documents"):
            extract(model, bad, "unused", progress=False)


# --- a full or too small cache disk names the cache, not --out (N88) ------------------------------
def test_a_full_cache_disk_names_the_cache_not_out(tiny, tmp_path, monkeypatch):
    """N88: with DSTG_CACHE on a full disk, the remedy said 'choose another out folder'."""
    import errno

    from dstg_interp import extract
    from dstg_interp.data import load_corpus
    from dstg_interp.model import load_model
    from dstg_interp.store import npy_writer
    from dstg_interp.store.manifest import StoreError

    checkpoint, corpus = tiny

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npy_writer.NpyWriter, "write", full_disk)
    store = tmp_path / "cache" / "stores" / "dstg-0123"
    with pytest.raises(StoreError, match="disk that holds .*cache/stores, or put the store elsewhere .*DSTG_CACHE"):
        extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, progress=False)
    assert not store.exists() and not [p for p in (tmp_path / "cache" / "stores").iterdir()]


def test_a_cache_disk_too_small_is_said_before_any_write_naming_the_cache(tiny, tmp_path, monkeypatch):
    """N88 again: the check before any file is reserved said 'choose another folder or export fewer layers'
    (the export's remedy) for a store dstg-probe caches."""
    import collections

    from dstg_interp import extract
    from dstg_interp.data import load_corpus
    from dstg_interp.model import load_model
    from dstg_interp.store import export
    from dstg_interp.store.manifest import StoreError

    checkpoint, corpus = tiny
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(export.shutil, "disk_usage", lambda path: usage(2**20, 2**20, 0))
    store = tmp_path / "cache" / "stores" / "dstg-0123"
    with pytest.raises(StoreError, match="needs about .* MiB free; free space on the disk that holds .*cache/stores, put "
                                         "the store elsewhere .*another DSTG_CACHE") as refused:
        extract(load_model(checkpoint), load_corpus(str(corpus), progress=False), store, progress=False)
    assert "export" not in str(refused.value) and not store.exists()


# --- nonsense values ------------------------------------------------------------------------------
def test_hf_layer_message_offers_no_final():
    """#27: the message for a missing HF layer offered 'final', which HF encoders then refuse."""
    with pytest.raises(StoreError) as caught:
        ExtractionConfig(layers=(7,)).resolve(6, ("full",), "hf:bert")
    assert "0..6" in str(caught.value) and "final" not in str(caught.value)
