"""`dlc.load(DIR)`: run a compiled artifact (imports neither the compiler nor lark)."""

from __future__ import annotations

import os

from dlc.runtime.artifact import Runner


def load(path: str | os.PathLike, seed: int = 0) -> Runner:
    """Open an artifact folder written by `dlc compile`; debug mode (`dlc.set_debug`,
    DLC_DEBUG=1) checks its kernels as it does a Session's."""
    from . import debug

    return Runner(path, seed=seed, hook=debug.gl_hook)
