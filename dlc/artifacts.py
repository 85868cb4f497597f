"""`dlc.load(DIR)`: a Session over a compiled artifact (imports neither the compiler nor lark)."""

from __future__ import annotations

import os

from .runtime.errors import DataError
from .session import Session


def load(path: str | os.PathLike, seed: int = 0, backend: str | None = None) -> Session:
    """Open an artifact folder written by `dlc compile` as a Session on GL running its
    programs (`backend="numpy"`: its model.dl on the NumPy reference, with its params). Debug
    mode (`dlc.set_debug`, DLC_DEBUG=1) checks its kernels as it does any Session's.

    >>> sess = dlc.load("mlp_digits.dlc/")  # after `dlc compile samples/mlp_digits.dl --train`
    """
    if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "manifest.json"))):
        raise DataError(f"{path} is not a dlc artifact: it has no manifest.json")
    return Session(path, backend=backend, seed=seed)
