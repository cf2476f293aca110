"""dstg-interp: train, hook, cache and probe encoders that separate positional and semantic information."""

from .config import ModelConfig
from .encoders import Encoder, EncoderError, load_hf_encoder, open_encoder
from .model import CheckpointError, DSTGNeoBERT, MaskedLMOutput, NeoBERT, NoMLMHeadError, build_model, load_model
from .store import ActivationStore, StoreError, extract

__version__ = "0.1.0"

__all__ = ["ModelConfig", "build_model", "load_model", "CheckpointError", "DSTGNeoBERT", "NeoBERT", "MaskedLMOutput",
           "NoMLMHeadError", "extract", "ActivationStore", "StoreError", "open_encoder", "Encoder", "EncoderError",
           "load_hf_encoder"]
