"""dlc: a compiler and runtime for machine learning on any GPU that speaks OpenGL.

Names are imported on first use, so `import dlc.runtime` (the artifact runner)
never imports the compiler or lark.
"""

from __future__ import annotations

import importlib

from .errors import CompileError, DataError, DlcError, RuntimeFailure

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "compile": "dlc.model",
    "Model": "dlc.model",
    "Session": "dlc.session",
    "SGD": "dlc.optimizers",
    "Momentum": "dlc.optimizers",
    "RMSProp": "dlc.optimizers",
    "Adagrad": "dlc.optimizers",
    "Adadelta": "dlc.optimizers",
    "Adam": "dlc.optimizers",
    "Adamax": "dlc.optimizers",
    "load": "dlc.runtime.artifact",
    "Graph": "dlc.graph",
    "Tensor": "dlc.graph",
}

__all__ = ["CompileError", "DataError", "DlcError", "RuntimeFailure", "__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dlc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
