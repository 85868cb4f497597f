"""Optional dependencies (pyproject's [project.optional-dependencies]), imported where they
are used through this one helper, so that dlc imports and runs without them and a missing one
is named with the pip extra that installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import DlcError


class MissingDependency(DlcError):
    """An optional package a feature needs is not installed (or cannot load)."""


def require(module: str, extra: str, what: str, needs: str | None = None) -> ModuleType:
    """`module` imported, or MissingDependency: "`what` needs `needs` (why): pip install
    'dlc[`extra`]'" (`needs` defaults to the module's package)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        needs = needs or module.split(".")[0]
        raise MissingDependency(f"{what} needs {needs} ({exc}): pip install 'dlc[{extra}]'") from None


def available(module: str) -> ModuleType | None:
    """`module` imported, or None when it is not installed (for features with a fallback)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
