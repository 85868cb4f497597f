"""dlc: a compiler and runtime for machine learning on any GPU that speaks OpenGL.

Names are imported on first use, so `import dlc.runtime` (the artifact runner)
never imports the compiler or lark.
"""

from __future__ import annotations

import importlib

from .runtime.errors import CompileError, DataError, DlcError, RuntimeFailure, TrainingDiverged
from .runtime.version import __version__

# public name -> module that defines it
_LAZY = {
    "compile": "dlc.model",
    "Model": "dlc.model",
    "Session": "dlc.session",
    "SGD": "dlc.runtime.optimizers",
    "Momentum": "dlc.runtime.optimizers",
    "RMSProp": "dlc.runtime.optimizers",
    "Adagrad": "dlc.runtime.optimizers",
    "Adadelta": "dlc.runtime.optimizers",
    "Adam": "dlc.runtime.optimizers",
    "Adamax": "dlc.runtime.optimizers",
    "AdamW": "dlc.runtime.optimizers",
    "schedules": "dlc.runtime.schedules",  # dlc.schedules.Cosine(...), the learning-rate schedules
    "load": "dlc.artifacts",
    # Keras-style callbacks for Session.fit (and dlc train --early-stop / --keep-best)
    "Callback": "dlc.callbacks",
    "EarlyStopping": "dlc.callbacks",
    "ModelCheckpoint": "dlc.callbacks",
    "LambdaCallback": "dlc.callbacks",
    "History": "dlc.callbacks",
    "import_onnx": "dlc.onnx_import",
    "distributed": "dlc.distributed",  # dlc.distributed.init(): data-parallel training over MPI
    "Graph": "dlc.graph",
    "Tensor": "dlc.graph",
    # the seeds' eager API: device arrays, ops, scopes, debug mode, seeds-style training
    "Array": "dlc.arrays",
    "array": "dlc.arrays",
    "zeros": "dlc.arrays",
    "ones": "dlc.arrays",
    "rand": "dlc.arrays",
    "randn": "dlc.arrays",
    "ops": "dlc.ops",
    "tidy": "dlc.scope",
    "keep": "dlc.scope",
    "memory": "dlc.memory_use",
    "set_program_cache_limit": "dlc.memory_use",
    "debug": "dlc.debug",
    "set_debug": "dlc.debug",
    "set_backend": "dlc.devices",
    "get_backend": "dlc.devices",
    "gl_devices": "dlc.devices",
    "open_gl_device": "dlc.devices",
    "FeedEntry": "dlc.seeds",
    "CostReduction": "dlc.seeds",
    "InCPUMemoryShuffledInputProviderBuilder": "dlc.seeds",
}

__all__ = ["CompileError", "DataError", "DlcError", "RuntimeFailure", "TrainingDiverged", "__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dlc' has no attribute {name!r}")
    imported = importlib.import_module(module)
    value = imported if module.rsplit(".", 1)[-1] == name else getattr(imported, name)  # a submodule itself
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names too, so that dir(dlc) and a REPL's completion find them.
    return sorted({*globals(), *__all__})
