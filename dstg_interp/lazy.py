"""A package face whose public names load on first use (PEP 562): ``dstg_interp`` and ``probes`` share it.

    _EXPORTS = {"ModelConfig": "dstg_interp.config", ...}      # public name -> the module that defines it
    __getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)

Only ``importlib`` is imported here, so importing a package that uses it stays instant.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_face(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``: a name of ``exports`` is imported from its
    module on first use and kept in the package's namespace; any other name is the usual AttributeError."""
    names = list(exports)

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)  # lazy: PEP 562, on first use
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(list(vars(sys.modules[package])) + names)

    return __getattr__, __dir__, names
