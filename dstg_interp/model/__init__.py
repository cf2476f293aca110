"""The encoders: DSTG-NeoBERT (``dstg.py``), the RoPE/AP/RP baselines (``baselines.py``), checkpoints."""

from .base import EncoderForMLM, MaskedLMOutput
from .baselines import NeoBERT
from .checkpoint import ZOO_NAMES, CheckpointError, build_model, load_model, save_checkpoint
from .dstg import DSTGNeoBERT

__all__ = [
    "EncoderForMLM",
    "MaskedLMOutput",
    "NeoBERT",
    "DSTGNeoBERT",
    "CheckpointError",
    "ZOO_NAMES",
    "build_model",
    "load_model",
    "save_checkpoint",
]
