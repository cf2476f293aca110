"""dstg-interp: train, hook, cache and probe encoders that separate positional and semantic information."""

import importlib

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

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dstg_interp' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)  # lazy: PEP 562, on first use
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
