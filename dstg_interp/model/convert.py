"""Write another author's checkpoint in dstg-interp's own (canonical) format (the dstg-convert command).

    from dstg_interp.model.convert import convert_checkpoint
    convert_checkpoint("path/to/fulldecoding-PosBERT", "runs/posbert", tokenizer="path/to/tokenizer.json")
    dstg-convert path/to/fulldecoding-PosBERT runs/posbert --tokenizer path/to/tokenizer.json
    dstg-convert path/to/NeoBERT runs/neobert            # its folder ships tokenizer.json / vocab.txt
    dstg-probe --model runs/posbert --task segment

SRC is anything ``load_model`` reads (model/formats.py: the authors' PosNeoBERT in their fork's or training
code's layout, their AP / RP / RoPE NeoBERT baselines, chandar-lab NeoBERT, or one of ours).  OUT gets
config.json (with ``source``: the SRC path, its format and the sha256 of its weight files),
model.safetensors and tokenizer.json.  Probing needs the tokenizer the model was trained with, so a SRC
without one is refused unless ``--tokenizer`` supplies it (or ``--no-tokenizer`` says you will pass token
ids yourself).  Bad input: one line on stderr, exit code 2, nothing written.  OUT may be new, empty, or a
checkpoint folder dstg-interp wrote (config.json, model.safetensors, tokenizer.json and nothing else), which
``overwrite`` replaces; a folder with anything else in it, a file, SRC or a folder holding SRC never is.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    load_model,
    missing_tokenizer_message,
    save_checkpoint,
)
from ..io import check_replaceable
from .files import files_sha256
from .saving import checkpoint_foreign_entries

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def convert_checkpoint(source: str | Path, out: str | Path, tokenizer: str | Path | None = None,
                       require_tokenizer: bool = True, overwrite: bool = False, dtype: torch.dtype | None = None) -> Path:
    """Load ``source`` (any format ``load_model`` reads) and save it in our format at ``out`` atomically."""
    out = Path(out)
    replace = dict(kind="a checkpoint", owned=checkpoint_foreign_entries, overwrite=overwrite, flag="OUT",
                   suffix="converted")
    check_replaceable(out, inputs=[source] if Path(source).exists() else [], **replace)  # before the weights load
    model = load_model(source, tokenizer=tokenizer)
    path = model.checkpoint_path
    check_replaceable(out, inputs=[path], **replace)  # a zoo name resolves to a folder only now
    if model.tokenizer is None and require_tokenizer:
        raise CheckpointError(missing_tokenizer_message(path))
    record = dict(model.config.source or {"path": str(path.resolve()), "format": "dstg-interp", "files": [WEIGHTS_FILE]})
    if "sha256" not in record:  # a model converted before keeps the record of its original files
        record["sha256"] = files_sha256([path / name for name in record["files"]])
    model.config.source = record
    return save_checkpoint(model, out, dtype=dtype, tokenizer=model.tokenizer)
