"""The one place dlc imports a module on first use rather than at the top of a file: an optional
dependency (matplotlib, onnx, mpi4py, playwright, graphviz), named with the pip extra that
installs it, or a heavy module kept off start-up (`import dlc.cli` imports no GL, no compiler).

    >>> plt = require("matplotlib.pyplot", extra="plot", why="--plot")
    >>> autodiff = require("dlc.compiler.autodiff")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .runtime.errors import DlcError


def require(module: str, extra: str | None = None, why: str | None = None) -> ModuleType:
    """`module`, imported. With `extra` (an optional dependency's pip extra) a missing module is a
    DlcError naming what needs it and how to install it: "--plot needs matplotlib, which is not
    installed: pip install 'dlc[plot]' (or pip install matplotlib)"."""
    if extra is None:
        return importlib.import_module(module)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".", 1)[0]
        missing = getattr(e, "name", None)
        if missing is not None and missing.split(".", 1)[0] != top:
            raise  # the package is there; something it imports is broken: show that
        who = why or "this"
        raise DlcError(
            f"{who} needs {top}, which is not installed: pip install 'dlc[{extra}]' (or pip install {top})"
        ) from None
