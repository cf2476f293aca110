"""What a store is extracted from: a model (anything ``open_encoder`` takes) and its input, as the store reads them.

    from dstg_interp.store import as_sequences
    sequences = as_sequences(encoder, documents, max_length=256, windows=True)   # StructuredSequences

Documents are tokenized with the model's own tokenizer (``Encoder.structured_sequences``); StructuredSequences
pass through, checked against the model's tokenizer by ``check_tokenizer``.  ``extract``, ``cached_extract``,
the position probes and the figure scripts all turn their input into sequences here, so a store's tokens are
built one way.  Every failure is a StoreError.
"""

from __future__ import annotations

from dstg_interp.data import Document, tokenizer_hash
from dstg_interp.encoders import Encoder, EncoderError, open_encoder

from .manifest import StoreError

__all__ = ["as_sequences", "store_encoder", "check_tokenizer"]


def store_encoder(model) -> Encoder:
    """``open_encoder(model)``, its failure a StoreError."""
    try:
        return open_encoder(model)
    except EncoderError as err:
        raise StoreError(f"cannot extract: {err}") from None


def as_sequences(model, sequences, max_length: int, windows: bool):
    """Documents are tokenized here, with the model's own tokenizer (``Encoder.structured_sequences``);
    sequences pass through."""
    if sequences is None or isinstance(sequences, str) or (
            isinstance(sequences, (list, tuple)) and sequences and not isinstance(sequences[0], (Document, dict))):
        found = type(sequences).__name__ if not isinstance(sequences, (list, tuple)) else f"a list of {type(sequences[0]).__name__}"
        raise StoreError(f"sequences must be StructuredSequences or a list of Documents (see load_corpus), got {found}")
    if not isinstance(sequences, (list, tuple)) or not sequences or not isinstance(sequences[0], Document):
        return sequences
    try:
        return store_encoder(model).structured_sequences(sequences, max_length=max_length, windows=windows)
    except EncoderError as err:
        raise StoreError(str(err)) from None


def check_tokenizer(encoder: Encoder, sequences) -> None:
    """StructuredSequences built with another tokenizer than the model's: one StoreError."""
    expected = getattr(sequences, "meta", {}).get("tokenizer_hash")
    if encoder.tokenizer is None or not expected:
        return
    actual = tokenizer_hash(encoder.tokenizer)
    if actual != expected:
        raise StoreError(f"the sequences were tokenized with tokenizer {expected[:12]} but the model's tokenizer is "
                         f"{actual[:12]}; pass the documents instead (they are then tokenized with the model's own)")
