"""Text in and out of an encoder, as TransformerLens' ``HookedTransformer`` does it: the model's own tokenizer
(``model.tokenizer``, shipped beside every checkpoint of the zoo) behind ``to_tokens`` and friends.

    tokens = model.to_tokens("The miller mended the door.")          # [1, pos]: [CLS] ... [SEP]
    tokens, mask = model.to_tokens(["a b", "a longer one"], return_attention_mask=True)   # right-padded
    model.to_str_tokens("The miller")                                # ['[CLS]', 'the', 'miller', '[SEP]']
    model.to_string(tokens[0])                                       # '[CLS] the miller mended the door. [SEP]'
    model.to_single_token("door")                                    # one id
    logits = model("The miller mended the door.")                    # string input, as model(tokens)

Special tokens are the tokenizer's own: its post-processor adds [CLS] ... [SEP] (``add_special_tokens``, TL's
``prepend_bos``); padding is the config's ``pad_token_id``.
"""

from __future__ import annotations

from typing import Any

import torch


TEXT_CHARS_PER_POSITION = 16  # the first prefix tokenized per position of the model (doubled while too short)
PREFIX_MARGIN_TOKENS = 32  # tokens past the limit a prefix must hold, so the word it cuts lies beyond the limit


class NoTokenizerError(ValueError, AttributeError):
    """Text was handed to a model without ``.tokenizer``."""


class TextInputs:
    """Mixin of ``EncoderForMLM``: needs ``self.tokenizer`` (a ``tokenizers.Tokenizer`` or None) and ``self.config``."""

    tokenizer = None
    config: Any  # the model's ModelConfig

    def _tokenizer(self):
        if self.tokenizer is None:
            raise NoTokenizerError(
                "this model has no tokenizer (model.tokenizer is None), so it cannot read text: load it from a "
                "checkpoint that ships tokenizer.json (load_model('dstg')), or set model.tokenizer = "
                "dstg_interp.data.load_tokenizer(path)")
        return self.tokenizer

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        try:
            return list(self._tokenizer().encode(text, add_special_tokens=add_special_tokens).ids)
        except TypeError:  # the tokenizers library refuses a str that is not valid Unicode (a lone surrogate)
            raise ValueError("the text is not valid Unicode (it holds a lone surrogate, such as '\\ud800'); "
                             "decode it with errors='replace' first") from None

    def _ids(self, text: str, add_special_tokens: bool, truncate: bool) -> list[int]:
        limit = self.config.max_positions
        # A long text is tokenized a prefix at a time, the prefix doubling until it holds more than the model's
        # positions: the tokens before the limit are the same, and an 11 MB string costs what its first
        # kilobytes cost (round 5, TK1: 18 s and 2 GB for the whole text before the cut).
        prefix = limit * TEXT_CHARS_PER_POSITION
        while True:
            ids = self._encode(text[:prefix], add_special_tokens)
            if prefix >= len(text) or len(ids) > limit + PREFIX_MARGIN_TOKENS:
                break
            prefix *= 2
        if len(ids) > limit:
            if not truncate:
                more = "" if prefix >= len(text) else "more than "
                raise ValueError(f"the text is {more}{len(ids)} tokens long, past max_positions={limit}; "
                                 "pass truncate=True")
            ids = ids[:limit - 1] + ids[-1:] if add_special_tokens else ids[:limit]  # keep the closing [SEP]
        return ids

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None, move_to_device: bool = True,
                  truncate: bool = True, *, add_special_tokens: bool = True, return_attention_mask: bool = False):
        """Token ids [batch, pos] (long) of a string or a list of strings, right-padded with the config's
        pad id; with ``return_attention_mask`` also the [batch, pos] bool mask of real tokens, which a padded
        batch needs (``model(tokens, attention_mask)``; a string input builds it itself).  ``prepend_bos``
        is TransformerLens' name for ``add_special_tokens`` ([CLS] ... [SEP] here)."""
        if prepend_bos is not None:
            add_special_tokens = bool(prepend_bos)
        if not isinstance(input, (str, list, tuple)):
            raise TypeError(f"to_tokens takes a string or a non-empty list of strings, got {type(input).__name__}")
        texts = [input] if isinstance(input, str) else list(input)
        if not texts or not all(isinstance(text, str) for text in texts):
            raise TypeError("to_tokens takes a string or a non-empty list of strings")
        rows = [self._ids(text, add_special_tokens, truncate) for text in texts]
        width = max(len(row) for row in rows)
        tokens = torch.full((len(rows), width), self.config.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, row in enumerate(rows):
            tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, :len(row)] = True
        if move_to_device:
            device = next(self.parameters()).device  # type: ignore[attr-defined]  # an nn.Module's
            tokens, mask = tokens.to(device), mask.to(device)
        return (tokens, mask) if return_attention_mask else tokens

    def to_str_tokens(self, input, prepend_bos: bool | None = None, *, add_special_tokens: bool = True):
        """Token strings: a list for a string or a [pos] / [1, pos] tensor (or list of ids), a list of lists
        for a list of strings or a [batch, pos] tensor (padding dropped where the text is known)."""
        tokenizer = self._tokenizer()
        if isinstance(input, str):
            if prepend_bos is not None:
                add_special_tokens = bool(prepend_bos)
            return [tokenizer.id_to_token(i) for i in self._ids(input, add_special_tokens, truncate=True)]
        if isinstance(input, (list, tuple)) and input and isinstance(input[0], str):
            return [self.to_str_tokens(text, prepend_bos, add_special_tokens=add_special_tokens) for text in input]
        ids = torch.as_tensor(input)
        if ids.dim() == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.dim() == 2:
            return [self.to_str_tokens(row) for row in ids]
        if ids.dim() != 1:
            raise ValueError(f"to_str_tokens takes a string, a list of strings or a [pos] / [batch, pos] tensor, "
                             f"got shape {tuple(ids.shape)}")
        return [tokenizer.id_to_token(int(i)) for i in ids]

    def to_string(self, tokens) -> Any:
        """The text of [pos] ids (a string) or [batch, pos] ids (a list of strings); special tokens kept
        ([CLS], [SEP], [MASK]) but padding dropped."""
        ids = torch.as_tensor(tokens)
        if ids.dim() == 2:
            return [self.to_string(row) for row in ids]
        if ids.dim() != 1:
            raise ValueError(f"to_string takes [pos] or [batch, pos] ids, got shape {tuple(ids.shape)}")
        pad = self.config.pad_token_id
        return self._tokenizer().decode([int(i) for i in ids if int(i) != pad], skip_special_tokens=False)

    def to_single_token(self, string: str) -> int:
        """The id of ``string`` when it is one token (no [CLS] / [SEP])."""
        ids = self._ids(string, add_special_tokens=False, truncate=False)
        if len(ids) != 1:
            raise ValueError(f"{string!r} is {len(ids)} tokens ({self.to_str_tokens(string, add_special_tokens=False)}), not one")
        return ids[0]

    def text_input(self, input, attention_mask):
        """(tokens, attention_mask) of a forward's input: strings are tokenized (their mask unless one is given)."""
        if isinstance(input, str) or (isinstance(input, (list, tuple)) and input and isinstance(input[0], str)):
            tokens, mask = self.to_tokens(input, return_attention_mask=True)
            return tokens, mask if attention_mask is None else attention_mask
        return input, attention_mask
