"""The encoders: DSTG-NeoBERT (``dstg.py``), the RoPE/AP/RP baselines (``baselines.py``), checkpoints, and
the readers of other authors' formats (``formats.py``)."""

from .base import EncoderForMLM, EncoderOnlyOutput, MaskedLMOutput, NoMLMHeadError
from .baselines import NeoBERT
from .checkpoint import ZOO_NAMES, CheckpointError, build_model, load_model, recognised_checkpoint, save_checkpoint
from .dstg import DSTGNeoBERT

__all__ = [
    "EncoderForMLM",
    "MaskedLMOutput",
    "EncoderOnlyOutput",
    "NoMLMHeadError",
    "NeoBERT",
    "DSTGNeoBERT",
    "CheckpointError",
    "ZOO_NAMES",
    "build_model",
    "load_model",
    "recognised_checkpoint",
    "save_checkpoint",
]
