"""Model inputs: special-token ids read from a tokenizer, length-sorted batches, right padding (``data.mlm.pad_batch``).

    special = special_tokens(tokenizer)              # SpecialTokens(cls=2, sep=3, pad=0, mask=4)
    for indices in length_sorted_batches(lengths, batch_size=32): ...
    tokens, mask = pad_batch([[2, 7, 3], [2, 3]], pad_id=special.pad)   # [B, T] long, [B, T] bool

Special tokens are looked up by name in the tokenizer's vocabulary, never assumed: our WordPiece puts
[PAD] [UNK] [CLS] [SEP] [MASK] at 0..4, BERT at 0/100/101/102/103, RoBERTa uses <s> </s> <pad> <mask>.
A Hugging Face folder names its own in tokenizer_config.json (transformers >= 5) or special_tokens_map.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from dstg_interp.data.mlm import pad_batch as pad_batch  # the one right-padding routine, re-exported here
from dstg_interp.data.structure import StructuredSequences
from dstg_interp.data.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID
from dstg_interp.model.files import read_json

# Names tried, in order, after the ones a folder declares.
CANDIDATES = {"cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>"), "mask": ("[MASK]", "<mask>")}


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens; ``mask`` is None for a tokenizer without one."""

    cls: int
    sep: int
    pad: int
    mask: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return {"cls": self.cls, "sep": self.sep, "pad": self.pad, "mask": self.mask}

    @property
    def ids(self) -> tuple[int, ...]:
        """Every special id (for MLM masking: these are never masked)."""
        return tuple(i for i in (self.pad, self.cls, self.sep, self.mask) if i is not None)


# The layout of this toolkit's tokenizer (data/tokenizer.py): what a model of ours without a tokenizer
# file was trained with, and what encodings built without a model at hand use.
TOOLKIT_SPECIAL_TOKENS = SpecialTokens(cls=CLS_ID, sep=SEP_ID, pad=PAD_ID, mask=MASK_ID)


def special_tokens(tokenizer: Tokenizer, declared: dict[str, str] | None = None, where: str = "the tokenizer") -> SpecialTokens:
    """Look up [CLS]/[SEP]/[PAD]/[MASK] (or the ``declared`` names, e.g. {"cls": "<s>"}) in ``tokenizer``.

    Raises ValueError naming ``where`` when CLS, SEP or PAD is missing."""
    ids = {}
    for role, defaults in CANDIDATES.items():
        names = ([declared[role]] if declared and declared.get(role) else []) + list(defaults)
        found = [tokenizer.token_to_id(name) for name in names if tokenizer.token_to_id(name) is not None]
        if not found and role != "mask":
            raise ValueError(f"{where} has no {role.upper()} token (tried {', '.join(names)}); "
                             "a BERT-style encoder needs one")
        ids[role] = int(found[0]) if found else None
    return SpecialTokens(**ids)


def declared_special_tokens(folder: Path) -> dict[str, str]:
    """{"cls": "[CLS]", ...} as a Hugging Face folder declares them (empty when it does not)."""
    declared = {}
    for file in ("special_tokens_map.json", "tokenizer_config.json"):
        data = read_json(folder / file, optional=True)
        for role in CANDIDATES:
            token = data.get(f"{role}_token")
            token = token.get("content") if isinstance(token, dict) else token
            if isinstance(token, str) and role not in declared:
                declared[role] = token
    return declared


def length_sorted_batches(lengths: Sequence[int] | np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Sequence indices of each forward batch: longest first, so a batch pads to similar lengths."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def sequence_lengths(sequences: StructuredSequences | Sequence) -> np.ndarray:
    """Lengths of StructuredSequences (its ``lengths``) or of a list of id sequences."""
    if hasattr(sequences, "lengths"):
        return np.asarray(sequences.lengths, dtype=np.int64)
    return np.array([len(sequence_ids(sequences, i)) for i in range(len(sequences))], dtype=np.int64)


def sequence_ids(sequences: StructuredSequences | Sequence, index: int) -> Sequence[int] | np.ndarray:
    """Token ids of sequence ``index``: an item of StructuredSequences is a dict with ``input_ids``."""
    item = sequences[int(index)]
    return item["input_ids"] if isinstance(item, dict) else item


