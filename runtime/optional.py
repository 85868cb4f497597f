"""The one place dlc imports a module on first use rather than at the top of a file: an optional
dependency (pyproject's [project.optional-dependencies]: matplotlib, onnx, mpi4py, playwright,
graphviz), named with the pip extra that installs it when it is missing, or a heavy module kept
off start-up (`import dlc.cli` imports no GL and no compiler; a session over an artifact never
imports the compiler).

    >>> plt = require("matplotlib.pyplot", extra="plot", why="--plot")
    >>> autodiff = require("dlc.compiler.autodiff")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import DlcError


class MissingDependency(DlcError):
    """An optional package a feature needs is not installed (or cannot load)."""


def require(module: str, extra: str | None = None, why: str | None = None, needs: str | None = None) -> ModuleType:
    """`module`, imported. With `extra` (an optional dependency's pip extra) a missing module is a
    MissingDependency naming what needs it (`why`) and how to install it: "--plot needs
    matplotlib, which is not installed: pip install 'dlc[plot]' (or pip install matplotlib)";
    `needs` names the package where its import name says too little."""
    if extra is None:
        return importlib.import_module(module)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".", 1)[0]
        missing = getattr(e, "name", None)
        if missing is not None and missing.split(".", 1)[0] != top:
            raise  # the package is there; something it imports is broken: show that
        raise MissingDependency(
            f"{why or 'this'} needs {needs or top}, which is not installed: pip install 'dlc[{extra}]'"
            f" (or pip install {top})"
        ) from None


def available(module: str) -> ModuleType | None:
    """`module` imported, or None when it is not installed (for features with a fallback)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
