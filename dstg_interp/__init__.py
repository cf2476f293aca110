"""dstg-interp: train, hook, cache and probe encoders that separate positional and semantic information."""

from dstg_interp.lazy import lazy_face

# The public names load on first use (PEP 562): importing the package stays instant, so a console
# command can take over Ctrl-C before torch and transformers load (see dstg_interp/cli/entry.py).
_EXPORTS = {
    "ModelConfig": "dstg_interp.config",
    "build_model": "dstg_interp.model", "load_model": "dstg_interp.model", "CheckpointError": "dstg_interp.model",
    "DSTGNeoBERT": "dstg_interp.model", "NeoBERT": "dstg_interp.model", "MaskedLMOutput": "dstg_interp.model",
    "NoMLMHeadError": "dstg_interp.model",
    "extract": "dstg_interp.store", "ActivationStore": "dstg_interp.store", "StoreError": "dstg_interp.store",
    "load_hf_encoder": "dstg_interp.encoders", "open_encoder": "dstg_interp.encoders", "Encoder": "dstg_interp.encoders",
    "EncoderError": "dstg_interp.encoders",
}

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
